"""Overload against 429s below saturation: the server's scheduler replayed with a modelled engine, per setting.

``python -m benchmarks.serve.tradeoff TOKENIZER.json [--waits 5,10,15,20] [--priorities 0,4,40] [--seeds 3]``.
Runs the real :class:`bertonnx.serve.scheduler.Scheduler` (its admission, order and cuts) in one process with an
engine that sleeps what a run costs (``--fixed-ms`` + ``--per-token-ms`` × padded tokens, long inputs a little
dearer: the ``benchmarks.serve.runcost`` fit of bert-base fp32 on 2 cores), in time scaled down ``--speedup``
times, on the serving benchmark's mixed requests (:func:`.workload.build_requests`: 1-32 inputs, texts and pairs,
their real token counts). Per setting of ``max_queue_wait`` (``--waits``, seconds) and the queue order
(``--priorities``, ms per request token) and per seed, two of SERVING.md's checks:

- **overload** (target 4): open loop at 0.5× capacity for 15 s, 4× for 30 s, 0.5× for 30 s, a one-text probe
  twice a second; 429s, 504s (an accepted request not answered within its 60 s timeout) and the recovery: seconds
  from the overload's end to the first of 5 probes in a row answered within the pre-overload probes' p99;
- **closed loop of 32 clients** (target 3, below saturation): 429s among 160 requests.

Load-independent (sleeps, not computation), so it can run on a busy machine; the figures are a model's, the
server's own are SERVING.md's. ``--json`` keeps them; ``--plot`` draws recovery against the closed loop's 429s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertonnx.batching import BatchLimits
from bertonnx.serve.engine import Work
from bertonnx.serve.scheduler import QueueFull, Scheduler
from bertonnx.tasks import Embed

from .cli import recovery_seconds
from .stats import DONE, SCHEDULED, STATUS
from .workload import build_requests

#: Phases of the overload test as (fraction of capacity, seconds): SERVING.md's plan.
PHASES = ((0.5, 15.0), (4.0, 30.0), (0.5, 30.0))
PROBE_EVERY_S = 0.5
PROBE_TOKENS = 12
TIMEOUT_S = 60.0
CLOSED = (32, 160)

TASK = Embed("mean", True)


class ModelEngine:
    """Sleeps what a run of bert-base fp32 costs on 2 cores (``runcost`` fit), ``speedup`` times faster."""

    def __init__(self, fixed_ms: float, per_token_ms: float, speedup: float) -> None:
        self.fixed_s = fixed_ms / 1000 / speedup
        self.per_token_s = per_token_ms / 1000 / speedup

    def seconds(self, lengths: Sequence[int]) -> float:
        longest = max(lengths)
        return self.fixed_s + self.per_token_s * longest * len(lengths) * (0.9 + 0.2 * longest / 512)

    def __call__(self, works: list[Work]) -> list[object]:
        time.sleep(self.seconds([len(w.ids) for w in works]))
        return [None] * len(works)


def _works(lengths: Sequence[int]) -> list[Work]:
    return [Work([0] * n, [0] * n, TASK) for n in lengths]


def _scheduler(engine: ModelEngine, limits: BatchLimits, scale: float, wait_s: float, priority_ms: float) -> Scheduler:
    scheduler = Scheduler(
        engine, limits, max_queue=1024, max_queue_wait=wait_s * scale, priority_per_token=priority_ms / 1000 * scale
    )
    scheduler.start()
    return scheduler


async def overload(
    requests: Sequence[list[int]],
    engine: ModelEngine,
    limits: BatchLimits,
    scale: float,
    wait_s: float,
    priority_ms: float,
    seed: int,
) -> dict[str, Any]:
    """One overload test; figures in unscaled seconds."""
    scheduler = _scheduler(engine, limits, scale, wait_s, priority_ms)
    loop = asyncio.get_running_loop()
    rng = np.random.default_rng(seed)
    mean_s = statistics.fmean(engine.seconds(r) for r in requests)  # one request alone, scaled
    capacity = 1 / mean_s
    events: list[tuple[float, int | None]] = []
    t = 0.0
    for fraction, seconds in PHASES:
        end = t + seconds * scale
        while True:
            t += float(rng.exponential(1 / (fraction * capacity)))
            if t >= end:
                t = end
                break
            events.append((t, int(rng.integers(len(requests)))))
    total = sum(seconds for _, seconds in PHASES) * scale
    events += [(k * PROBE_EVERY_S * scale, None) for k in range(1, int(total / (PROBE_EVERY_S * scale)))]
    events.sort(key=lambda e: e[0])
    counts = {"sent": 0, "ok": 0, "429": 0, "504": 0}
    probes: list[tuple[float, float | None]] = []
    started = loop.time()

    async def one(lengths: list[int], probe: bool) -> None:
        sent = loop.time()
        counts["sent"] += 0 if probe else 1
        try:
            ticket = scheduler.submit(_works(lengths), time.monotonic() + TIMEOUT_S * scale)
        except QueueFull:
            counts["429"] += 0 if probe else 1
            if probe:
                probes.append(((sent - started) / scale, None))
            return
        try:
            await asyncio.wait_for(ticket.future, TIMEOUT_S * scale)
        except asyncio.TimeoutError:
            counts["504"] += 0 if probe else 1
            return
        counts["ok"] += 0 if probe else 1
        if probe:
            probes.append(((sent - started) / scale, (loop.time() - sent) / scale))

    jobs = []
    for at, index in events:
        await asyncio.sleep(max(0.0, started + at - loop.time()))
        probe = index is None
        jobs.append(asyncio.ensure_future(one([PROBE_TOKENS] if probe else requests[index], probe)))
    await asyncio.gather(*jobs)
    await scheduler.stop()
    before_end = PHASES[0][1]
    overload_end = PHASES[0][1] + PHASES[1][1]
    normal = sorted(latency for at, latency in probes if at < before_end and latency is not None)
    normal_s = float(np.percentile(normal, 99)) if normal else None
    # the serving benchmark's own rule, on records shaped as its generator writes them
    records = []
    for at, latency in sorted(p for p in probes if p[0] >= overload_end):
        record: list[Any] = [None] * 8
        record[SCHEDULED], record[DONE] = at, at + (latency or 0.0)
        record[STATUS] = 200 if latency is not None else 429
        records.append(record)
    recovery = recovery_seconds(records, overload_end, None if normal_s is None else normal_s * 1000)
    return {**counts, "normal_probe_s": normal_s, "recovery_s": recovery}


async def closed_loop(
    requests: Sequence[list[int]],
    engine: ModelEngine,
    limits: BatchLimits,
    scale: float,
    wait_s: float,
    priority_ms: float,
) -> dict[str, Any]:
    """32 clients send ``CLOSED[1]`` requests; 429s and latency in unscaled seconds."""
    scheduler = _scheduler(engine, limits, scale, wait_s, priority_ms)
    loop = asyncio.get_running_loop()
    pending = iter(requests[: CLOSED[1]])
    refused = 0
    latency: list[float] = []

    async def client() -> None:
        nonlocal refused
        for lengths in pending:
            sent = loop.time()
            try:
                await scheduler.submit(_works(lengths), time.monotonic() + TIMEOUT_S * scale).future
            except QueueFull:
                refused += 1
                continue
            latency.append((loop.time() - sent) / scale)

    await asyncio.gather(*(client() for _ in range(CLOSED[0])))
    await scheduler.stop()
    return {"429": refused, "p50_s": float(np.percentile(latency, 50)), "p99_s": float(np.percentile(latency, 99))}


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Recovery (median over seeds; not recovered drawn at 30 s) against the closed loop's 429s, per setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for priority in sorted({r["priority_ms"] for r in rows}):
        points = sorted((r["wait_s"], r) for r in rows if r["priority_ms"] == priority)
        xs = [r["closed_429_mean"] for _, r in points]
        ys = [30.0 if r["recovery_median_s"] is None else r["recovery_median_s"] for _, r in points]
        ax.plot(xs, ys, marker="o", label=f"{priority:g} ms per request token")
        for (wait, _), x, y in zip(points, xs, ys, strict=True):
            ax.annotate(f"{wait:g} s", (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
    ax.axhline(5, color="gray", ls=":", lw=0.8)
    ax.set_xlabel("429s in a closed loop of 32 clients (160 mixed requests; target 0)")
    ax.set_ylabel("recovery after a 4× overload, s\n(median of seeds; 30: not within 30 s)")
    ax.set_title("max_queue_wait (labels) × queue order, replayed scheduler, modelled bert-base fp32", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.serve.tradeoff", description=__doc__.split("\n")[0])
    p.add_argument("tokenizer", help="tokenizer.json of the model (token counts of the requests)")
    p.add_argument("--waits", default="5,10,15,20", help="max_queue_wait settings, seconds")
    p.add_argument("--priorities", default="0,4,40", help="queue order settings, ms per request token")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--fixed-ms", type=float, default=0.4, help="run cost besides its tokens (runcost's fit)")
    p.add_argument("--per-token-ms", type=float, default=0.48, help="run cost per padded token (runcost's fit)")
    p.add_argument("--max-batch-tokens", type=int, default=512)
    p.add_argument("--speedup", type=float, default=25.0, help="how much faster than real time to replay")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--plot", type=Path, default=None)
    args = p.parse_args(argv)
    from bertonnx.tokenizer import TextTokenizer

    limits = BatchLimits(max_batch_tokens=args.max_batch_tokens)
    tokenizer = TextTokenizer(args.tokenizer, 512)
    scale = 1 / args.speedup
    engine = ModelEngine(args.fixed_ms, args.per_token_ms, args.speedup)
    workloads = [
        [_lengths(tokenizer, r) for r in build_requests(tokenizer, 400, corpus_size=2000, seed=seed)]
        for seed in range(args.seeds)
    ]
    rows = []
    for wait_s in (float(x) for x in args.waits.split(",")):
        for priority_ms in (float(x) for x in args.priorities.split(",")):
            runs = []
            for seed, requests in enumerate(workloads):
                runs.append(
                    {
                        "overload": asyncio.run(overload(requests, engine, limits, scale, wait_s, priority_ms, seed)),
                        "closed": asyncio.run(closed_loop(requests, engine, limits, scale, wait_s, priority_ms)),
                    }
                )
            recoveries = [r["overload"]["recovery_s"] for r in runs]
            done = sorted(x for x in recoveries if x is not None)
            row = {
                "wait_s": wait_s,
                "priority_ms": priority_ms,
                "runs": runs,
                "recovery_median_s": statistics.median(done) if len(done) > len(recoveries) / 2 else None,
                "closed_429_mean": statistics.fmean(r["closed"]["429"] for r in runs),
                "overload_504": sum(r["overload"]["504"] for r in runs),
                "overload_429": sum(r["overload"]["429"] for r in runs),
                "overload_sent": sum(r["overload"]["sent"] for r in runs),
            }
            rows.append(row)
            rec = ", ".join("—" if x is None else f"{x:.1f}" for x in recoveries)
            print(f"| {wait_s:g} s | {priority_ms:g} ms | {rec} | {row['overload_429']} / {row['overload_sent']} | "
                  f"{row['overload_504']} | {row['closed_429_mean']:.1f} | "
                  f"{statistics.fmean(r['closed']['p50_s'] for r in runs):.1f} / "
                  f"{statistics.fmean(r['closed']['p99_s'] for r in runs):.1f} |", flush=True)  # fmt: skip
    if args.json is not None:
        settings = {k: v for k, v in vars(args).items() if k not in ("json", "plot")}
        args.json.write_text(json.dumps({"args": settings, "rows": rows}, indent=1), encoding="utf-8")
    if args.plot is not None:
        plot(rows, args.plot)
    return 0


def _lengths(tokenizer: Any, request: Any) -> list[int]:
    texts = [item[0] if isinstance(item, tuple) else item for item in request.inputs]
    pairs = [item[1] for item in request.inputs] if isinstance(request.inputs[0], tuple) else None
    return [len(e.ids) for e in tokenizer.encode(texts, pairs, truncation=True, max_length=512)]


if __name__ == "__main__":
    raise SystemExit(main())
