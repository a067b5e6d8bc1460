"""The issue's five serving targets, judged per precision from one run: met, not met, or not measured.

1. concurrency 32: the server's inputs/s ≥ 90 % of offline ``embed``'s on the same inputs;
2. concurrency 1: p50 ≤ the offline single-call p50 of the same requests + 3 ms;
3. below saturation (closed loops at concurrency ≤ 32, whose inputs always fit the default queue, and open
   loops below the measured capacity): no error status and no request left without an answer;
4. at 4× capacity: 429 answered with p99 ≤ 50 ms; every accepted request of the overload test answered 200
   within the request timeout; the probe back to its pre-overload p99 within 5 s after the overload ends;
5. soak: RSS at the end ≤ 5 % above RSS after warm-up (the first 10 % of the requests).
"""

from __future__ import annotations

from typing import Any

MET, NOT_MET, NOT_MEASURED = "met", "not met", "not measured"
THROUGHPUT_SHARE = 0.90
LATENCY_SLACK_MS = 3.0
REJECT_P99_MS = 50.0
RECOVERY_S = 5.0
RSS_GROWTH = 0.05
#: Closed loops at this concurrency or below count as below saturation (32 requests of at most 32 inputs
#: fit the default queue of 1024 inputs, so the server must answer them all).
BELOW_SATURATION_CONCURRENCY = 32

TARGETS = (
    (1, "concurrency 32: server inputs/s vs offline `embed` on the same inputs", "≥ 90 % of offline"),
    (2, "concurrency 1: server p50 latency", "≤ offline single-call p50 + 3 ms"),
    (
        3,
        "below saturation (closed loops at concurrency ≤ 32, open loops below capacity): errors, lost requests",
        "0 errors, 0 lost accepted requests",
    ),
    (
        4,
        "at 4× capacity: 429 latency, accepted requests, recovery",
        "429 p99 ≤ 50 ms; every accepted request 200 within its timeout; normal latency ≤ 5 s after the overload",
    ),
    (5, "soak: RSS growth after warm-up", "≤ 5 %"),
)


def _status(ok: bool) -> str:
    return MET if ok else NOT_MET


def _point(run: dict[str, Any], concurrency: int) -> dict[str, Any] | None:
    return next((p for p in run.get("closed", []) if p["concurrency"] == concurrency), None)


def throughput(run: dict[str, Any]) -> dict[str, Any]:
    point, offline = _point(run, 32), run.get("offline")
    if point is None or offline is None or not point["inputs_per_s"]:
        return {"status": NOT_MEASURED, "measured": "not run"}
    ceiling = offline["ceiling"]["inputs_per_s"]
    share = point["inputs_per_s"] / ceiling
    return {
        "status": _status(share >= THROUGHPUT_SHARE),
        "measured": f"{point['inputs_per_s']:.1f} vs {ceiling:.1f} inputs/s = {100 * share:.0f} %",
        "share": share,
    }


def single_latency(run: dict[str, Any]) -> dict[str, Any]:
    point, offline = _point(run, 1), run.get("offline")
    if point is None or offline is None or point["latency_ms"]["p50"] is None:
        return {"status": NOT_MEASURED, "measured": "not run"}
    server, alone = point["latency_ms"]["p50"], offline["single"]["p50_ms"]
    return {
        "status": _status(server <= alone + LATENCY_SLACK_MS),
        "measured": f"p50 {server:.1f} ms vs offline {alone:.1f} ms ({server - alone:+.1f} ms)",
        "overhead_ms": server - alone,
    }


def below_saturation(run: dict[str, Any]) -> dict[str, Any]:
    points = [p for p in run.get("closed", []) if p["concurrency"] <= BELOW_SATURATION_CONCURRENCY]
    points += [p for p in run.get("open", []) if p["fraction"] < 1]
    if not points:
        return {"status": NOT_MEASURED, "measured": "not run"}
    errors = sum(sum(p["errors"].values()) for p in points)
    lost = sum(p["lost"] for p in points)
    requests = sum(p["sent"] for p in points)
    kinds = sorted({code for p in points for code in p["errors"]})
    detail = f" (status {', '.join(kinds)})" if kinds else ""
    return {
        "status": _status(errors == 0 and lost == 0),
        "measured": f"{errors} errors{detail}, {lost} lost of {requests} requests in {len(points)} points",
        "errors": errors,
        "lost": lost,
    }


def overload(run: dict[str, Any], request_timeout_s: float) -> dict[str, Any]:
    test = run.get("overload")
    if test is None:
        return {"status": NOT_MEASURED, "measured": "not run"}
    phase = next(p for p in test["phases"] if p["name"] == "overload")
    rejected = phase["mixed"]["statuses"].get("429", 0) + phase["probe"]["statuses"].get("429", 0)
    reject_p99 = phase["mixed"]["rejected_latency_ms"]["p99"]
    summary = test["generator"]
    failed = sum(n for code, n in summary["errors"].items() if code not in ("429",)) + summary["lost"]
    slowest = summary["latency_ms"]["max"]
    recovery = test["recovery"]["seconds"]
    parts = [
        f"{rejected} × 429, p99 {reject_p99:.1f} ms" if reject_p99 is not None else "no 429 answered",
        f"{failed} accepted requests not answered 200"
        + (f" ({', '.join(f'{n} × {c}' for c, n in summary['errors'].items() if c != '429')})" if failed else ""),
        f"slowest 200 {slowest / 1000:.1f} s" if slowest is not None else "no 200",
        f"recovery {recovery:.1f} s"
        if recovery is not None
        else f"not recovered within {test['recovery']['after_phase_s']:g} s",
    ]
    ok = (
        reject_p99 is not None
        and reject_p99 <= REJECT_P99_MS
        and failed == 0
        and slowest is not None
        and slowest <= request_timeout_s * 1000
        and recovery is not None
        and recovery <= RECOVERY_S
    )
    return {"status": _status(ok), "measured": "; ".join(parts), "rejected": rejected, "recovery_s": recovery}


def soak(run: dict[str, Any]) -> dict[str, Any]:
    test = run.get("soak")
    if test is None or test.get("rss_growth") is None:
        return {"status": NOT_MEASURED, "measured": "not run"}
    growth = test["rss_growth"]
    return {
        "status": _status(growth <= RSS_GROWTH),
        "measured": f"{test['rss_mb_after_warmup']:.0f} → {test['rss_mb_end']:.0f} MB ({100 * growth:+.1f} %) over "
        f"{test['ok']} requests (peak {100 * test['rss_peak_growth']:+.1f} %)",
        "growth": growth,
    }


def evaluate(results: dict[str, Any], request_timeout_s: float = 60.0) -> dict[str, Any]:
    """The five targets for each precision in ``results["precisions"]``."""
    rows = []
    judges = (throughput, single_latency, below_saturation, lambda r: overload(r, request_timeout_s), soak)
    for (number, name, required), judge in zip(TARGETS, judges, strict=True):
        rows.append(
            {
                "target": number,
                "name": name,
                "required": required,
                "by_precision": {precision: judge(run) for precision, run in results["precisions"].items()},
            }
        )
    return {"rows": rows, "quick": results.get("quick", False)}
