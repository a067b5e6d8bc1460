"""``ServeOptions``: the server's limits and defaults, validated in one place.

Names follow Text Embeddings Inference where it has the same knob (``max_batch_tokens``,
``max_client_batch_size``, ``payload_limit``, ``auto_truncate``, ``api_key``), so a TEI user finds them.
The token budget is the runtime's own rule (:class:`bertonnx.batching.BatchLimits`); this module only
holds its numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..batching import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS, BatchLimits
from ..outputs import POOLING_MODES

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
    "DEFAULT_REQUEST_TIMEOUT_S",
    "DEFAULT_WRITE_TIMEOUT_S",
    "ServeOptions",
]

#: Inputs one request may carry (TEI's default ``--max-client-batch-size``).
DEFAULT_MAX_CLIENT_BATCH_SIZE = 32
#: Request body bytes at most (TEI's default ``--payload-limit``, 2 MB).
DEFAULT_PAYLOAD_LIMIT = 2_000_000
#: Inputs waiting for the engine at most; past it requests get 429. bert-base fp32 runs roughly 100 short
#: inputs a second on 2 cores, so a full queue is about ten seconds of work.
DEFAULT_MAX_QUEUE = 1024
#: Seconds of work the queue may hold (estimated from the tokens queued and recent seconds per token); past it
#: requests get 429. Counting inputs alone misjudges the work by the inputs' lengths: on the 2-core machine
#: the default 1024 inputs of the serving benchmark's mixed corpus are about a minute of bert-base fp32 work,
#: so overload answered 504 after the request timeout instead of 429 at once (benchmarks/SERVING.md).
DEFAULT_MAX_QUEUE_WAIT_S: float | None = 20.0
#: Requests whose inputs may share one engine run (``None``: any number; 1 turns batching across requests off).
DEFAULT_MAX_BATCH_REQUESTS: int | None = None
#: How long the scheduler holds a batch open for more inputs once the engine is free (0: start at once).
DEFAULT_BATCH_WAIT_MS = 0.0
#: Seconds a request may take from arrival to answer before it gets 504 (its queued inputs are dropped).
DEFAULT_REQUEST_TIMEOUT_S = 60.0
#: Seconds SIGTERM/SIGINT waits for accepted requests before the process exits anyway.
DEFAULT_DRAIN_TIMEOUT_S = 30.0
#: Bytes of a request's line and headers at most (431 past it): nginx allows 4 buffers of 8 kB for them,
#: Envoy 60 kB; a bearer token and a client's usual headers take well under 2 kB.
DEFAULT_MAX_HEADER_BYTES = 32_768
#: Headers per request at most (431 past it): Envoy's and hyper's (TEI's HTTP library) default.
DEFAULT_MAX_HEADERS = 100
#: Bytes of the request target (path and query) at most (414 past it): nginx's 8 kB header buffer.
DEFAULT_MAX_URL_BYTES = 8_192
#: Seconds a connection may take to send a request's line and headers, counted from the connection (or,
#: on a kept-alive connection, from the request's first byte); past it 408 and the connection is closed.
DEFAULT_HEADER_TIMEOUT_S = 10.0
#: Seconds an idle kept-alive connection stays open between requests (uvicorn's and nginx's idea of it).
DEFAULT_KEEP_ALIVE_TIMEOUT_S = 5.0
#: Seconds an answer may go without the client reading any of it; past it the connection is closed and the
#: answer freed (nginx's ``send_timeout`` is 60 s).
DEFAULT_WRITE_TIMEOUT_S = 30.0
#: Pooling of ``/embed`` and ``/v1/embeddings`` when the request names none: BERT's trained pooler.
DEFAULT_POOLING = "pooler"


@dataclass(frozen=True)
class ServeOptions:
    """How the server batches, limits and answers.

    Attributes:
        max_batch_tokens: padded tokens per engine run (longest input × inputs), as offline.
        max_batch_size: inputs per engine run.
        max_batch_requests: requests whose inputs may share one engine run, the oldest queued first
            (``None``: no limit; 1: one request per run, batching across requests off, as TEI's
            ``--max-batch-requests 1``).
        max_client_batch_size: inputs one request may carry; more gives 413.
        max_queue: inputs waiting for the engine at most; a request that would pass it gets 429.
            At least ``max_client_batch_size``, so every admissible request can be queued.
        max_queue_wait: seconds of work the queue may hold, estimated from the tokens queued (and computing)
            and the seconds per token of recent batches; a request that would pass it gets 429 with
            ``Retry-After`` (``None``: no limit). A request is always taken when nothing is queued.
        batch_wait_ms: milliseconds to hold a batch open for more inputs once the engine is free
            (0: continuous batching, a batch starts as soon as the engine is free).
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
        max_url_bytes: bytes of the request target, path and query (414 past it).
        header_timeout: seconds to receive a request's line and headers (408 past it, then the connection
            is closed); a new connection that sends nothing is closed after it.
        keep_alive_timeout: seconds an idle kept-alive connection stays open.
        write_timeout: seconds an answer may go without the client reading any of it; past it the
            connection is closed and the answer freed.

    The connection limits (headers, URL, header, keep-alive and write timeouts) are enforced by
    :func:`bertonnx.serve.run_server`; an app run by another server (Ray Serve's proxy) has that server's.

    Raises:
        TypeError: a field has the wrong type.
        ValueError: a field is out of range.
    """

    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    max_batch_requests: int | None = DEFAULT_MAX_BATCH_REQUESTS
    max_client_batch_size: int = DEFAULT_MAX_CLIENT_BATCH_SIZE
    max_queue: int = DEFAULT_MAX_QUEUE
    max_queue_wait: float | None = DEFAULT_MAX_QUEUE_WAIT_S
    batch_wait_ms: float = DEFAULT_BATCH_WAIT_MS
    payload_limit: int = DEFAULT_PAYLOAD_LIMIT
    auto_truncate: bool = False
    api_key: str | None = None
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT_S
    pooling: str = DEFAULT_POOLING
    model_name: str | None = None
    max_response_bytes: int | None = None
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    max_headers: int = DEFAULT_MAX_HEADERS
    max_url_bytes: int = DEFAULT_MAX_URL_BYTES
    header_timeout: float = DEFAULT_HEADER_TIMEOUT_S
    keep_alive_timeout: float = DEFAULT_KEEP_ALIVE_TIMEOUT_S
    write_timeout: float = DEFAULT_WRITE_TIMEOUT_S

    def __post_init__(self) -> None:
        for name in ("max_client_batch_size", "max_queue", "payload_limit", "max_header_bytes", "max_headers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if isinstance(self.max_url_bytes, bool) or not isinstance(self.max_url_bytes, int):
            raise TypeError(f"max_url_bytes must be an int, got {type(self.max_url_bytes).__name__}")
        if not 1 <= self.max_url_bytes <= self.max_header_bytes:
            raise ValueError(
                f"max_url_bytes must be between 1 and max_header_bytes ({self.max_header_bytes}), got "
                f"{self.max_url_bytes}"
            )
        if self.max_response_bytes is not None:
            if isinstance(self.max_response_bytes, bool) or not isinstance(self.max_response_bytes, int):
                raise TypeError(
                    f"max_response_bytes must be an int or None, got {type(self.max_response_bytes).__name__}"
                )
            if self.max_response_bytes < 1:
                raise ValueError(
                    f"max_response_bytes must be >= 1, or None (sized to the largest legal request); got "
                    f"{self.max_response_bytes}"
                )
        if self.max_batch_requests is not None:
            if isinstance(self.max_batch_requests, bool) or not isinstance(self.max_batch_requests, int):
                raise TypeError(
                    f"max_batch_requests must be an int or None, got {type(self.max_batch_requests).__name__}"
                )
            if self.max_batch_requests < 1:
                raise ValueError(
                    f"max_batch_requests must be >= 1 (1: one request per engine run) or None (no limit), "
                    f"got {self.max_batch_requests}"
                )
        if self.max_queue_wait is not None:
            if isinstance(self.max_queue_wait, bool) or not isinstance(self.max_queue_wait, (int, float)):
                raise TypeError(f"max_queue_wait must be a number or None, got {type(self.max_queue_wait).__name__}")
            if not (self.max_queue_wait > 0 and math.isfinite(self.max_queue_wait)):
                raise ValueError(
                    f"max_queue_wait must be finite and > 0 seconds, or None (no limit); got {self.max_queue_wait}"
                )
        BatchLimits(max_batch_tokens=self.max_batch_tokens, max_batch_size=self.max_batch_size)  # raises if bad
        for name in (
            "batch_wait_ms",
            "request_timeout",
            "drain_timeout",
            "header_timeout",
            "keep_alive_timeout",
            "write_timeout",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name} must be a number, got {type(value).__name__}")
            if not math.isfinite(value):
                raise ValueError(
                    f"{name} must be a finite number of {'ms' if name == 'batch_wait_ms' else 's'}, got {value}"
                )
            positive = name not in ("batch_wait_ms", "drain_timeout")
            if value < 0 or (value == 0 and positive):
                raise ValueError(f"{name} must be {'> 0' if positive else '>= 0'}, got {value}")
        if self.max_queue < self.max_client_batch_size:
            raise ValueError(
                f"max_queue ({self.max_queue}) must be >= max_client_batch_size ({self.max_client_batch_size}), "
                "or a full request could never be queued; raise max_queue or lower max_client_batch_size"
            )
        if not isinstance(self.auto_truncate, bool):
            raise TypeError(f"auto_truncate must be a bool, got {type(self.auto_truncate).__name__}")
        if self.pooling not in POOLING_MODES:
            raise ValueError(f"pooling must be one of {', '.join(POOLING_MODES)}, got {self.pooling!r}")
        for name in ("api_key", "model_name"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{name} must be a non-empty str or None, got {value!r}")

    @property
    def limits(self) -> BatchLimits:
        """The token budget and batch-size cap of one engine run."""
        return BatchLimits(max_batch_tokens=self.max_batch_tokens, max_batch_size=self.max_batch_size)

    @property
    def batch_wait_s(self) -> float:
        return self.batch_wait_ms / 1000.0
