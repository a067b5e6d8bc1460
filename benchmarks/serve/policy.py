"""Batching policies replayed in simulated time: what the scheduler's cuts pad and how many inputs they run.

``python -m benchmarks.serve.policy TOKENIZER.json [--fixed-ms A --per-token-ms B]``. Load-independent: no engine
runs and no wall clock. A closed loop of ``concurrency`` clients sends the single-text workload
(:func:`.workload.single_texts`, one text per request); an engine run of ``count`` inputs padded to ``longest``
costs ``A + B × longest × count`` simulated milliseconds; an answered client sends its next text
``RETURN_MS + RETURN_STEP_MS × i`` later (the i-th answer of a run is written after i others). The batch cuts
are :func:`bertonnx.serve.scheduler.select_batch` (and its hold rule), so a policy measured here is the code the
server runs. The offline reference is :func:`bertonnx.batching.plan_batches` over all texts at once under the same
cost model. Figures: runs, mean inputs per run, padding share ((padded - real) / padded), modelled inputs/s and
its ratio to offline.
"""

from __future__ import annotations

import argparse
import heapq
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bertonnx.batching import BatchLimits, plan_batches
from bertonnx.serve.scheduler import batch_is_full, select_batch

from .workload import SINGLE_TEXTS, single_texts

#: Simulated milliseconds from a run's end to the first answered client's next request arriving, and per
#: further answer of the same run (the event loop writes answers and reads requests one after another).
RETURN_MS = 1.0
RETURN_STEP_MS = 0.3

#: (queued lengths, oldest first; limits; the index of the input the batch must serve) -> picks
Cut = Callable[[Sequence[int], BatchLimits, int], list[int]]


@dataclass(frozen=True)
class Policy:
    """A cut (queue lengths, oldest first -> picks) and how long the engine may hold a batch open (ms)."""

    name: str
    cut: Cut
    wait_ms: float = 0.0
    #: the anchor is the least ``enqueued + priority_ms_per_token × length`` (0: the oldest)
    priority_ms_per_token: float = 0.0
    #: hold the engine this long after a run while fewer inputs are queued than the run just answered
    #: and left queued (the answered clients come back), whatever the cut
    refill_ms: float = 0.0


def replay(
    lengths: Sequence[int],
    policy: Policy,
    limits: BatchLimits,
    *,
    concurrency: int,
    fixed_ms: float,
    per_token_ms: float,
) -> dict[str, float]:
    """Run the closed loop over ``lengths`` (one text per request) in simulated time; figures of the run."""
    arrivals: list[tuple[float, int]] = []  # (time, text index)
    sent = min(concurrency, len(lengths))
    for i in range(sent):
        heapq.heappush(arrivals, (RETURN_STEP_MS * i, i))
    queue: list[tuple[float, int]] = []  # (enqueued, text index), oldest first
    now = 0.0
    runs = inputs = padded = real = 0
    latencies: list[float] = []
    done = 0
    free_at, expected = 0.0, 0
    while done < len(lengths):
        while arrivals and arrivals[0][0] <= now:
            queue.append(heapq.heappop(arrivals))
        if not queue:
            now = arrivals[0][0]
            continue
        if policy.refill_ms > 0 and len(queue) < expected and now < free_at + policy.refill_ms and arrivals:
            now = min(free_at + policy.refill_ms, arrivals[0][0])
            continue
        queued = [lengths[i] for _, i in queue]
        keys = [enqueued + policy.priority_ms_per_token * lengths[i] for enqueued, i in queue]
        picks = policy.cut(queued, limits, keys.index(min(keys)))
        if policy.wait_ms > 0 and not batch_is_full(queued, picks, limits):
            until = queue[0][0] + policy.wait_ms
            if now < until:
                now = min(until, arrivals[0][0]) if arrivals else until
                continue
        batch = [queue[p] for p in sorted(picks)]
        chosen = set(picks)
        queue = [entry for k, entry in enumerate(queue) if k not in chosen]
        longest = max(lengths[i] for _, i in batch)
        now += fixed_ms + per_token_ms * longest * len(batch)
        free_at, expected = now, len(queue) + len(batch)
        runs += 1
        inputs += len(batch)
        padded += longest * len(batch)
        real += sum(lengths[i] for _, i in batch)
        for k, (enqueued, _) in enumerate(batch):
            latencies.append(now - enqueued)
            done += 1
            if sent < len(lengths):
                heapq.heappush(arrivals, (now + RETURN_MS + RETURN_STEP_MS * k, sent))
                sent += 1
    latencies.sort()
    return {
        "runs": runs,
        "inputs_per_run": inputs / runs,
        "padding": (padded - real) / padded,
        "padded_per_real": padded / real,
        "inputs_per_s": 1000 * len(lengths) / now,
        "p50_ms": latencies[len(latencies) // 2],
        "p99_ms": latencies[int(0.99 * (len(latencies) - 1))],
    }


def offline(lengths: Sequence[int], limits: BatchLimits, *, fixed_ms: float, per_token_ms: float) -> dict[str, float]:
    """All texts at once, sorted and cut by the budget (``BertOnnx.embed``), under the same cost model."""
    batches = plan_batches(lengths, limits)
    padded = sum(int(max(lengths[i] for i in b)) * len(b) for b in batches)
    real = sum(lengths)
    ms = sum(fixed_ms + per_token_ms * int(max(lengths[i] for i in b)) * len(b) for b in batches)
    return {
        "runs": len(batches),
        "inputs_per_run": len(lengths) / len(batches),
        "padding": (padded - real) / padded,
        "padded_per_real": padded / real,
        "inputs_per_s": 1000 * len(lengths) / ms,
    }


def window_bound(
    lengths: Sequence[int],
    limits: BatchLimits,
    *,
    window: int,
    fixed_ms: float,
    per_token_ms: float,
    samples: int = 300,
) -> dict[str, float]:
    """The best any cut can do seeing ``window`` queued inputs: random windows of the texts, each cut into the
    contiguous length-sorted runs of least total cost (dynamic programming). A scheduler with ``window``
    requests in flight sees at most that many; its inputs/s is at most this."""
    rng = random.Random(0)
    total_ms = padded = real = runs = 0.0
    for _ in range(samples):
        w = sorted(rng.sample(list(lengths), min(window, len(lengths))))
        n = len(w)
        best, back = [0.0] + [float("inf")] * n, [0] * (n + 1)
        for j in range(1, n + 1):
            for i in range(j):
                if limits.fits(w[j - 1], j - i):
                    cost = best[i] + fixed_ms + per_token_ms * w[j - 1] * (j - i)
                    if cost < best[j]:
                        best[j], back[j] = cost, i
        total_ms += best[n]
        j = n
        while j > 0:
            i = back[j]
            padded += w[j - 1] * (j - i)
            runs += 1
            j = i
        real += sum(w)
    inputs = samples * min(window, len(lengths))
    return {
        "runs": runs,
        "inputs_per_run": inputs / runs,
        "padding": (padded - real) / padded,
        "padded_per_real": padded / real,
        "inputs_per_s": 1000 * inputs / total_ms,
    }


def policies() -> list[Policy]:
    """Today's cut and the candidates: a larger efficient size, no padding cap, a short hold."""

    def cut(efficient: int, padding: float = 0.25) -> Cut:
        return lambda q, limits, anchor: select_batch(
            q, limits, efficient_tokens=efficient, max_padding=padding, anchor=anchor
        )

    out = [Policy("today (256 tokens, 25 %)", cut(256))]
    for efficient in (512, 1024, 2048):
        out.append(Policy(f"efficient {efficient}, 25 %", cut(efficient)))
    out.append(Policy("no padding cap", cut(1 << 30)))
    for wait in (2.0, 5.0, 10.0):
        out.append(Policy(f"today + hold {wait:g} ms", cut(256), wait))
        out.append(Policy(f"efficient 1024 + hold {wait:g} ms", cut(1024), wait))
    for refill in (2.0, 5.0, 10.0):
        out.append(Policy(f"today + refill {refill:g} ms", cut(256), refill_ms=refill))
        out.append(Policy(f"efficient 1024 + refill {refill:g} ms", cut(1024), refill_ms=refill))
    for per_token in (1.0, 4.0, 10.0):
        out.append(Policy(f"today, shortest first ({per_token:g} ms/token)", cut(256), 0.0, per_token))
        out.append(
            Policy(f"today + refill 5 ms, shortest first ({per_token:g} ms/token)", cut(256), 0.0, per_token, 5.0)
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.serve.policy", description=__doc__.split("\n")[0])
    p.add_argument("tokenizer", help="tokenizer.json of the model (token counts of the texts)")
    p.add_argument("--fixed-ms", type=float, default=20.0, help="cost of a run besides its tokens (ms)")
    p.add_argument("--per-token-ms", type=float, default=0.13, help="cost of one padded token (ms)")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--texts", type=int, default=SINGLE_TEXTS)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    from bertonnx.tokenizer import TextTokenizer

    tokenizer = TextTokenizer(args.tokenizer, 512)
    texts = single_texts(args.texts, args.seed)
    lengths = [len(e.ids) for e in tokenizer.encode(texts, None, truncation=True, max_length=512)]
    limits = BatchLimits()
    cost = {"fixed_ms": args.fixed_ms, "per_token_ms": args.per_token_ms}
    ref = offline(lengths, limits, **cost)
    print(f"cost model: {args.fixed_ms:g} ms + {args.per_token_ms:g} ms x padded tokens; {len(lengths)} texts, "
          f"concurrency {args.concurrency}")  # fmt: skip
    print("| policy | runs | inputs/run | padding | padded/real | inputs/s (model) | x offline | p50 / p99 ms |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| offline embed | {ref['runs']} | {ref['inputs_per_run']:.1f} | {ref['padding']:.1%} | "
          f"{ref['padded_per_real']:.2f} | {ref['inputs_per_s']:.1f} | 1.00 | |")  # fmt: skip
    bound = window_bound(lengths, limits, window=args.concurrency, **cost)
    print(f"| best possible cut of {args.concurrency} queued (bound) | | {bound['inputs_per_run']:.1f} | "
          f"{bound['padding']:.1%} | {bound['padded_per_real']:.2f} | {bound['inputs_per_s']:.1f} | "
          f"{bound['inputs_per_s'] / ref['inputs_per_s']:.2f} | |")  # fmt: skip
    for policy in policies():
        r = replay(lengths, policy, limits, concurrency=args.concurrency, **cost)
        print(f"| {policy.name} | {r['runs']} | {r['inputs_per_run']:.1f} | {r['padding']:.1%} | "
              f"{r['padded_per_real']:.2f} | {r['inputs_per_s']:.1f} | {r['inputs_per_s'] / ref['inputs_per_s']:.2f} | "
              f"{r['p50_ms']:.0f} / {r['p99_ms']:.0f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
