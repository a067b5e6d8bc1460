"""``ServeOptions``: the server's limits and defaults, validated by pydantic in one place.

Names follow Text Embeddings Inference where it has the same knob (``max_batch_tokens``,
``max_client_batch_size``, ``payload_limit``, ``auto_truncate``, ``api_key``), so a TEI user finds them.
The defaults and the command-line flags are declared once in :mod:`.arguments`; the token budget is the
runtime's own rule (:class:`bertonnx.batching.BatchLimits`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic.dataclasses import dataclass

from ..batching import DEFAULT_MAX_BATCH_SIZE, BatchLimits
from ..outputs import POOLING_MODES
from .defaults import (
    DEFAULT_BATCH_WAIT_MS,
    DEFAULT_DRAIN_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_KEEP_ALIVE_TIMEOUT_S,
    DEFAULT_MAX_BATCH_REQUESTS,
    DEFAULT_MAX_CLIENT_BATCH_SIZE,
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_HEADERS,
    DEFAULT_MAX_QUEUE,
    DEFAULT_MAX_QUEUE_WAIT_S,
    DEFAULT_MAX_URL_BYTES,
    DEFAULT_PAYLOAD_LIMIT,
    DEFAULT_POOLING,
    DEFAULT_PRIORITY_MS_PER_TOKEN,
    DEFAULT_REFILL_WAIT_MS,
    DEFAULT_REQUEST_TIMEOUT_S,
    DEFAULT_SERVE_MAX_BATCH_TOKENS,
    DEFAULT_WRITE_TIMEOUT_S,
    MAX_REFILL_WAIT_MS,
)

__all__ = [
    "DEFAULT_BATCH_WAIT_MS",
    "DEFAULT_DRAIN_TIMEOUT_S",
    "DEFAULT_HEADER_TIMEOUT_S",
    "DEFAULT_KEEP_ALIVE_TIMEOUT_S",
    "DEFAULT_MAX_BATCH_REQUESTS",
    "DEFAULT_MAX_CLIENT_BATCH_SIZE",
    "DEFAULT_MAX_HEADERS",
    "DEFAULT_MAX_HEADER_BYTES",
    "DEFAULT_MAX_QUEUE",
    "DEFAULT_MAX_QUEUE_WAIT_S",
    "DEFAULT_MAX_URL_BYTES",
    "DEFAULT_PAYLOAD_LIMIT",
    "DEFAULT_POOLING",
    "DEFAULT_PRIORITY_MS_PER_TOKEN",
    "DEFAULT_REFILL_WAIT_MS",
    "DEFAULT_REQUEST_TIMEOUT_S",
    "DEFAULT_SERVE_MAX_BATCH_TOKENS",
    "DEFAULT_WRITE_TIMEOUT_S",
    "MAX_REFILL_WAIT_MS",
    "ServeOptions",
]

PositiveInt = Annotated[int, Field(ge=1)]
Seconds = Annotated[float, Field(ge=0)]


@dataclass(frozen=True, config=ConfigDict(strict=True, allow_inf_nan=False))
class ServeOptions:
    """How the server batches, limits and answers.

    Attributes:
        max_batch_tokens: padded tokens per engine run (longest input × inputs), counted as offline
            (``DEFAULT_SERVE_MAX_BATCH_TOKENS``, below the runtime's offline default: why is said there).
        max_batch_size: inputs per engine run.
        max_batch_requests: requests whose inputs may share one engine run, the oldest queued first
            (``None``: no limit; 1: one request per run, batching across requests off, as TEI's
            ``--max-batch-requests 1``).
        max_client_batch_size: inputs one request may carry; more gives 413.
        max_queue: inputs waiting for the engine at most; a request that would pass it gets 429.
            At least ``max_client_batch_size``, so every admissible request can be queued.
        max_queue_wait: seconds of work the queue may hold (all of it, whatever its order), estimated from the
            tokens queued (and computing) and the seconds per token of recent batches; a request that would pass
            it gets 429 with
            ``Retry-After`` (``None``: no limit; the command line's ``0``). A request is always taken when
            nothing is queued.
        batch_wait_ms: milliseconds to hold a batch open for more inputs once the engine is free
            (0: continuous batching, a batch starts as soon as the engine is free).
        priority_ms_per_token: the queue's order: a request's place is its arrival time plus this many
            milliseconds per token of the request, so smaller requests go first within that bound (0: oldest first);
            :func:`bertonnx.serve.scheduler.priority_key`.
        refill_wait_ms: milliseconds the engine may wait after a run for the clients it answered to send their
            next requests, so the next batch is cut from a fuller queue (0: never; at most
            ``MAX_REFILL_WAIT_MS``: queued work waits meanwhile).
        payload_limit: request body bytes at most; more gives 413 (checked while the body is read).
        auto_truncate: truncate inputs over the model's 512 tokens when a request does not say
            (``truncate`` absent); ``False`` answers 422 naming the input, as the runtime raises.
        api_key: when set, every route but the health, readiness, metrics and API-description ones needs
            ``Authorization: Bearer <api_key>``.
        request_timeout: seconds from arrival to answer; past it 504 and the queued inputs are dropped.
        drain_timeout: seconds SIGTERM/SIGINT waits for accepted requests before exiting.
        pooling: ``pooler``, ``cls`` or ``mean`` for requests that name none.
        model_name: the name in KServe routes, ``/info`` and OpenAI answers (default: the directory name).
        max_response_bytes: bytes an answer may take, estimated before it is computed (413 past it, naming
            how to ask for less). ``None``: the answer of the largest request the other limits allow
            (``max_client_batch_size`` inputs of the model's positions with every output, as JSON), so only
            requests past those limits are refused.
        max_header_bytes: bytes of the request line and headers (431 past it).
        max_headers: headers per request (431 past it).
        max_url_bytes: bytes of the request target, path and query (414 past it); at most
            ``max_header_bytes``.
        header_timeout: seconds to receive a request's line and headers (408 past it, then the connection
            is closed); a new connection that sends nothing is closed after it.
        keep_alive_timeout: seconds an idle kept-alive connection stays open.
        write_timeout: seconds an answer may go without the client reading any of it; past it the
            connection is closed and the answer freed.

    The connection limits (headers, URL, header, keep-alive and write timeouts) are enforced by
    :func:`bertonnx.serve.run_server`; an app run by another server (Ray Serve's proxy) has that server's.

    Raises:
        pydantic.ValidationError: a field has the wrong type or is out of range (a ``ValueError``; every
            problem is listed with its field). Numbers are finite; ints are not bools or floats.
    """

    max_batch_tokens: int = DEFAULT_SERVE_MAX_BATCH_TOKENS
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    max_batch_requests: PositiveInt | None = DEFAULT_MAX_BATCH_REQUESTS
    max_client_batch_size: PositiveInt = DEFAULT_MAX_CLIENT_BATCH_SIZE
    max_queue: PositiveInt = DEFAULT_MAX_QUEUE
    max_queue_wait: Annotated[float, Field(gt=0)] | None = DEFAULT_MAX_QUEUE_WAIT_S
    batch_wait_ms: Seconds = DEFAULT_BATCH_WAIT_MS
    priority_ms_per_token: Seconds = DEFAULT_PRIORITY_MS_PER_TOKEN
    refill_wait_ms: Annotated[float, Field(ge=0, le=MAX_REFILL_WAIT_MS)] = DEFAULT_REFILL_WAIT_MS
    payload_limit: PositiveInt = DEFAULT_PAYLOAD_LIMIT
    auto_truncate: bool = False
    api_key: Annotated[str, Field(min_length=1)] | None = None
    request_timeout: Annotated[float, Field(gt=0)] = DEFAULT_REQUEST_TIMEOUT_S
    drain_timeout: Seconds = DEFAULT_DRAIN_TIMEOUT_S
    pooling: str = DEFAULT_POOLING
    model_name: Annotated[str, Field(min_length=1)] | None = None
    max_response_bytes: PositiveInt | None = None
    max_header_bytes: PositiveInt = DEFAULT_MAX_HEADER_BYTES
    max_headers: PositiveInt = DEFAULT_MAX_HEADERS
    max_url_bytes: PositiveInt = DEFAULT_MAX_URL_BYTES
    header_timeout: Annotated[float, Field(gt=0)] = DEFAULT_HEADER_TIMEOUT_S
    keep_alive_timeout: Annotated[float, Field(gt=0)] = DEFAULT_KEEP_ALIVE_TIMEOUT_S
    write_timeout: Annotated[float, Field(gt=0)] = DEFAULT_WRITE_TIMEOUT_S

    @field_validator("pooling")
    @classmethod
    def _known_pooling(cls, value: str) -> str:
        if value not in POOLING_MODES:
            raise ValueError(f"pooling must be one of {', '.join(POOLING_MODES)}, got {value!r}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ServeOptions:
        BatchLimits(max_batch_tokens=self.max_batch_tokens, max_batch_size=self.max_batch_size)  # its own message
        if self.max_queue < self.max_client_batch_size:
            raise ValueError(
                f"max_queue ({self.max_queue}) must be >= max_client_batch_size ({self.max_client_batch_size}), "
                "or a full request could never be queued; raise max_queue or lower max_client_batch_size"
            )
        if self.max_url_bytes > self.max_header_bytes:
            raise ValueError(
                f"max_url_bytes ({self.max_url_bytes}) must be <= max_header_bytes ({self.max_header_bytes}): the "
                "request target is part of the request line"
            )
        return self

    @property
    def limits(self) -> BatchLimits:
        """The token budget and batch-size cap of one engine run."""
        return BatchLimits(max_batch_tokens=self.max_batch_tokens, max_batch_size=self.max_batch_size)

    @property
    def batch_wait_s(self) -> float:
        return self.batch_wait_ms / 1000.0

    @property
    def priority_s_per_token(self) -> float:
        return self.priority_ms_per_token / 1000.0

    @property
    def refill_wait_s(self) -> float:
        return self.refill_wait_ms / 1000.0
