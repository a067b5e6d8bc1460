"""``python -m benchmarks.serve DIR`` / ``bertonnx bench-serve DIR``: the serving benchmark, end to end.

For each precision (``fp32`` and ``bf16`` by default), one after another:

1. **offline** (a fresh process, no server): ``BertOnnx.embed``/``nsp`` on the concurrency-32 requests' inputs
   at once (the ceiling), and the concurrency-1 requests one call each (the single-call latency);
2. **server** (``bertonnx serve`` in its own process, default options): closed loops at concurrency 1, 8, 32
   and 128 over prefixes of one seeded request list (so concurrency 32 runs exactly the ceiling's inputs);
   capacity = the concurrency-32 point's requests/s; open loops at fractions of it below and past saturation;
   then the overload test: 0.5× capacity, 4× capacity, 0.5× again, with a one-text probe throughout;
3. **batching off** (a fresh server with ``--max-batch-requests 1``): concurrency 32 on the same requests;
4. **soak** (a fresh server): one-input requests of mixed lengths and routes, closed loop, RSS sampled;
5. **single** (issue 22's workload, on the main server): ``single_texts`` seeded texts of 4-160 words, one per
   ``/embed`` request (``pooling: mean``, ``truncate: true``), closed loops at concurrency 1 and 32, against
   offline ``BertOnnx.embed`` of the same texts in one call (the independent ratio) and one call each.

Every load loop runs in a separate generator process (:mod:`.loadgen`) over loopback, bounded in count and
time. Answers are checked against the offline answers (fp32 within 1e-4, bf16 by cosine) for the requests the
offline run computed. Writes ``serving.json`` (everything but raw records), ``SERVING.md`` and two plots to
``--out``. Exit 0 when every checked answer was right, 3 when one was not, 2 for bad options.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bertonnx.command import ArgumentParser, Command, CommandError, run_command
from bertonnx.exit_codes import EXIT_INCORRECT, EXIT_OK
from bertonnx.vocabulary import add_option

from ..corpus import DEFAULT_CORPUS_SEED
from ..machine import cpu_facts, now_utc, versions
from .harness import ServerProcess, run_module
from .stats import DONE, SCHEDULED, STATUS, batch_figures, server_figures, summarize
from .workload import build_requests, build_single_requests, probe_request, write_requests

PRECISIONS = {"fp32": "fp32", "bf16": "bf16"}
SECTIONS = ("offline", "closed", "open", "overload", "single", "batching-off", "soak")
DEFAULT_OUT = Path("bertonnx-bench-serve")
PACKAGE = __package__ or "benchmarks.serve"
#: Tolerances of a server answer against the offline one for the same input (batching may differ).
FP32_MAX_ABS = 1e-4
BF16_MIN_COSINE = 0.999
BF16_PROBABILITY_ABS = 0.005
#: The server's request timeout in every run (its default); the generator waits this long plus a margin.
REQUEST_TIMEOUT_S = 60.0
CLIENT_MARGIN_S = 30.0
#: Open-loop requests in flight at most (past it a request is counted as skipped, not sent).
MAX_IN_FLIGHT = 512
#: A probe is back to normal when its latency is within the p99 of the probes before the overload, and the
#: server has recovered once this many probes in a row are.
RECOVERY_RUN = 5
#: Seconds of a ``--max-minutes`` budget kept back from the soak for stopping its server and writing reports.
BUDGET_RESERVE_S = 120.0
#: The soak's time bound without a budget (a closed loop sends nothing after it).
SOAK_MAX_SECONDS = 4 * 3600.0
#: The soak sends for at least this long, even when the budget is spent (RSS needs some minutes of samples).
SOAK_MIN_SECONDS = 60.0


@dataclass(frozen=True)
class Plan:
    """How much of each section to run.

    Attributes:
        corpus_size: texts the requests draw from.
        closed: ``(concurrency, requests)`` of each closed-loop point; each runs the first ``requests`` of the
            list; concurrency 32's requests are the ceiling's, concurrency 1's the single calls'.
        offline_passes: timed passes of the ceiling.
        open_fractions: open-loop arrival rates as fractions of the measured capacity.
        open_seconds: duration of each open-loop point.
        overload: ``(fraction, seconds)`` of the overload test's three phases: before, overload, after.
        probe_rate: probe requests per second during the overload test.
        batching_off: ``(concurrency, requests)`` of the point run with ``--max-batch-requests 1``.
        soak_requests, soak_concurrency: the soak's one-input requests and closed-loop concurrency.
        soak_sample_s: seconds between RSS samples in the soak.
        warmup_requests: untimed requests sent to each fresh server first.
        single_texts: texts of the single-text workload (``single`` section; concurrency 1 and 32 send all).
    """

    corpus_size: int = 2000
    closed: tuple[tuple[int, int], ...] = ((1, 60), (8, 120), (32, 160), (128, 256))
    offline_passes: int = 2
    open_fractions: tuple[float, ...] = (0.25, 0.5, 0.8, 2.0)
    open_seconds: float = 30.0
    overload: tuple[tuple[float, float], ...] = ((0.5, 15.0), (4.0, 30.0), (0.5, 30.0))
    probe_rate: float = 2.0
    batching_off: tuple[int, int] = (32, 160)
    soak_requests: int = 20_000
    soak_concurrency: int = 32
    soak_sample_s: float = 1.0
    warmup_requests: int = 16
    single_texts: int = 600

    @property
    def list_size(self) -> int:
        return max(n for _, n in self.closed) + 4 * self.warmup_requests


FULL_PLAN = Plan()
QUICK_PLAN = Plan(
    corpus_size=300,
    closed=((1, 12), (8, 24), (32, 48), (128, 160)),
    offline_passes=1,
    open_seconds=2.0,
    overload=((0.5, 2.0), (4.0, 3.0), (0.5, 3.0)),
    probe_rate=10.0,
    batching_off=(32, 48),
    soak_requests=400,
    soak_sample_s=0.2,
    warmup_requests=8,
    single_texts=48,
)


def _arguments(p: ArgumentParser) -> None:
    p.add_argument("model_dir", metavar="DIR", type=Path, help="directory written by `bertonnx export`")
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default ./{DEFAULT_OUT}, created if missing)"
    )
    p.add_argument("--precisions", default="fp32,bf16", help="comma-separated: fp32, bf16 (default both)")
    add_option(p, "threads", "bench-serve")
    p.add_argument("--quick", action="store_true", help="CI mode: few requests per point, a 400-request soak")
    p.add_argument("--soak-requests", type=int, help=f"soak requests (default {FULL_PLAN.soak_requests})")
    p.add_argument(
        "--max-minutes",
        type=float,
        help="time budget of the whole run: the soak stops sending when it is spent (the report says how many of "
        "its requests ran), and a precision is not started when the last one's sections before its soak would not "
        "fit (default: no budget)",
    )
    p.add_argument("--seed", type=int, default=DEFAULT_CORPUS_SEED, help="seeds the corpus and the requests")
    p.add_argument("--client", choices=("aiohttp", "httpx"), default="aiohttp", help="the generator's HTTP client")
    p.add_argument(
        "--server-args",
        default="",
        help="extra `bertonnx serve` options for every server, e.g. '--max-queue 256' (quoted as one argument)",
    )
    p.add_argument(
        "--plan",
        default="{}",
        metavar="JSON",
        help="override sizes of the plan (fields of benchmarks.serve.cli.Plan), e.g. '{\"soak_requests\": 5000}'",
    )
    p.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated subset of {', '.join(SECTIONS)} (default all; closed is needed by open and overload)",
    )


# -- one precision --------------------------------------------------------------------------------------


class Bench:
    """The state of one precision's run: its requests, work directory, and what each section measured."""

    def __init__(
        self,
        args: argparse.Namespace,
        plan: Plan,
        precision: str,
        work: Path,
        threads: int,
        deadline: float | None = None,
    ) -> None:
        from bertonnx.manifest import read_manifest
        from bertonnx.tokenizer import TextTokenizer

        self.args, self.plan, self.precision, self.work, self.threads = args, plan, precision, work, threads
        self.deadline = deadline  # time.monotonic() by which the run should be done (--max-minutes)
        self.variant = PRECISIONS[precision]
        manifest = read_manifest(args.model_dir)
        tokenizer = TextTokenizer(manifest.directory / "tokenizer.json", manifest.max_position_embeddings)
        mixed = build_requests(tokenizer, plan.list_size, corpus_size=plan.corpus_size, seed=args.seed)
        single = build_single_requests(tokenizer, plan.single_texts, seed=args.seed)
        soak = build_requests(
            tokenizer, plan.soak_requests, corpus_size=plan.corpus_size, seed=args.seed, one_input=True
        )
        self.files = {
            "mixed": str(write_requests(work / "mixed.jsonl", mixed)),
            "probe": str(write_requests(work / "probe.jsonl", [probe_request(tokenizer)])),
            "soak": str(write_requests(work / "soak.jsonl", soak)),
            "single": str(write_requests(work / "single.jsonl", single)),
        }
        self.rows = {
            name: [r.to_json() | {"body": None} for r in reqs]
            for name, reqs in (
                ("mixed", mixed),
                ("probe", [probe_request(tokenizer)]),
                ("soak", soak),
                ("single", single),
            )
        }
        self.server_args = shlex.split(args.server_args)
        self.answers: dict[str, np.ndarray] = {}
        self.checks: list[dict[str, Any]] = []
        self.result: dict[str, Any] = {"precision": precision, "variant": self.variant}

    # -- processes ----------------------------------------------------------------------------------------

    def server(self, name: str, *extra: str) -> ServerProcess:
        return ServerProcess(
            self.args.model_dir, self.variant, self.threads, [*self.server_args, *extra], self.work / f"{name}.log"
        )

    def generate(self, server: ServerProcess, name: str, phase: dict[str, Any], check: bool) -> dict[str, Any]:
        spec = {
            "url": server.url,
            "client": self.args.client,
            "timeout": REQUEST_TIMEOUT_S + CLIENT_MARGIN_S,
            "files": self.files,
            "check": self.checked(phase) if check else {},
            "phase": phase,
        }
        budget = phase.get("max_seconds", 0) + sum(s["start_s"] + s["seconds"] for s in phase.get("streams", []))
        return run_module(f"{PACKAGE}.loadgen", spec, self.work, f"{self.precision}-{name}", budget + 600)

    def point(
        self,
        server: ServerProcess,
        name: str,
        phase: dict[str, Any],
        *,
        check: bool = True,
        streams: dict[str, str] | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Run one generator phase against ``server`` and summarize it; returns (summary, raw generator output)."""
        server.wait_idle()
        before = server.metrics()
        machine_before, server_before = busy_cpu_seconds(), server.sampler.read()
        loop_before = server.sampler.main_thread_cpu()
        out = self.generate(server, name, phase, check)
        machine_after, server_after = busy_cpu_seconds(), server.sampler.read()
        loop_after = server.sampler.main_thread_cpu()
        server.wait_idle()
        after = server.metrics()
        # CPU of everything else on the machine meanwhile (other jobs, the generator's start-up): a point
        # measured while other work ran is slower than the server alone would be
        wall = server_after[0] - server_before[0]
        others = machine_after - machine_before - (server_after[2] - server_before[2]) - out["cpu_s"]
        open_loop = phase["mode"] == "open"
        named = streams or {phase.get("name", name): phase.get("file", "mixed")}
        summary = summarize(out["records"], {s: self.rows[f] for s, f in named.items()}, open_loop=open_loop)
        figures = server_figures(
            sorted([server_before, *server.sampler.samples, server_after]), summary["start"], summary["end"]
        )
        # the event loop's share: what parsing, admission, the scheduler and answer building take from the cores
        figures["event_loop_cpu_percent"] = 100 * (loop_after - loop_before) / wall if wall > 0 else None
        summary.update(
            name=name,
            mode=phase["mode"],
            generator_cpu_percent=100 * out["cpu_s"] / out["wall_s"] if out["wall_s"] > 0 else None,
            generator_check_cpu_s=out["check_cpu_s"],
            others_cpu_percent=100 * others / wall if wall > 0 else None,
            # with the reads taken just before and after the generator ran, a point shorter than the sampling
            # interval still has a sample on each side of it
            server=figures,
            batches=batch_figures(before, after),
        )
        if "mixed" in named.values():
            self.check_answers(name, out["answers"].get("mixed", {}))
        if "single" in named.values():
            self.check_answers(name, out["answers"]["single"], prefix="s")
        return summary, out

    # -- correctness ----------------------------------------------------------------------------------------

    def checked(self, phase: dict[str, Any]) -> dict[str, list[int]]:
        """The requests whose answers the generator keeps: those the offline run answered, per request file."""
        if phase.get("file") == "single":
            return {"single": [int(k[1:]) for k in self.answers if k.startswith("s")]}
        return {"mixed": [int(k[1:]) for k in self.answers if k[0] in "ep"]}

    def check_answers(self, point: str, answers: dict[str, Any], prefix: str = "e") -> None:
        worst = {"max_abs": 0.0, "min_cosine": 1.0, "probability_abs": 0.0}
        failures = 0
        for index, answer in answers.items():
            if f"{prefix}{index}" in self.answers:
                expected = self.answers[f"{prefix}{index}"]
                actual = np.asarray(answer, dtype=np.float32)
                if actual.shape != expected.shape:
                    failures += 1
                    continue
                max_abs = float(np.abs(actual - expected).max())
                cosine = float(np.min(np.sum(actual * expected, axis=1)))  # both are unit vectors
                worst["max_abs"] = max(worst["max_abs"], max_abs)
                worst["min_cosine"] = min(worst["min_cosine"], cosine)
                bad = max_abs > FP32_MAX_ABS if self.precision == "fp32" else cosine < BF16_MIN_COSINE
            else:
                expected = self.answers[f"p{index}"]
                actual = np.asarray(
                    [next(x["score"] for x in pair if x["label"] == "is_next") for pair in answer], dtype=np.float64
                )
                if actual.shape != expected.shape:
                    failures += 1
                    continue
                diff = float(np.abs(actual - expected).max())
                worst["probability_abs"] = max(worst["probability_abs"], diff)
                bad = diff > (FP32_MAX_ABS if self.precision == "fp32" else BF16_PROBABILITY_ABS)
            failures += int(bad)
        self.checks.append({"point": point, "checked": len(answers), "failed": failures, **worst})

    # -- sections -----------------------------------------------------------------------------------------

    def offline(self) -> None:
        plan = self.plan
        ceiling_n = dict(plan.closed)[32]
        single_n = dict(plan.closed)[1]
        spec = {
            "model_dir": str(self.args.model_dir),
            "variant": self.variant,
            "threads": self.threads,
            "requests": self.files["mixed"],
            "ceiling": list(range(ceiling_n)),
            "single": list(range(single_n)),
            "passes": plan.offline_passes,
            "answers": str(self.work / f"{self.precision}-answers.npz"),
            "single_workload": self.files["single"],
        }
        progress(f"{self.precision}: offline ceiling ({ceiling_n} requests) and {single_n} single calls")
        self.result["offline"] = run_module(f"{PACKAGE}.offline", spec, self.work, f"{self.precision}-offline", 7200)
        with np.load(spec["answers"]) as data:
            self.answers = {key: data[key] for key in data.files}

    def warm(self, server: ServerProcess) -> None:
        n = self.plan.warmup_requests
        start = self.plan.list_size - n
        phase = {"name": "warmup", "mode": "closed", "file": "mixed", "start": start, "count": n, "concurrency": 4}
        self.generate(server, "warmup", phase, check=False)

    def closed(self, server: ServerProcess) -> None:
        points = []
        for concurrency, count in self.plan.closed:
            progress(f"{self.precision}: closed loop, concurrency {concurrency}, {count} requests")
            phase = {"name": "closed", "mode": "closed", "file": "mixed", "start": 0, "count": count,
                     "concurrency": concurrency, "max_seconds": 3600}  # fmt: skip
            summary, _ = self.point(server, f"closed-c{concurrency}", phase)
            points.append({"concurrency": concurrency, **summary})
        self.result["closed"] = points
        by_c = {p["concurrency"]: p for p in points}
        self.result["capacity"] = {
            "requests_per_s": by_c[32]["requests_per_s"],
            "inputs_per_s": by_c[32]["inputs_per_s"],
            "from": "closed loop, concurrency 32",
        }

    def open(self, server: ServerProcess) -> None:
        capacity = self.result["capacity"]["requests_per_s"]
        points = []
        first = 0
        for fraction in self.plan.open_fractions:
            rate = fraction * capacity
            progress(f"{self.precision}: open loop, {rate:.2f} requests/s ({fraction:g}x capacity)")
            stream = {"name": "mixed", "file": "mixed", "rate": rate, "start_s": 0.0,
                      "seconds": self.plan.open_seconds, "first": first}  # fmt: skip
            phase = {"mode": "open", "streams": [stream], "max_in_flight": MAX_IN_FLIGHT}
            summary, _ = self.point(server, f"open-{fraction:g}x", phase, streams={"mixed": "mixed"})
            points.append({"fraction": fraction, "offered_per_s": rate, **summary})
            first += int(rate * self.plan.open_seconds)
        self.result["open"] = points

    def overload(self, server: ServerProcess) -> None:
        capacity = self.result["capacity"]["requests_per_s"]
        streams, start = [], 0.0
        phases = []
        for (fraction, seconds), name in zip(self.plan.overload, ("before", "overload", "after"), strict=True):
            streams.append({"name": name, "file": "mixed", "rate": fraction * capacity, "start_s": start,
                            "seconds": seconds, "first": len(streams) * 1000})  # fmt: skip
            phases.append({"name": name, "fraction": fraction, "seconds": seconds, "start_s": start})
            start += seconds
        streams.append(
            {"name": "probe", "file": "probe", "rate": self.plan.probe_rate, "start_s": 0.0, "seconds": start}
        )
        progress(
            f"{self.precision}: overload test: "
            + ", ".join(f"{p['fraction']:g}x for {p['seconds']:g} s" for p in phases)
            + f", probes at {self.plan.probe_rate:g}/s"
        )
        phase = {"mode": "open", "streams": streams, "max_in_flight": MAX_IN_FLIGHT}
        names = {s["name"]: s["file"] for s in streams}
        summary, out = self.point(server, "overload", phase, streams=names)
        records = out["records"]
        origin = min(r[SCHEDULED] for r in records)
        result: dict[str, Any] = {"capacity_requests_per_s": capacity, "phases": [], "generator": summary}
        for p in phases:
            window = (origin + p["start_s"], origin + p["start_s"] + p["seconds"])
            mixed = summarize(records, {p["name"]: self.rows["mixed"]}, open_loop=True, stream=p["name"])
            probes = summarize(records, {"probe": self.rows["probe"]}, open_loop=True, stream="probe", window=window)
            result["phases"].append({**p, "offered_per_s": p["fraction"] * capacity, "mixed": mixed, "probe": probes})
        before_probe = result["phases"][0]["probe"]["latency_ms"]
        overload_end = origin + phases[1]["start_s"] + phases[1]["seconds"]
        probe_rows = sorted(
            (r for r in records if r[0] == "probe" and r[SCHEDULED] >= overload_end), key=lambda r: r[SCHEDULED]
        )
        threshold = before_probe["p99"]
        result["recovery"] = {
            "normal_ms": threshold,
            "rule": f"{RECOVERY_RUN} probes in a row answered 200 within the pre-overload probes' p99",
            "seconds": recovery_seconds(probe_rows, overload_end, threshold),
            "after_phase_s": phases[2]["seconds"],
        }
        result["probe_timeline"] = [
            [r[SCHEDULED] - origin, (r[DONE] - r[SCHEDULED]) * 1000 if r[DONE] else None, r[STATUS]]
            for r in sorted((r for r in records if r[0] == "probe"), key=lambda r: r[SCHEDULED])
        ]
        result["overload_end_s"] = overload_end - origin
        self.result["overload"] = result

    def single(self, server: ServerProcess) -> None:
        """Issue 22's workload: one text per request at concurrency 1 and 32, against offline embed."""
        count = self.plan.single_texts
        points = []
        for concurrency in (1, 32):
            progress(f"{self.precision}: single texts, concurrency {concurrency}, {count} requests")
            phase = {"name": "single", "mode": "closed", "file": "single", "start": 0, "count": count,
                     "concurrency": concurrency, "max_seconds": 3600}  # fmt: skip
            summary, _ = self.point(server, f"single-c{concurrency}", phase, streams={"single": "single"})
            points.append({"concurrency": concurrency, **summary})
        offline = self.result.get("offline", {}).get("single_workload")
        by_c = {p["concurrency"]: p for p in points}
        self.result["single"] = {
            "texts": count,
            "points": points,
            "offline": offline,
            "ratio_c32": by_c[32]["inputs_per_s"] / offline["inputs_per_s"] if offline else None,
            "c1_over_offline_ms": (
                by_c[1]["latency_ms"]["p50"] - offline["single_p50_ms"]
                if offline and by_c[1]["latency_ms"]["p50"] is not None
                else None
            ),
        }

    def batching_off(self) -> None:
        concurrency, count = self.plan.batching_off
        progress(f"{self.precision}: batching off (--max-batch-requests 1), concurrency {concurrency}")
        server = self.server("batching-off", "--max-batch-requests", "1")
        try:
            self.warm(server)
            phase = {"name": "closed", "mode": "closed", "file": "mixed", "start": 0, "count": count,
                     "concurrency": concurrency, "max_seconds": 3600}  # fmt: skip
            summary, _ = self.point(server, f"batching-off-c{concurrency}", phase)
        finally:
            exit_code = server.stop()
        self.result["batching_off"] = {"concurrency": concurrency, "exit_code": exit_code, **summary}

    def soak(self) -> None:
        plan = self.plan
        server = self.server("soak")
        server.sampler.interval = plan.soak_sample_s
        try:
            self.warm(server)
            max_seconds = SOAK_MAX_SECONDS
            if self.deadline is not None:
                left = self.deadline - time.monotonic() - BUDGET_RESERVE_S
                max_seconds = min(max_seconds, max(SOAK_MIN_SECONDS, left))
            progress(
                f"{self.precision}: soak, {plan.soak_requests} one-input requests at concurrency "
                f"{plan.soak_concurrency}, sending for at most {max_seconds / 60:.1f} min"
            )
            phase = {"name": "soak", "mode": "closed", "file": "soak", "start": 0, "count": plan.soak_requests,
                     "concurrency": plan.soak_concurrency, "max_seconds": max_seconds}  # fmt: skip
            summary, out = self.point(server, "soak", phase, check=False, streams={"soak": "soak"})
            samples = [s for s in server.sampler.samples if summary["start"] <= s[0] <= summary["end"]]
        finally:
            exit_code = server.stop()
        self.result["soak"] = {
            **summary,
            "planned_requests": plan.soak_requests,
            "max_seconds": max_seconds,
            "exit_code": exit_code,
            **rss_growth(out["records"], samples, summary["start"]),
        }

    def run(self) -> dict[str, Any]:
        sections = set(self.args.sections.split(","))
        started = time.monotonic()
        soak_started = None
        if "offline" in sections:
            self.offline()
        if sections & {"closed", "open", "overload", "single"}:
            server = self.server("main")
            try:
                self.result["server"] = {"command": server.command[1:], "info": server.info()}
                self.warm(server)
                if sections & {"closed", "open", "overload"}:
                    self.closed(server)
                if "open" in sections:
                    self.open(server)
                if "single" in sections:
                    self.single(server)
                if "overload" in sections:
                    self.overload(server)
            finally:
                self.result["server"]["exit_code"] = server.stop()
        if "batching-off" in sections:
            self.batching_off()
        if "soak" in sections:
            soak_started = time.monotonic()
            self.soak()
        self.result["checks"] = self.checks
        self.result["duration_s"] = time.monotonic() - started
        self.result["before_soak_s"] = (soak_started or time.monotonic()) - started
        return self.result


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy (all cores, not idle or waiting for I/O)."""
    import psutil

    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


def recovery_seconds(probes: Sequence[Sequence[Any]], overload_end: float, normal_ms: float | None) -> float | None:
    """Seconds from the end of the overload to the first of ``RECOVERY_RUN`` normal probes in a row (``None``:
    not recovered while probed)."""
    if normal_ms is None:
        return None
    normal = [r[STATUS] == 200 and (r[DONE] - r[SCHEDULED]) * 1000 <= normal_ms for r in probes]
    for i in range(len(probes) - RECOVERY_RUN + 1):
        if all(normal[i : i + RECOVERY_RUN]):
            return max(0.0, probes[i][SCHEDULED] - overload_end)
    return None


#: Share of the soak's requests that count as warm-up (RSS growth is measured from the end of it).
SOAK_WARMUP_SHARE = 0.1


def rss_growth(
    records: Sequence[Sequence[Any]], samples: Sequence[tuple[float, int, float]], start: float
) -> dict[str, Any]:
    """RSS over the soak and its growth from the end of warm-up (the first 10 % of requests answered) to the end."""
    done = sorted(r[DONE] for r in records if r[DONE] is not None)
    if not done or not samples:
        return {"rss_timeline": [], "rss_growth": None}
    warm_end = done[int(len(done) * SOAK_WARMUP_SHARE)]
    after = [s for s in samples if s[0] >= warm_end]
    base = after[0][1] if after else samples[-1][1]
    end = samples[-1][1]
    return {
        "warmup_end_s": warm_end - start,
        "rss_mb_after_warmup": base / 1e6,
        "rss_mb_end": end / 1e6,
        "rss_mb_peak_after_warmup": max(s[1] for s in after) / 1e6 if after else None,
        "rss_growth": end / base - 1,
        "rss_peak_growth": max(s[1] for s in after) / base - 1 if after else None,
        "rss_timeline": [[round(s[0] - start, 2), round(s[1] / 1e6, 1)] for s in samples],
        "completed_timeline": [[round(t - start, 2), i + 1] for i, t in enumerate(done) if i % 100 == 0],
    }


def _tupled(value: Any) -> Any:
    """JSON lists as (nested) tuples, as ``Plan`` holds them."""
    return tuple(_tupled(v) for v in value) if isinstance(value, list) else value


def command_line() -> str:
    """The command as typed: ``python -m PACKAGE ...`` when run as a module, else the program's name."""
    program = f"python -m {PACKAGE}" if sys.argv[0].endswith("__main__.py") else os.path.basename(sys.argv[0])
    return f"{program} {shlex.join(sys.argv[1:])}"


def progress(message: str) -> None:
    print(f"[bench-serve {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the run --------------------------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    from bertonnx.manifest import read_manifest
    from bertonnx.options import physical_cores

    try:
        manifest = read_manifest(args.model_dir)
        precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
        unknown = [p for p in precisions if p not in PRECISIONS]
        if unknown or not precisions:
            raise ValueError(f"--precisions takes {', '.join(PRECISIONS)}, got {args.precisions!r}")
        missing = [p for p in precisions if PRECISIONS[p] not in manifest.variants]
        if missing:
            raise ValueError(f"{manifest.directory} has no {', '.join(missing)} variant; pick others with --precisions")
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    plan = QUICK_PLAN if args.quick else FULL_PLAN
    if args.soak_requests is not None:
        plan = replace(plan, soak_requests=args.soak_requests)
    try:
        overrides = json.loads(args.plan)
        if not isinstance(overrides, dict):
            raise TypeError("expected a JSON object of Plan fields")
        plan = replace(plan, **{key: _tupled(value) for key, value in overrides.items()})
    except (ValueError, TypeError) as exc:
        raise CommandError(f"--plan: {exc}") from exc
    threads = args.threads or physical_cores()
    if args.max_minutes is not None and args.max_minutes <= 0:
        raise CommandError(f"--max-minutes must be > 0, got {args.max_minutes:g}")
    started, wall = now_utc(), time.monotonic()
    deadline = None if args.max_minutes is None else wall + 60 * args.max_minutes
    results: dict[str, Any] = {
        "command": command_line(),
        "started": started,
        "quick": args.quick,
        "machine": cpu_facts(),
        "versions": versions(),
        "threads": threads,
        "client": args.client,
        "model": {
            "directory": str(manifest.directory),
            "random_weights": manifest.random_weights,
            "source": manifest.data.get("source"),
        },
        "plan": asdict(plan),
        "server_args": args.server_args,
        "max_minutes": args.max_minutes,
        "precisions": {},
    }
    results["precisions_requested"] = precisions
    from .report import write_reports
    from .targets import evaluate

    with tempfile.TemporaryDirectory(prefix="bertonnx-bench-serve-") as tmp:
        needed = 0.0  # seconds the next precision needs at least: the last one's sections before its soak
        for precision in precisions:
            if deadline is not None and time.monotonic() + needed + SOAK_MIN_SECONDS + BUDGET_RESERVE_S > deadline:
                progress(f"{precision}: not run, the --max-minutes budget would not hold it")
                continue
            work = Path(tmp) / precision
            work.mkdir()
            results["precisions"][precision] = Bench(args, plan, precision, work, threads, deadline).run()
            needed = results["precisions"][precision]["before_soak_s"]
            # the reports after each precision: a run stopped during the next keeps what it measured
            results["duration_s"] = time.monotonic() - wall
            results["targets"] = evaluate(results)
            write_reports(args.out, results)
    failed = [c for r in results["precisions"].values() for c in r["checks"] if c["failed"]]
    progress(f"done in {results['duration_s'] / 60:.1f} min; wrote {args.out}")
    return EXIT_INCORRECT if failed else EXIT_OK


BENCH_SERVE_COMMAND = Command(
    "bench-serve",
    "serving benchmark: bertonnx serve under load, overload and a soak, against offline embed",
    _arguments,
    _run,
    extra="bench",
    description="Benchmark `bertonnx serve` under load (closed and open loops, overload, soak) against "
    "offline BertOnnx on the same requests.",
    epilog="exit codes: 0 every checked answer right, 2 bad usage, 3 an answer differed from offline",
)


def build_parser() -> ArgumentParser:
    """The ``bertonnx bench-serve`` parser."""
    return BENCH_SERVE_COMMAND.parser()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``bertonnx bench-serve`` and ``python -m benchmarks.serve``."""
    return run_command(BENCH_SERVE_COMMAND, argv)
