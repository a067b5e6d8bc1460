"""Routes of the checkpoint's own heads: ``/predict`` for a classifier, ``/rerank``, ``/fill_mask``.

Each route tokenizes, queues its inputs on the one scheduler with a task of :mod:`bertonnx.tasks` (the
objects ``BertOnnx`` uses offline, so the answers are the offline ones) and formats them in TEI's shape:

- ``/predict`` on a ``BertForSequenceClassification`` export: per text or pair, every label with its score,
  highest first (``raw_scores``: the logits); one input in, one list out. On exports with an NSP head and
  no classifier, ``/predict`` stays next-sentence prediction (the route in :mod:`.app`).
- ``/rerank`` on a one-logit cross-encoder: ``query`` against each of ``texts``, ``[{"index", "score"}]``
  sorted by score (``return_text`` adds ``text``).
- ``/fill_mask`` on an export with an MLM head: per text, per ``[MASK]``, the ``top_k`` candidates of
  ``pipeline("fill-mask")`` (ours; TEI has no such route).

An export without the route's head answers 422 with the message of :class:`bertonnx.HeadMissingError`
(what the export was exported from and what it offers).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, StrictBool, StrictInt, StrictStr

from ..errors import HeadMissingError
from ..model import BertOnnx
from ..tasks.classify import Classify, default_function, rank_labels, rank_texts
from ..tasks.fill_mask import check_masks
from .engine import Work
from .errors import ServeError, from_core
from .protocol import TEXTS, TEXTS_OR_PAIRS, TRUNCATE_DOC, Pair, TextOrPair, _inputs_check

__all__ = [
    "FillMaskRequest",
    "LabelPrediction",
    "RerankRequest",
    "TextPredictRequest",
    "add_task_routes",
    "task_info",
]


class TextPredictRequest(BaseModel):
    """``POST /predict`` on a classifier export: one text or pair, or a list of texts and pairs."""

    inputs: StrictStr | Pair | list[TextOrPair] = Field(
        description='a text, one pair ["sentence A", "sentence B"], or a list of texts and pairs',
        examples=[["i loved this film", "the food was cold"]],
    )
    truncate: StrictBool | None = Field(default=None, description=TRUNCATE_DOC)
    raw_scores: StrictBool = Field(default=False, description="logits instead of the head's probabilities")

    check_inputs = _inputs_check("inputs", TEXTS_OR_PAIRS)


class LabelPrediction(BaseModel):
    label: str
    score: float = Field(description="softmax / sigmoid probability (as the checkpoint's head), or the logit")


class RerankRequest(BaseModel):
    """``POST /rerank`` (TEI's): score ``query`` against each text with a cross-encoder."""

    query: StrictStr = Field(examples=["what is deep learning?"])
    texts: list[StrictStr] = Field(examples=[["deep learning is a kind of machine learning", "cheese"]])
    truncate: StrictBool | None = Field(default=None, description=TRUNCATE_DOC)
    raw_scores: StrictBool = Field(default=False, description="the logit instead of its sigmoid")
    return_text: StrictBool = Field(default=False, description="add each text to its result")

    check_texts = _inputs_check("texts", TEXTS)


class Rank(BaseModel):
    index: int
    score: float
    text: str | None = None


class FillMaskRequest(BaseModel):
    """``POST /fill_mask``: the MLM head's top tokens for each ``[MASK]`` of each text."""

    inputs: StrictStr | list[StrictStr] = Field(examples=[["the capital of france is [MASK]."]])
    top_k: StrictInt = Field(default=5, ge=1, le=100, description="candidates per [MASK]")
    truncate: StrictBool | None = Field(default=None, description=TRUNCATE_DOC)

    check_inputs = _inputs_check("inputs", TEXTS)


class MaskCandidate(BaseModel):
    score: float
    token: int
    token_str: str
    sequence: str


def task_info(model: BertOnnx) -> dict[str, Any]:
    """What ``/info`` says of the export's head: architecture, tasks, labels, problem type."""
    manifest = model.manifest
    return {
        "architecture": manifest.architecture,
        "tasks": list(model.tasks),
        "heads": manifest.heads,
        "num_labels": manifest.num_labels,
        "labels": model.labels if manifest.num_labels else None,
        "problem_type": manifest.problem_type,
    }


def serves_classifier(tasks: tuple[str, ...]) -> bool:
    """Whether ``/predict`` serves the classifier (else it stays NSP)."""
    return "classify" in tasks


def _head_error(exc: HeadMissingError) -> ServeError:
    return from_core(exc)


def add_task_routes(app: FastAPI, state: Any, *, predict: bool) -> None:
    """Add ``/rerank``, ``/fill_mask`` and (when ``predict``) the classifier's ``/predict`` to ``app``.

    Args:
        state: the app's :class:`~bertonnx.serve.app.ServerState`.
        predict: serve ``/predict`` with the classifier (the export's task block offers ``classify``).
    """
    from .app import ERROR_RESPONSES, _answer, _compute, _prepare

    router = APIRouter()

    if predict:

        @router.post(
            "/predict",
            tags=["TEI"],
            response_model=list[LabelPrediction] | list[list[LabelPrediction]],
            responses=ERROR_RESPONSES,
        )
        async def predict_labels(body: TextPredictRequest, request: Request) -> Response:
            """The classifier's labels per text or pair, highest score first (one input in: one list out)."""
            model, _ = state.require_model()
            try:
                model.require("classify")
            except HeadMissingError as exc:
                raise _head_error(exc) from None
            function = "none" if body.raw_scores else default_function(model.manifest.problem_type, len(model.labels))
            single = isinstance(body.inputs, (str, tuple))
            _, answers = await _answer(state, request, body.inputs, body.truncate, Classify(function))
            predictions = [rank_labels(scores, model.labels, None) for scores in answers]
            return JSONResponse(predictions[0] if single else predictions)

    @router.post("/rerank", tags=["TEI"], response_model=list[Rank], responses=ERROR_RESPONSES)
    async def rerank(body: RerankRequest, request: Request) -> Response:
        """Texts ranked by a one-logit cross-encoder's score against ``query`` (sigmoid; TEI's shape)."""
        model, _ = state.require_model()
        try:
            model.require("rerank")
        except HeadMissingError as exc:
            raise _head_error(exc) from None
        if not body.texts:
            raise ServeError("texts is empty; send at least one text", "validation")
        task = Classify("none" if body.raw_scores else "sigmoid")
        pairs = [(body.query, text) for text in body.texts]
        _, answers = await _answer(state, request, pairs, body.truncate, task)
        ranked: list[dict[str, Any]] = [dict(r) for r in rank_texts(np.array([scores[0] for scores in answers]))]
        if body.return_text:
            for rank in ranked:
                rank["text"] = body.texts[rank["index"]]
        return JSONResponse(ranked)

    @router.post(
        "/fill_mask",
        tags=["bertonnx"],
        response_model=list[list[MaskCandidate]] | list[list[list[MaskCandidate]]],
        responses=ERROR_RESPONSES,
    )
    async def fill_mask(body: FillMaskRequest, request: Request) -> Response:
        """Per text, per [MASK] in order, the top_k tokens with score, token id, token_str and sequence (one
        text in: its list of masks out)."""
        model, _ = state.require_model()
        try:
            task = model.fill_mask_task(body.top_k)
        except HeadMissingError as exc:
            raise _head_error(exc) from None
        scheduler, encodings = await _prepare(state, request, body.inputs, body.truncate)
        try:
            check_masks(encodings, task.mask_token_id)
        except ValueError as exc:
            raise ServeError(str(exc), "validation") from None
        answers = await _compute(state, scheduler, request, [Work(e.ids, e.type_ids, task) for e in encodings])
        return JSONResponse(answers[0] if isinstance(body.inputs, str) else answers)

    app.include_router(router)
