"""The export extra's commands, ``bertonnx export [MODEL] OUTDIR`` and ``bertonnx parity DIR``.

This module imports neither torch nor transformers: their parsers build without the extra, so ``--help``
works on a runtime-only install and a missing extra is reported by :func:`bertonnx.command.run_command` in
one line. The work itself (``pipeline``, ``parity``) is imported when a command runs.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from bertonnx.command import EXIT_INTERRUPTED, EXIT_OK, ArgumentParser, Command, CommandError, run_command
from bertonnx.exit_codes import EXIT_VARIANT_REFUSED
from bertonnx.files import check_output_dir
from bertonnx.manifest import REFUSED_VARIANTS_KEY, VARIANT_FILES, read_manifest
from bertonnx.surface import envelope
from bertonnx.vocabulary import add_option, positive_int

from .errors import ExportError
from .heads import ROWS
from .names import DEFAULT_MODEL, DEFAULT_OPSET, MAX_OPSET, MIN_OPSET, WEIGHT_CHOICES

__all__ = ["EXPORT_COMMAND", "PARITY_COMMAND", "build_parser", "main"]

EXPORT_EPILOG = """\
exit codes: 0 ok, 2 refused (bad option, model or OUTDIR; missing extra), 3 parity gate failed (fp32 or
optimized, or no variant passed; nothing is written), 4 hub unreachable, 5 a lossy variant named by --variants
(int8, bf16) missed its parity gate and was not written (the others were), 130 interrupted. Without --variants
a refused lossy variant is a note and the exit is 0; the manifest's refused_variants says why."""


def _opset(text: str) -> int:
    """An argparse ``type``: an ONNX opset the export builds (``MIN_OPSET`` to ``MAX_OPSET``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an opset {MIN_OPSET} to {MAX_OPSET}, got {text!r}") from None
    if not MIN_OPSET <= value <= MAX_OPSET:
        raise argparse.ArgumentTypeError(
            f"expected an opset {MIN_OPSET} to {MAX_OPSET} (attention needs {MIN_OPSET}; {MAX_OPSET} is the highest "
            f"tried), got {value}"
        )
    return value


def _variants(text: str | None) -> tuple[str, ...]:
    """``--variants``' names; absent: every variant.

    Raises:
        CommandError: given but naming none (``--variants ""``).
    """
    if text is None:
        return tuple(VARIANT_FILES)
    names = tuple(v.strip() for v in text.split(",") if v.strip())
    if not names:
        raise CommandError(
            f"--variants {text!r} names no variant; give some of {', '.join(VARIANT_FILES)}, or leave it out for all"
        )
    return names


def _export_arguments(parser: ArgumentParser) -> None:
    parser.usage = "%(prog)s [MODEL] OUTDIR [options]"
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
        "--task",
        default=None,
        metavar="TASK",
        help="export this architecture instead of the checkpoint's own (config.json's architectures): "
        + ", ".join(f"{row.task_name} ({row.architecture})" for row in ROWS)
        + "; e.g. feature-extraction exports only the encoder of a classifier",
    )
    parser.add_argument(
        "--labels",
        default=None,
        metavar="L1,L2,...",
        help="name a seeded classification head's labels, comma-separated (sets num_labels, id2label, label2id): "
        "with --task text-classification or token-classification and --weights random (or --allow-random-heads); "
        "e.g. negative,neutral,positive, or BIO tags O,B-PER,I-PER,B-ORG,I-ORG,B-LOC,I-LOC,B-MISC,I-MISC",
    )
    parser.add_argument(
        "--num-labels",
        type=positive_int,
        default=None,
        metavar="N",
        help="the seeded classification head's number of labels, named LABEL_0 ... (1: a cross-encoder reranker); "
        "with --labels it must equal their count",
    )
    parser.add_argument(
        "--allow-random-heads",
        action="store_true",
        help="accept a checkpoint without a head the exported architecture needs (e.g. --task pretraining on "
        "a BertModel); seed it and record it as seeded",
    )
    parser.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")
    add_option(parser, "variants", "export")
    parser.add_argument(
        "--opset",
        type=_opset,
        default=None,
        help=f"ONNX opset, {MIN_OPSET} to {MAX_OPSET} (default {DEFAULT_OPSET})",
    )
    parser.add_argument("--force", action="store_true", help="replace an existing OUTDIR written by bertonnx export")
    add_option(parser, "json", "export")


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(args: argparse.Namespace) -> int:
    """Run the export for parsed ``args``; return the process exit code.

    Raises:
        CommandError: a refusal or a failed gate, with the export's exit code.
    """
    from .pipeline import ExportOptions, run_export

    if len(args.paths) > 2:
        raise CommandError(f"expected [MODEL] OUTDIR, got {len(args.paths)} paths: {' '.join(args.paths)}")
    model, outdir = (DEFAULT_MODEL, args.paths[0]) if len(args.paths) == 1 else args.paths
    target = Path(outdir).expanduser()
    check_output_dir(target.absolute().parent, "OUTDIR", name=f"OUTDIR {outdir}")
    options = ExportOptions(
        outdir=target,
        model=model,
        weights=args.weights,
        seed=args.seed,
        allow_random_heads=args.allow_random_heads,
        revision=args.revision,
        variants=_variants(args.variants),
        variants_named=args.variants is not None,
        opset=DEFAULT_OPSET if args.opset is None else args.opset,
        force=args.force,
        task=args.task,
        labels=tuple(args.labels.split(",")) if args.labels is not None else None,
        num_labels=args.num_labels,
    )
    signal.signal(signal.SIGTERM, _terminate)  # so a killed export still removes its staging directory
    log = (lambda message: print(message, file=sys.stderr, flush=True)) if args.json else None
    try:
        manifest = run_export(options, log) if log else run_export(options)
    except ExportError as exc:
        raise CommandError(str(exc), exc.exit_code) from exc
    except KeyboardInterrupt:
        raise CommandError("export interrupted; nothing was written", EXIT_INTERRUPTED) from None
    if args.json:
        random_weights = read_manifest(target).random_weights
        print(json.dumps(envelope(target, None, random_weights, [], **manifest), indent=2))  # the manifest beside
    refused = [v for v in options.variants if v in manifest[REFUSED_VARIANTS_KEY]] if options.variants_named else []
    if refused:
        written = ", ".join(manifest["variants"])
        print(
            f"[export] {', '.join(refused)}, named by --variants, missed {'their' if len(refused) > 1 else 'its'} "
            f"parity gate and {'were' if len(refused) > 1 else 'was'} not written; {target} holds {written} "
            f"(exit {EXIT_VARIANT_REFUSED}: variant refused)",
            file=sys.stderr if args.json else sys.stdout,
            flush=True,
        )
        return EXIT_VARIANT_REFUSED
    return EXIT_OK


def _parity_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("model_dir", metavar="DIR", help="directory written by `bertonnx export`")
    parser.add_argument(
        "--reference",
        metavar="MODEL_OR_DIR",
        help="checkpoint directory or hub id of the PyTorch reference (default: the manifest's source)",
    )
    parser.add_argument("--pairs", metavar="FILE.tsv", help="more inputs: text_a<TAB>text_b per line, or one text")
    parser.add_argument("--report", metavar="FILE.md", help="write a markdown report (its folder must exist)")
    add_option(parser, "variants", "parity")
    add_option(parser, "json", "parity")


def _run_parity(args: argparse.Namespace) -> int:
    from .parity import run as run_parity

    return run_parity(args)


EXPORT_COMMAND = Command(
    "export",
    "export a checkpoint (BERT, RoBERTa, XLM-R, DistilBERT, MPNet, ELECTRA; a sentence-transformers folder) "
    "to a verified model directory",
    _export_arguments,
    run,
    extra="export",
    description="Export a BERT checkpoint with its own heads (BertModel, BertForPreTraining, BertForMaskedLM, "
    "BertForNextSentencePrediction, BertForSequenceClassification, BertForTokenClassification, "
    "BertForQuestionAnswering) to one verified ONNX model directory.",
    epilog=EXPORT_EPILOG,
)
PARITY_COMMAND = Command(
    "parity",
    "compare every variant of DIR, run through the runtime, with PyTorch",
    _parity_arguments,
    _run_parity,
    extra="export",
    description="Compare every variant of an export, run through the bertonnx runtime, with PyTorch.",
    epilog="exit codes: 0 all within tolerance, 1 a breach, 2 bad usage",
)


def build_parser() -> ArgumentParser:
    """The ``bertonnx export`` parser (parse with ``parse_intermixed_args``: options go anywhere)."""
    return EXPORT_COMMAND.parser()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bertonnx_export`` (the same as ``bertonnx export``)."""
    return run_command(EXPORT_COMMAND, argv)
