"""``bertonnx serve DIR [options]``: its parser (:mod:`.arguments`, options anywhere), then the server.

The directory and variant are checked before the port is bound (a typo exits 2 at once, naming the
fix); loading and warm-up then run behind the bound port, reported by ``/ready``.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence

from ..errors import ModelDirectoryError
from ..manifest import read_manifest
from .app import create_app
from .arguments import build_parser
from .options import ServeOptions
from .server import DEFAULT_HOST, run_server

__all__ = ["check_listen_address", "main"]

EXIT_USAGE = 2


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
            max_response_bytes=args.max_response_bytes,
            max_header_bytes=args.max_header_bytes,
            max_headers=args.max_headers,
            max_url_bytes=args.max_url_bytes,
            header_timeout=args.header_timeout,
            keep_alive_timeout=args.keep_alive_timeout,
            write_timeout=args.write_timeout,
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
