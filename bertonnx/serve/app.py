"""``create_app``: the FastAPI application: routes of the three protocols over one scheduler and model.

A request goes down one path and never climbs back: HTTP (middleware, pydantic body) -> tokenization (a
worker thread) -> the scheduler's queue -> one engine run on the engine thread (``BertOnnx.run_batch``)
-> this request's answers, formatted for its protocol. Loading and warm-up happen after the port is
bound, in the background: ``/health`` answers at once, ``/ready`` and the model routes say 503 until
the model is warm.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import platform
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from tokenizers import Encoding

from ..errors import HeadMissingError, RequestTooLargeError
from ..manifest import NSP_IS_NEXT_INDEX, read_manifest
from ..model import DEFAULT_VARIANT, BertOnnx
from ..options import RuntimeOptions
from ..tasks import Embed, Graph, Nsp, Task
from ..version import __version__
from .answers import JSONAnswer, answer_bytes, check_answer_size
from .engine import Engine, Work
from .errors import CORE_ERRORS, ERROR_STATUS, ServeError, error_body, from_core, validation_message
from .kserve import (
    BINARY_HEADER,
    INPUT_DATATYPE,
    OUTPUT_DATATYPE,
    InferRows,
    answer_floats,
    decode_body,
    encode_response,
    parse_infer_request,
)
from .metrics import CONTENT_TYPE, ServeMetrics
from .middleware import ARRIVAL_KEY, BearerAuth, BodyLimit, InFlight, RequestAccounting
from .options import ServeOptions
from .protocol import (
    REQUEST_EXAMPLES,
    EmbedRequest,
    EncodedInput,
    EncodeRequest,
    ErrorResponse,
    InfoResponse,
    KServeInferRequest,
    KServeInferResponse,
    KServeModelMetadata,
    KServeTensorMetadata,
    OpenAIEmbeddingsRequest,
    OpenAIEmbeddingsResponse,
    Prediction,
    PredictRequest,
    TokenizeRequest,
    Tokens,
)
from .scheduler import Scheduler

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
#: Requests of at most this many characters are tokenized on the event loop (tens of microseconds);
#: larger ones in a worker thread, so a 2 MB request never stalls the loop.
TOKENIZE_INLINE_CHARS = 2048
#: An input over the model's limit (truncation off) is counted exactly when it has at most this many
#: characters (a few milliseconds); a longer one is refused once its first ``max_length + 1`` tokens are
#: found, without tokenizing the rest.
EXACT_COUNT_CHARS = 16_384
#: Content encodings the KServe infer route takes (the others take none).
KSERVE_ENCODINGS = ("gzip", "deflate")
#: KServe bodies of at most this many bytes are decoded and parsed on the event loop; larger ones in a thread.
PARSE_INLINE_BYTES = 65_536
#: Tokens every input has at least ([CLS] and [SEP]).
SPECIAL_TOKENS = 2
#: The only model version KServe routes know.
MODEL_VERSION = "1"
#: Status recorded for a request whose client left before its answer (nginx's "client closed request").
CLIENT_CLOSED_STATUS = 499
NSP_LABELS = {NSP_IS_NEXT_INDEX: "is_next", 1 - NSP_IS_NEXT_INDEX: "not_next"}
VERSIONED_PACKAGES = ("onnxruntime", "tokenizers", "numpy", "fastapi", "uvicorn", "pydantic", "prometheus-client")
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": kind}
    for kind, status in ERROR_STATUS.items()
    if kind not in ("not_found", "method_not_allowed", "backend")
}


class ClientGone(Exception):
    """The client closed its connection while its inputs were queued (they were dropped)."""


class ServerState:
    """Everything the routes share: options, metrics, the model and scheduler once loaded, the lifecycle."""

    def __init__(self, options: ServeOptions, model_name: str) -> None:
        self.options = options
        self.model_name = model_name
        self.metrics = ServeMetrics()
        self.in_flight = InFlight()
        self.model: BertOnnx | None = None
        self.scheduler: Scheduler | None = None
        self.ready = False
        self.draining = False
        self.load_error: str | None = None

    async def load(self, source: str | Path | BertOnnx, variant: str, runtime: RuntimeOptions) -> None:
        """Load (in a worker thread), warm up, start the scheduler, then say ready; record any failure."""
        try:
            started = time.monotonic()
            if isinstance(source, BertOnnx):
                model = source
            else:
                model = await asyncio.to_thread(BertOnnx, source, variant, options=runtime)
            engine = Engine(model)
            await asyncio.to_thread(engine.warmup)
            scheduler = Scheduler(
                engine.run,
                self.options.limits,
                max_queue=self.options.max_queue,
                batch_wait_s=self.options.batch_wait_s,
                max_batch_requests=self.options.max_batch_requests,
                max_queue_wait=self.options.max_queue_wait,
                priority_per_token=self.options.priority_s_per_token,
                refill_wait_s=self.options.refill_wait_s,
                metrics=self.metrics,
            )
            scheduler.start()
            self.model, self.scheduler, self.ready = model, scheduler, True
            log.info("ready: %r loaded and warmed up in %.2f s", model, time.monotonic() - started)
        except Exception as exc:  # noqa: BLE001 - reported by /ready and the server's exit code
            self.load_error = f"{type(exc).__name__}: {exc}"
            log.error("the model failed to load: %s", self.load_error)

    def response_limit(self, model: BertOnnx) -> int:
        """``--max-response-bytes``, or by default the answer of the largest request the other limits allow
        (``/encode`` of ``max_client_batch_size`` inputs of the model's positions)."""
        if self.options.max_response_bytes is not None:
            return self.options.max_response_bytes
        return _answer_estimate([model.max_length] * self.options.max_client_batch_size, model, states=True)

    def unavailable(self) -> ServeError | None:
        """Why model routes cannot answer now (503), or ``None``."""
        if self.draining:
            return ServeError(
                "the server is shutting down and takes no new requests; send this request to another instance "
                "or retry after the restart",
                "unavailable",
                {"Connection": "close"},
            )
        if self.load_error is not None:
            return ServeError(f"the model failed to load ({self.load_error}); fix it and restart", "unavailable")
        if not self.ready:
            return ServeError(
                "the model is still loading and warming up; retry when GET /ready answers 200",
                "unavailable",
                {"Retry-After": "1"},
            )
        return None

    def require_model(self) -> tuple[BertOnnx, Scheduler]:
        """The model and scheduler, or raise the 503 that says why not."""
        problem = self.unavailable()
        if problem is not None:
            raise problem
        if self.model is None or self.scheduler is None:  # ready implies both; kept for the type checker
            raise ServeError("the model is not loaded; retry when GET /ready answers 200", "unavailable")
        return self.model, self.scheduler


# -- the steps of a request -----------------------------------------------------------------------------


def _as_list(value: Any) -> list[Any]:
    return [value] if isinstance(value, (str, tuple)) else list(value)


def _check_count(count: int, options: ServeOptions, field: str = "inputs") -> None:
    if count == 0:
        raise ServeError(f"{field} is empty; send at least one input", "validation")
    if count > options.max_client_batch_size:
        raise RequestTooLargeError(count, options.max_client_batch_size)


def encode_inputs(
    model: BertOnnx, items: Sequence[str | tuple[str, str]], truncation: bool, max_length: int | None = None
) -> list[Encoding]:
    """Tokenize texts and pairs (mixed) as the model is fed, in order.

    Runs of texts and runs of pairs are encoded together; errors name the input's index in ``items``.

    Args:
        max_length: tokens per input (default: the model's positions).

    Raises:
        InputTooLongError: an input is over ``max_length`` and ``truncation`` is off.
    """
    limit = model.max_length if max_length is None else max_length
    encodings: list[Encoding] = []
    start = 0
    while start < len(items):
        is_pair = isinstance(items[start], tuple)
        stop = start
        while stop < len(items) and isinstance(items[stop], tuple) == is_pair:
            stop += 1
        run = items[start:stop]
        texts = [item[0] if isinstance(item, tuple) else item for item in run]
        pairs = [item[1] for item in run if isinstance(item, tuple)] if is_pair else None
        encodings += model.tokenizer.encode(texts, pairs, truncation=truncation, max_length=limit, first_index=start)
        start = stop
    return encodings


def _chars(item: str | tuple[str, str]) -> int:
    return len(item) if isinstance(item, str) else len(item[0]) + len(item[1])


def encode_within_limit(model: BertOnnx, items: Sequence[str | tuple[str, str]]) -> list[Encoding]:
    """Tokenize without truncation, at a cost bounded by the model's limit however long the texts are.

    Every input is tokenized only as far as ``max_length + 1`` tokens (the tokenizer's prefix truncation,
    whose result is exactly that of tokenizing the whole text and cutting it): an input that reaches them is
    over the limit, and one that does not was tokenized whole. So a 2 MB text is refused in milliseconds.

    Raises:
        InputTooLongError: the first input over the limit, with its exact token count, when it has at most
            ``EXACT_COUNT_CHARS`` characters.
        ServeError: 422 naming the first input over the limit, when it is longer than that.
    """
    limit = model.max_length
    encodings = encode_inputs(model, items, True, max_length=limit + 1)
    for index, encoding in enumerate(encodings):
        if len(encoding) <= limit:
            continue
        item = items[index]
        if _chars(item) <= EXACT_COUNT_CHARS:  # count it exactly: raises InputTooLongError (422 by from_core)
            texts, pairs = ([item], None) if isinstance(item, str) else ([item[0]], [item[1]])
            model.tokenizer.encode(texts, pairs, truncation=False, max_length=limit, first_index=index)
        raise ServeError(
            f"input {index} has more than {limit} tokens, the model's limit (it was refused after its first "
            f'{limit + 1}). Send "truncate": true to cut it, or split the text.',
            "validation",
        )
    return encodings


async def _tokenize(
    state: ServerState,
    model: BertOnnx,
    items: Sequence[str | tuple[str, str]],
    truncate: bool | None,
    deadline: float,
) -> list[Encoding]:
    truncation = state.options.auto_truncate if truncate is None else truncate
    started = time.monotonic()

    def tokenize() -> list[Encoding]:  # InputTooLongError: 422 (from_core)
        return encode_inputs(model, items, True) if truncation else encode_within_limit(model, items)

    if sum(_chars(item) for item in items) <= TOKENIZE_INLINE_CHARS:  # a thread hop costs more than this
        encodings = tokenize()
    else:
        work = asyncio.ensure_future(asyncio.to_thread(tokenize))
        done, _ = await asyncio.wait({work}, timeout=max(0.0, deadline - time.monotonic()))
        if work not in done:
            work.add_done_callback(lambda future: future.exception())  # its result is not wanted
            raise ServeError(
                f"tokenizing the request took more than --request-timeout {state.options.request_timeout:g} s; "
                "send fewer or shorter inputs, or raise --request-timeout",
                "timeout",
            )
        encodings = work.result()
    state.metrics.tokenization_duration.observe(time.monotonic() - started)
    return encodings


def _deadline(state: ServerState, request: Request) -> float:
    """``time.monotonic()`` by which the request must be answered (``--request-timeout`` from its arrival)."""
    arrival: float = request.scope.get("state", {}).get(ARRIVAL_KEY, time.monotonic())
    return arrival + state.options.request_timeout


def _answer_estimate(lengths: Sequence[int], model: BertOnnx, *, states: bool) -> int:
    """Bytes of the JSON answer to inputs of ``lengths`` tokens (see :func:`.answers.answer_bytes`): a vector
    and two logits per input, and with ``states`` (``/encode``) every token's hidden state and ids too."""
    hidden, tokens = model.hidden_size, sum(lengths)
    if states:
        return answer_bytes(tokens * hidden + (hidden + 2) * len(lengths), tokens=tokens)
    return answer_bytes((hidden + 2) * len(lengths))


async def _wait_disconnect(request: Request) -> None:
    """Return when the client disconnects. The body has been read, so ``receive`` blocks until then; a
    server that answers it otherwise (no disconnect events) is not watched rather than polled."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
        if not message.get("more_body", False):
            await asyncio.Event().wait()  # never set: cancelled once the answer is ready


async def _compute(state: ServerState, scheduler: Scheduler, request: Request, works: list[Work]) -> list[Any]:
    """Queue ``works`` and wait for their answers, the client leaving, or the request's deadline."""
    timeout = state.options.request_timeout
    deadline = _deadline(state, request)
    ticket = scheduler.submit(works, deadline)  # QueueFullError: 429 (from_core)
    watcher: asyncio.Future[Any] = asyncio.ensure_future(_wait_disconnect(request))
    waiting: set[asyncio.Future[Any]] = {ticket.future, watcher}
    try:
        done, _ = await asyncio.wait(
            waiting, timeout=max(0.0, deadline - time.monotonic()), return_when=asyncio.FIRST_COMPLETED
        )
        if ticket.future in done:
            answers: list[Any] = ticket.future.result()
            return answers
        if watcher in done:
            scheduler.cancel(ticket, "disconnected")
            raise ClientGone
        scheduler.cancel(ticket, "timeout")
        raise ServeError(
            f"the request took more than --request-timeout {timeout:g} s; its queued inputs were dropped, not "
            "computed. Retry later, send fewer inputs, or raise --request-timeout",
            "timeout",
        )
    finally:
        watcher.cancel()


async def _prepare(
    state: ServerState,
    request: Request,
    inputs: Any,
    truncate: bool | None,
    field: str = "inputs",
    queued: bool = True,
) -> tuple[Scheduler, list[Encoding]]:
    """The checks and tokenization every model route starts with (``field``: the inputs' name in the body;
    ``queued``: the inputs go to the scheduler, so a full queue refuses them before they are tokenized)."""
    model, scheduler = state.require_model()
    items = _as_list(inputs)
    _check_count(len(items), state.options, field)
    if queued:  # nothing is computed for a request the queue would refuse (QueueFullError: 429, from_core)
        # 2 tokens an input at least
        scheduler.check_room(len(items), SPECIAL_TOKENS * len(items), lower_bound=True)
    return scheduler, await _tokenize(state, model, items, truncate, _deadline(state, request))


async def _answer(
    state: ServerState,
    request: Request,
    inputs: Any,
    truncate: bool | None,
    task: Task,
    field: str = "inputs",
    states: bool = False,
) -> tuple[list[Encoding], list[Any]]:
    """Tokenize a request's inputs, check the answer's size (``states``: it holds every token's hidden state),
    run them through the scheduler, return encodings and answers."""
    scheduler, encodings = await _prepare(state, request, inputs, truncate, field)
    model, _ = state.require_model()
    estimate = _answer_estimate([len(e) for e in encodings], model, states=states)
    advice = "send fewer inputs per request"
    if states:
        advice = "send fewer or shorter inputs per request, or use /embed for one pooled vector per input"
    check_answer_size(estimate, state.response_limit(model), advice)
    answers = await _compute(state, scheduler, request, [Work(e.ids, e.type_ids, task) for e in encodings])
    return encodings, answers


def _json(content: Any, request: Request | None = None) -> Response:
    """A JSON answer (numpy arrays allowed anywhere); for a model route (``request``) serialised off the event
    loop within the request's deadline (see :class:`.answers.JSONAnswer`)."""
    if request is None:
        return JSONResponse(content)
    state: ServerState = request.app.state.bertonnx
    return JSONAnswer(content, deadline=_deadline(state, request))


def _predictions(values: np.ndarray) -> list[dict[str, Any]]:
    """Both NSP labels of one pair with their scores (from the ``Nsp`` task), highest first."""
    ranked = sorted(range(len(values)), key=lambda i: -float(values[i]))
    return [{"label": NSP_LABELS[i], "score": float(values[i])} for i in ranked]


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"bertonnx": __version__, "python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


# -- the application ------------------------------------------------------------------------------------


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
    from .tasks_routes import add_task_routes, serves_classifier

    classifier = serves_classifier(_export_tasks(model))
    _add_tei_routes(app, state, nsp_predict=not classifier)
    add_task_routes(app, state, predict=classifier)
    _add_openai_routes(app, state)
    _add_kserve_routes(app, state)
    _add_server_routes(app, state)
    from .spans import add_span_routes  # imports this module: added once the app's helpers exist

    add_span_routes(app, state)
    app.add_middleware(
        BodyLimit, limit=options.payload_limit, timeout=options.request_timeout, draining=lambda: state.draining
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


def _unsupported_encoding(request: Request) -> ServeError | None:
    """415 for a compressed body on a route that takes none (only KServe's infer route decompresses)."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return None
    return ServeError(
        f"Content-Encoding {encoding} is not supported on {request.url.path}; send the JSON body uncompressed "
        f"(only the KServe infer route takes {' or '.join(KSERVE_ENCODINGS)})",
        "unsupported_media_type",
    )


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
        message = validation_message(exc.errors(), REQUEST_EXAMPLES.get(request.url.path))
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


def _add_tei_routes(app: FastAPI, state: ServerState, *, nsp_predict: bool = True) -> None:
    options = state.options

    @app.post("/embed", tags=["TEI"], response_model=list[list[float]], responses=ERROR_RESPONSES)
    async def embed(body: EmbedRequest, request: Request) -> Response:
        """One vector per text, in the request's order (TEI's /embed; ``pooling`` is ours)."""
        task = Embed(body.pooling or options.pooling, body.normalize)
        _, answers = await _answer(state, request, body.inputs, body.truncate, task)
        return _json(np.stack(answers), request)

    async def predict(body: PredictRequest, request: Request) -> Response:
        """Next-sentence prediction: per pair, both labels sorted by score (one pair in: one list out)."""
        model, _ = state.require_model()
        try:
            model.require("nsp")
        except HeadMissingError as exc:
            raise from_core(exc) from None
        task = Nsp("logits" if body.raw_scores else "probabilities")
        _, answers = await _answer(state, request, body.inputs, body.truncate, task)
        predictions = [_predictions(scores) for scores in answers]
        return _json(predictions[0] if isinstance(body.inputs, tuple) else predictions, request)

    if nsp_predict:  # a classifier export's /predict is the classifier's (tasks_routes)
        app.add_api_route(
            "/predict",
            predict,
            methods=["POST"],
            tags=["TEI"],
            response_model=list[Prediction] | list[list[Prediction]],
            responses=ERROR_RESPONSES,
        )

    @app.post("/encode", tags=["TEI"], response_model=list[EncodedInput], responses=ERROR_RESPONSES)
    async def encode(body: EncodeRequest, request: Request) -> Response:
        """Every graph output of each text or pair: hidden states (no padding), and the pooler output, NSP
        logits or classifier logits the export has."""
        model, _ = state.require_model()
        task = Graph(model.output_names)
        encodings, answers = await _answer(state, request, body.inputs, body.truncate, task, states=True)
        return _json(
            [
                {
                    "tokens": e.tokens,
                    "ids": e.ids,
                    "type_ids": e.type_ids,
                    **{name: answer[name] for name in task.outputs},
                }
                for e, answer in zip(encodings, answers, strict=True)
            ],
            request,
        )

    @app.post("/tokenize", tags=["TEI"], response_model=list[Tokens], responses=ERROR_RESPONSES)
    async def tokenize(body: TokenizeRequest, request: Request) -> Response:
        """Tokens, ids and segment ids of each text or pair, exactly as the model is fed."""
        _, encodings = await _prepare(state, request, body.inputs, body.truncate, queued=False)
        return _json(
            [
                {"tokens": e.tokens, "ids": e.ids, "type_ids": e.type_ids, "attention_mask": [1] * len(e.ids)}
                for e in encodings
            ],
            request,
        )


def _add_openai_routes(app: FastAPI, state: ServerState) -> None:
    options = state.options

    @app.post("/v1/embeddings", tags=["OpenAI"], response_model=OpenAIEmbeddingsResponse, responses=ERROR_RESPONSES)
    async def embeddings(body: OpenAIEmbeddingsRequest, request: Request) -> Response:
        """OpenAI's embeddings API: unit-length vectors with the server's --pooling."""
        model, _ = state.require_model()
        if body.dimensions is not None and body.dimensions != model.hidden_size:
            raise ServeError(
                f"dimensions is {body.dimensions}, but this model gives {model.hidden_size}-dimensional vectors; "
                f"omit dimensions or send {model.hidden_size}",
                "validation",
            )
        task = Embed(options.pooling, normalize=True)
        encodings, answers = await _answer(state, request, body.input, body.truncate, task, field="input")
        if body.encoding_format == "base64":
            vectors: list[Any] = [base64.b64encode(a.astype("<f4").tobytes()).decode("ascii") for a in answers]
        else:
            vectors = list(answers)
        tokens = sum(len(e.ids) for e in encodings)
        return _json(
            {
                "object": "list",
                "data": [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(vectors)],
                "model": state.model_name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
            request,
        )


def _add_kserve_routes(app: FastAPI, state: ServerState) -> None:
    options = state.options

    def check_model(name: str, version: str | None) -> tuple[BertOnnx, Scheduler]:
        if name != state.model_name:
            raise ServeError(f"model {name!r} is not served here; this server serves {state.model_name!r}", "not_found")
        if version is not None and version != MODEL_VERSION:
            raise ServeError(f"model {name!r} has only version {MODEL_VERSION}, not {version!r}", "not_found")
        return state.require_model()

    @app.get("/v2", tags=["KServe v2"])
    async def server_metadata() -> dict[str, Any]:
        """KServe v2 server metadata."""
        return {"name": "bertonnx", "version": __version__, "extensions": ["binary_tensor_data"]}

    @app.api_route("/v2/health/live", methods=["GET", "HEAD"], tags=["KServe v2"])
    async def live() -> dict[str, bool]:
        """KServe v2 liveness: 200 while the process serves."""
        return {"live": True}

    @app.api_route("/v2/health/ready", methods=["GET", "HEAD"], tags=["KServe v2"], responses=ERROR_RESPONSES)
    async def server_ready() -> dict[str, bool]:
        """KServe v2 readiness: 200 once the model is warm, 503 while loading or draining."""
        state.require_model()
        return {"ready": True}

    async def model_metadata(name: str, version: str | None = None) -> KServeModelMetadata:
        model, _ = check_model(name, version)
        dims = {
            "last_hidden_state": [-1, -1, model.hidden_size],
            "pooler_output": [-1, model.hidden_size],
            "logits": [-1, len(model.labels)],
        }
        return KServeModelMetadata(
            name=state.model_name,
            versions=[MODEL_VERSION],
            platform=f"bertonnx_{model.backend}",
            inputs=[
                KServeTensorMetadata(name=i.name, datatype=INPUT_DATATYPE, shape=[-1, -1])
                for i in model.session.get_inputs()
            ],
            outputs=[
                KServeTensorMetadata(name=name, datatype=OUTPUT_DATATYPE, shape=dims.get(name, [-1, 2]))
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
        answers = await _compute(state, scheduler, request, works)
        header, blobs = encode_response(rows, answers, model_name=state.model_name, hidden_size=model.hidden_size)
        del answers
        if not blobs:
            return JSONAnswer(header, deadline=_deadline(state, request))
        return JSONAnswer(
            header,
            deadline=_deadline(state, request),
            tail=blobs,
            json_length_header=BINARY_HEADER,
            media_type="application/octet-stream",
        )

    infer_body = {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": KServeInferRequest.model_json_schema()}},
        }
    }
    for prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
        app.add_api_route(
            prefix, model_metadata, methods=["GET"], tags=["KServe v2"], response_model=KServeModelMetadata
        )
        app.add_api_route(prefix + "/ready", model_ready, methods=["GET"], tags=["KServe v2"])
        app.add_api_route(
            prefix + "/infer",
            infer,
            methods=["POST"],
            tags=["KServe v2"],
            response_model=KServeInferResponse,
            responses=ERROR_RESPONSES,
            openapi_extra=infer_body,
            summary="KServe v2 inference on token ids (JSON or binary tensors)",
        )


def _add_server_routes(app: FastAPI, state: ServerState) -> None:
    options = state.options

    @app.api_route("/health", methods=["GET", "HEAD"], tags=["server"])
    async def health() -> dict[str, str]:
        """Liveness: 200 while the process serves (also while loading and draining)."""
        return {"status": "ok"}

    @app.api_route("/ready", methods=["GET", "HEAD"], tags=["server"], responses=ERROR_RESPONSES)
    async def ready() -> dict[str, str]:
        """Readiness: 200 once the model is loaded and warm; 503 while loading, after a failed load, or
        while draining."""
        state.require_model()
        return {"status": "ready"}

    @app.get("/info", tags=["server"], response_model=InfoResponse, responses=ERROR_RESPONSES)
    async def info() -> Response:
        """The model, its variant, engine and precision, the server's limits and package versions."""
        model = state.model
        if model is None:
            raise state.unavailable() or ServeError("the model is not loaded yet", "unavailable")
        from .tasks_routes import task_info

        manifest = model.manifest
        return _json(
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

    @app.get("/metrics", tags=["server"], response_class=Response)
    async def metrics() -> Response:
        """Prometheus metrics (see the README for the names)."""
        return Response(state.metrics.render(), media_type=CONTENT_TYPE)
