"""Text Embeddings Inference's routes: ``/embed``, ``/predict``, ``/rerank``, ``/tokenize``, and our ``/encode``.

Field names and defaults are TEI's (``inputs``, ``truncate``, ``normalize`` true, ``raw_scores``); ``truncate``
is the runtime's ``truncation``, translated here. ``/predict`` is the classifier's on an export with a
sequence-classification head (every label with its score, highest first), else next-sentence prediction;
``/rerank`` needs a one-logit cross-encoder. ``pooling`` and ``/encode`` are ours.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...tasks import Prepared, nsp_labels
from ...tasks.base import fed_length
from .. import pipeline
from ..protocol import (
    EmbedRequest,
    EmbedSparseRequest,
    EncodedInput,
    EncodeRequest,
    LabelPrediction,
    Prediction,
    PredictRequest,
    Rank,
    RerankRequest,
    SparseValue,
    TextPredictRequest,
    TokenizeRequest,
    Tokens,
)
from ..state import ServerState
from .server import ERROR_RESPONSES

if TYPE_CHECKING:
    from tokenizers import Encoding

__all__ = ["tei_routes"]


def encodings(prepared: Prepared) -> list[Encoding]:
    """The prepared units of a per-input task: each input's ``tokenizers.Encoding``."""
    return cast("list[Encoding]", prepared.units)


def truncation(state: ServerState, truncate: bool | None) -> bool:
    """TEI's ``truncate`` as the runtime's ``truncation`` (absent: the server's default)."""
    return state.options.truncation if truncate is None else truncate


def task_truncation(state: ServerState, truncate: bool | None) -> bool | None:
    """``truncation`` for a task with a default of its own: absent and no ``--auto-truncate``, the task's
    default, as offline (an export of a sentence-transformers folder or CrossEncoder cuts at its
    ``max_seq_length``, as ``encode`` and ``predict``; any other refuses an input over the limit)."""
    if truncate is None and not state.options.truncation:
        return None
    return truncation(state, truncate)


def tei_routes(state: ServerState, *, classifier: bool) -> APIRouter:
    """TEI's routes; ``classifier``: ``/predict`` serves the export's classifier, else its NSP head."""
    router = APIRouter(tags=["TEI"])

    @router.post("/embed", response_model=list[list[float]], responses=ERROR_RESPONSES)
    async def embed(body: EmbedRequest, request: Request) -> Response:
        """One vector per text, in the request's order (TEI's /embed; ``pooling`` is ours)."""
        model, _ = state.require_model()
        task = pipeline.task(
            model,
            "embed",
            pooling=body.pooling or state.options.pooling,
            normalize=body.normalize,
            truncation=task_truncation(state, body.truncate),
            prompt_name=body.prompt_name,
            prompt=body.prompt,
            dimensions=body.dimensions,
        )
        _, answers = await pipeline.run(state, request, task, pipeline.as_list(body.inputs))
        return pipeline.json_answer(np.stack(answers), request)

    @router.post("/embed_sparse", response_model=list[list[SparseValue]], responses=ERROR_RESPONSES)
    async def embed_sparse(body: EmbedSparseRequest, request: Request) -> Response:
        """SPLADE (an export of a sentence-transformers SparseEncoder folder): per text its non-zero vocabulary
        ids with their weights, TEI's ``[{"index", "value"}]``, as ``SparseEncoder.encode``."""
        model, _ = state.require_model()
        task = pipeline.task(
            model,
            "embed_sparse",
            top_k=body.top_k,
            prompt_name=body.prompt_name,
            prompt=body.prompt,
            truncation=task_truncation(state, body.truncate),
        )
        _, answers = await pipeline.run(state, request, task, pipeline.as_list(body.inputs), size_check=False)
        return pipeline.json_answer(
            [
                [{"index": int(i), "value": float(v)} for i, v in zip(a["indices"], a["values"], strict=True)]
                for a in answers
            ],
            request,
        )

    if classifier:

        @router.post(
            "/predict",
            response_model=list[LabelPrediction] | list[list[LabelPrediction]],
            responses=ERROR_RESPONSES,
        )
        async def predict_labels(body: TextPredictRequest, request: Request) -> Response:
            """The classifier's labels per text or pair, highest score first (one input in: one list out)."""
            model, _ = state.require_model()
            task = pipeline.task(
                model,
                "classify",
                raw_scores=body.raw_scores,
                top_k=None,
                truncation=task_truncation(state, body.truncate),
            )
            _, answers = await pipeline.run(state, request, task, pipeline.as_list(body.inputs))
            single = isinstance(body.inputs, (str, tuple))
            return pipeline.json_answer(answers[0] if single else answers, request)

    else:

        @router.post("/predict", response_model=list[Prediction] | list[list[Prediction]], responses=ERROR_RESPONSES)
        async def predict(body: PredictRequest, request: Request) -> Response:
            """Next-sentence prediction: per pair, both labels sorted by score (one pair in: one list out)."""
            model, _ = state.require_model()
            scores = "logits" if body.raw_scores else "probabilities"
            task = pipeline.task(model, "nsp", scores=scores, truncation=truncation(state, body.truncate))
            _, answers = await pipeline.run(state, request, task, pipeline.as_list(body.inputs))
            predictions = [nsp_labels(values) for values in answers]
            return pipeline.json_answer(predictions[0] if isinstance(body.inputs, tuple) else predictions, request)

    @router.post("/rerank", response_model=list[Rank], responses=ERROR_RESPONSES)
    async def rerank(body: RerankRequest, request: Request) -> Response:
        """Texts ranked by a one-logit cross-encoder's score against ``query`` (sigmoid; TEI's shape)."""
        model, _ = state.require_model()
        task = pipeline.task(
            model, "rerank", raw_scores=body.raw_scores, truncation=task_truncation(state, body.truncate)
        )
        pairs = [(body.query, text) for text in body.texts]
        _, answers = await pipeline.run(state, request, task, pairs, field="texts")
        ranked: list[dict[str, Any]] = [dict(rank) for rank in task.rank(answers)]
        if body.return_text:
            for rank in ranked:
                rank["text"] = body.texts[rank["index"]]
        return pipeline.json_answer(ranked, request)

    @router.post("/encode", response_model=list[EncodedInput], responses=ERROR_RESPONSES)
    async def encode(body: EncodeRequest, request: Request) -> Response:
        """Every graph output of each text or pair: hidden states (no padding), and the pooler output, NSP
        logits or classifier logits the export has."""
        model, _ = state.require_model()
        task = pipeline.task(model, "encode", truncation=truncation(state, body.truncate))
        prepared, answers = await pipeline.run(state, request, task, pipeline.as_list(body.inputs), states=True)
        return pipeline.json_answer(
            [
                {"tokens": e.tokens, "ids": e.ids, "type_ids": e.type_ids, **{name: a[name] for name in task.outputs}}
                for e, a in zip(encodings(prepared), answers, strict=True)
            ],
            request,
        )

    @router.post("/tokenize", response_model=list[Tokens], responses=ERROR_RESPONSES)
    async def tokenize(body: TokenizeRequest, request: Request) -> Response:
        """Tokens, ids and segment ids of each text or pair, exactly as the model is fed (a
        sentence-transformers export: up to its ``max_seq_length``)."""
        model, _ = state.require_model()
        task = pipeline.task(model, "encode", truncation=truncation(state, body.truncate), max_length=fed_length(model))
        items = pipeline.as_list(body.inputs)
        pipeline.check_count(len(items), state)
        prepared = await pipeline.prepare(state, request, task, items)
        return pipeline.json_answer(
            [
                {"tokens": e.tokens, "ids": e.ids, "type_ids": e.type_ids, "attention_mask": [1] * len(e.ids)}
                for e in encodings(prepared)
            ],
            request,
        )

    return router
