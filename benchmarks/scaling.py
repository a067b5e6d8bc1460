"""The corpus job on one machine against Ray: local ``bertonnx batch`` vs Ray 1 actor x 2 threads and 2 x 1.

    python -m benchmarks.scaling MODEL_DIR [--size 6000] [--repeats 2] [--json OUT.json]

Builds a seeded corpus (:func:`benchmarks.corpus.build_corpus`: English-like texts of 8 to 256 tokens,
log-uniform lengths), writes it as ``.txt``, then per repeat: the local job in a fresh process (2 threads),
a local Ray cluster (``ray.init(num_cpus=2)``, started once and timed apart), and the Ray job with each
layout. Every Ray output is checked against the local one (same ids, fp32 max abs <= 1e-5) before its time
counts. Ray's workers run at the driver's priority here (``RAY_worker_niceness=0``; Ray's default is
nice 15), so on a shared machine both runners compete for the CPU alike. A small job of ``--small`` rows
per runner measures the fixed cost (process and actor start, model load), so the steady throughput is
``(size - small) / (time - small_time)``. It also times the driver-side work per input byte (counting
lines into splits) and a read task's parsing rate, the inputs
of the N-machine projection in ``benchmarks/SCALING.md``.

Run it under the machine-wide lock: ``flock /work/team/timing.lock python -m benchmarks.scaling ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from .corpus import build_corpus
from .machine import cpu_facts

DEFAULT_SIZE = 6000
SMALL_SIZE = 200
#: Rows per batch. The job's default (2048) leaves a 3,000-text corpus in two batches, one per actor at
#: best, so a 2-actor pool would idle half the time; real corpora have thousands of batches per actor.
CHUNK_ROWS = 256
CPUS = 2
OBJECT_STORE_BYTES = 512 * 1024 * 1024
ATOL = 1e-5
IO_BYTES = 32 << 20
LAYOUTS = ((1, 2), (2, 1))  # (actors, threads per actor)


def write_corpus(path: Path, size: int) -> list[str]:
    singles, firsts, seconds = build_corpus(size)
    texts = singles + [f"{a} {b}" for a, b in zip(firsts, seconds, strict=True)]
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    return texts


def run_local(model_dir: Path, corpus: Path, output: Path, pooling: str, chunk_rows: int) -> dict[str, Any]:
    """The local job in a fresh process with 2 threads; its summary plus the process's wall time."""
    command = [
        sys.executable, "-m", "bertonnx.cli", "batch", str(model_dir), "--input", str(corpus),
        "--output", str(output), "--threads", str(CPUS), "--pooling", pooling, "--json", "--no-progress",
        "--chunk-size", str(chunk_rows),
    ]  # fmt: skip
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    summary: dict[str, Any] = json.loads(result.stdout)
    summary["process_seconds"] = time.perf_counter() - started
    return summary


def check_same(ray_output: Path, local_output: Path) -> float:
    """Max abs difference of the embeddings; raises if the rows or ids differ or it exceeds ``ATOL``."""
    from bertonnx.corpus import read_output

    got, expected = read_output(ray_output), read_output(local_output)
    if got.column("id").to_pylist() != expected.column("id").to_pylist():
        raise AssertionError(f"{ray_output}: ids differ from the local job's")
    difference = float(
        np.abs(np.array(got["embedding"].to_pylist()) - np.array(expected["embedding"].to_pylist())).max()
    )
    if difference > ATOL:
        raise AssertionError(f"{ray_output}: max abs {difference:.2e} > {ATOL}")
    return difference


def io_rates(corpus: Path, work: Path) -> dict[str, float]:
    """MB/s of the driver's line count (plan_splits) and rows/s of one read task (read_split), on the corpus
    repeated to at least ``IO_BYTES``."""
    from bertonnx.corpus.readers import open_input, plan_splits, read_split, whole_file

    text = corpus.read_text(encoding="utf-8")
    big = work / "io.txt"
    big.write_text(text * max(1, IO_BYTES // max(1, len(text))), encoding="utf-8")
    source = open_input(big)
    started = time.perf_counter()
    plan_splits(source, max(1, source.size_bytes // 64))
    plan_seconds = time.perf_counter() - started
    started = time.perf_counter()
    rows = sum(t.num_rows for t in read_split(source, whole_file(source)))
    read_seconds = time.perf_counter() - started
    return {
        "corpus_mb": source.size_bytes / 1e6,
        "driver_split_mb_per_s": source.size_bytes / 1e6 / plan_seconds,
        "read_task_rows_per_s": rows / read_seconds,
        "read_task_mb_per_s": source.size_bytes / 1e6 / read_seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scaling", description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--size", type=int, default=DEFAULT_SIZE, help=f"texts in the corpus (default {DEFAULT_SIZE})")
    parser.add_argument("--small", type=int, default=SMALL_SIZE, help="texts of the fixed-cost job")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--pooling", default="mean")
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=CHUNK_ROWS,
        help=f"rows per batch (sorting window) for every runner (default {CHUNK_ROWS}: many batches per actor)",
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)

    # Ray starts workers at nice 15 (RayConfig worker_niceness), so on a machine shared with other work its
    # actors would lose the CPU to them while the local job, at nice 0, would not; compare at equal priority.
    os.environ.setdefault("RAY_worker_niceness", "0")
    import ray

    from bertonnx.corpus import TaskOptions
    from bertonnx.corpus.ray_job import run_ray_job

    work = Path(tempfile.mkdtemp(prefix="bertonnx-scaling-"))
    corpus, small = work / "corpus.txt", work / "small.txt"
    texts = write_corpus(corpus, args.size)
    small.write_text("\n".join(texts[: args.small]) + "\n", encoding="utf-8")
    results: dict[str, Any] = {"machine": cpu_facts(), "size": args.size, "small": args.small, "runs": []}
    results["chunk_rows"] = args.chunk_size
    results["machine"]["ray"] = ray.__version__
    results["io"] = io_rates(corpus, work)
    options = TaskOptions(pooling=args.pooling)

    def local_run(repeat: int) -> dict[str, Any]:
        local = run_local(args.model_dir, corpus, work / "local.parquet", args.pooling, args.chunk_size)
        local_small = run_local(args.model_dir, small, work / "local-small.parquet", args.pooling, args.chunk_size)
        return {
            "repeat": repeat,
            "runner": "local 2 threads",
            "seconds": local["seconds"],
            "small_seconds": local_small["seconds"],
            "process_seconds": local["process_seconds"],
        }

    def ray_run(repeat: int, actors: int, threads: int, cluster_seconds: float) -> dict[str, Any]:
        def job(source: Path, output: Path) -> Any:
            return run_ray_job(
                args.model_dir,
                source,
                output,
                options,
                actors=actors,
                threads_per_actor=threads,
                chunk_rows=args.chunk_size,
                progress=False,
            )

        output = work / f"ray-{actors}x{threads}.parquet"
        summary, small_summary = job(corpus, output), job(small, work / "ray-small.parquet")
        return {
            "repeat": repeat,
            "runner": f"ray {actors} actor(s) x {threads} thread(s)",
            "seconds": summary.seconds,
            "small_seconds": small_summary.seconds,
            "cluster_start_seconds": cluster_seconds,
            "max_abs_vs_local": check_same(output, work / "local.parquet"),
        }

    results["runs"].append(local_run(0))  # the reference every Ray output is checked against
    started = time.perf_counter()
    ray.init(num_cpus=CPUS, object_store_memory=OBJECT_STORE_BYTES, include_dashboard=False, log_to_driver=False)
    cluster_seconds = time.perf_counter() - started
    try:  # runners alternate order between repeats, so a slow spell of a shared machine hits them alike
        for repeat in range(args.repeats):
            layouts = LAYOUTS if repeat % 2 == 0 else LAYOUTS[::-1]
            results["runs"] += [ray_run(repeat, actors, threads, cluster_seconds) for actors, threads in layouts]
            if repeat + 1 < args.repeats:
                results["runs"].append(local_run(repeat + 1))
    finally:
        ray.shutdown()
    for run in results["runs"]:
        run["inputs_per_s"] = args.size / run["seconds"]
        run["steady_inputs_per_s"] = (args.size - args.small) / max(1e-9, run["seconds"] - run["small_seconds"])
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


def report(results: dict[str, Any]) -> str:
    """A markdown table: best of the repeats per runner, overhead against local."""
    best: dict[str, dict[str, Any]] = {}
    for run in results["runs"]:
        if run["runner"] not in best or run["seconds"] < best[run["runner"]]["seconds"]:
            best[run["runner"]] = run
    local = best["local 2 threads"]
    lines = [
        f"corpus: {results['size']} texts (8-256 tokens) in batches of {results['chunk_rows']} rows, fixed-cost job: "
        f"{results['small']} texts; "
        f"best of {max(r['repeat'] for r in results['runs']) + 1}",
        "",
        "| runner | job s | inputs/s | fixed-cost job s | steady inputs/s | overhead vs local (job / steady) |",
        "|---|---|---|---|---|---|",
    ]
    for name, run in best.items():
        job = run["seconds"] / local["seconds"] - 1
        steady = local["steady_inputs_per_s"] / run["steady_inputs_per_s"] - 1
        lines.append(
            f"| {name} | {run['seconds']:.1f} | {run['inputs_per_s']:.1f} | {run['small_seconds']:.1f} | "
            f"{run['steady_inputs_per_s']:.1f} | {job:+.0%} / {steady:+.0%} |"
        )
    ray_runs = [r for r in results["runs"] if "cluster_start_seconds" in r]
    if ray_runs:
        lines.append("")
        lines.append(
            f"Ray cluster start (ray.init, num_cpus=2): {min(r['cluster_start_seconds'] for r in ray_runs):.1f} s"
        )
    io = results["io"]
    lines.append(
        f"driver line count {io['driver_split_mb_per_s']:.0f} MB/s; one read task {io['read_task_rows_per_s']:.0f} "
        f"rows/s ({io['read_task_mb_per_s']:.1f} MB/s) on {io['corpus_mb']:.0f} MB of it"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
