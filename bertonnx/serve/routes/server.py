"""The server's own routes: ``/health``, ``/ready``, ``/info``, ``/metrics``, and the error answers every route
documents (:data:`ERROR_RESPONSES`)."""

from __future__ import annotations

import platform
from importlib import metadata
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from ...model import BertOnnx
from ...version import __version__
from ..errors import ERROR_STATUS, ServeError
from ..metrics import CONTENT_TYPE
from ..protocol import ErrorResponse, InfoResponse
from ..state import ServerState

__all__ = ["ERROR_RESPONSES", "VERSIONED_PACKAGES", "server_routes", "task_info"]

VERSIONED_PACKAGES = ("onnxruntime", "tokenizers", "numpy", "fastapi", "uvicorn", "pydantic", "prometheus-client")
#: The error answers a model route may give, for the OpenAPI description.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": kind}
    for kind, status in ERROR_STATUS.items()
    if kind not in ("not_found", "method_not_allowed", "backend")
}


def task_info(model: BertOnnx) -> dict[str, Any]:
    """What ``/info`` says of the export's head: architecture, tasks, heads, labels, problem type, outputs."""
    manifest = model.manifest
    return {
        "architecture": manifest.architecture,
        "tasks": list(model.tasks),
        "heads": manifest.heads,
        "num_labels": manifest.num_labels,
        "labels": model.labels if manifest.num_labels else None,
        "problem_type": manifest.problem_type,
    }


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"bertonnx": __version__, "python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def server_routes(state: ServerState) -> APIRouter:
    """The server's own routes."""
    router = APIRouter(tags=["server"])
    options = state.options

    @router.api_route("/health", methods=["GET", "HEAD"])
    async def health() -> dict[str, str]:
        """Liveness: 200 while the process serves (also while loading and draining)."""
        return {"status": "ok"}

    @router.api_route("/ready", methods=["GET", "HEAD"], responses=ERROR_RESPONSES)
    async def ready() -> dict[str, str]:
        """Readiness: 200 once the model is loaded and warm; 503 while loading, after a failed load, or
        while draining."""
        state.require_model()
        return {"status": "ready"}

    @router.get("/info", response_model=InfoResponse, responses=ERROR_RESPONSES)
    async def info() -> Response:
        """The model, its variant, engine and precision, the server's limits and package versions."""
        model = state.model
        if model is None:
            raise state.unavailable() or ServeError("the model is not loaded yet", "unavailable")
        manifest = model.manifest
        return JSONResponse(
            {
                "model_name": state.model_name,
                "model_dir": str(manifest.directory),
                "source": manifest.data.get("source"),
                "variant": model.variant,
                "engine": model.backend,
                "precision": model.precision,
                "random_weights": manifest.random_weights,
                "task": task_info(model),
                "hidden_size": model.hidden_size,
                "max_input_length": model.max_length,
                "pooling": options.pooling,
                "threads": model.options.intra_op_threads,
                "memory": {
                    "arena_shrinkage": model.options.arena_shrinkage,
                    "release_memory": model.options.release_memory,
                },
                "limits": {
                    "max_batch_tokens": options.max_batch_tokens,
                    "max_batch_size": options.max_batch_size,
                    "max_batch_requests": options.max_batch_requests,
                    "max_client_batch_size": options.max_client_batch_size,
                    "max_queue": options.max_queue,
                    "max_queue_wait": options.max_queue_wait,
                    "batch_wait_ms": options.batch_wait_ms,
                    "priority_ms_per_token": options.priority_ms_per_token,
                    "refill_wait_ms": options.refill_wait_ms,
                    "payload_limit": options.payload_limit,
                    "request_timeout": options.request_timeout,
                    "drain_timeout": options.drain_timeout,
                    "auto_truncate": options.auto_truncate,
                    "api_key": options.api_key is not None,
                    "max_response_bytes": state.response_limit(model),
                    "max_header_bytes": options.max_header_bytes,
                    "max_headers": options.max_headers,
                    "max_url_bytes": options.max_url_bytes,
                    "header_timeout": options.header_timeout,
                    "keep_alive_timeout": options.keep_alive_timeout,
                    "write_timeout": options.write_timeout,
                },
                "versions": _versions(),
            }
        )

    @router.get("/metrics", response_class=Response)
    async def metrics() -> Response:
        """Prometheus metrics (see the README for the names)."""
        return Response(state.metrics.render(), media_type=CONTENT_TYPE)

    return router
