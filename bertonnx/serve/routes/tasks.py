"""The heads' own routes: ``/fill_mask``, ``/tag``, ``/answer``, ``/choose`` and ``/detect_replaced`` (TEI has none
of them).

- ``/fill_mask``: per text, per ``[MASK]``, the ``top_k`` candidates of ``pipeline("fill-mask")`` (one text in:
  its list of masks out).
- ``/tag``: ``{"inputs", "aggregation_strategy", "ignore_labels", "stride"}`` -> per text the pipeline-shaped
  entities (one text in: one list out). A text over the model's positions needs ``stride``; without it the
  request is a 422 saying so.
- ``/answer``: ``{"question", "context", "top_k", "max_answer_len", "doc_stride", "handle_impossible_answer",
  "max_seq_len"}`` -> per question ``{"score", "start", "end", "answer"}`` (a list with ``top_k > 1``; one question
  in: one answer out). A long context is searched in overlapping windows, never refused for its length;
  ``truncate`` means nothing here (nothing is ever cut), so ``"truncate": true`` is a 422 that says so.
- ``/choose``: per context, the best of its choices and every choice's probability (a multiple-choice head).
- ``/zero_shot``: ``{"inputs", "candidate_labels", "hypothesis_template", "multi_label", "entailment_label"}`` -> per
  text ``{"sequence", "labels", "scores"}`` as ``pipeline("zero-shot-classification")`` (one text in: one answer out);
  every (text, hypothesis) pair is one unit of the scheduler.
- ``/detect_replaced``: ``{"inputs", "truncate"}`` -> per text its tokens with offsets and ``P(replaced)``
  (ELECTRA's discriminator; one text in: one list out).

Every unit (a text, a window, a context-choice pair) goes through the shared scheduler; ``--max-client-batch-size``
counts texts, questions or contexts, the body limit bounds the characters, and the queue's limits the units.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from .. import pipeline
from ..errors import ServeError
from ..protocol import (
    AnswerRequest,
    AnswerSpan,
    ChoiceAnswer,
    ChooseRequest,
    DetectReplacedRequest,
    EntityGroup,
    FillMaskRequest,
    MaskCandidate,
    ReplacedTokenAnswer,
    TagRequest,
    TokenEntity,
    ZeroShotRequest,
    ZeroShotResult,
)
from ..state import ServerState
from .server import ERROR_RESPONSES
from .tei import truncation

__all__ = ["TRUNCATE_MEANINGLESS", "task_routes"]

TRUNCATE_MEANINGLESS = (
    "truncate is meaningless for question answering: a long context is searched in overlapping windows "
    "(doc_stride tokens shared), never cut; drop the field"
)


def task_routes(state: ServerState) -> APIRouter:
    """The heads' own routes."""
    router = APIRouter(tags=["tasks"])

    @router.post(
        "/fill_mask",
        response_model=list[list[MaskCandidate]] | list[list[list[MaskCandidate]]],
        responses=ERROR_RESPONSES,
    )
    async def fill_mask(body: FillMaskRequest, request: Request) -> Response:
        """Per text, per [MASK] in order, the top_k tokens with score, token id, token_str and sequence (one
        text in: its list of masks out)."""
        model, _ = state.require_model()
        task = pipeline.task(
            model, "fill_mask", top_k=body.top_k, truncation=truncation(state, body.truncate), targets=body.targets
        )
        _, answers = await pipeline.run(state, request, task, pipeline.as_list(body.inputs), size_check=False)
        return pipeline.json_answer(answers[0] if isinstance(body.inputs, str) else answers, request)

    @router.post(
        "/tag",
        response_model=list[TokenEntity | EntityGroup] | list[list[TokenEntity | EntityGroup]],
        responses=ERROR_RESPONSES,
    )
    async def tag(body: TagRequest, request: Request) -> Response:
        """Named entities (token labels) of each text with character offsets, as transformers'
        ``pipeline("token-classification")`` gives them."""
        model, _ = state.require_model()
        task = pipeline.task(
            model,
            "tag",
            aggregation_strategy=body.aggregation_strategy,
            ignore_labels=body.ignore_labels,
            stride=body.stride,
        )
        texts = pipeline.as_list(body.inputs)
        _, found = await pipeline.run(state, request, task, texts, size_check=False, admit=False)
        return pipeline.json_answer(found[0] if isinstance(body.inputs, str) else found, request)

    @router.post(
        "/answer",
        response_model=AnswerSpan | list[AnswerSpan] | list[AnswerSpan | list[AnswerSpan]],
        responses=ERROR_RESPONSES,
    )
    async def answer(body: AnswerRequest, request: Request) -> Response:
        """Extractive answers, as transformers' ``pipeline("question-answering")`` finds them: only context
        tokens are candidates, the best spans over all windows of a long context win."""
        model, _ = state.require_model()
        if body.truncate:
            raise ServeError(TRUNCATE_MEANINGLESS, "validation")
        questions = pipeline.as_list(body.question)
        if isinstance(body.context, str):
            contexts = [body.context] * len(questions)
        elif isinstance(body.question, str):
            raise ServeError("a list of contexts needs a list of questions, one per context", "validation")
        else:
            contexts = list(body.context)
        pipeline.check_count(len(questions), state)
        task = pipeline.task(
            model,
            "answer",
            top_k=body.top_k,
            max_answer_len=body.max_answer_len,
            doc_stride=body.doc_stride,
            handle_impossible_answer=body.handle_impossible_answer,
            max_seq_len=body.max_seq_len,
        )
        if len(questions) != len(contexts):
            raise ServeError(
                f"questions and contexts differ in length ({len(questions)} vs {len(contexts)}); send one "
                "context per question, or one context for all",
                "validation",
            )
        _, found = await pipeline.run(
            state, request, task, questions, contexts, field="question", size_check=False, admit=False
        )
        return pipeline.json_answer(found[0] if isinstance(body.question, str) else found, request)

    @router.post("/choose", response_model=ChoiceAnswer | list[ChoiceAnswer], responses=ERROR_RESPONSES)
    async def choose(body: ChooseRequest, request: Request) -> Response:
        """The best choice for each context by the multiple-choice head, and every choice's probability."""
        model, _ = state.require_model()
        task = pipeline.task(model, "choose", truncation=truncation(state, body.truncate))
        single = isinstance(body.context, str)
        contexts = pipeline.as_list(body.context)
        groups = [body.choices] if single else list(body.choices)
        if single and body.choices and not isinstance(body.choices[0], str):
            raise ServeError('one context takes one list of choices: send choices as ["a", "b", ...]', "validation")
        if not single and any(isinstance(group, str) for group in groups):
            raise ServeError(
                'a list of contexts takes one list of choices per context: [["a", "b"], ...]', "validation"
            )
        if len(groups) != len(contexts):
            raise ServeError(
                f"{len(contexts)} contexts but {len(groups)} lists of choices; send one list per context", "validation"
            )
        _, found = await pipeline.run(state, request, task, contexts, groups, field="context", size_check=False)
        return pipeline.json_answer(found[0] if single else found, request)

    @router.post("/zero_shot", response_model=ZeroShotResult | list[ZeroShotResult], responses=ERROR_RESPONSES)
    async def zero_shot(body: ZeroShotRequest, request: Request) -> Response:
        """The candidate labels of each text ranked by the NLI classifier, as transformers'
        ``pipeline("zero-shot-classification")``."""
        model, _ = state.require_model()
        task = pipeline.task(
            model,
            "zero_shot",
            candidate_labels=body.candidate_labels,
            hypothesis_template=body.hypothesis_template,
            multi_label=body.multi_label,
            entailment_label=body.entailment_label,
            truncation=body.truncate,
        )
        _, found = await pipeline.run(state, request, task, pipeline.as_list(body.inputs), size_check=False)
        return pipeline.json_answer(found[0] if isinstance(body.inputs, str) else found, request)

    @router.post(
        "/detect_replaced",
        response_model=list[ReplacedTokenAnswer] | list[list[ReplacedTokenAnswer]],
        responses=ERROR_RESPONSES,
    )
    async def detect_replaced(body: DetectReplacedRequest, request: Request) -> Response:
        """Replaced token detection (ELECTRA's discriminator): per token of each text, special tokens left out,
        its offsets and the probability that it was replaced (one text in: one list out)."""
        model, _ = state.require_model()
        task = pipeline.task(model, "detect_replaced", truncation=truncation(state, body.truncate))
        _, found = await pipeline.run(state, request, task, pipeline.as_list(body.inputs), size_check=False)
        return pipeline.json_answer(found[0] if isinstance(body.inputs, str) else found, request)

    return router
