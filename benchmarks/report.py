"""Write the results: JSON (everything), a markdown report and a latency plot, each atomically.

Files are written to a temporary name beside the target and renamed into place, so a reader never sees
half a report and an interrupted run leaves the previous one intact.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

PLOT_DPI = 120
PLOT_SIZE_PER_PANEL = (4.2, 3.6)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    tmp.write_bytes(data)
    tmp.replace(path)


def write_json(path: Path, results: dict[str, Any]) -> None:
    write_atomic(path, (json.dumps(results, indent=2) + "\n").encode("utf-8"))


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def _num(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "/").replace("\n", " ")


def targets_lines(results: dict[str, Any]) -> list[str]:
    """The targets table: one row per target, the informational row beside target 1, then the notes."""
    targets = results["targets"]
    lines = [
        "## Targets (issue 6: bert-base, 2 threads)",
        "",
        f"Fast path: `{targets['fast_path_variant']}`; exact path: `{targets['exact_path_variant']}`. Latency is the "
        f"{targets['latency_statistic']}." + (" Quick run: few timed calls, small corpus." if targets["quick"] else ""),
        "",
    ]
    if targets["out_of_scope"]:
        lines += [f"**Not judged:** {targets['out_of_scope']}. The figures are listed for reference.", ""]
    lines += ["| # | target | required | measured | status |", "|---|---|---|---|---|"]
    notes: list[str] = []
    for row in targets["rows"]:
        status = row["status"] if row["status"] != "not met" else "**not met**"
        lines.append(
            f"| {row['target']} | {_cell(row['name'])} | {_cell(row['required'])} | "
            f"{_cell(row['measured'])} | {status} |"
        )
        notes += [f"target {row['target']}: {note}" for note in row["notes"]]
        for extra in [x for x in targets["informational"] if x["beside_target"] == row["target"]]:
            lines.append(
                f"| {extra['target']} | {_cell(extra['name'])} | {_cell(extra['required'])} | "
                f"{_cell(extra['measured'])} | informational (against target {row['target']}: "
                f"{extra['judged_against_target']}) |"
            )
            notes += [f"{extra['name']}: {note}" for note in extra["notes"]]
    lines += [""] + [f"- {note}" for note in notes] + ([""] if notes else [])
    return lines


def throughput_lines(results: dict[str, Any]) -> list[str]:
    """The corpus-throughput section: its targets, then one table per export (peer first)."""
    sections = results.get("throughput") or []
    if not sections:
        return []
    judged = results["throughput_targets"]
    lines = [
        "",
        "## Corpus throughput: bertonnx against sentence-transformers",
        "",
        "The mixed corpus (`benchmarks.corpus.build_mixed_corpus`: seeded texts of 3–400 words, 70 % under 30), "
        "mean pooling, truncation at 512 tokens, the same thread budget, each runner in its own fresh process. "
        "The peer is sentence-transformers on torch (batch 32, its own length sorting) loading the export's own "
        'PyTorch weights; bertonnx runs `BertOnnx(dir, variant).embed(texts, "mean", truncation=True)` with '
        "its defaults. texts/s is the median of the timed passes; max abs and cosines compare each runner's "
        "vectors of the timed call with the peer's.",
        "",
    ]
    if judged["out_of_scope"]:
        lines += [f"**Not judged:** {judged['out_of_scope']}.", ""]
    lines += [f"Targets judged on `{judged['judged_on']}`:", "", "| # | target | required | measured | status |"]
    lines.append("|---|---|---|---|---|")
    notes = []
    for row in judged["rows"]:
        status = row["status"] if row["status"] != "not met" else "**not met**"
        lines.append(
            f"| {row['target']} | {_cell(row['name'])} | {_cell(row['required'])} | {_cell(row['measured'])} | "
            f"{status} |"
        )
        notes += [f"target {row['target']}: {note}" for note in row["notes"]]
    lines += [""] + [f"- {note}" for note in notes]
    for section in sections:
        lines += [
            "",
            f"### `{section['directory']}`: {section['texts']} texts, {section['tokens']} tokens, "
            f"{section['passes']} timed pass(es), peer {section['peer']['runner']} {section['peer']['version']}",
            "",
            "| runner | texts/s | passes texts/s | tokens/s | vs peer | max abs vs peer | min / mean cosine |",
            "|---|---:|---|---:|---:|---:|---|",
        ]
        for row in section["rows"]:
            passes = ", ".join(f"{v:.1f}" for v in row["texts_per_s_passes"])
            lines.append(
                f"| {row['runner']} | {row['texts_per_s']:.1f} | {passes} | {_num(row['tokens_per_s'], 0)} | "
                f"{row['vs_peer']:.2f}× | {row['max_abs']:.2g} | {row['min_cosine']:.5f} / {row['mean_cosine']:.5f} |"
            )
    return lines


def _header(results: dict[str, Any]) -> list[str]:
    """The report's title and the run's facts: model, machine, threads, versions, date and command."""
    machine, model, threads = results["machine"], results["model"], results["threads"]
    versions = ", ".join(f"{k} {v}" for k, v in results["versions"].items() if v)
    isa = ", ".join(flag for flag, present in machine["isa_flags"].items() if present) or "none of interest"
    return [
        "# bertonnx benchmarks",
        "",
        f"- model: `{model['directory']}` ({model['config']['num_hidden_layers']} layers, hidden "
        f"{model['config']['hidden_size']}), weights: {model['weights_kind']}"
        + (" — **random weights: latency is real, outputs are not**" if model["random_weights"] else ""),
        f"- machine: {machine['cpu_model']}, {machine['physical_cores']} physical cores, ISA: {isa}",
        f"- threads: {threads['intra_op']} intra-op (onnxruntime) / torch.set_num_threads({threads['torch']}), "
        f"inter-op {threads['inter_op']}; each runner in its own fresh process, one after another",
        f"- versions: {versions}",
        f"- date: {results['date']}; command: `{results['command']}`",
    ]


def throughput_markdown(results: dict[str, Any]) -> str:
    """The report of a ``--sections throughput`` run: the run's facts and the corpus-throughput section."""
    return "\n".join([*_header(results), *throughput_lines(results)]) + "\n"


def markdown(results: dict[str, Any]) -> str:
    """The human-readable report of one run."""
    lines = [
        *_header(results),
        f"- timing: {results['settings']['plan']} (p50 etc. in ms per `session.run` / forward on pre-built "
        "int64 arrays, no padding)",
        "",
        "![p50 latency vs sequence length per runner, log scale](latency.png)",
        "",
        *targets_lines(results),
        "## Correctness (checked before timing, against PyTorch fp32)",
        "",
        "| runner | correct | figures |",
        "|---|---|---|",
    ]
    for name, runner in results["runners"].items():
        figures = runner.get("figures") or {}
        shown = ", ".join(
            f"{k} {v:.3g}" if k.endswith("_max_abs") else f"{k} {v:.5f}"
            for k, v in sorted(figures.items())
            if k.endswith(("_max_abs", "_min_cosine"))
        )
        lines.append(
            f"| {name} | {'yes' if runner['correct'] else '**NO**: ' + '; '.join(runner['breaches'])} | {shown} |"
        )
    lines += [
        "",
        "## Latency grid",
        "",
        "| runner | batch | seq | min | p50 | p90 | p99 | mean | seq/s | tokens/s | GFLOP/s | % of peak |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in results["grid"]:
        if not row["valid"]:
            lines.append(f"| {row['runner']} | {row['batch']} | {row['seq']} | failed correctness: not timed |||||||||")
            continue
        lines.append(
            f"| {row['runner']} | {row['batch']} | {row['seq']} | {_ms(row['min_ms'])} | {_ms(row['p50_ms'])} | "
            f"{_ms(row['p90_ms'])} | {_ms(row['p99_ms'])} | {_ms(row['mean_ms'])} | {_num(row['sequences_per_s'])} | "
            f"{_num(row['tokens_per_s'], 0)} | {_num(row['gflops'])} | "
            f"{_num(100 * row['peak_fraction'])}% ({row['peak_kind']}) |"
        )
    summary = results["summary_b1_t128"]
    lines += ["", "## Batch 1 × 128 tokens, p50", ""]
    if summary:
        lines += [
            f"Each runner timed in {results['settings']['repeats']} fresh process(es), one after another: the grid's "
            "process, then processes timing this shape alone. p50 is the median of the per-process p50s (the grid "
            "above shows the grid process's).",
            "",
            "| runner | p50 ms | per-process p50s ms | speed-up over torch |",
            "|---|---:|---|---:|",
        ]
        lines += [
            f"| {s['runner']} | {_ms(s['p50_ms'])} | {', '.join(_ms(v) for v in s['process_p50_ms'])} | "
            f"{_num(s['speedup_vs_torch'], 2)}× |"
            for s in summary
        ]
    else:
        lines.append("1×128 is not in this run's grid.")
    lines += [
        "",
        "## Runtime overhead (batch 1, one single text)",
        "",
        "End to end `BertOnnx(...)([text])` (tokenize, batch, run, post-process) against bare `session.run` on "
        "the same arrays, timed in alternating rounds (one call of each, order swapped every round); the overhead "
        "is the median of the per-round differences, so a change in the machine's speed between calls cancels.",
        "",
        "| runner | tokens | end-to-end p50 ms | session.run p50 ms | overhead ms | % of end-to-end |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for o in results["overhead"]:
        lines.append(
            f"| {o['runner']} | {o['tokens']} | {o['end_to_end']['p50_ms']:.3f} | {o['session_run']['p50_ms']:.3f} | "
            f"{o['overhead_ms']:.3f} | {o['overhead_pct']:.1f}% |"
        )
    corpus = results["corpus"]
    lines += [
        "",
        "## Variable-length corpus: length-sorted vs input-order batching",
        "",
        f"{corpus['size']} generated inputs (half single texts, half pairs; seed {corpus['seed']}), "
        f"batch size {corpus['batch_size']}, `hidden_states=False`.",
        "",
        "| runner | tokens min/mean/max | sorted inputs/s | naive inputs/s | speed-up |",
        "|---|---|---:|---:|---:|",
    ]
    for c in corpus["results"]:
        t = c["token_lengths"]
        lines.append(
            f"| {c['runner']} | {t['min']}/{t['mean']:.0f}/{t['max']} | {c['sorted_inputs_per_s']:.1f} | "
            f"{c['naive_inputs_per_s']:.1f} | {c['speedup']:.2f}× |"
        )
    lines += throughput_lines(results)
    lines += [
        "",
        "## Cold start (fresh process: import, load, one result)",
        "",
        "| runner | wall s | import s | load s | first result s | peak RSS MB | file | file MB | RSS / file |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for c in results["cold_start"]:
        lines.append(
            f"| {c['runner']} | {c['wall_s']:.2f} | {c['import_s']:.2f} | {c['load_s']:.2f} | "
            f"{c['first_result_s']:.3f} | "
            f"{c['peak_rss_mb']:.0f} | {c['file']} | {c['file_mb']:.1f} | {c['rss_per_file_mb']:.2f} |"
        )
    real = results.get("real_weights")
    if real is not None:
        lines += [
            "",
            "## Accuracy on real weights (against PyTorch fp32)",
            "",
            f"`{real['directory']}` (reference {real['reference']['model']}), the export gate's cases "
            f"({real['sequences']} sequences). Mean-pooled: the mean of `last_hidden_state` over valid tokens.",
            "",
            "| variant | pooler min cosine | mean-pooled min cosine | NSP argmax agreement | NSP probability max abs |",
            "|---|---:|---:|---:|---:|",
        ]
        for name, f in real["figures"].items():
            lines.append(
                f"| {name} | {f['pooler_output_min_cosine']:.5f} | {f['mean_pooled_min_cosine']:.5f} | "
                f"{f['nsp_argmax_agreement']:.3f} | {f['nsp_probability_max_abs']:.4f} |"
            )
    roof = results["roofline"]
    lines += [
        "",
        "## Roofline",
        "",
        f"Square {roof['size']}×{roof['size']} GEMM, {roof['threads']} threads, best run: fp32 "
        f"{roof['fp32_gflops']:.0f} GFLOP/s (onnxruntime MatMul {roof['onnxruntime_fp32']['gflops']:.0f}, numpy "
        f"{roof['numpy_fp32']['gflops']:.0f}); int8 {roof['int8_gops']:.0f} GOP/s (onnxruntime MatMulInteger u8×s8)"
        + (
            f"; bf16 {roof['bf16_gflops']:.0f} GFLOP/s (OpenVINO MatMul, bf16 hint). "
            if roof.get("bf16_gflops")
            else ". "
        )
        + "The grid's GFLOP/s count the encoder's matrix products (see `benchmarks/grid.py:bert_flops`) over the p50; "
        "fp32, optimized and torch are compared with the fp32 peak, int8 with the int8 peak, bf16 with the bf16 peak.",
        "",
    ]
    return "\n".join(lines)


def plot(path: Path, results: dict[str, Any]) -> None:
    """Latency p50 against sequence length, one panel per batch size, one line per runner (log y)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results["grid"] if r["valid"]]
    batches = sorted({r["batch"] for r in results["grid"]})
    fig, axes = plt.subplots(
        1, len(batches), figsize=(PLOT_SIZE_PER_PANEL[0] * len(batches), PLOT_SIZE_PER_PANEL[1]), squeeze=False
    )
    runners = list(dict.fromkeys(r["runner"] for r in rows))
    for ax, batch in zip(axes[0], batches, strict=True):
        for runner in runners:
            points = sorted((r["seq"], r["p50_ms"]) for r in rows if r["runner"] == runner and r["batch"] == batch)
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=runner)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"batch {batch}")
        ax.set_xlabel("sequence length (tokens)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("p50 latency (ms)")
    axes[0][-1].legend(fontsize="small")
    fig.suptitle(f"{Path(results['model']['directory']).name}: latency p50, {results['threads']['intra_op']} threads")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=PLOT_DPI)
    plt.close(fig)
    write_atomic(path, buffer.getvalue())
