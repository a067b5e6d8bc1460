"""``bertonnx export [MODEL] OUTDIR``: argument parsing and exit codes for the export step."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from .errors import ExportError
from .source import DEFAULT_MODEL, WEIGHT_CHOICES

EXIT_OK = 0


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Add the export options to ``parser`` (or a new parser)."""
    from .pipeline import ALL_VARIANTS

    parser = parser or argparse.ArgumentParser(prog="bertonnx export")
    parser.description = "Export a BERT checkpoint (encoder + pooler + NSP head) to one verified ONNX model directory."
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="[MODEL] OUTDIR",
        help=f"hub id or checkpoint dir (default {DEFAULT_MODEL}), then the output directory",
    )
    parser.add_argument(
        "--weights",
        choices=WEIGHT_CHOICES,
        default="pretrained",
        help="pretrained (default); random: the exact architecture with seeded weights, no network needed; "
        "auto: pretrained when they can be had, else random with a loud warning",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for random weights and random heads (default 0)")
    parser.add_argument(
        "--allow-random-heads",
        action="store_true",
        help="accept a checkpoint without pooler/NSP head; seed them and record them as random",
    )
    parser.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")
    parser.add_argument(
        "--variants",
        default=",".join(ALL_VARIANTS),
        help=f"comma-separated subset of {','.join(ALL_VARIANTS)} (default: all)",
    )
    parser.add_argument("--opset", type=int, default=None, help="ONNX opset (default 17)")
    parser.add_argument("--force", action="store_true", help="replace an existing OUTDIR written by bertonnx export")
    parser.add_argument("--json", action="store_true", help="print the manifest as JSON when done")
    return parser


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(args: argparse.Namespace) -> int:
    """Run the export for parsed ``args``; return the process exit code."""
    from .graph import DEFAULT_OPSET
    from .pipeline import ExportOptions, run_export

    if len(args.paths) > 2:
        print(f"error: expected [MODEL] OUTDIR, got {len(args.paths)} paths: {' '.join(args.paths)}", file=sys.stderr)
        return ExportError.EXIT_REFUSED
    model, outdir = (DEFAULT_MODEL, args.paths[0]) if len(args.paths) == 1 else args.paths
    options = ExportOptions(
        outdir=Path(outdir),
        model=model,
        weights=args.weights,
        seed=args.seed,
        allow_random_heads=args.allow_random_heads,
        revision=args.revision,
        variants=tuple(v.strip() for v in args.variants.split(",") if v.strip()),
        opset=args.opset or DEFAULT_OPSET,
        force=args.force,
    )
    signal.signal(signal.SIGTERM, _terminate)  # so a killed export still removes its staging directory
    log = (lambda message: print(message, file=sys.stderr, flush=True)) if args.json else None
    try:
        manifest = run_export(options, log) if log else run_export(options)
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: export interrupted; nothing was written", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(manifest, indent=2))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m export``."""
    return run(build_parser().parse_args(argv))
