"""``bertonnx serve DIR [options]``: a :class:`~bertonnx.command.Command` like every other.

Its arguments are declared in :mod:`.arguments` (standard library only, so ``--help`` and parse errors work
without the serve extra, which :func:`~bertonnx.command.run_command` checks before running). The directory,
variant and address are checked before the port is bound (a typo is one line at once, naming the fix);
loading and warm-up then run behind the bound port, reported by ``/ready``. ``--ray`` runs the same app as
Ray Serve replicas (:mod:`.ray_serve`), with the same options.
"""

from __future__ import annotations

import argparse
import socket
import sys
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..command import ArgumentParser, Command, optional_address_argv, run_command
from ..errors import RandomWeightsWarning
from ..manifest import read_manifest
from ..surface import print_random_banner
from .arguments import DEFAULT_HOST, add_serve_arguments, serve_options

if TYPE_CHECKING:
    from .options import ServeOptions

__all__ = ["SERVE_COMMAND", "check_listen_address", "main"]


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


def _arguments(parser: ArgumentParser) -> None:
    add_serve_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Check the options, directory, variant and address, then serve until SIGTERM/SIGINT; the exit code.

    A random-weights export gets the banner of every command once on stderr (:mod:`bertonnx.surface`), before
    the port is bound, instead of Python's warning line when the model loads.
    """
    options = serve_options(args)
    manifest = read_manifest(args.model_dir)
    manifest.require_variant(args.variant)
    print_random_banner(manifest.random_weights, manifest.weights)
    with warnings.catch_warnings():  # the banner said it
        warnings.simplefilter("ignore", RandomWeightsWarning)
        return _serve(args, options)


def _serve(args: argparse.Namespace, options: ServeOptions) -> int:
    if args.ray is not None:
        from .ray_serve import serve_on_ray  # the same app as Ray Serve replicas (checks the ray extra)

        return serve_on_ray(args, options)
    check_listen_address(args.host, args.port)
    from .app import create_app
    from .server import run_server

    app = create_app(
        args.model_dir,
        options,
        variant=args.variant,
        threads=args.threads,
        spinning=args.spinning,
        keep_memory=args.keep_memory,
    )
    return run_server(app, host=args.host, port=args.port, log_level=args.log_level, access_log=args.access_log)


SERVE_COMMAND = Command(
    "serve",
    "serve DIR over HTTP: TEI, OpenAI and KServe v2 routes (--ray: as Ray Serve replicas)",
    _arguments,
    run,
    extra="serve",
    description="Serve a bertonnx export over HTTP, batched across requests by a token budget. Routes:\n"
    "  TEI's      /embed /embed_sparse /predict /rerank /tokenize\n"
    "  ours       /encode /fill_mask /tag /answer /choose /zero_shot /detect_replaced (the heads' tasks)\n"
    "  OpenAI's   /v1/embeddings\n"
    "  KServe v2  /v2/...\n"
    "  server     /health /ready /info /metrics",
    epilog="With --ray, --threads is per replica (default 1) and Ray reserves that many CPUs for each.",
    rewrite_argv=optional_address_argv,
)


def main(argv: Sequence[str] | None = None) -> int:
    """``bertonnx serve ARGS``; returns the exit code (one line on stderr for an expected failure)."""
    return run_command(SERVE_COMMAND, list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    raise SystemExit(main())
