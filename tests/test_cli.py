"""The ``bertonnx`` command: every subcommand, --json, errors; the full-size checks behind ``slow``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bertonnx.cli import main
from bertonnx.info import count_parameters, read_graph

from .conftest import ROOT, run_torch_free

PAIR_TOKENS = ["[CLS]", "the", "weather", "is", "nice", "[SEP]", "i", "agree", "with", "you", "[SEP]"]


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:  # type: ignore[type-arg]
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.torch_free
def test_inspect_counts_from_initializers(capsys: pytest.CaptureFixture[str], tiny_export: Path) -> None:
    facts = run_json(capsys, "inspect", str(tiny_export))
    assert facts["parameters"]["counted_from"] == "model.onnx initializers"
    assert facts["parameters"]["matches_manifest"] is True
    # tiny BERT: 30522*32 token embeddings; pooler 32*32+32; NSP head 32*2+2
    assert facts["parameters"]["counts"]["token_embeddings"] == 30522 * 32
    assert facts["parameters"]["counts"]["pooler"] == 32 * 32 + 32
    assert facts["parameters"]["counts"]["nsp_head"] == 66
    assert [o["name"] for o in facts["outputs"]] == ["last_hidden_state", "pooler_output", "nsp_logits"]
    assert facts["random_weights"] is False


@pytest.mark.torch_free
def test_fused_graph_counts_the_same(tiny_export: Path) -> None:
    plain = count_parameters(read_graph(tiny_export / "model.onnx"))
    fused = count_parameters(read_graph(tiny_export / "model_optimized.onnx"))
    assert plain == fused


@pytest.mark.torch_free
def test_tokenize_nsp_embed(capsys: pytest.CaptureFixture[str], tiny_export: Path, tmp_path: Path) -> None:
    tok = run_json(capsys, "tokenize", str(tiny_export), "the weather is nice", "i agree with you")["results"][0]
    assert tok["tokens"] == PAIR_TOKENS
    assert tok["type_ids"] == [0] * 6 + [1] * 5
    nsp = run_json(capsys, "nsp", str(tiny_export), "the weather is nice", "i agree with you")
    assert 0.0 < nsp["results"][0] < 1.0
    target = tmp_path / "vectors.npy"
    run_json(capsys, "embed", str(tiny_export), "one", "two words", "--output", str(target), "--pooling", "mean")
    assert np.load(target).shape == (2, 32)
    inputs = tmp_path / "texts.txt"
    inputs.write_text("first line\nsecond line\n\nthird\n")
    assert main(["embed", str(tiny_export), "--input", str(inputs)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in rows] == ["first line", "second line", "", "third"]  # one row per line
    assert len(rows[0]["embedding"]) == 32


@pytest.mark.torch_free
def test_walkthrough(capsys: pytest.CaptureFixture[str], tiny_export: Path) -> None:
    out = run_json(capsys, "walkthrough", str(tiny_export))
    assert out["tokens"] == PAIR_TOKENS
    assert out["last_hidden_state_shape"] == [1, 11, 32]
    assert out["pooler_output_shape"] == [1, 32]
    assert -1.0 <= out["mean_tokens_vs_pooler_cosine"] <= 1.0


@pytest.mark.torch_free
def test_errors_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, tiny_export: Path) -> None:
    assert main(["inspect", str(tmp_path)]) == 2
    assert "is not a bertonnx export" in capsys.readouterr().err
    assert main(["nsp", str(tiny_export), "a", "b", "--variant", "fp16"]) == 2
    assert "argument --variant: invalid choice: 'fp16'" in capsys.readouterr().err
    assert main(["embed", str(tiny_export)]) == 2
    assert "give TEXT arguments or --input FILE" in capsys.readouterr().err


def test_export_subcommand_dispatches(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """Options between the positionals (as users type them); the log shows cosines to 5 decimals."""
    command = [sys.executable, "-m", "bertonnx.cli", "export", str(tiny_checkpoint), "--variants", "fp32,int8"]
    result = subprocess.run([*command, str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "bertonnx.json").is_file()
    cosines = re.findall(r"_min_cosine (\S+?)[,\s]", result.stdout)
    assert len(cosines) == 2 * 4  # two variants, three outputs and the MLM head's logits
    assert all(re.fullmatch(r"\d\.\d{5}", c) for c in cosines), cosines


@pytest.mark.slow
@pytest.mark.torch_free
def test_bert_base_module_facts_torch_free(bert_base_export: Path) -> None:
    out = run_torch_free(
        f"""
import json
from bertonnx.cli import main
main(["inspect", {str(bert_base_export)!r}, "--json"])
main(["walkthrough", {str(bert_base_export)!r}, "--json"])
"""
    )
    decoder = json.JSONDecoder()
    inspect, end = decoder.raw_decode(out)
    walk, _ = decoder.raw_decode(out[end:].lstrip())
    counts = inspect["parameters"]["counts"]
    assert counts["bert_model"] == 109_482_240
    assert counts["token_embeddings"] == 23_440_896
    assert counts["nsp_head"] == 1_538
    assert inspect["random_weights"] is True
    assert walk["tokens"] == PAIR_TOKENS
    assert walk["token_type_ids"] == [0] * 6 + [1] * 5
    assert walk["last_hidden_state_shape"] == [1, 11, 768]
    assert walk["pooler_output_shape"] == [1, 768]
    assert walk["config"]["num_hidden_layers"] == 12


@pytest.mark.slow
@pytest.mark.torch_free
def test_bert_base_inspect_prints_the_counts(bert_base_export: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bertonnx.cli", "inspect", str(bert_base_export)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "109,482,240" in result.stdout
    assert "23,440,896" in result.stdout
    assert "RANDOM WEIGHTS" in result.stdout
