"""What one engine run costs: a least-squares fit of ``A + B × padded tokens`` milliseconds per run.

``python -m benchmarks.serve.runcost DIR [--threads N] [--repeats K]``. Times ``BertOnnx.run_batch`` on padded
batches of ``B × T`` shapes (B inputs of T tokens, 1 <= B <= 64) under two sets of runtime options: the server's
defaults (``bertonnx serve``: idle threads do not spin, the arena shrinks and free pages go back to the system
after every run) and the offline defaults (``BertOnnx``: spinning, arena kept). ``A`` is what a run costs besides
its tokens (weights read once per run, thread wake-ups, memory given back and faulted in again); it decides how
close a server that sees only its queued inputs can come to offline, which sorts the whole corpus
(``python -m benchmarks.serve.policy TOKENIZER --fixed-ms A --per-token-ms B`` replays that). Each shape's figure
is the median of ``repeats`` runs after one warm-up run; shapes are visited in a seeded shuffled order so drift
spreads over all of them. Prints a markdown table and the fit; ``--json`` writes the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bertonnx import BertOnnx, RuntimeOptions
from bertonnx.batching import make_batch
from bertonnx.serve.engine import Work
from bertonnx.tasks import Embed

#: (inputs, tokens) shapes timed: padded tokens from 8 to 2,048, the server's runs at concurrency 32 included.
SHAPES = (
    (1, 8), (1, 32), (1, 64), (1, 128), (1, 256),
    (2, 64), (4, 32), (4, 64), (4, 128), (8, 16), (8, 64), (8, 128),
    (16, 32), (16, 64), (16, 128), (32, 32), (32, 64), (64, 32),
)  # fmt: skip

#: Runtime options compared: what ``bertonnx serve`` sets by default, and ``BertOnnx``'s own defaults.
MODES = {
    "server": RuntimeOptions(allow_spinning=False, arena_shrinkage=True, release_memory=True),
    "offline": RuntimeOptions(),
}


def fit(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares ``ms = A + B × padded`` over ``(padded tokens, ms)`` points; returns ``(A, B)`` in ms."""
    x = np.array([p for p, _ in points], dtype=float)
    y = np.array([ms for _, ms in points], dtype=float)
    design = np.stack([np.ones_like(x), x], axis=1)
    (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
    return float(a), float(b)


def time_shapes(model: BertOnnx, repeats: int, seed: int) -> dict[tuple[int, int], float]:
    """Median ms per run of each shape of ``SHAPES`` (one warm-up run each)."""
    (encoding,) = model.encode("the quick brown fox jumps over the lazy dog " * 40)
    ids = encoding.ids
    task = Embed("mean", True)
    order = list(SHAPES)
    random.Random(seed).shuffle(order)
    out: dict[tuple[int, int], float] = {}
    for count, length in order:
        work = [Work(ids[: length - 1] + ids[-1:], [0] * length, task) for _ in range(count)]
        batch = make_batch(work, np.arange(count))
        model.run_batch(batch, ["last_hidden_state"])
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            model.run_batch(batch, ["last_hidden_state"])
            times.append((time.perf_counter() - started) * 1000)
        out[(count, length)] = statistics.median(times)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.serve.runcost", description=__doc__.split("\n")[0])
    p.add_argument("model_dir", type=Path, help="directory written by `bertonnx export`")
    p.add_argument("--variant", default="fp32")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads (default: cores)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args(argv)
    result: dict[str, object] = {}
    rows: dict[str, dict[tuple[int, int], float]] = {}
    for mode, options in MODES.items():
        runtime = dataclasses.replace(options, threads=args.threads)
        model = BertOnnx(args.model_dir, args.variant, options=runtime)
        rows[mode] = time_shapes(model, args.repeats, args.seed)
        a, b = fit([(count * length, ms) for (count, length), ms in rows[mode].items()])
        result[mode] = {
            "fixed_ms": a,
            "per_token_ms": b,
            "shapes": {f"{c}x{t}": ms for (c, t), ms in rows[mode].items()},
        }
        del model
    print("| B × T | padded tokens | " + " | ".join(f"{m} (ms)" for m in MODES) + " |")
    print("|---|---:|" + "---:|" * len(MODES))
    for count, length in SHAPES:
        cells = " | ".join(f"{rows[m][(count, length)]:.1f}" for m in MODES)
        print(f"| {count} × {length} | {count * length} | {cells} |")
    for mode in MODES:
        r = result[mode]
        assert isinstance(r, dict)
        print(f"{mode}: {r['fixed_ms']:.1f} ms + {r['per_token_ms']:.4f} ms x padded tokens")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
