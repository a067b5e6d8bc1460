"""``bertonnx batch``: a corpus job on this machine, or on a Ray cluster with ``--ray``.

Options may come before or after ``DIR`` (``parse_intermixed_args``). Every failure prints one line
naming the problem and the fix and exits 2; nothing is written then.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from ..batching import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS
from ..errors import ModelDirectoryError
from ..model import DEFAULT_VARIANT
from ..outputs import POOLING_MODES
from ..tasks.tag import AGGREGATION_STRATEGIES, DEFAULT_IGNORE_LABELS
from .compute import ON_ERROR_MODES, TASKS, TaskOptions
from .errors import BadRowError, CorpusFileError
from .job import JobSummary, run_local_job

__all__ = ["build_parser", "main"]

EXIT_OK = 0
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bertonnx batch",
        description="Embed, score or classify a corpus file into Parquet: one row per input row, with its id.",
        epilog="Multi-machine: `ray start --head` on one node, `ray start --address HEAD:6379` on the others, "
        "then `bertonnx batch ... --ray auto` on the driver. Paths must be readable (input, model) and "
        "writable (output) at the same place on every node.",
    )
    parser.add_argument("model_dir", metavar="DIR", help="directory written by `bertonnx export`")
    parser.add_argument("--input", required=True, metavar="FILE", help=".txt (one text a line), .jsonl, .csv, .parquet")
    parser.add_argument(
        "--output",
        required=True,
        metavar="OUT.parquet",
        help="Parquet file (a directory of Parquet files with --ray); rejects go to OUT.rejects.jsonl",
    )
    parser.add_argument("--task", choices=TASKS, default="embed", help="default: embed")
    parser.add_argument("--text-column", metavar="NAME", help="column of texts (default: text; not for .txt)")
    parser.add_argument("--pair-column", metavar="NAME", help="column of second sentences (nsp, encode, classify)")
    parser.add_argument("--pooling", choices=POOLING_MODES, default="pooler", help="embed: default pooler")
    parser.add_argument("--normalize", action="store_true", help="embed: unit-length vectors")
    parser.add_argument("--truncate", action="store_true", help="cut inputs longer than the model takes")
    parser.add_argument(
        "--aggregation-strategy",
        choices=AGGREGATION_STRATEGIES,
        default="simple",
        help="tag: none (every token), simple (B-/I- grouped), first/average/max (one label per word); default simple",
    )
    parser.add_argument(
        "--stride",
        type=int,
        default=None,
        help="tag: tag rows over the model's 512 tokens in windows sharing this many tokens (else they are bad rows)",
    )
    parser.add_argument(
        "--ignore-label",
        action="append",
        metavar="LABEL",
        help="tag: leave LABEL out (repeatable; default O); --ignore-label '' keeps every label",
    )
    parser.add_argument(
        "--on-error",
        choices=ON_ERROR_MODES,
        default="stop",
        help="a bad row (null, not a string, too long): stop the job (default) or skip it to the rejects file",
    )
    parser.add_argument("--variant", default=DEFAULT_VARIANT, help=f"model variant (default {DEFAULT_VARIANT})")
    parser.add_argument("--threads", type=int, help="local job: intra-op threads (default: physical cores)")
    parser.add_argument(
        "--max-batch-tokens",
        type=int,
        default=DEFAULT_MAX_BATCH_TOKENS,
        help=f"padded tokens (longest x count) per run (default {DEFAULT_MAX_BATCH_TOKENS})",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_MAX_BATCH_SIZE,
        help=f"inputs per run (default {DEFAULT_MAX_BATCH_SIZE})",
    )
    parser.add_argument(
        "--chunk-size",
        type=int,
        metavar="ROWS",
        help="rows sorted by length together; bounds memory (default 2048, 256 for encode)",
    )
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, help="default: on a terminal")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    ray = parser.add_argument_group("Ray")
    ray.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run on Ray: no ADDRESS starts a local cluster; `auto`, HOST:PORT or ray://HOST:PORT joins one",
    )
    ray.add_argument("--actors", type=int, help="actors (default: the cluster's CPUs / threads per actor)")
    ray.add_argument(
        "--threads-per-actor", type=int, default=1, help="onnxruntime threads = CPUs Ray reserves per actor (default 1)"
    )
    return parser


def _ray_argv(argv: list[str]) -> list[str]:
    """``--ray`` takes an ADDRESS only when the next word looks like one (``auto`` or with a ``:``), so
    ``bertonnx batch --ray DIR ...`` keeps DIR as the model directory."""
    out = []
    for i, word in enumerate(argv):
        following = argv[i + 1] if i + 1 < len(argv) else ""
        if word == "--ray" and not (following == "auto" or ":" in following):
            word = "--ray="
        out.append(word)
    return out


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through the writers, which delete their temp files


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``bertonnx batch``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_intermixed_args(_ray_argv(argv))
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if _main_thread() else None
    try:
        summary = _run(args)
    except (CorpusFileError, BadRowError, ModelDirectoryError, ValueError, TypeError, ImportError) as exc:
        kind = "model directory" if isinstance(exc, ModelDirectoryError) else "batch"
        print(f"error ({kind}): {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted: no output written (the previous output, if any, is unchanged)", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    print(json.dumps(summary.as_dict(), indent=2) if args.json else summary.text())
    return EXIT_OK


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _run(args: argparse.Namespace) -> JobSummary:
    options = TaskOptions(
        args.task,
        args.pooling,
        args.normalize,
        args.truncate,
        args.on_error,
        max_batch_tokens=args.max_batch_tokens,
        batch_size=args.batch_size,
        aggregation_strategy=args.aggregation_strategy,
        stride=args.stride,
        ignore_labels=tuple(label for label in args.ignore_label or DEFAULT_IGNORE_LABELS if label),
    )
    for name in ("chunk_size", "actors", "threads_per_actor", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.ray is None:
        if args.actors is not None:
            raise ValueError("--actors needs --ray; without it the job runs in this process (use --threads)")
        return run_local_job(
            args.model_dir,
            args.input,
            args.output,
            options,
            text_column=args.text_column,
            pair_column=args.pair_column,
            variant=args.variant,
            threads=args.threads,
            chunk_rows=args.chunk_size,
            progress=args.progress,
        )
    from .ray_job import run_ray_job

    return run_ray_job(
        args.model_dir,
        args.input,
        args.output,
        options,
        address=args.ray or None,
        actors=args.actors,
        threads_per_actor=args.threads_per_actor,
        text_column=args.text_column,
        pair_column=args.pair_column,
        variant=args.variant,
        chunk_rows=args.chunk_size,
        progress=args.progress,
    )


if __name__ == "__main__":
    raise SystemExit(main())
