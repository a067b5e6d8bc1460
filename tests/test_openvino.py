"""The ``bf16`` variant on OpenVINO: real bf16 where the CPU has it, same answers, threads, and its errors.

Accuracy against PyTorch on real and seeded weights is asserted in ``test_parity.py``; this file checks
the runtime side: that the variant loads through ``BertOnnx``, computes in bf16 on CPUs that can, agrees with
fp32 within bf16's error, is thread-safe, and fails clearly when OpenVINO or its files are missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bertonnx import BertOnnx, ModelDirectoryError, RuntimeOptions
from bertonnx.manifest import MANIFEST_FILE, OPENVINO_BACKEND, read_manifest

from .conftest import ROOT, run_torch_free
from .test_runtime import PAIR, PAIR_TOKENS, PAIR_TYPES, check_concurrent_calls_match_serial, mixed_inputs

#: bf16 keeps 8 bits of mantissa: per-vector cosines against fp32 stay far above this on the tiny model.
MIN_COSINE_VS_FP32 = 0.999
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")

#: Makes ``import openvino`` fail as if it were not installed (and ``importlib.util.find_spec`` say None).
BLOCK_OPENVINO = """
import sys
sys.modules["openvino"] = None
"""


def _cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").split()
    except OSError:
        return False
    return any(flag in flags for flag in BF16_CPU_FLAGS)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return np.sum(a64 * b64, -1) / (np.linalg.norm(a64, axis=-1) * np.linalg.norm(b64, axis=-1))


def _run_without_openvino(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCK_OPENVINO + code], capture_output=True, text=True, cwd=ROOT, timeout=600
    )


@pytest.fixture(scope="module")
def bf16(tiny_export: Path) -> BertOnnx:
    return BertOnnx(tiny_export, "bf16", threads=1)


def test_manifest_records_the_backend(tiny_export: Path) -> None:
    record = read_manifest(tiny_export).variants["bf16"]
    assert record["file"] == "model_bf16.xml"
    assert record["data_file"] == "model_bf16.bin"
    assert record["backend"] == OPENVINO_BACKEND
    assert record["precision"] == "bf16"
    assert record["parity"]["passed"] is True
    assert record["parity"]["pooler_output_min_cosine"] >= 0.999
    from bertonnx.info import describe

    backends = {name: v["backend"] for name, v in describe(read_manifest(tiny_export))["variants"].items()}
    assert backends == {"fp32": "onnxruntime", "optimized": "onnxruntime", "int8": "onnxruntime", "bf16": "openvino"}


def test_loads_through_bertonnx(bf16: BertOnnx) -> None:
    assert bf16.backend == OPENVINO_BACKEND
    assert "variant='bf16'" in repr(bf16)
    tokens = bf16.tokenize(*PAIR)
    assert tokens.tokens == PAIR_TOKENS
    assert tokens.type_ids == PAIR_TYPES
    out = bf16([PAIR[0]], [PAIR[1]])
    assert out.last_hidden_state.shape == (1, 11, 32)
    assert out.pooler_output.shape == (1, 32)
    assert out.nsp_logits.shape == (1, 2)
    assert out.last_hidden_state.dtype == np.float32


@pytest.mark.skipif(not _cpu_has_bf16(), reason="this CPU has no bf16 instructions; OpenVINO computes in f32")
def test_computes_in_bf16_where_the_cpu_can(tiny_export: Path, bf16: BertOnnx) -> None:
    assert bf16.precision == "bf16"
    fp32 = BertOnnx(tiny_export, threads=1)
    texts, pairs = mixed_inputs(4)
    difference = np.abs(bf16(texts, pairs).last_hidden_state - fp32(texts, pairs).last_hidden_state).max()
    assert difference > 1e-5, "bf16 gave fp32's exact answers: OpenVINO did not compute in bf16"


def test_agrees_with_fp32_in_callers_order(tiny_export: Path, bf16: BertOnnx) -> None:
    fp32 = BertOnnx(tiny_export, threads=1)
    texts, pairs = mixed_inputs(24, seed=2)
    got, want = bf16(texts, pairs, batch_size=5), fp32(texts, pairs, batch_size=5)
    assert got.lengths.tolist() == want.lengths.tolist()
    for i in range(len(texts)):
        assert _cosines(got.token_states(i), want.token_states(i)).min() >= MIN_COSINE_VS_FP32, i
        assert not got.last_hidden_state[i, got.lengths[i] :].any()  # padding is zero, not garbage
    assert _cosines(got.pooler_output, want.pooler_output).min() >= MIN_COSINE_VS_FP32
    np.testing.assert_allclose(bf16.embed(texts), fp32.embed(texts), atol=0.05, rtol=0)


def test_concurrent_calls_match_serial(bf16: BertOnnx) -> None:
    check_concurrent_calls_match_serial(bf16)


def test_threads_reach_openvino(tiny_export: Path) -> None:
    for threads in (1, 2):
        model = BertOnnx(tiny_export, "bf16", options=RuntimeOptions(threads=threads))
        assert model.session._compiled.get_property("INFERENCE_NUM_THREADS") == threads


def test_runs_with_torch_blocked(tiny_export: Path) -> None:
    out = run_torch_free(
        f"""
from bertonnx import BertOnnx
m = BertOnnx({str(tiny_export)!r}, "bf16")
r = m(["the weather is nice"], ["i agree with you"])
print(m.backend, r.last_hidden_state.shape, r.pooler_output.shape, 0 <= m.nsp(*{PAIR!r}) <= 1)
"""
    )
    assert "openvino (1, 11, 32) (1, 32) True" in out


def test_without_openvino_other_variants_still_load(tiny_export: Path) -> None:
    result = _run_without_openvino(
        f"""
import importlib, pkgutil, bertonnx
for info in pkgutil.walk_packages(bertonnx.__path__, "bertonnx."):
    importlib.import_module(info.name)
from bertonnx import BertOnnx
print(BertOnnx({str(tiny_export)!r}, "int8").embed("hello").shape)
try:
    BertOnnx({str(tiny_export)!r}, "bf16")
except ImportError as error:
    print("ImportError:", error)
"""
    )
    assert result.returncode == 0, result.stderr
    assert "(1, 32)" in result.stdout
    assert "The 'bf16' variant runs on OpenVINO, which is not installed." in result.stdout
    assert "pip install 'bertonnx[openvino]'" in result.stdout
    assert "fp32, optimized, int8" in result.stdout


def test_export_refuses_bf16_without_openvino(tiny_checkpoint: Path, tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    result = _run_without_openvino(
        f"""
from bertonnx_export.pipeline import ExportOptions, run_export
from bertonnx_export.errors import ExportError
try:
    run_export(ExportOptions(outdir={str(outdir)!r}, model={str(tiny_checkpoint)!r}), log=print)
except ExportError as error:
    print("ExportError:", error)
"""
    )
    assert result.returncode == 0, result.stderr
    assert "the bf16 variant runs on OpenVINO, which is not installed" in result.stdout
    assert "--variants fp32,optimized,int8" in result.stdout
    assert "[export] load" not in result.stdout  # refused before any work
    assert not outdir.exists()


def test_missing_weights_file_is_named(tiny_export: Path, tmp_path: Path) -> None:
    copy = tmp_path / "model"
    shutil.copytree(tiny_export, copy)
    (copy / "model_bf16.bin").unlink()
    with pytest.raises(ModelDirectoryError, match=r"model_bf16\.bin is missing"):
        BertOnnx(copy, "bf16")
    BertOnnx(copy, "fp32")  # the other variants do not need it


def test_bf16_only_export(tiny_checkpoint: Path, tmp_path: Path) -> None:
    from bertonnx.info import describe
    from bertonnx_export.pipeline import ExportOptions, run_export

    outdir = tmp_path / "bf16-only"
    run_export(ExportOptions(outdir=outdir, model=str(tiny_checkpoint), variants=("bf16",)), log=lambda m: None)
    assert sorted(p.name for p in outdir.glob("model*")) == ["model_bf16.bin", "model_bf16.xml"]
    facts = describe(read_manifest(outdir))
    assert [v["name"] for v in facts["outputs"]] == ["last_hidden_state", "pooler_output", "nsp_logits"]
    assert list(facts["variants"]) == ["bf16"]
    assert BertOnnx(outdir, "bf16").embed("hello").shape == (1, 32)
    with pytest.raises(ValueError, match=r"has no 'fp32' variant; it holds bf16"):
        BertOnnx(outdir)


def test_a_backend_this_version_does_not_run_is_named(tiny_export: Path, tmp_path: Path) -> None:
    copy = tmp_path / "model"
    shutil.copytree(tiny_export, copy)
    manifest = json.loads((copy / MANIFEST_FILE).read_text())
    manifest["variants"]["bf16"]["backend"] = "tensorrt"
    (copy / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ModelDirectoryError, match="variant 'bf16' names backend 'tensorrt', but this bertonnx runs"):
        BertOnnx(copy, "bf16")
