"""The server's defaults, each with its reason, in one place that imports nothing (the command's parser and
:class:`~bertonnx.serve.options.ServeOptions` both read them, so neither imports the other)."""

from __future__ import annotations

from ..tasks.embed import DEFAULT_POOLING

__all__ = [
    "API_KEY_ENV",
    "DEFAULT_BATCH_WAIT_MS",
    "DEFAULT_DRAIN_TIMEOUT_S",
    "DEFAULT_HEADER_TIMEOUT_S",
    "DEFAULT_HOST",
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
    "DEFAULT_PORT",
    "DEFAULT_PRIORITY_MS_PER_TOKEN",
    "DEFAULT_REFILL_WAIT_MS",
    "DEFAULT_REQUEST_TIMEOUT_S",
    "DEFAULT_SERVE_MAX_BATCH_TOKENS",
    "DEFAULT_WRITE_TIMEOUT_S",
    "MAX_REFILL_WAIT_MS",
]

#: Loopback unless told otherwise: exposing the server is a decision, not a default.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
#: Read when --api-key is not given, so the key need not appear in the process list.
API_KEY_ENV = "BERTONNX_API_KEY"

#: Padded tokens per engine run in the server (the runtime's offline default is 2,048). On a 2-core CPU a run costs
#: its padded tokens and almost nothing besides (bert-base fp32: 0.4 ms + 0.48 ms per padded token, from 8 to 2,048
#: tokens; benchmarks/SCHEDULER.md, ``benchmarks.serve.runcost``), so larger runs gain nothing, while a short request
#: arriving behind a run waits for all of it: 512 (one full-length input) keeps that wait near 0.25 s instead of 1 s.
#: Raise it where a run has a fixed cost to spread (many cores, a GPU); ``runcost`` measures it.
DEFAULT_SERVE_MAX_BATCH_TOKENS = 512
#: Inputs one request may carry (TEI's default ``--max-client-batch-size``).
DEFAULT_MAX_CLIENT_BATCH_SIZE = 32
#: Request body bytes at most (TEI's default ``--payload-limit``, 2 MB).
DEFAULT_PAYLOAD_LIMIT = 2_000_000
#: Inputs waiting for the engine at most; past it requests get 429 (benchmarks/DEFAULTS.md, "Queue limits").
DEFAULT_MAX_QUEUE = 1024
#: Seconds of work the queue may hold (estimated from the tokens queued and recent seconds per token); past it
#: requests get 429 at once instead of 504 after the request timeout. Counting inputs alone misjudges the work
#: by the inputs' lengths (benchmarks/DEFAULTS.md, "Queue limits"). 15 s: the closed loop of 32 mixed requests
#: holds up to about 10 s and must not be refused; what an overload leaves queued must drain soon after it
#: (the trade-off: benchmarks/SCHEDULER.md).
DEFAULT_MAX_QUEUE_WAIT_S: float | None = 15.0
#: Requests whose inputs may share one engine run (``None``: any number; 1 turns batching across requests off).
DEFAULT_MAX_BATCH_REQUESTS: int | None = None
#: How long the scheduler holds a batch open for more inputs once the engine is free (0: start at once).
DEFAULT_BATCH_WAIT_MS = 0.0
#: Milliseconds of queue age each token of a request costs it in the queue's order: smaller requests go first
#: within that bound (0: oldest first). Chosen by replay (benchmarks/SCHEDULER.md); equal to the scheduler's
#: ``PRIORITY_SECONDS_PER_TOKEN`` (a test holds them together; this module stays free of the serve extra).
DEFAULT_PRIORITY_MS_PER_TOKEN = 40.0
#: Milliseconds the engine waits after a run for the clients it answered (0: never); the scheduler's
#: ``REFILL_WAIT_S``.
DEFAULT_REFILL_WAIT_MS = 5.0
#: The refill wait at most: queued work waits while it lasts.
MAX_REFILL_WAIT_MS = 1000.0
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
