"""``bertonnx batch``: a corpus job on this machine, or on a Ray cluster with ``--ray``.

A :class:`~bertonnx.command.Command` like every other: options anywhere, one line naming the problem and
the fix for every failure (exit 2; nothing is written then), ``--debug`` for the traceback. This module
imports no pyarrow, so ``--help`` and parse errors work without the batch extra, which
:func:`~bertonnx.command.run_command` checks before running. :func:`task_options` is the one place the
arguments become :class:`~bertonnx.corpus.compute.TaskOptions`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from ..command import ArgumentParser, Command, CommandError, optional_address_argv, positive_int, run_command
from ..errors import RandomWeightsWarning
from ..exit_codes import EXIT_INTERRUPTED, EXIT_OK
from ..manifest import Manifest, read_manifest
from ..surface import envelope, print_random_banner
from ..vocabulary import OPTIONS, add_option, ignore_labels
from .errors import RayJobError
from .tasks import ON_ERROR_MODES, TASKS

if TYPE_CHECKING:
    from .compute import TaskOptions
    from .job import JobSummary

__all__ = ["BATCH_COMMAND", "main", "task_options"]

EPILOG = (
    "Multi-machine (Ray 2.60): RAY_AUTH_MODE=token and the head's ~/.ray/auth_token on every node; `ray start "
    "--head` on one node, `ray start --address HEAD:6379` on the others, then `bertonnx batch ... --ray "
    "HEAD:6379` on any node. Paths must be readable (input, model) and writable (output) at the same place on "
    "every node. The README lists the ports to open."
)


def _arguments(parser: ArgumentParser) -> None:
    parser.add_argument("model_dir", metavar="DIR", help="directory written by `bertonnx export`")
    add_option(parser, "input", "batch")
    add_option(parser, "output", "batch")
    parser.add_argument("--task", choices=TASKS, default="embed", help="default: embed")
    parser.add_argument("--text-column", metavar="NAME", help="column of texts (default: text; not for .txt)")
    parser.add_argument("--pair-column", metavar="NAME", help="column of second sentences (nsp, encode, classify)")
    for name in ("pooling", "normalize", "prompt_name", "dimensions", "truncation", "aggregation_strategy", "stride"):
        add_option(parser, name, "batch")
    for name in ("ignore_labels", "keep_all"):
        add_option(parser, name, "batch")
    for name in ("candidate_labels", "hypothesis_template", "multi_label", "entailment_label"):
        add_option(parser, name, "batch")
    parser.add_argument(
        "--on-error",
        choices=ON_ERROR_MODES,
        default="stop",
        help="a bad row (null, not a string, too long): stop the job (default) or skip it to the rejects file",
    )
    for name in ("variant", "threads", "max_batch_tokens", "batch_size"):
        add_option(parser, name, "batch")
    parser.add_argument(
        "--chunk-size",
        type=positive_int,
        metavar="ROWS",
        help="rows sorted by length together; bounds memory (default 2048, 256 for encode)",
    )
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, help="default: on a terminal")
    add_option(parser, "json", "batch")
    ray = parser.add_argument_group("Ray (the ray extra)")
    ray.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run on Ray: no ADDRESS starts a local cluster; `auto`, HOST:PORT or ray://HOST:PORT joins one",
    )
    ray.add_argument("--actors", type=positive_int, help="actors (default: the cluster's CPUs / threads per actor)")
    ray.add_argument(
        "--threads-per-actor",
        type=positive_int,
        default=1,
        help="onnxruntime threads = CPUs Ray reserves per actor (default 1)",
    )


#: What the vocabulary notes of an option that only one corpus task reads (``--task embed``).
_TASK_NOTE = "--task "


def check_task_options(args: argparse.Namespace) -> None:
    """Refuse an option given for another task than the job's (``--candidate-labels`` on an embed job), rather
    than ignoring it: the vocabulary notes which task reads each such option.

    Raises:
        CommandError: one line naming the option, its task and the job's.
    """
    for name, option in OPTIONS.items():
        convention = option.conventions.get("batch")
        if convention is None or not convention.note.startswith(_TASK_NOTE):
            continue
        # "--task tag; a refused row ...", "--task embed or sparse"
        tasks = convention.note.removeprefix(_TASK_NOTE).split(";")[0].strip().split(" or ")
        if args.task not in tasks and getattr(args, name, None) != option.default_for("batch"):
            named = " or ".join(f"--task {task}" for task in tasks)
            raise CommandError(
                f"{option.flag} is read by {named} only, and this job is --task {args.task}; drop "
                f"{option.flag}, or pass {named}"
            )


def task_options(args: argparse.Namespace) -> TaskOptions:
    """The :class:`TaskOptions` the parsed arguments ask for (the one place arguments become options).

    Raises:
        CommandError: an option of another task (:func:`check_task_options`).
    """
    from .compute import TaskOptions

    check_task_options(args)
    return TaskOptions(
        args.task,
        args.pooling,
        args.normalize,
        args.truncation,
        args.on_error,
        max_batch_tokens=args.max_batch_tokens,
        batch_size=args.batch_size,
        aggregation_strategy=args.aggregation_strategy,
        stride=args.stride,
        ignore_labels=ignore_labels(args),
        prompt_name=args.prompt_name,
        dimensions=args.dimensions,
        candidate_labels=",".join(args.candidate_labels) if args.candidate_labels else None,
        hypothesis_template=args.hypothesis_template,
        multi_label=args.multi_label,
        entailment_label=args.entailment_label,
    )


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through the writers, which delete their temp files


def run(args: argparse.Namespace) -> int:
    """Run the job; print its summary (``--json``: the envelope of every command, :func:`bertonnx.surface.envelope`,
    with empty ``results`` and the summary beside). Ctrl-C or SIGTERM leaves no output behind. A random-weights
    export gets the banner of every command, once on stderr, not Python's warning line."""
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    try:
        # Ray prints its notices to the driver (a node marked dead, a lost object rebuilt) on stdout; they go
        # to stderr, so that stdout holds only the summary (`--json`).
        with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
            warnings.simplefilter("ignore", RandomWeightsWarning)  # the banner says it once (_run)
            summary, manifest = _run(args)
    except RayJobError as exc:  # the cluster's failure, not a bug: one line, exit 2
        raise CommandError(str(exc)) from exc
    except KeyboardInterrupt:
        raise CommandError(
            "interrupted: no output written (the previous output, if any, is unchanged)", EXIT_INTERRUPTED
        ) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if args.json:
        found = envelope(manifest.directory, args.variant, manifest.random_weights, [], **summary.as_dict())
        print(json.dumps(found, indent=2))
    else:
        print(summary.text())
    return EXIT_OK


#: What ``--output`` may be called: the job writes Parquet (a file, or with ``--ray`` a directory of files).
OUTPUT_SUFFIXES = (".parquet", ".pq")


def check_output_name(output: str, ray: bool) -> None:
    """Refuse an ``--output`` whose name says another format (``out.csv`` would hold Parquet).

    Raises:
        CommandError: the suffix is not Parquet's (a directory without a suffix is fine with ``--ray``).
    """
    suffix = Path(output).suffix.lower()
    if suffix in OUTPUT_SUFFIXES or (ray and not suffix) or Path(output).is_dir():
        return  # an existing directory gets the writer's own refusal ("is a directory")
    where = "a directory of Parquet files (--ray)" if ray else "Parquet"
    raise CommandError(
        f"--output {output}: the job writes {where}, not {suffix or 'a file without a suffix'}; name it "
        f"{Path(output).with_suffix('.parquet').name}"
    )


def _run(args: argparse.Namespace) -> tuple[JobSummary, Manifest]:
    options = task_options(args)
    check_output_name(args.output, args.ray is not None)
    manifest = read_manifest(args.model_dir)
    if not args.json:
        print_random_banner(manifest.random_weights, manifest.weights)
    return _run_job(args, options), manifest


def _run_job(args: argparse.Namespace, options: TaskOptions) -> JobSummary:
    if args.ray is None:
        if args.actors is not None:
            raise CommandError("--actors needs --ray; without it the job runs in this process (use --threads)")
        from .job import run_local_job

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


BATCH_COMMAND = Command(
    "batch",
    "embed or score a corpus file into Parquet, locally or on Ray (--ray)",
    _arguments,
    run,
    extra="batch",
    description="Embed or score a corpus file into Parquet: one row per input row, with its id (row number).",
    epilog=EPILOG,
    rewrite_argv=optional_address_argv,
)


def main(argv: Sequence[str] | None = None) -> int:
    """``bertonnx batch ARGS``; returns the exit code (one line on stderr for an expected failure)."""
    return run_command(BATCH_COMMAND, list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    raise SystemExit(main())
