"""KServe v2 / Triton HTTP routes: server and model metadata, health, and inference on token ids.

The tensors' codec (JSON and binary, gzip/deflate bodies) is :mod:`bertonnx.serve.kserve`; each row becomes one
unit of the ``encode`` task (the graph's outputs, padding stripped), batched with every other request's units.
The model metadata gives every output's shape from the model table (:func:`bertonnx.table.output_shape`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...model import BertOnnx
from ...table import output_shape
from ...tasks import Graph
from ...version import __version__
from .. import pipeline
from ..answers import JSONAnswer, answer_bytes, check_answer_size
from ..engine import Work
from ..errors import ServeError
from ..kserve import (
    BINARY_HEADER,
    INPUT_DATATYPE,
    OUTPUT_DATATYPE,
    InferRows,
    answer_floats,
    decode_body,
    encode_response,
    parse_infer_request,
)
from ..protocol import KServeInferRequest, KServeInferResponse, KServeModelMetadata, KServeTensorMetadata
from ..scheduler import Scheduler
from ..state import ServerState
from .server import ERROR_RESPONSES

__all__ = ["MODEL_VERSION", "kserve_routes"]

#: The only model version KServe routes know.
MODEL_VERSION = "1"
#: KServe bodies of at most this many bytes are decoded and parsed on the event loop; larger ones in a thread.
PARSE_INLINE_BYTES = 65_536


def kserve_routes(state: ServerState) -> APIRouter:
    """KServe v2's routes."""
    router = APIRouter(tags=["KServe v2"])
    options = state.options

    def check_model(name: str, version: str | None) -> tuple[BertOnnx, Scheduler]:
        if name != state.model_name:
            raise ServeError(f"model {name!r} is not served here; this server serves {state.model_name!r}", "not_found")
        if version is not None and version != MODEL_VERSION:
            raise ServeError(f"model {name!r} has only version {MODEL_VERSION}, not {version!r}", "not_found")
        return state.require_model()

    @router.get("/v2")
    async def server_metadata() -> dict[str, Any]:
        """KServe v2 server metadata."""
        return {"name": "bertonnx", "version": __version__, "extensions": ["binary_tensor_data"]}

    @router.api_route("/v2/health/live", methods=["GET", "HEAD"])
    async def live() -> dict[str, bool]:
        """KServe v2 liveness: 200 while the process serves."""
        return {"live": True}

    @router.api_route("/v2/health/ready", methods=["GET", "HEAD"], responses=ERROR_RESPONSES)
    async def server_ready() -> dict[str, bool]:
        """KServe v2 readiness: 200 once the model is warm, 503 while loading or draining."""
        state.require_model()
        return {"ready": True}

    async def model_metadata(name: str, version: str | None = None) -> KServeModelMetadata:
        model, _ = check_model(name, version)
        return KServeModelMetadata(
            name=state.model_name,
            versions=[MODEL_VERSION],
            platform=f"bertonnx_{model.backend}",
            inputs=[
                KServeTensorMetadata(name=i.name, datatype=INPUT_DATATYPE, shape=[-1, -1])
                for i in model.session.get_inputs()
            ],
            outputs=[
                KServeTensorMetadata(
                    name=name,
                    datatype=OUTPUT_DATATYPE,
                    shape=output_shape(name, hidden_size=model.hidden_size, num_labels=model.manifest.num_labels),
                )
                for name in model.output_names
            ],
        )

    async def model_ready(name: str, version: str | None = None) -> dict[str, Any]:
        check_model(name, version)
        return {"name": name, "ready": True}

    async def infer(name: str, request: Request, version: str | None = None) -> Response:
        model, scheduler = check_model(name, version)
        config = model.manifest.config
        raw = await request.body()

        def parse() -> InferRows:
            return parse_infer_request(
                decode_body(raw, request.headers.get("content-encoding"), options.payload_limit),
                request.headers.get(BINARY_HEADER),
                input_names=[i.name for i in model.session.get_inputs()],
                vocab_size=int(config["vocab_size"]),
                type_vocab_size=int(config.get("type_vocab_size", 2)),
                max_length=model.max_length,
                max_client_batch_size=options.max_client_batch_size,
                output_names=model.output_names,
            )

        rows = parse() if len(raw) <= PARSE_INLINE_BYTES else await asyncio.to_thread(parse)
        json_floats, binary_floats = answer_floats(rows, model.hidden_size, model.manifest.num_labels)
        check_answer_size(
            answer_bytes(json_floats) + answer_bytes(binary_floats, binary=True),
            state.response_limit(model),
            'ask for fewer outputs (outputs: [{"name": "pooler_output"}]), send fewer rows or pad them less, '
            "or ask for binary outputs (parameters.binary_data_output: true)",
        )
        task = Graph(tuple(dict.fromkeys(output for output, _ in rows.outputs)))
        works = [Work(ids, types, task) for ids, types in zip(rows.ids, rows.type_ids, strict=True)]
        answers = await pipeline.compute(state, scheduler, request, works)
        header, blobs = encode_response(rows, answers, model_name=state.model_name, hidden_size=model.hidden_size)
        del answers
        limit = pipeline.deadline(state, request)
        if not blobs:
            return JSONAnswer(header, deadline=limit)
        return JSONAnswer(
            header, deadline=limit, tail=blobs, json_length_header=BINARY_HEADER, media_type="application/octet-stream"
        )

    infer_body = {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": KServeInferRequest.model_json_schema()}},
        }
    }
    for prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
        router.add_api_route(prefix, model_metadata, methods=["GET"], response_model=KServeModelMetadata)
        router.add_api_route(prefix + "/ready", model_ready, methods=["GET"])
        router.add_api_route(
            prefix + "/infer",
            infer,
            methods=["POST"],
            response_model=KServeInferResponse,
            responses=ERROR_RESPONSES,
            openapi_extra=infer_body,
            summary="KServe v2 inference on token ids (JSON or binary tensors)",
        )
    return router
