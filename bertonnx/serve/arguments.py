"""``bertonnx serve``'s options, declared once: flag, default and help, and the one mapping to ``ServeOptions``.

The server's limits are :class:`~bertonnx.serve.options.ServeOptions` fields; each is declared here once
(:data:`SERVE_OPTIONS`: its flag, parser type, default and help) and :class:`ServeOptions` takes its defaults
from here and validates the values. :func:`add_serve_arguments` builds the parser of ``bertonnx serve``
(``--ray`` included) and :func:`serve_options` is the one place arguments become options, for the server
and for its Ray Serve form alike. This module imports only the standard library and the core, so ``bertonnx
serve --help`` and its parse errors work without the serve extra.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..batching import DEFAULT_MAX_BATCH_SIZE
from ..command import ArgumentParser, CommandError, port_number, positive_int
from ..manifest import VARIANT_FILES
from ..model import DEFAULT_VARIANT
from ..outputs import POOLING_MODES
from .defaults import (
    API_KEY_ENV,
    DEFAULT_BATCH_WAIT_MS,
    DEFAULT_DRAIN_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_HOST,
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
    DEFAULT_PORT,
    DEFAULT_PRIORITY_MS_PER_TOKEN,
    DEFAULT_REFILL_WAIT_MS,
    DEFAULT_REQUEST_TIMEOUT_S,
    DEFAULT_SERVE_MAX_BATCH_TOKENS,
    DEFAULT_WRITE_TIMEOUT_S,
)

if TYPE_CHECKING:
    from pydantic import ValidationError

    from .options import ServeOptions

__all__ = [
    "API_KEY_ENV",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "SERVE_OPTIONS",
    "Option",
    "add_serve_arguments",
    "serve_options",
]


@dataclass(frozen=True)
class Option:
    """One ``ServeOptions`` field set from the command line.

    Attributes:
        flag: the option, e.g. ``--max-queue``; the field is its name in snake case.
        kind: the parser's ``type`` (str -> value).
        default: the field's default (``None``: no limit).
        help: what it limits; the default is appended.
        zero_means_none: ``0`` on the command line means the field's ``None`` (no limit, or computed).
        default_text: how ``--help`` shows the default (default: the value; ``None`` shows "no limit").
    """

    flag: str
    kind: Callable[[str], object]
    default: object
    help: str
    zero_means_none: bool = False
    default_text: str | None = None

    @property
    def field(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


#: Every ``ServeOptions`` field a flag sets, in ``--help`` order.
SERVE_OPTIONS: tuple[Option, ...] = (
    Option(
        "--max-batch-tokens",
        positive_int,
        DEFAULT_SERVE_MAX_BATCH_TOKENS,
        "padded tokens (longest x inputs) per engine run",
    ),
    Option("--max-batch-size", positive_int, DEFAULT_MAX_BATCH_SIZE, "inputs per engine run"),
    Option(
        "--max-batch-requests",
        int,
        DEFAULT_MAX_BATCH_REQUESTS,
        "requests whose inputs may share one engine run, the oldest first (1: one request per run, batching "
        "across requests off; 0: no limit)",
        zero_means_none=True,
    ),
    Option(
        "--max-client-batch-size", positive_int, DEFAULT_MAX_CLIENT_BATCH_SIZE, "inputs per request; more gives 413"
    ),
    Option("--max-queue", positive_int, DEFAULT_MAX_QUEUE, "inputs waiting for the engine; past it requests get 429"),
    Option(
        "--max-queue-wait",
        float,
        DEFAULT_MAX_QUEUE_WAIT_S,
        "seconds of work (estimated from queued tokens and recent throughput) the queue may hold; past it requests "
        "get 429 (0: no limit)",
        zero_means_none=True,
    ),
    Option(
        "--batch-wait-ms",
        float,
        DEFAULT_BATCH_WAIT_MS,
        "hold a batch open this long for more inputs once the engine is free",
    ),
    Option(
        "--priority-ms-per-token",
        float,
        DEFAULT_PRIORITY_MS_PER_TOKEN,
        "queue order: each token of a request counts as this many milliseconds of age, so smaller requests go "
        "first within that bound (0: oldest first)",
    ),
    Option(
        "--refill-wait-ms",
        float,
        DEFAULT_REFILL_WAIT_MS,
        "after a run, wait up to this long for the clients it answered to send their next requests (0: never; at "
        "most 1000)",
    ),
    Option("--payload-limit", positive_int, DEFAULT_PAYLOAD_LIMIT, "request body bytes; more gives 413"),
    Option(
        "--request-timeout",
        float,
        DEFAULT_REQUEST_TIMEOUT_S,
        "seconds from arrival to answer; past it 504 and queued inputs are dropped",
    ),
    Option(
        "--drain-timeout",
        float,
        DEFAULT_DRAIN_TIMEOUT_S,
        "seconds SIGTERM/SIGINT waits for accepted requests before exiting",
    ),
    Option(
        "--max-response-bytes",
        int,
        None,
        "bytes an answer may take, estimated before it is computed; more gives 413 (0: the default)",
        zero_means_none=True,
        default_text="the answer of the largest request the other limits allow",
    ),
    Option(
        "--max-header-bytes",
        positive_int,
        DEFAULT_MAX_HEADER_BYTES,
        "bytes of the request line and headers; more gives 431",
    ),
    Option("--max-headers", positive_int, DEFAULT_MAX_HEADERS, "headers per request; more gives 431"),
    Option(
        "--max-url-bytes",
        positive_int,
        DEFAULT_MAX_URL_BYTES,
        "bytes of the request target (path and query); more gives 414",
    ),
    Option(
        "--header-timeout",
        float,
        DEFAULT_HEADER_TIMEOUT_S,
        "seconds to receive a request's line and headers; past it 408 and the connection closes",
    ),
    Option(
        "--keep-alive-timeout", float, DEFAULT_KEEP_ALIVE_TIMEOUT_S, "seconds an idle kept-alive connection stays open"
    ),
    Option(
        "--write-timeout",
        float,
        DEFAULT_WRITE_TIMEOUT_S,
        "seconds an answer may go without the client reading any of it; past it the connection closes",
    ),
)


def _shown(option: Option) -> str:
    if option.default_text is not None:
        return option.default_text
    if option.default is None:
        return "no limit"
    return f"{option.default:g}" if isinstance(option.default, float) else str(option.default)


def add_serve_arguments(parser: ArgumentParser) -> None:
    """The arguments of ``bertonnx serve``: the model, the address, the engine, every limit, and Ray Serve."""
    parser.add_argument("model_dir", metavar="DIR", help="directory written by `bertonnx export`")
    parser.add_argument(
        "--variant", default=DEFAULT_VARIANT, choices=list(VARIANT_FILES), help=f"default {DEFAULT_VARIANT}"
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST}: loopback only)")
    parser.add_argument("--port", type=port_number, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="onnxruntime intra-op threads (default: physical cores; with --ray: 1 per replica)",
    )
    parser.add_argument(
        "--spinning",
        action="store_true",
        help="let idle onnxruntime threads spin between runs (off: they would take cores from the event loop)",
    )
    parser.add_argument(
        "--keep-memory",
        action="store_true",
        help="keep onnxruntime's memory arena and freed heap pages between engine runs (a little faster; RSS grows "
        "with every new batch shape; off: the arena shrinks and free pages go back to the system after each run)",
    )
    for option in SERVE_OPTIONS:
        parser.add_argument(
            option.flag, type=option.kind, default=option.default, help=f"{option.help} (default {_shown(option)})"
        )
    parser.add_argument(
        "--auto-truncate",
        action="store_true",
        help="truncate inputs over 512 tokens when a request does not say (default: 422 naming the input)",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV) or None,
        help=f"require 'Authorization: Bearer KEY' (default: ${API_KEY_ENV}; unset: no auth)",
    )
    parser.add_argument(
        "--pooling",
        choices=POOLING_MODES,
        default=DEFAULT_POOLING,
        help=f"pooling when a request names none (default {DEFAULT_POOLING})",
    )
    parser.add_argument("--model-name", default=None, help="name in KServe routes and answers (default: DIR's name)")
    parser.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    parser.add_argument(
        "--access-log", action="store_true", help="log every request (off by default: it costs throughput)"
    )
    ray = parser.add_argument_group("Ray Serve (the ray extra)")
    ray.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="serve on Ray: no ADDRESS starts a local cluster; `auto`, HOST:PORT or ray://HOST:PORT joins one",
    )
    ray.add_argument("--replicas", type=positive_int, default=1, help="replicas, each with its own model (default 1)")
    ray.add_argument(
        "--max-ongoing-requests",
        type=positive_int,
        default=None,
        help="requests in flight per replica (default: --max-queue, so Serve never caps a batch)",
    )


def serve_options(args: argparse.Namespace) -> ServeOptions:
    """The :class:`ServeOptions` the parsed arguments ask for (the one place arguments become options).

    Raises:
        CommandError: a value out of range, naming its option (one line).
    """
    from pydantic import ValidationError

    from .options import ServeOptions

    values: dict[str, object] = {}
    for option in SERVE_OPTIONS:
        value = getattr(args, option.field)
        values[option.field] = None if option.zero_means_none and value == 0 else value
    values.update(
        auto_truncate=args.auto_truncate, api_key=args.api_key, pooling=args.pooling, model_name=args.model_name
    )
    try:
        return ServeOptions(**values)  # type: ignore[arg-type]  # checked by ServeOptions itself
    except ValidationError as exc:
        raise CommandError(_option_problems(exc)) from None


def _option_problems(error: ValidationError) -> str:
    """A pydantic ``ValidationError`` of ``ServeOptions`` as one line naming each option, argparse's way."""
    flags = {option.field: option.flag for option in SERVE_OPTIONS}
    parts = []
    for item in error.errors():
        field = ".".join(str(part) for part in item.get("loc", ()))
        message = str(item.get("msg", "")).removeprefix("Value error, ")
        if field:
            flag = flags.get(field, "--" + field.replace("_", "-"))
            parts.append(f"argument {flag}: {message[:1].lower()}{message[1:]}, got {item.get('input')!r}")
        else:
            parts.append(message)
    return "; ".join(parts)
