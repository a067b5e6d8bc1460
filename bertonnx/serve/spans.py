"""``POST /tag`` and ``POST /answer``: token classification and extractive question answering over HTTP.

Verbs that read next to TEI's ``/embed``, ``/predict``, ``/rerank`` and ``/tokenize`` (TEI has neither
task). Each request is cut into windows (:func:`bertonnx.tasks.tag.tag_windows`,
:func:`bertonnx.tasks.answer.qa_windows`) in a worker thread; every window goes through the shared scheduler
as one input (batched with other requests' inputs by the token budget), and the request's windows are merged
into the answers :meth:`bertonnx.BertOnnx.tag` / :meth:`~bertonnx.BertOnnx.answer` give offline.

- ``/tag``: ``{"inputs": text | [texts], "aggregation_strategy", "ignore_labels", "stride"}`` -> per text
  the pipeline-shaped entities (one text in: one list out). A text over the model's 512 tokens needs
  ``stride`` (it is tagged in windows sharing that many tokens); without it the request is a 422 saying so.
- ``/answer``: ``{"question": text | [texts], "context": text | [texts], "top_k", "max_answer_len",
  "doc_stride", "handle_impossible_answer", "max_seq_len"}`` -> per question ``{"score", "start", "end",
  "answer"}`` (a list with ``top_k > 1``; one question in: one answer out). A long context is searched in
  overlapping windows, never refused for its length; ``truncate`` means nothing here (nothing is ever cut),
  so ``"truncate": true`` is a 422 that says so.

Request limits are the other routes': ``--max-client-batch-size`` counts texts or questions, the body limit
bounds the characters, and the queue's limits bound the windows in flight.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field, StrictBool, StrictInt, StrictStr

from ..errors import HeadMissingError
from ..tasks.answer import (
    DEFAULT_DOC_STRIDE,
    DEFAULT_MAX_ANSWER_LEN,
    Answer,
    check_answer_options,
    merge_answers,
    qa_windows,
)
from ..tasks.tag import DEFAULT_IGNORE_LABELS, Tag, check_ignore_labels, merge_entities, tag_windows
from ..tokenizer import SPECIAL_TOKENS_PAIR
from .app import ERROR_RESPONSES, ServerState, _as_list, _check_count, _compute, _json
from .engine import Work
from .errors import ServeError, from_core
from .protocol import REQUEST_EXAMPLES

__all__ = [
    "AnswerRequest",
    "AnswerSpan",
    "EntityGroup",
    "TagRequest",
    "TokenEntity",
    "add_span_routes",
]

REQUEST_EXAMPLES["/tag"] = (
    '{"inputs": "text" or ["text", ...], "aggregation_strategy": "none" | "simple" | "first" | "average" | "max", '
    '"ignore_labels": ["O"], "stride": null}'
)
REQUEST_EXAMPLES["/answer"] = (
    '{"question": "text" or ["text", ...], "context": "text" or ["text", ...], "top_k": 1, "max_answer_len": 15, '
    '"doc_stride": 128, "handle_impossible_answer": false}'
)
#: Requests of at most this many characters are windowed on the event loop; larger ones in a thread.
WINDOW_INLINE_CHARS = 2048
#: Answers of at most this many windows are merged on the event loop; more in a thread.
MERGE_INLINE_WINDOWS = 16
TRUNCATE_MEANINGLESS = (
    "truncate is meaningless for question answering: a long context is searched in overlapping windows "
    "(doc_stride tokens shared), never cut; drop the field"
)


class TagRequest(BaseModel):
    """``POST /tag``: the entities of each text (token classification)."""

    inputs: StrictStr | list[StrictStr] = Field(
        description="a text or a list of texts", examples=["Angela Merkel met Emmanuel Macron in Paris."]
    )
    aggregation_strategy: Literal["none", "simple", "first", "average", "max"] = Field(
        default="simple",
        description="none: every token; simple: adjacent B-/I- tags grouped; first/average/max: one label per "
        "word (its first piece's, its pieces' mean scores', its most confident piece's), then grouped",
    )
    ignore_labels: list[StrictStr] = Field(
        default=list(DEFAULT_IGNORE_LABELS), description="labels left out; [] keeps every token or group"
    )
    stride: StrictInt | None = Field(
        default=None,
        ge=0,
        description="tag texts over the model's 512 tokens in windows sharing this many tokens (not with 'none'); "
        "absent: such a text is a 422",
    )


class TokenEntity(BaseModel):
    """One token (``aggregation_strategy: none``)."""

    entity: str = Field(description="the token's label, e.g. B-PER")
    score: float = Field(description="its softmax probability")
    index: int = Field(description="the token's position in the tokenized text ([CLS] is 0)")
    word: str = Field(description="the token as the vocabulary spells it (## for a continuation)")
    start: int = Field(description="character offset of its first character in the text")
    end: int = Field(description="character offset after its last character")


class EntityGroup(BaseModel):
    """One entity (every other strategy): adjacent tokens or words sharing a tag."""

    entity_group: str = Field(description="the tag, B-/I- prefix removed, e.g. PER")
    score: float = Field(description="mean probability of its tokens or words")
    word: str = Field(description="its tokens decoded (lower-cased by an uncased model)")
    start: int = Field(description="character offset of its first character in the text")
    end: int = Field(description="character offset after its last character: text[start:end] is the entity")


class AnswerRequest(BaseModel):
    """``POST /answer``: extractive answers to questions in contexts."""

    question: StrictStr | list[StrictStr] = Field(description="a question or a list of questions")
    context: StrictStr | list[StrictStr] = Field(
        description="the context of every question, or one context per question; any length (windowed)"
    )
    top_k: StrictInt = Field(default=1, ge=1, description="answers per question (a list when > 1)")
    max_answer_len: StrictInt = Field(default=DEFAULT_MAX_ANSWER_LEN, ge=1, description="longest answer in tokens")
    doc_stride: StrictInt = Field(
        default=DEFAULT_DOC_STRIDE, ge=0, description="context tokens shared by consecutive windows"
    )
    handle_impossible_answer: StrictBool = Field(
        default=False, description='also offer the empty answer {"start": 0, "end": 0, "answer": ""}'
    )
    max_seq_len: StrictInt | None = Field(default=None, description="tokens per window; absent: 384")
    truncate: StrictBool | None = Field(default=None, description="meaningless here (nothing is cut); true is a 422")


class AnswerSpan(BaseModel):
    score: float = Field(description="P(start) x P(end) in its window, summed over windows finding the same text")
    start: int = Field(description="character offset of the answer in the context")
    end: int = Field(description="character offset after it: context[start:end] == answer")
    answer: str


def _validation(exc: ValueError) -> ServeError:
    return ServeError(str(exc), "validation")


def _head_missing(exc: HeadMissingError) -> ServeError:
    return from_core(exc)


async def _inline_or_thread(inline: bool, work: Any, *args: Any, **kwargs: Any) -> Any:
    """``work(*args, **kwargs)`` on the event loop when ``inline`` (cheap), else in a worker thread."""
    if inline:
        return work(*args, **kwargs)
    return await asyncio.to_thread(work, *args, **kwargs)


def add_span_routes(app: FastAPI, state: ServerState) -> None:
    """Add ``/tag`` and ``/answer`` to ``app`` (the server's other routes are in :mod:`bertonnx.serve.app`)."""

    @app.post(
        "/tag",
        tags=["tasks"],
        response_model=list[TokenEntity | EntityGroup] | list[list[TokenEntity | EntityGroup]],
        responses=ERROR_RESPONSES,
    )
    async def tag(body: TagRequest, request: Request) -> Response:
        """Named entities (token labels) of each text with character offsets, as transformers'
        ``pipeline("token-classification")`` gives them."""
        model, scheduler = state.require_model()
        texts = _as_list(body.inputs)
        _check_count(len(texts), state.options)
        try:
            model.require_task("tag")
            ignore = check_ignore_labels(body.ignore_labels)
            windows = await _inline_or_thread(
                sum(map(len, texts)) <= WINDOW_INLINE_CHARS,
                tag_windows,
                model.windowing,
                texts,
                max_length=model.max_length,
                aggregation_strategy=body.aggregation_strategy,
                stride=body.stride,
            )
        except HeadMissingError as exc:
            raise _head_missing(exc) from None
        except ValueError as exc:
            raise _validation(exc) from None
        task = Tag()
        works = [Work(window.ids, window.type_ids, task) for text_windows in windows for window in text_windows]
        logits = await _compute(state, scheduler, request, works)
        found = await _inline_or_thread(
            len(works) <= MERGE_INLINE_WINDOWS,
            merge_entities,
            texts,
            windows,
            logits,
            model.labels,
            model.token_strings,
            aggregation_strategy=body.aggregation_strategy,
            ignore_labels=ignore,
        )
        return _json(found[0] if isinstance(body.inputs, str) else found)

    @app.post(
        "/answer",
        tags=["tasks"],
        response_model=AnswerSpan | list[AnswerSpan] | list[AnswerSpan | list[AnswerSpan]],
        responses=ERROR_RESPONSES,
    )
    async def answer(body: AnswerRequest, request: Request) -> Response:
        """Extractive answers, as transformers' ``pipeline("question-answering")`` finds them: only context
        tokens are candidates, the best spans over all windows of a long context win."""
        model, scheduler = state.require_model()
        if body.truncate:
            raise ServeError(TRUNCATE_MEANINGLESS, "validation")
        questions = _as_list(body.question)
        if isinstance(body.context, str):
            contexts = [body.context] * len(questions)
        elif isinstance(body.question, str):
            raise ServeError("a list of contexts needs a list of questions, one per context", "validation")
        else:
            contexts = list(body.context)
        _check_count(len(questions), state.options)
        window = model.qa_window if body.max_seq_len is None else body.max_seq_len
        try:
            model.require_task("answer")
            check_answer_options(body.top_k, body.max_answer_len)
            if not SPECIAL_TOKENS_PAIR + 2 <= window <= model.max_length:
                raise ValueError(
                    f"max_seq_len must be between {SPECIAL_TOKENS_PAIR + 2} and the model's {model.max_length} "
                    f"positions, got {window}"
                )
            windows = await _inline_or_thread(
                sum(map(len, questions)) + sum(map(len, set(contexts))) <= WINDOW_INLINE_CHARS,
                qa_windows,
                model.windowing,
                questions,
                contexts,
                max_length=window,
                doc_stride=body.doc_stride,
            )
        except HeadMissingError as exc:
            raise _head_missing(exc) from None
        except ValueError as exc:
            raise _validation(exc) from None
        task = Answer()
        works = [Work(window.ids, window.type_ids, task) for question in windows for window in question]
        logits = await _compute(state, scheduler, request, works)
        found = await _inline_or_thread(
            len(works) <= MERGE_INLINE_WINDOWS,
            merge_answers,
            contexts,
            windows,
            logits,
            cls_id=model.tokenizer.token_to_id("[CLS]"),
            top_k=body.top_k,
            max_answer_len=body.max_answer_len,
            handle_impossible_answer=body.handle_impossible_answer,
        )
        shaped = [spans[0] if body.top_k == 1 and spans else spans for spans in found]
        return _json(shaped[0] if isinstance(body.question, str) else shaped)
