"""The serving benchmark: ``--quick`` end to end on the tiny export (real server, generator and offline processes
on loopback), the report's structure and the self-consistency of its numbers; and its pieces on synthetic
records. Speed is not asserted here (that is what the benchmark reports)."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bertonnx_benchmarks.serve.cli import QUICK_PLAN, RECOVERY_RUN, recovery_seconds, rss_growth
from bertonnx_benchmarks.serve.loadgen import check_loopback, open_schedule
from bertonnx_benchmarks.serve.report import NOTES_MARKER, markdown, write_reports
from bertonnx_benchmarks.serve.stats import latency_ms, server_figures, summarize
from bertonnx_benchmarks.serve.targets import MET, NOT_MET, TARGETS

from .conftest import ROOT

PRECISIONS = ("fp32", "bf16")
QUICK_TIMEOUT_S = 900
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MAX_FILE_BYTES = 2_000_000


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory, tiny_export: Path) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("bench-serve")
    command = [sys.executable, "-m", "bertonnx_benchmarks.serve", str(tiny_export), "--quick", "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=QUICK_TIMEOUT_S, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-4000:]
    return out, json.loads((out / "serving.json").read_text(encoding="utf-8"))


def _close(a: float, b: float, rel: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)


def check_point(point: dict[str, Any]) -> None:
    """Counts add up, rates are counts over the elapsed time, percentiles are ordered."""
    assert point["ok"] + sum(point["errors"].values()) + point["lost"] == point["sent"]
    assert sum(point["statuses"].values()) == point["answered"] == point["sent"] - point["lost"]
    assert point["ok"] > 0
    assert point["elapsed_s"] > 0
    assert _close(point["requests_per_s"], point["ok"] / point["elapsed_s"])
    assert _close(point["inputs_per_s"], point["inputs"] / point["elapsed_s"])
    assert _close(point["tokens_per_s"], point["tokens"] / point["elapsed_s"])
    assert point["ok"] <= point["inputs"] <= 32 * point["ok"]
    assert point["tokens"] >= 3 * point["inputs"]  # [CLS] text [SEP] at least
    lat = point["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert lat["max"] <= point["elapsed_s"] * 1000 + 1
    server = point["server"]
    assert server["cpu_percent"] is not None
    assert server["cpu_percent"] > 0
    assert server["rss_mb_max"] > 50
    # the event loop (the server's main thread) is part of the server: measured, never more than the whole
    # (kernel ticks of 10 ms: a short point may read 0)
    assert 0 <= server["event_loop_cpu_percent"] <= server["cpu_percent"] + 10
    # the generator's CPU is read from the kernel's 10 ms ticks: a short point may use less than one
    assert point["generator_cpu_percent"] >= 0
    batches = point["batches"]
    assert batches["runs"] > 0
    assert 1 <= batches["requests_per_run"] <= batches["inputs_per_run"]
    assert 0 <= batches["padding_share"] < 1


def test_quick_run_writes_a_consistent_report(quick: tuple[Path, dict[str, Any]]) -> None:
    _out, results = quick
    assert set(results["precisions"]) == set(PRECISIONS)
    assert results["quick"] is True
    assert results["threads"] >= 1
    assert results["versions"]["onnxruntime"]
    assert results["machine"]["cpu_model"]
    assert "bench-serve" in results["command"] or "benchmarks.serve" in results["command"]
    for precision, run in results["precisions"].items():
        assert [p["concurrency"] for p in run["closed"]] == [c for c, _ in QUICK_PLAN.closed]
        for point, (_, count) in zip(run["closed"], QUICK_PLAN.closed, strict=True):
            assert point["sent"] == count  # a closed loop sends every request of its prefix
            check_point(point)
        single = run["single"]
        assert [p["concurrency"] for p in single["points"]] == [1, 32]
        for point in single["points"]:
            check_point(point)
            assert point["sent"] == point["inputs"] == QUICK_PLAN.single_texts  # one text per request
            assert point["errors"] == {}, point["errors"]  # below saturation: no 429
        assert single["offline"]["texts"] == QUICK_PLAN.single_texts
        assert single["ratio_c32"] == single["points"][1]["inputs_per_s"] / single["offline"]["inputs_per_s"]
        # below saturation nothing fails, and concurrency 32 batches across requests
        for point in [*run["closed"][:3], *(p for p in run["open"] if p["fraction"] < 1)]:
            assert point["errors"] == {}, (precision, point["name"], point["errors"])
            assert point["lost"] == 0, (precision, point["name"], point["no_answer"])
        assert run["closed"][2]["batches"]["runs_with_several_requests"] > 0
        for point in run["open"]:
            check_point(point)
            assert _close(point["offered_per_s"], point["fraction"] * run["capacity"]["requests_per_s"])
        off = run["batching_off"]
        check_point(off)
        assert off["batches"]["runs_with_several_requests"] == 0
        assert off["batches"]["requests_per_run"] == 1
        assert off["exit_code"] == 0
        assert run["server"]["exit_code"] == 0
        ceiling = run["offline"]["ceiling"]
        assert ceiling["requests"] == dict(QUICK_PLAN.closed)[32]
        assert ceiling["inputs"] == run["closed"][2]["inputs"]  # the same inputs as concurrency 32
        assert run["offline"]["single"]["requests"] == dict(QUICK_PLAN.closed)[1]
        checks = run["checks"]
        assert sum(c["checked"] for c in checks) > 0
        assert all(c["failed"] == 0 for c in checks)
        overload = run["overload"]
        assert [p["name"] for p in overload["phases"]] == ["before", "overload", "after"]
        assert overload["phases"][1]["mixed"]["sent"] > overload["phases"][0]["mixed"]["sent"]
        soak = run["soak"]
        assert soak["ok"] + sum(soak["errors"].values()) + soak["lost"] == soak["sent"] == QUICK_PLAN.soak_requests
        times = [t for t, _ in soak["rss_timeline"]]
        assert len(times) >= 3
        assert times == sorted(times)
        assert _close(soak["rss_growth"], soak["rss_mb_end"] / soak["rss_mb_after_warmup"] - 1, rel=1e-6)


def test_quick_run_judges_the_five_targets_from_its_own_figures(quick: tuple[Path, dict[str, Any]]) -> None:
    _, results = quick
    rows = results["targets"]["rows"]
    assert [row["target"] for row in rows] == [number for number, _, _ in TARGETS]
    for row in rows:
        assert set(row["by_precision"]) == set(PRECISIONS)
        for precision, judged in row["by_precision"].items():
            assert judged["status"] in (MET, NOT_MET), (row["target"], precision, judged)
    for precision, run in results["precisions"].items():
        share = rows[0]["by_precision"][precision]["share"]
        assert _close(share, run["closed"][2]["inputs_per_s"] / run["offline"]["ceiling"]["inputs_per_s"])
        assert rows[0]["by_precision"][precision]["status"] == (MET if share >= 0.9 else NOT_MET)
        overhead = rows[1]["by_precision"][precision]["overhead_ms"]
        assert _close(overhead, run["closed"][0]["latency_ms"]["p50"] - run["offline"]["single"]["p50_ms"])
        assert rows[4]["by_precision"][precision]["growth"] == run["soak"]["rss_growth"]


def test_quick_run_writes_markdown_and_small_plots(quick: tuple[Path, dict[str, Any]]) -> None:
    out, results = quick
    text = (out / "SERVING.md").read_text(encoding="utf-8")
    for heading in ("## Targets", "## fp32", "## bf16", "### Closed loop", "### Open loop", "### Overload", "### Soak"):
        assert heading in text
    assert results["command"] in text
    for name in ("serving_latency.png", "serving_rss.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC)
        assert len(data) < MAX_FILE_BYTES
        assert f"({name})" in text
    assert (out / "serving.json").stat().st_size < MAX_FILE_BYTES


def test_rewriting_the_report_keeps_its_notes(quick: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    _, results = quick
    report = tmp_path / "SERVING.md"
    report.write_text(f"an old report\n\n{NOTES_MARKER}\n\nWhat was tried and lost.\n", encoding="utf-8")
    write_reports(tmp_path, results)
    text = report.read_text(encoding="utf-8")
    assert "an old report" not in text
    assert "## Targets" in text
    assert text.count(NOTES_MARKER) == 1
    assert text.rstrip().endswith("What was tried and lost.")
    # redrawn from serving.json alone: the same report
    command = [sys.executable, "-m", "bertonnx_benchmarks.serve.report", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert report.read_text(encoding="utf-8") == text


def test_the_report_says_what_a_budget_shortened(quick: tuple[Path, dict[str, Any]]) -> None:
    _, results = quick
    assert "Shortened" not in markdown(results, plots=False)  # the quick run ran its whole plan
    cut = copy.deepcopy(results)
    cut["max_minutes"] = 30.0
    cut["precisions_requested"] = [*cut["precisions"], "int8"]
    soak = cut["precisions"]["fp32"]["soak"]
    soak.update(planned_requests=20_000, max_seconds=600.0)
    text = markdown(cut, plots=False)
    assert f"**Shortened:** {soak['sent']:,} of the 20,000 planned requests were sent" in text
    assert "after 10.0 min" in text
    assert "Requested but not measured in this run: int8 (the `--max-minutes` budget would not hold it)." in text


def test_bench_serve_refuses_bad_options(tiny_export: Path, tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "bertonnx.cli", "bench-serve", *args, "--out", str(tmp_path)]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)

    result = run(str(tiny_export), "--precisions", "fp16")
    assert result.returncode == 2
    assert "--precisions takes fp32, bf16, got 'fp16'" in result.stderr
    result = run(str(tiny_export), "--max-minutes", "0")
    assert result.returncode == 2
    assert "--max-minutes must be > 0, got 0" in result.stderr
    result = run(str(tmp_path / "missing"))
    assert result.returncode == 2
    assert "error" in result.stderr
    assert not (tmp_path / "serving.json").exists()


# -- pieces -----------------------------------------------------------------------------------------------


def test_the_generator_targets_loopback_only() -> None:
    for url in ("http://127.0.0.1:8080", "http://localhost:1", "http://[::1]:9", "http://127.0.0.2:80"):
        check_loopback(url)
    for url in ("http://10.0.0.1:8080", "http://192.168.1.2", "http://example.com", "http://0.0.0.0:80"):
        with pytest.raises(ValueError, match="only targets loopback addresses"):
            check_loopback(url)


def test_open_schedule_spaces_each_stream_at_its_rate_and_wraps_the_requests() -> None:
    streams = [
        {"name": "mixed", "file": "a", "rate": 4.0, "start_s": 1.0, "seconds": 1.0, "first": 3},
        {"name": "probe", "file": "b", "rate": 2.0, "start_s": 0.0, "seconds": 2.0},
    ]
    schedule = open_schedule(streams, {"a": 5, "b": 1}, origin=100.0)
    assert [round(t, 3) for t, *_ in schedule] == [100.0, 100.5, 101.0, 101.0, 101.25, 101.5, 101.5, 101.75]
    assert [index for _, stream, _, index in schedule if stream == "mixed"] == [3, 4, 0, 1]
    assert {index for _, stream, _, index in schedule if stream == "probe"} == {0}


def record(index: int, scheduled: float, done: float | None, status: int, stream: str = "s") -> list[Any]:
    return [stream, index, scheduled, scheduled, done, status, 10, "" if status else "ClientError: gone"]


def test_summarize_counts_statuses_and_measures_from_the_schedule_in_open_loops() -> None:
    rows = {"s": [{"inputs": 2, "tokens": 20}, {"inputs": 3, "tokens": 30}]}
    records = [record(0, 0.0, 1.0, 200), record(1, 0.5, 1.5, 429), record(0, 1.0, 2.5, 0), record(1, 1.0, 3.0, 200)]
    records[3][3] = 2.0  # sent late (the generator was busy): an open loop still counts from the schedule
    point = summarize(records, rows, open_loop=True)
    assert (point["sent"], point["ok"], point["lost"], point["statuses"]) == (4, 2, 1, {"200": 2, "429": 1})
    assert point["errors"] == {"429": 1}
    assert point["no_answer"] == {"ClientError": 1}
    assert (point["inputs"], point["tokens"], point["elapsed_s"]) == (5, 50, 3.0)
    assert point["latency_ms"]["max"] == 2000.0
    closed = summarize(records, rows, open_loop=False)
    assert closed["latency_ms"]["max"] == 1000.0
    assert latency_ms([]) == {"p50": None, "p90": None, "p99": None, "max": None, "mean": None}


def test_server_figures_of_a_point_shorter_than_the_sampling_interval() -> None:
    # the samples around the point (taken just before and after the generator ran) bound it: CPU over them
    before, after = (10.0, 200_000_000, 5.0), (10.5, 210_000_000, 5.4)
    figures = server_figures([before, after], start=10.1, end=10.3)
    assert figures["cpu_percent"] == pytest.approx(80.0)
    assert figures["rss_mb_max"] == 210.0
    # samples only before it: no CPU figure rather than a made-up one
    assert server_figures([before], start=10.1, end=10.3)["cpu_percent"] is None


def test_recovery_is_the_first_run_of_normal_probes_after_the_overload() -> None:
    end = 10.0
    latencies = [3.0, 2.0, 0.05, 0.05, 1.0, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05]
    probes = [record(0, end + 0.5 * i, end + 0.5 * i + lat, 200) for i, lat in enumerate(latencies)]
    assert RECOVERY_RUN == 5
    assert recovery_seconds(probes, end, normal_ms=100) == 2.5  # probe 5 starts the first run of five
    assert recovery_seconds(probes[:8], end, normal_ms=100) is None
    refused = [record(0, end + i, end + i + 0.001, 429) for i in range(6)]
    assert recovery_seconds(refused, end, normal_ms=100) is None  # a fast 429 is not normal service
    assert recovery_seconds(probes, end, normal_ms=None) is None


def test_rss_growth_is_measured_from_the_end_of_warm_up() -> None:
    records = [record(0, float(i), float(i) + 0.5, 200) for i in range(100)]
    samples = [(float(t), 100_000_000 + (50_000_000 if t < 5 else 1_000_000 * (t - 5)), 0.0) for t in range(0, 102, 2)]
    found = rss_growth(records, samples, start=0.0)
    assert found["warmup_end_s"] == 10.5  # the 11th answer of 100
    assert found["rss_mb_after_warmup"] == 107.0  # the first sample at or after it (t=12)
    assert found["rss_mb_end"] == 195.0
    assert found["rss_growth"] == pytest.approx(195 / 107 - 1)
    assert rss_growth([], samples, 0.0)["rss_growth"] is None


def test_the_run_cost_fit_recovers_a_fixed_and_a_per_token_cost(tiny_export: Path, tmp_path: Path) -> None:
    """``benchmarks.serve.runcost``: the least-squares line of ms against padded tokens, and a run on a real export."""
    from bertonnx_benchmarks.serve.runcost import SHAPES, fit, main

    a, b = fit([(tokens, 20.0 + 0.13 * tokens) for tokens in (8, 64, 512, 2048)])
    assert math.isclose(a, 20.0, abs_tol=1e-9)
    assert math.isclose(b, 0.13, rel_tol=1e-9)
    out = tmp_path / "runcost.json"
    assert main([str(tiny_export), "--repeats", "1", "--threads", "1", "--json", str(out)]) == 0
    figures = json.loads(out.read_text(encoding="utf-8"))
    assert set(figures) == {"server", "offline"}
    for mode in figures.values():
        assert len(mode["shapes"]) == len(SHAPES)
        assert all(ms > 0 for ms in mode["shapes"].values())
        assert mode["per_token_ms"] > 0


#: Replayed time runs this many times faster than real time: slow enough that the event loop's own overhead on a
#: 2-core machine (also when other work shares it) stays small against a replayed engine run.
SPEEDUP = 10.0


def test_the_tradeoff_replay_counts_every_request_and_times_the_recovery() -> None:
    """``benchmarks.serve.tradeoff``: the real scheduler with a sleeping engine; every request is answered or
    refused, none times out, and a closed loop of small requests is never refused."""
    import asyncio

    from bertonnx.batching import BatchLimits
    from bertonnx_benchmarks.serve.tradeoff import ModelEngine, closed_loop, overload

    engine = ModelEngine(fixed_ms=0.4, per_token_ms=0.48, speedup=SPEEDUP)
    assert math.isclose(engine.seconds([100, 100]), (0.4 + 0.48 * 200 * (0.9 + 0.2 * 100 / 512)) / 1000 / SPEEDUP)
    requests = [[40] * n for n in (1, 1, 2, 4)]
    limits = BatchLimits(max_batch_tokens=512)
    result = asyncio.run(overload(requests, engine, limits, 1 / SPEEDUP, wait_s=15.0, priority_ms=40.0, seed=0))
    assert result["sent"] > 0
    assert result["ok"] + result["429"] + result["504"] == result["sent"]
    assert result["504"] == 0
    assert result["429"] > 0  # 4x capacity for 30 (scaled) seconds passes the 15 s of queued work
    assert result["normal_probe_s"] is not None
    closed = asyncio.run(closed_loop(requests * 40, engine, limits, 1 / SPEEDUP, wait_s=15.0, priority_ms=40.0))
    assert closed["429"] == 0
    assert 0 < closed["p50_s"] <= closed["p99_s"]
