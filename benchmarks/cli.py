"""``bertonnx bench DIR``: run every section, one fresh process per runner, and write the reports.

Order: roofline, correctness check (all runners, before any timing), the real-weights accuracy (with
``--real-weights``), each runner's grid (torch first, then the variants in the manifest), the extra
processes of ``--repeats`` for B1×T128, cold-start probes, then the targets. Processes run strictly one
after another with the same thread budget. Exit 0 when every runner was correct, 3 when one failed its
check (reports are still written, with that runner's rows marked failed), 2 for bad options, a bad
model directory, an output folder that cannot be written, or a missing bench extra (each one line).

``--repeats N``: one process may run the same file markedly slower than the next (on a 2-core VM, fp32
B1×T128 at 116 ms in some fresh processes and 135 ms in others), so B1×T128 is timed in N fresh processes
per runner: the grid's process, then N - 1 processes timing that shape alone, in rounds (every runner
once per round) so a slow spell of the machine does not land on one runner. The summary and the targets
use the median of the per-process p50s.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertonnx.command import ArgumentParser, Command, run_command
from bertonnx.exit_codes import EXIT_INCORRECT, EXIT_OK, EXIT_USAGE
from bertonnx.files import check_output_dir, check_output_file
from bertonnx.vocabulary import add_option

from .coldstart import probe_bertonnx, probe_torch, thread_env
from .corpus import DEFAULT_CORPUS_SEED, DEFAULT_CORPUS_SIZE, QUICK_CORPUS_SIZE
from .grid import (
    DEFAULT_BATCHES,
    DEFAULT_PLAN,
    DEFAULT_SEQUENCES,
    QUICK_BATCHES,
    QUICK_PLAN,
    QUICK_SEQUENCES,
    TimingPlan,
    bert_flops,
    parse_sizes,
)
from .machine import cpu_facts, now_utc, versions
from .report import markdown, plot, throughput_markdown, write_atomic, write_json
from .targets import FAST_PATH_VARIANT, FASTEST_LOSSY_VARIANT, evaluate, evaluate_throughput
from .throughput import (
    MAIN_PASSES,
    MAIN_TEXTS,
    QUICK_PASSES,
    QUICK_TEXTS,
    REAL_WEIGHTS_PASSES,
    REAL_WEIGHTS_TEXTS,
    run_section,
)
from .worker import progress

if TYPE_CHECKING:
    from bertonnx.manifest import Manifest

EXIT_ERROR = EXIT_USAGE
ROOT = Path(__file__).resolve().parents[1]
#: Relative to the current directory (never inside the installed package).
DEFAULT_OUT = Path("bertonnx-bench")
TORCH_RUNNER = "torch"
DEFAULT_CORPUS_BATCH = 32
QUICK_CORPUS_BATCH = 16
#: The grid shape compared across runners in the summary section.
SUMMARY_SHAPE = (1, 128)
#: Fresh processes timing SUMMARY_SHAPE per runner (full runs / --quick).
DEFAULT_REPEATS = 3
QUICK_REPEATS = 1
#: Variants compared with PyTorch on the ``--real-weights`` export (target 1 and its informational row).
REAL_WEIGHTS_VARIANTS = (FAST_PATH_VARIANT, FASTEST_LOSSY_VARIANT)
WORKER_TIMEOUT_S = 6 * 3600
RESULTS_JSON, RESULTS_MD, RESULTS_PNG = "results.json", "results.md", "latency.png"
#: Tolerance of a runner's own outputs against the outputs the check judged (same file, same threads),
#: when the manifest does not record the gate's ``exact_max_abs``.
FALLBACK_RECHECK_MAX_ABS = 1e-4


#: ``--sections``: every section, or the corpus-throughput section alone.
SECTION_CHOICES = ("all", "throughput")


def _bench_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("model_dir", metavar="DIR", help="directory written by `bertonnx export`")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default ./{DEFAULT_OUT}, created if missing)"
    )
    parser.add_argument(
        "--results-md", type=Path, help="also write the markdown report here (e.g. benchmarks/RESULTS.md)"
    )
    parser.add_argument("--reference", help="PyTorch reference for a pretrained export (hub id or checkpoint dir)")
    parser.add_argument("--runners", help="comma-separated subset of torch and the variants (default: all)")
    parser.add_argument(
        "--sections",
        choices=SECTION_CHOICES,
        default="all",
        help="all (default), or only the corpus-throughput section (its own report, no latency grid; its "
        "target 3 then needs a full run)",
    )
    parser.add_argument("--batch", help="batch sizes, e.g. 1,8,32")
    parser.add_argument("--seq", help="sequence lengths, e.g. 16,128,512")
    add_option(parser, "threads", "bench")
    parser.add_argument("--quick", action="store_true", help="CI mode: few shapes and runs, small corpus")
    parser.add_argument("--warmup", type=int, help="untimed calls per shape")
    parser.add_argument("--min-runs", type=int, help="timed calls per shape, at least")
    parser.add_argument("--min-time", type=float, help="seconds of timed calls per shape, at least")
    parser.add_argument("--max-runs", type=int, help="timed calls per shape, at most")
    parser.add_argument(
        "--corpus-size", type=int, help=f"corpus inputs (default {DEFAULT_CORPUS_SIZE}, quick {QUICK_CORPUS_SIZE})"
    )
    parser.add_argument("--corpus-batch", type=int, help=f"corpus batch size (default {DEFAULT_CORPUS_BATCH})")
    parser.add_argument("--corpus-seed", type=int, default=DEFAULT_CORPUS_SEED)
    parser.add_argument(
        "--repeats",
        type=int,
        help=f"fresh processes timing B1×T128 per runner; the median of their p50s is reported "
        f"(default {DEFAULT_REPEATS}, quick {QUICK_REPEATS})",
    )
    parser.add_argument(
        "--throughput-texts",
        type=int,
        help=f"texts of the mixed corpus in the corpus-throughput section, 0 to skip it (default {MAIN_TEXTS} on DIR "
        f"and {REAL_WEIGHTS_TEXTS} on --real-weights; quick {QUICK_TEXTS})",
    )
    parser.add_argument(
        "--throughput-passes",
        type=int,
        help=f"timed passes per runner in that section (default {MAIN_PASSES} on DIR, {REAL_WEIGHTS_PASSES} on "
        f"--real-weights; quick {QUICK_PASSES})",
    )
    parser.add_argument(
        "--real-weights",
        type=Path,
        metavar="DIR",
        help=f"an export of pretrained weights (e.g. MiniLM): its {' and '.join(REAL_WEIGHTS_VARIANTS)} variants "
        "are compared with PyTorch fp32 for target 1's accuracy",
    )


def build_parser() -> ArgumentParser:
    """The ``bertonnx bench`` parser (parse with ``parse_intermixed_args``: options go anywhere)."""
    return BENCH_COMMAND.parser()


def _settings(args: argparse.Namespace, max_positions: int) -> dict[str, Any]:
    base = QUICK_PLAN if args.quick else DEFAULT_PLAN
    plan = TimingPlan(
        warmup=base.warmup if args.warmup is None else args.warmup,
        min_runs=base.min_runs if args.min_runs is None else args.min_runs,
        min_time_s=base.min_time_s if args.min_time is None else args.min_time,
        max_runs=base.max_runs if args.max_runs is None else args.max_runs,
    )
    batches = parse_sizes(args.batch, "batch") if args.batch else (QUICK_BATCHES if args.quick else DEFAULT_BATCHES)
    seqs = (
        parse_sizes(args.seq, "seq", max_positions)
        if args.seq
        else (QUICK_SEQUENCES if args.quick else DEFAULT_SEQUENCES)
    )
    if max(seqs) > max_positions:
        raise ValueError(f"sequence lengths must be <= the model's {max_positions} positions, got {max(seqs)}")
    corpus_size = args.corpus_size or (QUICK_CORPUS_SIZE if args.quick else DEFAULT_CORPUS_SIZE)
    corpus_batch = args.corpus_batch or (QUICK_CORPUS_BATCH if args.quick else DEFAULT_CORPUS_BATCH)
    if corpus_size < 2 or corpus_batch < 1:
        raise ValueError(f"expected --corpus-size >= 2 and --corpus-batch >= 1, got {corpus_size} and {corpus_batch}")
    repeats = args.repeats if args.repeats is not None else (QUICK_REPEATS if args.quick else DEFAULT_REPEATS)
    if repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {repeats}")

    def sizes(texts: int, passes: int) -> tuple[int, int] | None:
        texts = QUICK_TEXTS if args.quick else texts if args.throughput_texts is None else args.throughput_texts
        passes = QUICK_PASSES if args.quick else passes if args.throughput_passes is None else args.throughput_passes
        if texts < 0 or passes < 1:
            raise ValueError(f"expected --throughput-texts >= 0 and --throughput-passes >= 1, got {texts} and {passes}")
        return (texts, passes) if texts else None

    return {
        "throughput": {
            "main": sizes(MAIN_TEXTS, MAIN_PASSES),
            "real_weights": sizes(REAL_WEIGHTS_TEXTS, REAL_WEIGHTS_PASSES),
        },
        "quick": bool(args.quick),
        "repeats": repeats,
        "plan": asdict(plan),
        "shapes": [[b, s] for b in batches for s in seqs],
        "corpus": {"size": corpus_size, "batch_size": corpus_batch, "seed": args.corpus_seed},
    }


def _runners(requested: str | None, variants: Sequence[str]) -> list[str]:
    available = [TORCH_RUNNER, *variants]
    if not requested:
        return available
    chosen = [name.strip() for name in requested.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in available]
    if unknown or not chosen:
        raise ValueError(f"--runners got {requested!r}; expected a comma-separated subset of {', '.join(available)}")
    return [name for name in available if name in chosen]


class Workers:
    """Runs worker tasks in fresh processes, one at a time, with the thread budget in their environment."""

    def __init__(self, workdir: Path, threads: int) -> None:
        self.workdir = workdir
        self.env = thread_env(threads)
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        self.count = 0

    def run(self, task: str, spec: dict[str, Any]) -> dict[str, Any]:
        self.count += 1
        spec_path = self.workdir / f"{self.count:02d}-{task}-spec.json"
        result_path = self.workdir / f"{self.count:02d}-{task}-result.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        proc = subprocess.run(
            [sys.executable, "-m", "bertonnx_benchmarks.worker", task, str(spec_path), str(result_path)],
            env=self.env,
            cwd=ROOT,
            timeout=WORKER_TIMEOUT_S,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"benchmark worker {task!r} failed with exit code {proc.returncode} (see its stderr above)"
            )
        result: dict[str, Any] = json.loads(result_path.read_text(encoding="utf-8"))
        return result


def _failed_rows(runner: str, shapes: list[list[int]]) -> list[dict[str, Any]]:
    return [
        {"runner": runner, "batch": b, "seq": s, "correct": False, "valid": False, "p50_ms": None} for b, s in shapes
    ]


def _add_roofline(rows: list[dict[str, Any]], config: dict[str, Any], roofline: dict[str, Any]) -> None:
    for row in rows:
        flops = bert_flops(config, row["batch"], row["seq"])
        kind = "int8" if "int8" in row["runner"] else "bf16" if "bf16" in row["runner"] else "fp32"
        if kind == "bf16" and not roofline.get("bf16_gflops"):
            kind = "fp32"  # no bf16 peak measured (OpenVINO missing in the roofline process)
        peaks = {"int8": roofline["int8_gops"], "bf16": roofline.get("bf16_gflops"), "fp32": roofline["fp32_gflops"]}
        peak = peaks[kind]
        gflops = flops / (row["p50_ms"] / 1e3) / 1e9
        row.update(
            correct=True, valid=True, gflop=flops / 1e9, gflops=gflops, peak_kind=kind, peak_fraction=gflops / peak
        )


def _summary(process_p50s: dict[str, list[float]]) -> list[dict[str, Any]]:
    """Per runner: the p50 of SUMMARY_SHAPE in each of its processes, their median, the speed-up over torch."""
    median = {name: statistics.median(p50s) for name, p50s in process_p50s.items() if p50s}
    torch_p50 = median.get(TORCH_RUNNER)
    return [
        {
            "runner": name,
            "p50_ms": p50,
            "process_p50_ms": process_p50s[name],
            "processes": len(process_p50s[name]),
            "speedup_vs_torch": None if torch_p50 is None else torch_p50 / p50,
        }
        for name, p50 in median.items()
    ]


def _real_weights(directory: Path | None) -> tuple[Manifest | None, list[str]]:
    """The ``--real-weights`` manifest and which of REAL_WEIGHTS_VARIANTS it holds (read in the parent: no torch).

    Raises:
        ValueError: the directory is not an export of pretrained weights (ModelDirectoryError included).
    """
    from bertonnx.manifest import read_manifest

    if directory is None:
        return None, []
    manifest = read_manifest(directory)
    if manifest.weights.get("kind") != "pretrained":
        raise ValueError(
            f"--real-weights expects an export of pretrained weights, got {directory} with "
            f"{manifest.weights.get('kind')} weights; export a trained checkpoint (e.g. MiniLM) and pass that"
        )
    return manifest, [name for name in REAL_WEIGHTS_VARIANTS if name in manifest.variants]


def _time_runner(workers: Workers, runner: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One fresh process timing ``runner`` on ``spec["shapes"]`` (after its re-check)."""
    if runner == TORCH_RUNNER:
        return workers.run("torch", spec)
    return workers.run("onnx", {**spec, "variant": runner})


def _rechecked(info: dict[str, Any], out: dict[str, Any], where: str) -> bool:
    """Whether the timed process's re-check passed; marks the runner failed (with the breach) when not."""
    if out["check"]["correct"]:
        return True
    info.update(correct=False, breaches=[*info.get("breaches", []), f"re-check in {where}: {out['check']}"])
    return False


def _command_line() -> str:
    """The command as typed: ``python -m benchmarks ...`` or ``bertonnx bench ...``."""
    program = Path(sys.argv[0]).name
    head = [Path(sys.executable).name, "-m", "bertonnx_benchmarks"] if program == "__main__.py" else [program]
    return shlex.join([*head, *sys.argv[1:]])


def run(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    """Run every section; return the results and whether every runner was correct."""
    from bertonnx.manifest import read_manifest
    from bertonnx.options import physical_cores

    manifest = read_manifest(args.model_dir)
    directory = manifest.directory.resolve()
    settings = _settings(args, manifest.max_position_embeddings)
    real_manifest, real_variants = _real_weights(args.real_weights)
    runners = _runners(args.runners, list(manifest.variants))
    variants = [r for r in runners if r != TORCH_RUNNER]
    threads = args.threads or physical_cores()
    recheck = float(manifest.data.get("parity_gate", {}).get("exact_max_abs", FALLBACK_RECHECK_MAX_ABS))
    common = {"dir": str(directory), "threads": threads, "plan": settings["plan"], "reference": args.reference}
    results: dict[str, Any] = {
        "format": "bertonnx-bench",
        "format_version": 1,
        "date": now_utc(),
        "command": _command_line(),
        "arguments": {
            key: value if isinstance(value, (int, float, bool, type(None))) else str(value)
            for key, value in vars(args).items()
        },
        "versions": versions(),
        "machine": cpu_facts(),
        "threads": {"budget": threads, "intra_op": threads, "inter_op": 1, "torch": threads, "torch_interop": 1},
        "settings": settings,
        "model": {
            "directory": str(directory),
            "source": manifest.data.get("source"),
            "weights_kind": manifest.weights.get("kind"),
            "random_weights": manifest.random_weights,
            "config": manifest.config,
            "variants": list(manifest.variants),
            "reference": args.reference,
        },
        "real_weights": None,
    }
    if args.sections == "throughput":
        with tempfile.TemporaryDirectory(prefix="bertonnx-bench-") as tmp:
            workers = Workers(Path(tmp), threads)
            results["throughput"] = _throughput(workers, directory, variants, threads, settings, real_manifest)
        results["throughput_targets"] = evaluate_throughput(results)
        return results, True
    with tempfile.TemporaryDirectory(prefix="bertonnx-bench-") as tmp:
        workdir = Path(tmp)
        workers = Workers(workdir, threads)
        progress(f"{directory.name}: runners {', '.join(runners)}; {threads} threads; shapes {settings['shapes']}")
        roofline = workers.run("roofline", common)
        check = workers.run(
            "check",
            {
                **common,
                "variants": variants,
                "cases": str(workdir / "cases.npz"),
                "checkpoint": str(workdir / "torch-checkpoint"),
            },
        )
        results["model"]["reference_loaded"] = check["reference"]
        if real_manifest is not None:
            accuracy = workers.run(
                "accuracy",
                {"dir": str(real_manifest.directory.resolve()), "threads": threads, "variants": real_variants},
            )
            results["real_weights"] = {
                "directory": str(real_manifest.directory.resolve()),
                "source": real_manifest.data.get("source"),
                "random_heads": list(real_manifest.weights.get("random_heads") or []),
                **accuracy,
            }
        runner_info: dict[str, dict[str, Any]] = {}
        grid: list[dict[str, Any]] = []
        overhead: list[dict[str, Any]] = []
        corpus: list[dict[str, Any]] = []
        process_p50s: dict[str, list[float]] = {}
        cases_file = str(workdir / "cases.npz")
        base_spec = {**common, "cases": cases_file, "corpus": settings["corpus"], "recheck_max_abs": recheck}
        for runner in runners:
            judged = check["verdicts"].get(runner, {"correct": True, "figures": {}, "breaches": []})
            info = {"kind": "torch" if runner == TORCH_RUNNER else "onnx", **judged}
            if runner != TORCH_RUNNER:
                info["file"] = manifest.variants[runner]["file"]
                info["files"] = manifest.variant_files(runner)
                info["backend"] = manifest.variants[runner].get("backend", "onnxruntime")
            runner_info[runner] = info
            if not judged["correct"]:
                progress(f"{runner}: failed the correctness check, not timed")
                grid += _failed_rows(runner, settings["shapes"])
                continue
            out = _time_runner(workers, runner, {**base_spec, "shapes": settings["shapes"]})
            if runner == TORCH_RUNNER:
                info["threads_used"] = out["torch_threads"]
                info["figures"] = out["check"]["figures"]  # the rebuilt model against the check's reference
            else:
                info["threads_used"] = out["intra_op_threads"]
            info["recheck"] = out["check"]
            if not _rechecked(info, out, "the grid's process"):
                grid += _failed_rows(runner, settings["shapes"])
                continue
            _add_roofline(out["grid"], manifest.config, roofline)
            grid += out["grid"]
            process_p50s[runner] = [r["p50_ms"] for r in out["grid"] if (r["batch"], r["seq"]) == SUMMARY_SHAPE]
            if "overhead" in out:
                overhead.append({"runner": runner, **out["overhead"]})
                corpus.append({"runner": runner, **out["corpus"]})
        if list(SUMMARY_SHAPE) not in settings["shapes"]:
            if settings["repeats"] > 1:
                progress(f"--repeats times {SUMMARY_SHAPE[0]}x{SUMMARY_SHAPE[1]}, which is not in this grid: skipped")
        else:
            for round_number in range(2, settings["repeats"] + 1):
                for runner in [name for name in runners if runner_info[name]["correct"]]:
                    progress(f"repeat {round_number}/{settings['repeats']}: {runner}")
                    spec = {**base_spec, "shapes": [list(SUMMARY_SHAPE)], "grid_only": True}
                    out = _time_runner(workers, runner, spec)
                    if not _rechecked(runner_info[runner], out, f"repeat process {round_number}"):
                        grid = [r for r in grid if r["runner"] != runner] + _failed_rows(runner, settings["shapes"])
                        overhead = [o for o in overhead if o["runner"] != runner]
                        corpus = [c for c in corpus if c["runner"] != runner]
                        process_p50s.pop(runner, None)
                        continue
                    process_p50s[runner] += [r["p50_ms"] for r in out["grid"]]
        cold: list[dict[str, Any]] = []
        for runner in runners:
            if not runner_info[runner]["correct"]:
                continue
            if runner == TORCH_RUNNER:
                probe = probe_torch(Path(check["checkpoint"]), directory, threads, workers.env)
            else:
                files = [directory / name for name in manifest.variant_files(runner)]
                probe = probe_bertonnx(directory, runner, files, threads, workers.env)
            progress(f"cold start {runner}: {probe['wall_s']:.2f} s, peak RSS {probe['peak_rss_mb']:.0f} MB")
            cold.append({"runner": runner, **probe})
        correct = [name for name in variants if runner_info[name]["correct"]]
        throughput = _throughput(workers, directory, correct, threads, settings, real_manifest)
    results.update(
        runners=runner_info,
        grid=grid,
        summary_b1_t128=_summary(process_p50s),
        overhead=overhead,
        corpus={**settings["corpus"], "results": corpus},
        cold_start=cold,
        roofline=roofline,
    )
    results["throughput"] = throughput
    results["targets"] = evaluate(results)
    results["throughput_targets"] = evaluate_throughput(results)
    return results, all(info["correct"] for info in runner_info.values())


def _throughput(
    workers: Workers,
    directory: Path,
    variants: list[str],
    threads: int,
    settings: dict[str, Any],
    real_manifest: Manifest | None,
) -> list[dict[str, Any]]:
    """The corpus-throughput sections: ``variants`` of the benchmarked export, then every variant of the
    real-weights export (each skipped when its size is 0)."""
    sections = []
    if settings["throughput"]["main"]:
        sections.append(run_section(workers, directory, variants, threads, *settings["throughput"]["main"], progress))
    if real_manifest is not None and settings["throughput"]["real_weights"]:
        real_dir = real_manifest.directory.resolve()
        sections.append(
            run_section(
                workers,
                real_dir,
                list(real_manifest.variants),
                threads,
                *settings["throughput"]["real_weights"],
                progress,
            )
        )
    return sections


def _run_bench(args: argparse.Namespace) -> int:
    """Run every section and write the reports; the exit code (module docstring)."""
    out = check_output_dir(args.out, "--out")
    if args.results_md:
        check_output_file(str(args.results_md), "--results-md")
    results, all_correct = run(args)
    write_json(out / RESULTS_JSON, results)
    text = markdown(results) if args.sections == "all" else throughput_markdown(results)
    write_atomic(out / RESULTS_MD, text.encode("utf-8"))
    if args.results_md:
        write_atomic(args.results_md, text.encode("utf-8"))
    if args.sections == "all":
        plot(out / RESULTS_PNG, results)
    plotted = f", {out / RESULTS_PNG}" if args.sections == "all" else ""
    progress(f"wrote {out / RESULTS_JSON}, {out / RESULTS_MD}{plotted}")
    if not all_correct:
        failed = [name for name, info in results["runners"].items() if not info["correct"]]
        print(f"error: {', '.join(failed)} failed the correctness check; their rows are marked failed", file=sys.stderr)
        return EXIT_INCORRECT
    return EXIT_OK


BENCH_COMMAND = Command(
    "bench",
    "latency benchmarks of every variant against PyTorch",
    _bench_arguments,
    _run_bench,
    extra="bench",
    description="Benchmark bertonnx's variants against PyTorch eager fp32.",
    epilog="exit codes: 0 every runner correct, 2 bad usage, 3 a runner failed its correctness check",
)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``bertonnx bench`` and ``python -m bertonnx_benchmarks``."""
    return run_command(BENCH_COMMAND, argv)
