"""``bertonnx serve DIR [options]``: its own parser (options anywhere on the line), then the server.

The directory and variant are checked before the port is bound (a typo exits 2 at once, naming the
fix); loading and warm-up then run behind the bound port, reported by ``/ready``.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Sequence

from ..command import ArgumentParser
from ..errors import ModelDirectoryError
from ..manifest import VARIANT_FILES, read_manifest
from ..model import DEFAULT_VARIANT
from ..outputs import POOLING_MODES
from .app import create_app
from .options import ServeOptions
from .server import DEFAULT_HOST, DEFAULT_PORT, run_server

__all__ = ["API_KEY_ENV", "build_parser", "main"]

EXIT_USAGE = 2
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
)


def build_parser() -> argparse.ArgumentParser:
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


def check_listen_address(host: str, port: int) -> None:
    """Bind ``host:port`` once and let it go, so a taken port or a wrong ``--host`` is one line before loading.

    Raises:
        ValueError: the address cannot be resolved or bound; the message names the option and the fix.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ValueError(
            f"--host {host!r} is not an address of this machine ({exc.strerror}); use an IP such as {DEFAULT_HOST}"
        ) from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            raise ValueError(
                f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port, or stop what holds it"
                if port
                else f"cannot listen on {host} ({exc.strerror}); use an address of this machine with --host"
            ) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``bertonnx serve`` (``--ray``: :func:`bertonnx.serve.ray_serve.main`); returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(arg == "--ray" or arg.startswith("--ray=") for arg in argv):
        from .ray_serve import main as ray_serve_main  # the same app as Ray Serve replicas

        return ray_serve_main(argv)
    args = build_parser().parse_intermixed_args(argv)
    try:
        options = ServeOptions(
            max_batch_tokens=args.max_batch_tokens,
            max_batch_size=args.max_batch_size,
            max_batch_requests=args.max_batch_requests,
            max_client_batch_size=args.max_client_batch_size,
            max_queue=args.max_queue,
            max_queue_wait=args.max_queue_wait or None,
            batch_wait_ms=args.batch_wait_ms,
            payload_limit=args.payload_limit,
            auto_truncate=args.auto_truncate,
            api_key=args.api_key,
            request_timeout=args.request_timeout,
            drain_timeout=args.drain_timeout,
            pooling=args.pooling,
            model_name=args.model_name,
        )
        manifest = read_manifest(args.model_dir)
        if args.variant not in manifest.variants:
            raise ValueError(
                f"{manifest.directory} has no {args.variant!r} variant; it holds {', '.join(manifest.variants)}. "
                "Pick one with --variant."
            )
        if args.threads is not None and args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        if not 0 <= args.port <= 65535:
            raise ValueError(f"--port must be between 0 and 65535, got {args.port}")
        check_listen_address(args.host, args.port)
    except (ValueError, TypeError) as exc:
        kind = "model directory" if isinstance(exc, ModelDirectoryError) else "options"
        print(f"error ({kind}): {exc}", file=sys.stderr)
        return EXIT_USAGE
    app = create_app(
        args.model_dir,
        options,
        variant=args.variant,
        threads=args.threads,
        spinning=args.spinning,
        keep_memory=args.keep_memory,
    )
    return run_server(app, host=args.host, port=args.port, log_level=args.log_level, access_log=args.access_log)


if __name__ == "__main__":
    raise SystemExit(main())
