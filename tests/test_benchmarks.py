"""The benchmark suite end to end on the tiny export: every section present, every runner checked.

No timing assertions: the numbers depend on the machine. A broken variant must be marked failed and
never reported with valid timings.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bertonnx.manifest import MANIFEST_FILE, read_manifest
from bertonnx_benchmarks import targets
from bertonnx_benchmarks.cli import build_parser
from bertonnx_benchmarks.cli import main as bench_main
from bertonnx_benchmarks.grid import TimingPlan, measure_paired
from bertonnx_benchmarks.throughput import PEER_RUNNER, QUICK_TEXTS
from bertonnx_export.gate import GATE_INPUTS, PADDED_BATCH

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = (
    "runners",
    "grid",
    "summary_b1_t128",
    "overhead",
    "corpus",
    "cold_start",
    "roofline",
    "machine",
    "versions",
    "targets",
    "throughput",
    "throughput_targets",
)
EXIT_INCORRECT = 3


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bertonnx_benchmarks", *args], capture_output=True, text=True, cwd=ROOT, timeout=1800
    )


def load_results(out: Path) -> dict[str, Any]:
    results: dict[str, Any] = json.loads((out / "results.json").read_text())
    return results


def all_runners(export_dir: Path) -> set[str]:
    return {"torch", *read_manifest(export_dir).variants}


def check_structure(results: dict[str, Any], out: Path, runners: set[str]) -> None:
    for section in SECTIONS:
        assert section in results, section
    assert set(results["runners"]) == runners
    assert all(info["correct"] for info in results["runners"].values()), results["runners"]
    assert results["threads"]["intra_op"] >= 1
    assert results["machine"]["cpu_model"]
    assert set(results["machine"]["isa_flags"]) >= {"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile"}
    for name in ("onnxruntime", "torch", "transformers", "numpy", "bertonnx", "python"):
        assert results["versions"][name], name
    assert results["command"]
    assert results["date"]
    shapes = {tuple(s) for s in results["settings"]["shapes"]}
    assert {(r["runner"], r["batch"], r["seq"]) for r in results["grid"]} == {
        (name, b, s) for name in runners for b, s in shapes
    }
    for row in results["grid"]:
        assert row["correct"]
        assert row["valid"]
        assert 0 < row["min_ms"] <= row["p50_ms"] <= row["p90_ms"] <= row["p99_ms"], row
        for key in ("mean_ms", "sequences_per_s", "tokens_per_s", "gflops", "peak_fraction"):
            assert row[key] > 0, (key, row)
    variants = runners - {"torch"}
    assert {o["runner"] for o in results["overhead"]} == variants
    for o in results["overhead"]:
        assert o["tokens"] == 16
        assert o["end_to_end"]["p50_ms"] > 0
        assert o["session_run"]["p50_ms"] > 0
        assert o["end_to_end"]["runs"] == o["session_run"]["runs"]  # paired rounds: one call of each per round
        assert o["overhead_pct"] == pytest.approx(100 * o["overhead_ms"] / o["end_to_end"]["p50_ms"])
    corpus = results["corpus"]
    assert {c["runner"] for c in corpus["results"]} == variants
    for c in corpus["results"]:
        assert c["inputs"] == corpus["size"]
        assert 8 <= c["token_lengths"]["min"] <= c["token_lengths"]["max"] <= 256
        assert c["sorted_inputs_per_s"] > 0
        assert c["naive_inputs_per_s"] > 0
        assert c["speedup"] > 0
    assert {c["runner"] for c in results["cold_start"]} == runners
    manifest = read_manifest(results["model"]["directory"])
    for c in results["cold_start"]:
        assert c["wall_s"] > 0
        assert c["peak_rss_mb"] > 0
        assert c["rss_per_file_mb"] > 0
        if c["runner"] != "torch":  # the size is the sum of the variant's files as the manifest lists them
            files = manifest.variant_files(c["runner"])
            assert c["file"] == " + ".join(files)
            assert c["file_mb"] == pytest.approx(sum(manifest.files[f].size for f in files) / 1e6)
    check_targets(results, out)
    check_throughput(results, out, variants)
    roof = results["roofline"]
    assert roof["fp32_gflops"] > 0
    assert roof["int8_gops"] > 0
    assert (out / "results.md").read_text().startswith("# bertonnx benchmarks")
    assert (out / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def check_throughput(results: dict[str, Any], out: Path, variants: set[str]) -> None:
    """The corpus-throughput section: the peer and every variant, timed and checked against the peer."""
    section = results["throughput"][0]  # then the --real-weights export's section, when there is one
    assert len(results["throughput"]) == 1 + (results["real_weights"] is not None)
    assert section["directory"] == results["model"]["directory"]
    assert section["texts"] == QUICK_TEXTS
    assert section["tokens"] > section["texts"]
    rows = {row["runner"]: row for row in section["rows"]}
    assert set(rows) == {PEER_RUNNER, *variants}
    for row in rows.values():
        assert row["texts_per_s"] > 0
        assert row["tokens_per_s"] == pytest.approx(row["texts_per_s"] * section["tokens"] / section["texts"])
        assert row["vs_peer"] == pytest.approx(row["texts_per_s"] / rows[PEER_RUNNER]["texts_per_s"])
    for exact in {"fp32", "optimized"} & variants:
        assert rows[exact]["max_abs"] <= 1e-4, rows[exact]  # what was timed gave the peer's vectors
    if "bf16" in variants:
        assert rows["bf16"]["min_cosine"] >= 0.999, rows["bf16"]
    judged = results["throughput_targets"]
    assert [row["target"] for row in judged["rows"]] == [1, 2, 3]
    assert all(row["status"] in targets.STATUSES for row in judged["rows"]), judged
    assert "## Corpus throughput" in (out / "results.md").read_text()


def check_targets(results: dict[str, Any], out: Path) -> None:
    """Five target rows with known statuses, the int8 row beside target 1, and the table in the markdown."""
    section = results["targets"]
    rows = section["rows"]
    assert [row["target"] for row in rows] == [1, 2, 3, 4, 5]
    assert all(row["status"] in targets.STATUSES for row in rows), rows
    assert section["fast_path_variant"] == targets.FAST_PATH_VARIANT
    (info,) = section["informational"]
    assert (info["beside_target"], info["status"]) == (1, "informational")
    assert info["measured"].startswith(f"{targets.FASTEST_LOSSY_VARIANT} B1×T128 p50")
    if targets.FAST_PATH_VARIANT not in results["model"]["variants"]:
        assert "the export has no bf16 variant" in rows[0]["measured"]
        assert rows[0]["status"] == "not measured"
    text = (out / "results.md").read_text()
    assert "## Targets" in text
    for label in ("1", "1 (info)", "2", "3", "4", "5"):
        assert f"\n| {label} | " in text, label


def test_quick_run_on_tiny_export(tiny_export: Path, tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    md = tmp_path / "RESULTS.md"
    proc = run_bench(
        str(tiny_export),
        "--quick",
        "--out",
        str(out),
        "--reference",
        str(tiny_checkpoint),
        "--results-md",
        str(md),
        "--repeats",
        "2",
        "--real-weights",
        str(tiny_export),
    )
    assert proc.returncode == 0, proc.stderr
    assert "[bench] torch 1x16: p50" in proc.stderr
    results = load_results(out)
    runners = all_runners(tiny_export)
    check_structure(results, out, runners)
    assert md.read_text() == (out / "results.md").read_text()
    assert results["corpus"]["size"] == 200
    # --repeats 2: B1×T128 timed in two processes per runner, the first being the grid's; median reported.
    assert results["settings"]["repeats"] == 2
    summary = {s["runner"]: s for s in results["summary_b1_t128"]}
    assert set(summary) == runners
    grid = {(r["runner"], r["batch"], r["seq"]): r for r in results["grid"]}
    for name, row in summary.items():
        assert row["processes"] == len(row["process_p50_ms"]) == 2, row
        assert all(p50 > 0 for p50 in row["process_p50_ms"])
        assert row["process_p50_ms"][0] == grid[(name, 1, 128)]["p50_ms"]
        assert row["p50_ms"] == statistics.median(row["process_p50_ms"])
    assert proc.stderr.count("[bench] repeat 2/2: ") == len(runners)
    # The tiny model is not bert-base: every target is listed but none is judged.
    section = results["targets"]
    assert section["judged"] is False
    assert "stated for bert-base" in section["out_of_scope"]
    assert {row["status"] for row in section["rows"]} == {"not measured"}
    assert "Not judged:" in md.read_text()
    # --real-weights: the same directory as the benchmarked one, on all the gate's cases, of which the check's
    # two cases are a subset: the worst cosines over the superset can only be lower or equal.
    real = results["real_weights"]
    compared = [v for v in (targets.FAST_PATH_VARIANT, "int8") if v in runners]
    assert sorted(real["figures"]) == sorted(compared)
    assert real["sequences"] == len(GATE_INPUTS) + len(PADDED_BATCH)
    for variant in compared:
        figures, checked = real["figures"][variant], results["runners"][variant]["figures"]
        for key in ("pooler_output_min_cosine", "mean_pooled_min_cosine"):
            assert figures[key] <= checked[key] + 1e-6, (variant, key)
        assert 0.9 < figures["mean_pooled_min_cosine"] <= 1 + 1e-9
        assert 0.0 <= figures["nsp_argmax_agreement"] <= 1.0
    assert "real-weights accuracy was not measured" not in section["rows"][0]["measured"]
    assert "## Accuracy on real weights" in md.read_text()


def test_throughput_section_alone(tiny_export: Path, tmp_path: Path) -> None:
    out, md = tmp_path / "out", tmp_path / "THROUGHPUT.md"
    proc = run_bench(
        str(tiny_export), "--sections", "throughput", "--runners", "fp32", "--throughput-texts", "40",
        "--out", str(out), "--results-md", str(md),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = load_results(out)
    assert "grid" not in results
    assert "targets" not in results
    (section,) = results["throughput"]
    assert section["texts"] == 40
    assert section["passes"] == 1
    rows = {row["runner"]: row for row in section["rows"]}
    assert set(rows) == {"sentence-transformers", "fp32"}
    assert rows["fp32"]["max_abs"] <= 1e-4
    assert rows["fp32"]["texts_per_s"] > 0
    text = md.read_text()
    assert text == (out / "results.md").read_text()
    assert "## Corpus throughput" in text
    assert "## Latency grid" not in text
    assert not (out / "latency.png").exists()
    judged = {row["target"]: row["status"] for row in results["throughput_targets"]["rows"]}
    assert judged[3] == "not measured"  # the overhead target needs the latency grid of a full run


def _break_pooler(export_dir: Path, target: Path) -> Path:
    """Copy the export and turn the fp32 pooler's Tanh into a Sigmoid, with the manifest updated to match."""
    import onnx

    shutil.copytree(export_dir, target)
    path = target / "model.onnx"
    model = onnx.load(str(path))
    tanh = [node for node in model.graph.node if node.op_type == "Tanh"]
    assert tanh, "expected the pooler's Tanh in the fp32 graph"
    for node in tanh:
        node.op_type = "Sigmoid"
    onnx.save(model, str(path))
    manifest = json.loads((target / MANIFEST_FILE).read_text())
    manifest["files"]["model.onnx"].update(
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(), size=path.stat().st_size
    )
    (target / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2))
    return target


def test_wrong_variant_is_marked_failed(tiny_export: Path, tiny_checkpoint: Path, tmp_path: Path) -> None:
    broken = _break_pooler(tiny_export, tmp_path / "broken")
    out = tmp_path / "out"
    proc = run_bench(
        str(broken), "--quick", "--out", str(out), "--reference", str(tiny_checkpoint), "--runners", "torch,fp32,int8"
    )
    assert proc.returncode == EXIT_INCORRECT, proc.stderr
    assert "fp32 failed the correctness check" in proc.stderr
    results = load_results(out)
    fp32 = results["runners"]["fp32"]
    assert fp32["correct"] is False
    assert fp32["figures"]["pooler_output_max_abs"] > 1e-4
    assert any("pooler_output" in breach for breach in fp32["breaches"])
    assert results["runners"]["torch"]["correct"]
    assert results["runners"]["int8"]["correct"]
    rows = [r for r in results["grid"] if r["runner"] == "fp32"]
    assert rows
    assert all(r["correct"] is False and r["valid"] is False and r["p50_ms"] is None for r in rows)
    assert all(r["valid"] and r["p50_ms"] > 0 for r in results["grid"] if r["runner"] != "fp32")
    assert "fp32" not in {o["runner"] for o in results["overhead"]}
    assert "fp32" not in {c["runner"] for c in results["cold_start"]}
    assert "fp32" not in {s["runner"] for s in results["summary_b1_t128"]}
    assert "failed correctness: not timed" in (out / "results.md").read_text()
    exact = results["targets"]["rows"][1]
    assert "fp32 B1×T128 p50: not measured (fp32 failed the correctness check)" in exact["measured"]
    # The check measured the breach: target 2 would be not met on bert-base, whatever the latency.
    assert exact["criteria"][1]["value"] == fp32["figures"]["pooler_output_max_abs"]
    assert exact["criteria"][1]["status"] == "not met"
    assert (
        "real-weights accuracy was not measured in this run; pass --real-weights DIR"
        in (results["targets"]["rows"][0]["measured"])
    )
    assert results["real_weights"] is None


def test_bad_options_are_refused_by_message(tiny_export: Path, tmp_path: Path) -> None:
    proc = run_bench(str(tiny_export), "--runners", "fp16", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert "expected a comma-separated subset of torch, fp32, optimized, int8" in proc.stderr
    proc = run_bench(str(tiny_export), "--seq", "16,1024", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert "exceeds the model's 512 positions" in proc.stderr


def test_repeats_default_and_refusals(tiny_export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bertonnx_benchmarks.cli import _settings

    assert _settings(build_parser().parse_args([str(tiny_export)]), 512)["repeats"] == 3
    assert _settings(build_parser().parse_args([str(tiny_export), "--quick"]), 512)["repeats"] == 1
    assert bench_main([str(tiny_export), "--repeats", "0", "--out", str(tmp_path)]) == 2
    assert "--repeats must be >= 1, got 0" in capsys.readouterr().err
    random = tmp_path / "random"
    shutil.copytree(tiny_export, random)
    manifest = json.loads((random / MANIFEST_FILE).read_text())
    manifest["weights"]["kind"] = "random"
    (random / MANIFEST_FILE).write_text(json.dumps(manifest))
    assert bench_main([str(tiny_export), "--real-weights", str(random), "--out", str(tmp_path)]) == 2
    assert "--real-weights expects an export of pretrained weights" in capsys.readouterr().err


def test_bench_is_dispatched_by_the_bertonnx_command(tiny_export: Path, tmp_path: Path) -> None:
    from bertonnx.cli import main

    assert main(["bench", str(tiny_export), "--batch", "0", "--out", str(tmp_path)]) == 2


@pytest.mark.slow
def test_quick_run_on_bert_base(bert_base_export: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_bench(str(bert_base_export), "--quick", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    results = load_results(out)
    check_structure(results, out, all_runners(bert_base_export))
    assert results["targets"]["judged"] is (results["threads"]["budget"] == targets.TARGET_THREADS)


# -- targets: judged from a results dict, no processes ------------------------------------------------

BERT_BASE_CONFIG = {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072}
GOOD_ACCURACY = {"pooler_output_min_cosine": 0.9999, "mean_pooled_min_cosine": 0.9998, "nsp_argmax_agreement": 1.0}
EXACT_FIGURES = {"last_hidden_state_max_abs": 4e-6, "pooler_output_max_abs": 2e-6, "nsp_logits_max_abs": 5e-7}


def bert_base_results() -> dict[str, Any]:
    """A bert-base run at 2 threads that meets every target (figures made up, keys as the bench writes them)."""
    variants = ["fp32", "optimized", "int8", "bf16"]
    p50 = {"torch": 150.0, "fp32": 110.0, "optimized": 118.0, "int8": 42.0, "bf16": 35.0}
    return {
        "model": {
            "config": dict(BERT_BASE_CONFIG),
            "variants": variants,
            "weights_kind": "random",
            "random_weights": True,
        },
        "threads": {"budget": 2},
        "settings": {"quick": False, "repeats": 3},
        "runners": {
            "torch": {"correct": True, "figures": {}},
            "fp32": {"correct": True, "figures": {**GOOD_ACCURACY, **EXACT_FIGURES}},
            "optimized": {"correct": True, "figures": {**GOOD_ACCURACY, **EXACT_FIGURES}},
            "int8": {"correct": True, "figures": {**GOOD_ACCURACY, "pooler_output_min_cosine": 0.9995}},
            "bf16": {"correct": True, "figures": dict(GOOD_ACCURACY)},
        },
        "summary_b1_t128": [
            {"runner": name, "p50_ms": value, "process_p50_ms": [value] * 3, "processes": 3}
            for name, value in p50.items()
        ],
        "overhead": [{"runner": name, "overhead_pct": 3.0} for name in variants],
        "corpus": {"results": [{"runner": name, "speedup": 2.4} for name in variants]},
        "cold_start": [
            {
                "runner": name,
                "wall_s": wall,
                "import_s": 0.1,
                "load_s": wall - 0.3,
                "first_result_s": 0.1,
                "rss_per_file_mb": ratio,
            }
            for name, wall, ratio in (("fp32", 0.72, 0.98), ("int8", 0.36, 0.95), ("bf16", 0.55, 1.1))
        ],
        "real_weights": {
            "directory": "/models/minilm",
            "reference": {"model": "/ckpt/minilm"},
            "cases": ["module pair", "padded batch"],
            "sequences": 7,
            "random_heads": ["nsp"],
            "figures": {"bf16": dict(GOOD_ACCURACY), "int8": {**GOOD_ACCURACY, "pooler_output_min_cosine": 0.994}},
        },
    }


def drop_runner(results: dict[str, Any], runner: str) -> dict[str, Any]:
    """``results`` as the bench writes them when ``runner`` was not timed: no rows of it anywhere."""
    for section in ("summary_b1_t128", "overhead", "cold_start"):
        results[section] = [row for row in results[section] if row["runner"] != runner]
    results["corpus"]["results"] = [row for row in results["corpus"]["results"] if row["runner"] != runner]
    del results["runners"][runner]
    return results


def statuses(results: dict[str, Any]) -> list[str]:
    return [row["status"] for row in targets.evaluate(results)["rows"]]


def test_targets_all_met() -> None:
    section = targets.evaluate(bert_base_results())
    assert section["judged"] is True
    assert [row["status"] for row in section["rows"]] == ["met"] * 5
    (info,) = section["informational"]
    # int8: 42 ms and a real-weights pooler cosine of 0.994 would not meet target 1.
    assert info["judged_against_target"] == "not met"
    assert "int8 B1×T128 p50 (median of 3 processes) 42.0 ms > 40 ms" in info["measured"]
    assert "real weights: int8 pooler min cosine 0.99400 < 0.999" in info["measured"]
    assert any("seeds its nsp head(s) at random" in note for note in section["rows"][0]["notes"])


MET, NOT_MET, UNMEASURED = "met", "not met", "not measured"


@pytest.mark.parametrize(
    ("change", "expected", "target", "text"),
    [
        (lambda r: r["summary_b1_t128"][4].update(p50_ms=41.0), NOT_MET, 1, "bf16 B1×T128 p50 (median"),
        (lambda r: r["real_weights"]["figures"]["bf16"].update(nsp_argmax_agreement=6 / 7), NOT_MET, 1, "0.857 <"),
        (lambda r: r.update(real_weights=None), UNMEASURED, 1, "pass --real-weights DIR"),
        (lambda r: r["summary_b1_t128"][1].update(p50_ms=116.0), NOT_MET, 2, "116.0 ms > 115 ms"),
        (lambda r: r["runners"]["fp32"]["figures"].update(pooler_output_max_abs=2e-4), NOT_MET, 2, "2.00e-04 >"),
        (lambda r: r["corpus"]["results"][2].update(speedup=1.9), NOT_MET, 3, "int8 sorted / naive 1.90× < 2×"),
        (lambda r: r["corpus"].update(results=[]), UNMEASURED, 3, "nothing measured"),
        (lambda r: r["overhead"][0].update(overhead_pct=5.8), NOT_MET, 4, "fp32 overhead 5.80% > 5%"),
        (
            lambda r: r["cold_start"][2].update(load_s=0.41),
            NOT_MET,
            5,
            "first result) (spawn to exit 0.55 s) 0.61 s > 0.6 s",
        ),
        (lambda r: r["cold_start"][0].update(rss_per_file_mb=1.3), NOT_MET, 5, "fp32 peak RSS / file size 1.30 >"),
    ],
)
def test_each_target_fails_or_goes_unmeasured_on_its_own(change: Any, expected: str, target: int, text: str) -> None:
    results = bert_base_results()
    change(results)
    row = targets.evaluate(results)["rows"][target - 1]
    assert text in row["measured"], row["measured"]
    assert statuses(results) == [expected if i == target else MET for i in range(1, 6)]


def test_a_runner_that_failed_its_check_leaves_its_targets_unmeasured() -> None:
    results = drop_runner(bert_base_results(), "bf16")
    results["runners"]["bf16"] = {"correct": False, "figures": {}}
    rows = targets.evaluate(results)["rows"]
    assert statuses(results) == [UNMEASURED, MET, MET, MET, UNMEASURED]
    assert "bf16 B1×T128 p50: not measured (bf16 failed the correctness check)" in rows[0]["measured"]
    assert (
        "bf16 cold start (import + load + first result), bf16 peak RSS / file size: not measured "
        "(bf16 failed the correctness check)" in (rows[4]["measured"])
    )


def test_a_breach_of_the_exact_path_is_not_met_even_when_it_was_not_timed() -> None:
    results = drop_runner(bert_base_results(), "fp32")
    results["runners"]["fp32"] = {"correct": False, "figures": {**EXACT_FIGURES, "pooler_output_max_abs": 0.03}}
    rows = targets.evaluate(results)["rows"]
    assert statuses(results) == [MET, NOT_MET, MET, MET, UNMEASURED]
    assert "fp32 B1×T128 p50: not measured (fp32 failed the correctness check)" in rows[1]["measured"]
    assert "3.00e-02 > 0.0001" in rows[1]["measured"]


def test_targets_without_the_fast_path_variant() -> None:
    results = drop_runner(bert_base_results(), "bf16")
    results["model"]["variants"].remove("bf16")
    del results["real_weights"]["figures"]["bf16"]
    rows = targets.evaluate(results)["rows"]
    assert statuses(results) == [UNMEASURED, MET, MET, MET, UNMEASURED]
    assert "bf16 B1×T128 p50: not measured (the export has no bf16 variant)" in rows[0]["measured"]
    assert "the export has no bf16 variant" in rows[4]["measured"]
    # A failing part outweighs a missing one.
    results["cold_start"][0]["load_s"] = 1.1
    assert statuses(results)[4] == NOT_MET


def test_targets_are_not_judged_off_bert_base_or_off_two_threads() -> None:
    for change in ({"threads": {"budget": 4}}, {"model": {**bert_base_results()["model"], "config": {}}}):
        results = copy.deepcopy(bert_base_results())
        results.update(change)
        results["model"]["config"] = results["model"]["config"] or {"num_hidden_layers": 2, "hidden_size": 32}
        section = targets.evaluate(results)
        assert section["judged"] is False
        assert [row["status"] for row in section["rows"]] == ["not measured"] * 5
        assert all(
            row["status_reason"].startswith("not judged: the targets are stated for bert-base")
            for row in section["rows"]
        )


def test_a_figure_at_its_limit_meets_it() -> None:
    assert targets.Criterion("p50", 40.0, 40.0, at_most=True).status == MET
    assert targets.Criterion("p50", 40.01, 40.0, at_most=True).status == NOT_MET
    assert targets.Criterion("cosine", 0.999, 0.999, at_most=False).status == MET
    assert targets.Criterion("cosine", 0.9989, 0.999, at_most=False).status == NOT_MET
    assert targets.Criterion("cosine", None, 0.999, at_most=False, missing="why").text() == "cosine: not measured (why)"


def test_paired_timing_alternates_and_swaps_the_order_each_round() -> None:
    calls: list[str] = []
    plan = TimingPlan(warmup=1, min_runs=4, min_time_s=0.0, max_runs=4)
    first, second = measure_paired(lambda: calls.append("a"), lambda: calls.append("b"), plan)
    assert len(first) == len(second) == 4
    assert calls == ["a", "b"] + ["a", "b", "b", "a"] * 2  # warm-up, then rounds with the order swapped


def test_long_inputs_benchmark_quick_runs_and_checks_its_states(tmp_path: Path) -> None:
    """``benchmarks.long --quick``: a tiny ModernBERT exported, onnxruntime and torch run at 512 and 2,048 tokens,
    their states checked against torch sdpa's; ``--out`` replaces only the file's ``## Measured`` section."""
    from bertonnx_benchmarks.long import run, write_section

    report = run(quick=True, runners=("onnxruntime fp32",))
    rows = [line for line in report.splitlines() if line.startswith("| 2048 |") or line.startswith("| 512 |")]
    assert [row.split(" | ")[1] for row in rows] == ["onnxruntime fp32", "torch sdpa"] * 2
    assert all(float(row.rstrip(" |").rsplit("| ", 1)[1]) <= 1e-4 for row in rows)  # max abs vs torch sdpa
    page = tmp_path / "LONG.md"
    intro = "# Long inputs\n\n`--out` replaces the `## Measured` section below.\n\nhow to run\n\n"
    page.write_text(intro + "## Measured\n\nold figures\n", encoding="utf-8")
    write_section(page, report)
    text = page.read_text(encoding="utf-8")
    assert text.startswith(intro + "## Measured (--quick")  # a mention of the heading in the text is kept
    assert "old figures" not in text
