"""One load point's figures from the generator's records, the server's samples and its ``/metrics`` deltas.

Latency: closed loop from the send, open loop from the scheduled send time (so queueing in the generator counts
as it would for a client). Throughput counts answered-200 requests, their inputs and tokens, over the point's
wall time (first send or scheduled time to the last answer). Server CPU is in percent of one core (2 cores:
200 % at most), from psutil's CPU times at the point's ends; generator CPU likewise from its own CPU times.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from .loadgen import NO_ANSWER, SKIPPED

STREAM, INDEX, SCHEDULED, SENT, DONE, STATUS, BYTES, ERROR = range(8)
OK = 200
REJECTED = 429
PERCENTILES = (50, 90, 99)


def latency_ms(values: Sequence[float]) -> dict[str, float | None]:
    """p50, p90, p99, max and mean of ``values`` (seconds) in milliseconds; ``None`` for no values."""
    if not values:
        return {"p50": None, "p90": None, "p99": None, "max": None, "mean": None}
    ms = np.asarray(values, dtype=np.float64) * 1000
    p50, p90, p99 = (float(v) for v in np.percentile(ms, PERCENTILES))
    return {"p50": p50, "p90": p90, "p99": p99, "max": float(ms.max()), "mean": float(ms.mean())}


def _delta(after: dict[str, float], before: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def batch_figures(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """Engine runs between two ``/metrics`` reads: count, mean inputs and requests per run, padding share."""
    runs = _delta(after, before, "bertonnx_batch_size_count")
    padded = _delta(after, before, "bertonnx_batch_padded_tokens_sum")
    real = _delta(after, before, "bertonnx_batch_tokens_sum")
    single_request = _delta(after, before, "bertonnx_batch_requests_bucket{le=1.0}")
    return {
        "runs": int(runs),
        "inputs_per_run": _delta(after, before, "bertonnx_batch_size_sum") / runs if runs else None,
        "requests_per_run": _delta(after, before, "bertonnx_batch_requests_sum") / runs if runs else None,
        "runs_with_several_requests": int(runs - single_request),
        "padding_share": 1 - real / padded if padded else None,
        "dropped_inputs": {
            reason: int(_delta(after, before, f"bertonnx_dropped_inputs_total{{reason={reason}}}"))
            for reason in ("disconnected", "timeout")
        },
    }


def server_figures(samples: Sequence[tuple[float, int, float]], start: float, end: float) -> dict[str, Any]:
    """Server CPU (percent of one core) and RSS (MB) over ``[start, end]`` from the sampler's samples."""
    inside = [s for s in samples if start <= s[0] <= end]
    before = [s for s in samples if s[0] <= start]
    after = [s for s in samples if s[0] >= end]
    first = before[-1] if before else (inside[0] if inside else None)
    last = after[0] if after else (inside[-1] if inside else None)
    cpu = None
    if first is not None and last is not None and last[0] > first[0]:
        cpu = 100 * (last[2] - first[2]) / (last[0] - first[0])
    rss = [s[1] for s in inside] or ([last[1]] if last is not None else [])
    return {
        "cpu_percent": cpu,
        "rss_mb_max": max(rss) / 1e6 if rss else None,
        "rss_mb_end": rss[-1] / 1e6 if rss else None,
    }


def summarize(
    records: Sequence[Sequence[Any]],
    requests: dict[str, Sequence[dict[str, Any]]],
    *,
    open_loop: bool,
    stream: str | None = None,
    window: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """The figures of one point (or of one ``stream`` within a ``window`` of scheduled times).

    Args:
        records: the generator's records.
        requests: each stream's requests (``inputs`` and ``tokens``), to count what was answered.
        open_loop: latency from the scheduled time (else from the send).
        stream: only this stream's records.
        window: only records scheduled within ``[start, end)``.
    """
    rows = [r for r in records if stream is None or r[STREAM] == stream]
    if window is not None:
        rows = [r for r in rows if window[0] <= r[SCHEDULED] < window[1]]
    sent = [r for r in rows if r[STATUS] != SKIPPED]
    statuses = Counter(str(r[STATUS]) for r in sent if r[STATUS] != NO_ANSWER)
    no_answer = Counter(str(r[ERROR]).split(":")[0] for r in sent if r[STATUS] == NO_ANSWER)
    ok = [r for r in sent if r[STATUS] == OK]
    origin = SCHEDULED if open_loop else SENT
    start = min((r[origin] for r in sent), default=0.0)
    end = max((r[DONE] for r in sent), default=start)
    elapsed = end - start
    inputs = sum(requests[r[STREAM]][r[INDEX]]["inputs"] for r in ok)
    tokens = sum(requests[r[STREAM]][r[INDEX]]["tokens"] for r in ok)
    errors = {code: n for code, n in statuses.items() if code != str(OK)}
    return {
        "sent": len(sent),
        "skipped": len(rows) - len(sent),
        "answered": sum(statuses.values()),
        "ok": len(ok),
        "statuses": dict(sorted(statuses.items())),
        "errors": dict(sorted(errors.items())),
        "no_answer": dict(no_answer),
        "lost": len(sent) - sum(statuses.values()),
        "start": start,
        "end": end,
        "elapsed_s": elapsed,
        "requests_per_s": len(ok) / elapsed if elapsed > 0 else None,
        "inputs": inputs,
        "tokens": tokens,
        "inputs_per_s": inputs / elapsed if elapsed > 0 else None,
        "tokens_per_s": tokens / elapsed if elapsed > 0 else None,
        "latency_ms": latency_ms([r[DONE] - r[origin] for r in ok]),
        "rejected_latency_ms": latency_ms([r[DONE] - r[origin] for r in sent if r[STATUS] == REJECTED]),
    }
