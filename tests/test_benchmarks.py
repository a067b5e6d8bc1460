"""The benchmark suite end to end on the tiny export: every section present, every runner checked.

No timing assertions: the numbers depend on the machine. A broken variant must be marked failed and
never reported with valid timings.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bertonnx.manifest import MANIFEST_FILE

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("runners", "grid", "summary_b1_t128", "overhead", "corpus", "cold_start", "roofline", "machine", "versions")
EXIT_INCORRECT = 3


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args], capture_output=True, text=True, cwd=ROOT, timeout=1800
    )


def load_results(out: Path) -> dict[str, Any]:
    results: dict[str, Any] = json.loads((out / "results.json").read_text())
    return results


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
    corpus = results["corpus"]
    assert {c["runner"] for c in corpus["results"]} == variants
    for c in corpus["results"]:
        assert c["inputs"] == corpus["size"]
        assert 8 <= c["token_lengths"]["min"] <= c["token_lengths"]["max"] <= 256
        assert c["sorted_inputs_per_s"] > 0
        assert c["naive_inputs_per_s"] > 0
        assert c["speedup"] > 0
    assert {c["runner"] for c in results["cold_start"]} == runners
    for c in results["cold_start"]:
        assert c["wall_s"] > 0
        assert c["peak_rss_mb"] > 0
        assert c["file_mb"] > 0
        assert c["rss_per_file_mb"] > 0
    roof = results["roofline"]
    assert roof["fp32_gflops"] > 0
    assert roof["int8_gops"] > 0
    assert (out / "results.md").read_text().startswith("# bertonnx benchmarks")
    assert (out / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_quick_run_on_tiny_export(tiny_export: Path, tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    md = tmp_path / "RESULTS.md"
    proc = run_bench(
        str(tiny_export), "--quick", "--out", str(out), "--reference", str(tiny_checkpoint), "--results-md", str(md)
    )
    assert proc.returncode == 0, proc.stderr
    assert "[bench] torch 1x16: p50" in proc.stderr
    results = load_results(out)
    check_structure(results, out, {"torch", "fp32", "optimized", "int8"})
    assert md.read_text() == (out / "results.md").read_text()
    assert {s["runner"] for s in results["summary_b1_t128"]} == {"torch", "fp32", "optimized", "int8"}
    assert results["corpus"]["size"] == 200


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


def test_bad_options_are_refused_by_message(tiny_export: Path, tmp_path: Path) -> None:
    proc = run_bench(str(tiny_export), "--runners", "fp16", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert "expected a comma-separated subset of torch, fp32, optimized, int8" in proc.stderr
    proc = run_bench(str(tiny_export), "--seq", "16,1024", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert "exceeds the model's 512 positions" in proc.stderr


def test_bench_is_dispatched_by_the_bertonnx_command(tiny_export: Path, tmp_path: Path) -> None:
    from bertonnx.cli import main

    assert main(["bench", str(tiny_export), "--batch", "0", "--out", str(tmp_path)]) == 2


@pytest.mark.slow
def test_quick_run_on_bert_base(bert_base_export: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_bench(str(bert_base_export), "--quick", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    check_structure(load_results(out), out, {"torch", "fp32", "optimized", "int8"})
