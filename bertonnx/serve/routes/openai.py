"""OpenAI's embeddings route: ``/v1/embeddings`` (the ``openai`` client works unchanged).

Vectors are unit length with the server's ``--pooling``; ``encoding_format`` float or base64 (little-endian
float32 bytes, the client's default); ``dimensions`` must be absent or the model's width; ``truncate`` is TEI's
extension (the runtime's ``truncation``). Errors come in OpenAI's shape (:func:`bertonnx.serve.errors.error_body`).
"""

from __future__ import annotations

import base64
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from .. import pipeline
from ..protocol import OpenAIEmbeddingsRequest, OpenAIEmbeddingsResponse
from ..state import ServerState
from .server import ERROR_RESPONSES
from .tei import task_truncation

__all__ = ["openai_routes"]


def openai_routes(state: ServerState) -> APIRouter:
    """OpenAI's routes."""
    router = APIRouter(tags=["OpenAI"])

    @router.post("/v1/embeddings", response_model=OpenAIEmbeddingsResponse, responses=ERROR_RESPONSES)
    async def embeddings(body: OpenAIEmbeddingsRequest, request: Request) -> Response:
        """OpenAI's embeddings API: unit-length vectors with the server's --pooling."""
        model, _ = state.require_model()
        task = pipeline.task(
            model,
            "embed",
            pooling=state.options.pooling,
            normalize=True,
            truncation=task_truncation(state, body.truncate),
            dimensions=body.dimensions,
        )
        prepared, answers = await pipeline.run(state, request, task, pipeline.as_list(body.input), field="input")
        if body.encoding_format == "base64":
            vectors: list[Any] = [base64.b64encode(a.astype("<f4").tobytes()).decode("ascii") for a in answers]
        else:
            vectors = list(answers)
        tokens = sum(len(unit.ids) for unit in prepared.units)
        return pipeline.json_answer(
            {
                "object": "list",
                "data": [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(vectors)],
                "model": state.model_name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
            request,
        )

    return router
