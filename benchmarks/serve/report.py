"""The serving benchmark's report: ``serving.json``, ``SERVING.md`` and two plots, each written atomically.

The JSON holds every figure of the run (not the per-request records); the markdown holds the tables and the
targets. Hand-written notes (what the figures mean, what was tried and lost) go below the :data:`NOTES_MARKER`
line of an existing ``SERVING.md``; writing the report again keeps them, so a rerun, or ``python -m
benchmarks.serve.report OUT`` (the report redrawn from ``OUT/serving.json``), does not lose them.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

from ..report import write_atomic, write_json

#: The line of ``SERVING.md`` below which its hand-written notes are kept when the report is written again.
NOTES_MARKER = "<!-- notes: written by hand, kept when the report is rewritten -->"
JSON_NAME, MD_NAME = "serving.json", "SERVING.md"
LATENCY_PNG, RSS_PNG = "serving_latency.png", "serving_rss.png"
PLOT_DPI = 110


def _n(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _ms(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def _codes(point: dict[str, Any]) -> str:
    parts = [f"{n} × {code}" for code, n in point["errors"].items()]
    if point["lost"]:
        parts.append(f"{point['lost']} lost")
    if point.get("skipped"):
        parts.append(f"{point['skipped']} not sent")
    return ", ".join(parts) or "0"


def _server(point: dict[str, Any]) -> str:
    s = point["server"]
    loop = s.get("event_loop_cpu_percent")
    loop_text = "" if loop is None else f" ({_n(loop, 0)} %)"
    return f"{_n(s['cpu_percent'], 0)} %{loop_text} / {_n(s['rss_mb_max'], 0)} MB"


def _batches(point: dict[str, Any]) -> str:
    b = point["batches"]
    share = b["padding_share"]
    return (
        f"{_n(b['inputs_per_run'])} / {_n(b['requests_per_run'])} / {'—' if share is None else f'{100 * share:.0f} %'}"
    )


POINT_HEADER = (
    "| requests/s | inputs/s | tokens/s | p50 | p90 | p99 | max (ms) | errors | server CPU (event loop) / RSS "
    "| generator CPU | other CPU | inputs / requests per run, padding |"
)
POINT_RULE = "|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---|"


def _point_cells(point: dict[str, Any]) -> str:
    lat = point["latency_ms"]
    return (
        f"{_n(point['requests_per_s'], 2)} | {_n(point['inputs_per_s'])} | {_n(point['tokens_per_s'], 0)} | "
        f"{_ms(lat['p50'])} | {_ms(lat['p90'])} | {_ms(lat['p99'])} | {_ms(lat['max'])} | {_codes(point)} | "
        f"{_server(point)} | {_n(point['generator_cpu_percent'], 1)} % | {_n(point.get('others_cpu_percent'), 0)} % | "
        f"{_batches(point)} |"
    )


def targets_table(results: dict[str, Any]) -> list[str]:
    precisions = list(results["precisions"])
    lines = [
        "| # | target | required | " + " | ".join(precisions) + " |",
        "|---|---|---|" + "---|" * len(precisions),
    ]
    for row in results["targets"]["rows"]:
        cells = []
        for precision in precisions:
            judged = row["by_precision"][precision]
            status = judged["status"] if judged["status"] != "not met" else "**not met**"
            cells.append(f"{status}: {judged['measured']}")
        lines.append(f"| {row['target']} | {row['name']} | {row['required']} | " + " | ".join(cells) + " |")
    return lines


def precision_section(name: str, run: dict[str, Any]) -> list[str]:
    lines = [f"## {name}", ""]
    offline = run.get("offline")
    computed = offline["precision"] if offline else run.get("server", {}).get("info", {}).get("precision")
    if name == "bf16" and computed == "f32":
        lines += [
            "**`bf16` computes in f32 on this CPU**: it has no AVX512-BF16 or AMX, so OpenVINO runs the `bf16` "
            "variant's graph in f32; these figures are OpenVINO f32, not bf16.",
            "",
        ]
    if offline:
        c, s = offline["ceiling"], offline["single"]
        lines += [
            f"Offline `BertOnnx` ({offline['engine']}, {offline['precision']}, {offline['threads']} threads, fresh "
            f"process, no server): the concurrency-32 requests' {c['inputs']} inputs ({c['tokens']:,} tokens) in "
            f"one `embed` + one `nsp` call: **{c['inputs_per_s']:.1f} inputs/s**, {c['tokens_per_s']:,.0f} tokens/s "
            f"(passes: {', '.join(f'{x:.1f} s' for x in c['pass_seconds'])}). The concurrency-1 requests one call "
            f"each: p50 **{_ms(s['p50_ms'])} ms**, p90 {_ms(s['p90_ms'])} ms.",
            "",
        ]
    if run.get("closed"):
        lines += ["### Closed loop", "", "| concurrency " + POINT_HEADER, "|---:" + POINT_RULE]
        for p in run["closed"]:
            lines.append(f"| {p['concurrency']} ({p['sent']} requests) | " + _point_cells(p))
        off = run.get("batching_off")
        if off:
            lines.append(f"| {off['concurrency']}, batching off ({off['sent']} requests) | " + _point_cells(off))
        cap = run["capacity"]
        lines += [
            "",
            f"Capacity (concurrency 32): {cap['requests_per_s']:.2f} requests/s, {cap['inputs_per_s']:.1f} inputs/s.",
            "",
        ]
    single = run.get("single")
    if single:
        off = single.get("offline")
        lines += [
            "### Single texts (issue 22)",
            "",
            f"{single['texts']} seeded texts of 4-160 words, one per `/embed` request (`pooling: mean`, "
            "`truncate: true`), closed loops.",
            "",
            "| concurrency " + POINT_HEADER,
            "|---:" + POINT_RULE,
        ]
        for p in single["points"]:
            lines.append(f"| {p['concurrency']} ({p['sent']} requests) | " + _point_cells(p))
        if off:
            ratio = single["ratio_c32"]
            extra = single["c1_over_offline_ms"]
            lines += [
                "",
                f"Offline `embed` of the same texts in one call: {off['inputs_per_s']:.1f} inputs/s; one call each: "
                f"p50 {_ms(off['single_p50_ms'])} ms. Concurrency 32 / offline: "
                f"**{_n(ratio, 2) if ratio is not None else '—'}×**; concurrency 1 p50 over an offline single call: "
                f"**{_n(extra, 1) if extra is not None else '—'} ms**.",
            ]
        lines.append("")
    if run.get("open"):
        lines += ["### Open loop (fixed arrival rate)", "", "| offered | " + POINT_HEADER + " 429 p99 (ms) |",
                  "|---:" + POINT_RULE + "---:|"]  # fmt: skip
        for p in run["open"]:
            lines.append(
                f"| {p['offered_per_s']:.2f}/s ({p['fraction']:g}×, {p['sent']} requests) | "
                + _point_cells(p)
                + f" {_ms(p['rejected_latency_ms']['p99'])} |"
            )
        lines.append("")
    test = run.get("overload")
    if test:
        lines += [
            "### Overload and recovery",
            "",
            f"Open loop at fractions of the capacity ({test['capacity_requests_per_s']:.2f} requests/s), one phase "
            "after the other, with a one-text `/embed` probe throughout.",
            "",
            "| phase | offered | sent | 200 | 429 | other | lost | 200 p50 / p99 / max (ms) | 429 p50 / p99 (ms) "
            "| probe p50 / p99 (ms) |",
            "|---|---:|---:|---:|---:|---|---:|---|---|---|",
        ]
        for p in test["phases"]:
            m, probe = p["mixed"], p["probe"]
            other = ", ".join(f"{n} × {c}" for c, n in m["errors"].items() if c != "429") or "0"
            lines.append(
                f"| {p['name']} ({p['fraction']:g}×, {p['seconds']:g} s) | {p['offered_per_s']:.2f}/s | {m['sent']} | "
                f"{m['ok']} | {m['statuses'].get('429', 0)} | {other} | {m['lost']} | "
                f"{_ms(m['latency_ms']['p50'])} / {_ms(m['latency_ms']['p99'])} / {_ms(m['latency_ms']['max'])} | "
                f"{_ms(m['rejected_latency_ms']['p50'])} / {_ms(m['rejected_latency_ms']['p99'])} | "
                f"{_ms(probe['latency_ms']['p50'])} / {_ms(probe['latency_ms']['p99'])} |"
            )
        rec = test["recovery"]
        seconds = rec["seconds"]
        when = f"{seconds:.1f} s" if seconds is not None else f"not within {rec['after_phase_s']:g} s"
        lines += [
            "",
            f"Recovery: {when} after the overload ended ({rec['rule']}: {_ms(rec['normal_ms'])} ms).",
            "",
        ]
    soak = run.get("soak")
    if soak:
        lines += [
            "### Soak",
            "",
            *_soak_cut(soak),
            f"{soak['ok']:,} of {soak['sent']:,} one-input requests answered 200 ({_codes(soak)} errors) in "
            f"{soak['elapsed_s'] / 60:.1f} min at {_n(soak['requests_per_s'])} requests/s; RSS "
            f"{_n(soak['rss_mb_after_warmup'], 0)} MB after warm-up (first 10 % of requests, "
            f"{soak['warmup_end_s']:.0f} s), {_n(soak['rss_mb_end'], 0)} MB at the end "
            f"({100 * soak['rss_growth']:+.1f} %), peak {_n(soak['rss_mb_peak_after_warmup'], 0)} MB "
            f"({100 * soak['rss_peak_growth']:+.1f} %). Server CPU {_n(soak['server']['cpu_percent'], 0)} %, "
            f"generator CPU {_n(soak['generator_cpu_percent'])} %.",
            "",
        ]
    checks = run.get("checks", [])
    if checks:
        checked = sum(c["checked"] for c in checks)
        failed = sum(c["failed"] for c in checks)
        worst_abs = max(c["max_abs"] for c in checks)
        worst_cos = min(c["min_cosine"] for c in checks)
        worst_p = max(c["probability_abs"] for c in checks)
        lines += [
            f"Answers checked against offline: {checked} requests, {failed} wrong (worst vector max abs "
            f"{worst_abs:.1e}, min cosine {worst_cos:.6f}, is-next probability {worst_p:.1e}).",
            "",
        ]
    return lines


def _soak_cut(soak: dict[str, Any]) -> list[str]:
    """A line when the soak sent fewer requests than planned (stopped by its time bound, ``--max-minutes``)."""
    planned = soak.get("planned_requests")
    if planned is None or soak["sent"] >= planned:
        return []
    return [
        f"**Shortened:** {soak['sent']:,} of the {planned:,} planned requests were sent: the soak stops sending "
        f"after {soak['max_seconds'] / 60:.1f} min (what the run's `--max-minutes` budget left it).",
        "",
    ]


def _unfinished(results: dict[str, Any]) -> list[str]:
    """A line naming the requested precisions the run has not measured (yet, or ever, if it was stopped)."""
    missing = [p for p in results.get("precisions_requested", []) if p not in results["precisions"]]
    if not missing:
        return []
    why = "the `--max-minutes` budget would not hold it" if results.get("max_minutes") else "the run stopped first"
    return [f"Requested but not measured in this run: {', '.join(missing)} ({why}).", ""]


def markdown(results: dict[str, Any], plots: bool) -> str:
    machine = results["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in results["versions"].items() if v)
    model = results["model"]
    weights = "seeded random weights" if model["random_weights"] else "pretrained weights"
    lines = [
        "# Serving benchmark: `bertonnx serve` under load",
        "",
        f"Measured {results['started']} on {machine['cpu_model']} ({machine['physical_cores']} cores), "
        f"{results['threads']} intra-op threads; model `{Path(model['directory']).name}` ({weights}). "
        f"Run took {results['duration_s'] / 60:.1f} min"
        + (" (quick mode: few requests per point)." if results["quick"] else "."),
        "",
        f"Command: `{results['command']}`",
        "",
        *_unfinished(results),
        f"Versions: {versions}.",
        "",
        "The server (`bertonnx serve`, default options unless stated) and the load generator (aiohttp, its own "
        "process, loopback only) share the machine's cores; the generator's CPU is reported per point. Latency "
        "in closed loops counts from the send, in open loops from the scheduled send time. Requests: seeded, "
        "mixed lengths (`benchmarks.corpus.build_mixed_corpus`), 70 % `/embed` texts and 30 % `/predict` pairs, "
        "half with one input and half with 2–32, `truncate: true`. Columns: server CPU in % of one core "
        f"({machine['physical_cores']} cores = {100 * machine['physical_cores']} %), in brackets its main "
        "thread's (the event loop: HTTP, JSON, admission, the scheduler; tokenization and inference run on other "
        "threads), "
        "RSS the maximum during the point; "
        "other CPU is what the rest of the machine used meanwhile (other jobs; "
        "the figures of a point with much of it are slower than the server alone would be); per engine run, mean "
        "inputs, mean requests and the share of padded tokens.",
        "",
        "## Targets",
        "",
        *targets_table(results),
        "",
    ]
    if plots:
        lines += [f"![p99 latency against inputs/s]({LATENCY_PNG})", "", f"![RSS over the soak]({RSS_PNG})", ""]
    for name, run in results["precisions"].items():
        lines += precision_section(name, run)
    return "\n".join(lines)


def _png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=PLOT_DPI, bbox_inches="tight")
    return buffer.getvalue()


def plots(out: Path, results: dict[str, Any]) -> bool:
    """The latency-throughput plot (p99 against inputs/s) and the soak's RSS over time; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for name, run in results["precisions"].items():
        for key, marker, label in (("closed", "o-", "closed loop"), ("open", "s--", "open loop")):
            points = [p for p in run.get(key, []) if p["inputs_per_s"] and p["latency_ms"]["p99"] is not None]
            if points:
                xs = [p["inputs_per_s"] for p in points]
                ys = [p["latency_ms"]["p99"] / 1000 for p in points]
                axis.plot(xs, ys, marker, label=f"{name} {label}")
                for p, x, y in zip(points, xs, ys, strict=True):
                    tag = f"c{p['concurrency']}" if key == "closed" else f"{p['fraction']:g}×"
                    axis.annotate(tag, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        off = run.get("batching_off")
        if off and off["inputs_per_s"]:
            axis.plot(
                [off["inputs_per_s"]], [off["latency_ms"]["p99"] / 1000], "x", ms=9, label=f"{name} batching off, c32"
            )
        offline = run.get("offline")
        if offline and axis.lines:  # (nothing to match with --sections offline or single alone)
            axis.axvline(offline["ceiling"]["inputs_per_s"], ls=":", lw=1, color=axis.lines[-1].get_color())
    axis.set_xlabel("inputs/s answered (dotted: offline embed on the same inputs)")
    axis.set_ylabel("p99 latency (s)")
    axis.set_yscale("log")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=7)
    axis.set_title("bertonnx serve: p99 latency against throughput")
    write_atomic(out / LATENCY_PNG, _png(figure))
    plt.close(figure)

    figure, axis = plt.subplots(figsize=(7, 3.8))
    for name, run in results["precisions"].items():
        soak = run.get("soak")
        if soak and soak.get("rss_timeline"):
            t, rss = zip(*soak["rss_timeline"], strict=True)
            (line,) = axis.plot([x / 60 for x in t], rss, label=f"{name}")
            axis.axvline(soak["warmup_end_s"] / 60, ls=":", lw=1, color=line.get_color())
    axis.set_xlabel("minutes into the soak (dotted: end of warm-up)")
    axis.set_ylabel("server RSS (MB)")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    axis.set_title("bertonnx serve: RSS over the soak")
    write_atomic(out / RSS_PNG, _png(figure))
    plt.close(figure)
    return True


def kept_notes(path: Path) -> str:
    """The notes of an existing report: its text from :data:`NOTES_MARKER` on (empty without one)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    at = text.find(NOTES_MARKER)
    return "" if at < 0 else text[at:].strip() + "\n"


def write_reports(out: Path, results: dict[str, Any]) -> None:
    """Write ``serving.json``, the plots and ``SERVING.md`` (keeping its notes) to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / JSON_NAME, results)
    drawn = plots(out, results)
    notes = kept_notes(out / MD_NAME)
    text = markdown(results, drawn).rstrip() + "\n" + (f"\n{notes}" if notes else "")
    write_atomic(out / MD_NAME, text.encode("utf-8"))


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.serve.report OUT``: redraw OUT's report from ``OUT/serving.json``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m benchmarks.serve.report OUT (a folder holding serving.json)", file=sys.stderr)
        return 2
    out = Path(args[0])
    write_reports(out, json.loads((out / JSON_NAME).read_text(encoding="utf-8")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
