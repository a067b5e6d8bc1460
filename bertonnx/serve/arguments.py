"""``bertonnx serve``'s options: one parser for the server (:mod:`.cli`) and its Ray Serve form
(:mod:`.ray_serve`, which adds the Ray options), with ``ServeOptions``' defaults shown in ``--help``."""

from __future__ import annotations

import argparse
import os

from ..command import ArgumentParser
from ..manifest import VARIANT_FILES
from ..model import DEFAULT_VARIANT
from ..outputs import POOLING_MODES
from .options import ServeOptions
from .server import DEFAULT_HOST, DEFAULT_PORT

__all__ = ["API_KEY_ENV", "NUMERIC_OPTIONS", "build_parser"]

#: Read when --api-key is not given, so the key need not appear in the process list.
API_KEY_ENV = "BERTONNX_API_KEY"
#: ``--flag`` (a ``ServeOptions`` field, whose default it shows), type, help.
NUMERIC_OPTIONS: tuple[tuple[str, type, str], ...] = (
    ("--max-batch-tokens", int, "padded tokens (longest x inputs) per engine run"),
    ("--max-batch-size", int, "inputs per engine run"),
    ("--max-client-batch-size", int, "inputs per request; more gives 413"),
    ("--max-queue", int, "inputs waiting for the engine; past it requests get 429"),
    ("--batch-wait-ms", float, "hold a batch open this long for more inputs once the engine is free"),
    ("--payload-limit", int, "request body bytes; more gives 413"),
    ("--request-timeout", float, "seconds from arrival to answer; past it 504 and queued inputs are dropped"),
    ("--drain-timeout", float, "seconds SIGTERM/SIGINT waits for accepted requests before exiting"),
    ("--max-header-bytes", int, "bytes of the request line and headers; more gives 431"),
    ("--max-headers", int, "headers per request; more gives 431"),
    ("--max-url-bytes", int, "bytes of the request target (path and query); more gives 414"),
    (
        "--header-timeout",
        float,
        "seconds to receive a request's line and headers; past it 408 and the connection closes",
    ),
    ("--keep-alive-timeout", float, "seconds an idle kept-alive connection stays open"),
    (
        "--write-timeout",
        float,
        "seconds an answer may go without the client reading any of it; past it the connection closes",
    ),
)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``bertonnx serve`` (usage errors raise ``bertonnx.command.CommandError``: one line)."""
    defaults = ServeOptions()
    p = ArgumentParser(
        prog="bertonnx serve",
        description="Serve a bertonnx export over HTTP: TEI (/embed /predict /encode /tokenize), OpenAI "
        "(/v1/embeddings) and KServe v2 (/v2/...) routes, batched across requests by a token budget.",
    )
    p.add_argument("model_dir", metavar="DIR", help="directory written by `bertonnx export`")
    p.add_argument("--variant", default=DEFAULT_VARIANT, help=f"one of {', '.join(VARIANT_FILES)} (default fp32)")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST}: loopback only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads (default: physical cores)")
    p.add_argument(
        "--spinning",
        action="store_true",
        help="let idle onnxruntime threads spin between runs (off: they would take cores from the event loop)",
    )
    p.add_argument(
        "--keep-memory",
        action="store_true",
        help="keep onnxruntime's memory arena and freed heap pages between engine runs (a little faster; RSS grows "
        "with every new batch shape; off: the arena shrinks and free pages go back to the system after each run)",
    )
    p.add_argument(
        "--max-batch-requests",
        type=int,
        default=defaults.max_batch_requests,
        help="requests whose inputs may share one engine run, the oldest first (default: no limit; 1: one "
        "request per run, batching across requests off)",
    )
    p.add_argument(
        "--max-queue-wait",
        type=float,
        default=defaults.max_queue_wait or 0.0,
        help="seconds of work (estimated from queued tokens and recent throughput) the queue may hold; past it "
        f"requests get 429 (default {defaults.max_queue_wait or 0:g}; 0: no limit)",
    )
    p.add_argument(
        "--max-response-bytes",
        type=int,
        default=None,
        help="bytes an answer may take, estimated before it is computed; more gives 413 (default: the answer of "
        "the largest request the other limits allow)",
    )
    for flag, kind, text in NUMERIC_OPTIONS:
        default = getattr(defaults, flag[2:].replace("-", "_"))
        shown = f"{default:g}" if kind is float else str(default)
        p.add_argument(flag, type=kind, default=default, help=f"{text} (default {shown})")
    p.add_argument(
        "--auto-truncate",
        action="store_true",
        help="truncate inputs over 512 tokens when a request does not say (default: 422 naming the input)",
    )
    p.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV),
        help=f"require 'Authorization: Bearer KEY' (default: ${API_KEY_ENV}; unset: no auth)",
    )
    p.add_argument(
        "--pooling",
        choices=POOLING_MODES,
        default=defaults.pooling,
        help=f"pooling when a request names none (default {defaults.pooling})",
    )
    p.add_argument("--model-name", default=None, help="name in KServe routes and answers (default: DIR's name)")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    p.add_argument("--access-log", action="store_true", help="log every request (off by default: it costs throughput)")
    return p
