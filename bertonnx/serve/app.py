"""``create_app``: the FastAPI application: the routes of every protocol over one scheduler and model.

A request goes down one path and never climbs back: HTTP (:mod:`.middleware`, a pydantic body from
:mod:`.protocol`) -> its route (:mod:`.routes`: one module per protocol) -> the request's steps
(:mod:`.pipeline`: the task's prepare, the scheduler's queue, one engine run on the engine thread, the task's
finish) -> this request's answers, formatted for its protocol. Every error becomes its answer in one place
(:mod:`.errors`, registered below). Loading and warm-up happen after the port is bound (:mod:`.state`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..manifest import read_manifest
from ..model import DEFAULT_VARIANT, BertOnnx
from ..options import RuntimeOptions
from ..version import __version__
from .errors import CORE_ERRORS, ERROR_STATUS, ServeError, error_body, from_core, validation_message
from .middleware import BearerAuth, BodyLimit, RequestAccounting
from .options import ServeOptions
from .pipeline import ClientGone
from .protocol import REQUEST_EXAMPLES
from .routes.kserve import kserve_routes
from .routes.openai import openai_routes
from .routes.server import server_routes
from .routes.tasks import task_routes
from .routes.tei import tei_routes
from .state import ServerState

__all__ = ["OPEN_PATHS", "ServerState", "create_app"]

log = logging.getLogger("bertonnx.serve")

#: Routes that need no bearer token even with --api-key: liveness, readiness (ours and KServe's), metrics,
#: and the API's description (a browser cannot send the header to /docs; its "Authorize" button then does).
OPEN_PATHS = (
    "/health",
    "/ready",
    "/metrics",
    "/v2/health/live",
    "/v2/health/ready",
    "/docs",
    "/docs/oauth2-redirect",
    "/openapi.json",
)
#: The OpenAPI security scheme declared when the server has an --api-key.
BEARER_SCHEME = "bearer"
#: Content encodings the KServe infer route takes (the others take none).
KSERVE_ENCODINGS = ("gzip", "deflate")
#: Status recorded for a request whose client left before its answer (nginx's "client closed request").
CLIENT_CLOSED_STATUS = 499


def create_app(
    model: str | Path | BertOnnx,
    options: ServeOptions | None = None,
    *,
    variant: str = DEFAULT_VARIANT,
    threads: int | None = None,
    spinning: bool = False,
    keep_memory: bool = False,
) -> FastAPI:
    """Build the server's ASGI application.

    Args:
        model: a directory written by ``bertonnx export`` (loaded in the background once the server runs),
            or a loaded :class:`BertOnnx`.
        options: limits and defaults (default: ``ServeOptions()``).
        variant: which variant of the directory to load (ignored for a loaded model).
        threads: onnxruntime intra-op threads (default: physical cores; ignored for a loaded model).
        spinning: let idle onnxruntime threads spin (ignored for a loaded model). Off by default: the
            event loop and tokenization share the cores, and spinning threads take them
            (benchmarks/DEFAULTS.md, "Idle threads do not spin in the server").
        keep_memory: keep onnxruntime's memory arena and the heap's freed pages between engine runs (ignored
            for a loaded model). Off by default: after each run the arena shrinks and free pages go back to the
            system (:attr:`bertonnx.RuntimeOptions.arena_shrinkage`, ``release_memory``), so RSS follows the
            batch being computed instead of growing with every new batch shape (benchmarks/SERVING.md: the
            soak's RSS with and without).

    Returns:
        A FastAPI app; its lifespan loads and warms up the model and runs the scheduler. Its
        :class:`ServerState` is ``app.state.bertonnx``.

    Raises:
        TypeError: ``model`` or ``options`` has the wrong type.
    """
    options = options or ServeOptions()
    if not isinstance(options, ServeOptions):
        raise TypeError(f"options must be a bertonnx.serve.ServeOptions, got {type(options).__name__}")
    if isinstance(model, BertOnnx):
        default_name = model.manifest.directory.name
    elif isinstance(model, (str, Path)):
        default_name = Path(model).resolve().name
    else:
        raise TypeError(f"model must be a model directory or a BertOnnx, got {type(model).__name__}")
    state = ServerState(options, options.model_name or default_name)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = RuntimeOptions(
            threads=threads, allow_spinning=spinning, arena_shrinkage=not keep_memory, release_memory=not keep_memory
        )
        loader = asyncio.create_task(state.load(model, variant, runtime), name="bertonnx-load")
        try:
            yield
        finally:
            if not loader.done():
                loader.cancel()
            if state.scheduler is not None:
                await state.scheduler.stop()

    app = FastAPI(
        title="bertonnx",
        version=__version__,
        description="BERT and its fine-tuned heads on onnxruntime: Text Embeddings Inference, OpenAI and "
        "KServe v2 routes over one batching scheduler. Errors are JSON {error, error_type} (OpenAI's "
        "{error: {message, type}} on /v1/).",
        lifespan=lifespan,
        redoc_url=None,  # one API page (/docs), open with --api-key as documented
        redirect_slashes=False,  # a 307 to '/embed' has no body most clients would follow or show
    )
    app.state.bertonnx = state
    _add_error_handlers(app)
    app.include_router(tei_routes(state, classifier="classify" in _export_tasks(model)))
    app.include_router(task_routes(state))
    app.include_router(openai_routes(state))
    app.include_router(kserve_routes(state))
    app.include_router(server_routes(state))
    app.add_middleware(
        BodyLimit,
        limit=options.payload_limit,
        timeout=options.request_timeout,
        draining=lambda: state.draining,
        encoding_refusal=_encoding_refusal,
    )
    if options.api_key is not None:
        app.add_middleware(BearerAuth, api_key=options.api_key, open_paths=OPEN_PATHS)
        _declare_bearer(app)
    app.add_middleware(RequestAccounting, metrics=state.metrics, in_flight=state.in_flight, routes=lambda: app.routes)
    return app


def _declare_bearer(app: FastAPI) -> None:
    """Declare the bearer token in the OpenAPI description, so /docs shows "Authorize" and sends it."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()  # caches itself in app.openapi_schema; the additions below stay in the cache
            scheme = {"type": "http", "scheme": "bearer"}
            schema.setdefault("components", {})["securitySchemes"] = {BEARER_SCHEME: scheme}
            schema["security"] = [{BEARER_SCHEME: []}]
        return app.openapi_schema or build()

    app.openapi = openapi  # type: ignore[method-assign]


def _error_response(error: ServeError, request: Request) -> Response:
    """``error`` as JSON in the shape of the request's API (OpenAI's on ``/v1/``)."""
    return Response(
        error.body(request.url.path), status_code=error.status, headers=error.headers, media_type="application/json"
    )


def _encoding_refusal(path: str, header: str) -> ServeError | None:
    """415 for a Content-Encoding the route does not decode (only KServe's infer route takes gzip and deflate,
    and refuses others itself); ``None`` for none or identity."""
    encoding = header.strip().lower()
    if encoding in ("", "identity") or (path.startswith("/v2/models/") and path.endswith("/infer")):
        return None
    return ServeError(
        f"Content-Encoding {encoding} is not supported on {path}; send the JSON body uncompressed "
        f"(only the KServe infer route takes {' or '.join(KSERVE_ENCODINGS)})",
        "unsupported_media_type",
    )


def _unsupported_encoding(request: Request) -> ServeError | None:
    """:func:`_encoding_refusal` of a request that reached a route."""
    return _encoding_refusal(request.url.path, request.headers.get("content-encoding", ""))


def _body_problem(cause: BaseException | None) -> str:
    """Why FastAPI could not parse a JSON body, in the client's terms."""
    if isinstance(cause, UnicodeDecodeError):
        return f"it is not UTF-8: byte {cause.start} is {cause.object[cause.start : cause.start + 1]!r}"
    if isinstance(cause, RecursionError):
        return "it is nested too deeply"
    if isinstance(cause, ValueError) and "digits" in str(cause):
        return f"a number in it is too long ({cause}); send numbers of at most 4,300 digits"
    return f"{type(cause).__name__}: {cause}" if cause is not None else "not UTF-8, or nested too deeply"


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServeError)
    async def serve_error(request: Request, exc: ServeError) -> Response:
        return _error_response(exc, request)

    async def core_error(request: Request, exc: Exception) -> Response:
        return _error_response(from_core(exc), request)

    for kind in CORE_ERRORS:  # the core's typed errors, mapped in one place (bertonnx.serve.errors.from_core)
        app.add_exception_handler(kind, core_error)

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, exc: ClientGone) -> Response:
        return Response(status_code=CLIENT_CLOSED_STATUS)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, exc: RequestValidationError) -> Response:
        encoded = _unsupported_encoding(request)
        if encoded is not None:
            return _error_response(encoded, request)
        route = request.scope.get("route")
        body = getattr(getattr(getattr(route, "body_field", None), "field_info", None), "annotation", None)
        fields = list(getattr(body, "model_fields", {}))
        message = validation_message(exc.errors(), REQUEST_EXAMPLES.get(request.url.path), fields)
        content_type = request.headers.get("content-type", "")
        if not content_type.startswith("application/json"):
            message = f"send Content-Type: application/json (got {content_type or 'none'}); {message}"
        return _error_response(ServeError(message, "validation"), request)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}; the routes are listed at /docs"
            return _error_response(ServeError(message, "not_found"), request)
        if exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            message = f"{request.method} is not allowed on {request.url.path} (allowed: {allowed or 'none'})"
            return _error_response(ServeError(message, "method_not_allowed", exc.headers), request)
        if exc.status_code == 400:  # FastAPI could not decode the body (not UTF-8, nested too deeply ...)
            encoded = _unsupported_encoding(request)
            if encoded is not None:
                return _error_response(encoded, request)
            example = REQUEST_EXAMPLES.get(request.url.path)
            message = f"the body could not be read as JSON ({_body_problem(exc.__cause__)})"
            return _error_response(
                ServeError(f"{message}. Expected a JSON body like {example}" if example else message, "validation"),
                request,
            )
        kinds = {status: kind for kind, status in ERROR_STATUS.items()}
        kind = kinds.get(exc.status_code, "validation")
        return Response(
            error_body(str(exc.detail), kind, request.url.path),
            status_code=ERROR_STATUS[kind],
            media_type="application/json",
        )

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return _error_response(ServeError(f"internal error ({type(exc).__name__}: {exc})", "backend"), request)


def _export_tasks(model: str | Path | BertOnnx) -> tuple[str, ...]:
    """The tasks the export offers, read from its manifest before it loads (none if it cannot be read: the
    load then fails and says why)."""
    if isinstance(model, BertOnnx):
        return model.tasks
    try:
        return read_manifest(model).tasks
    except (ValueError, KeyError, TypeError):
        return ()
