"""``python -m benchmarks.families --quick`` runs end to end (tiny models, one repeat): every runner of every
family asked for is checked against torch fp32 and timed, the ratios against BERT's are computed, and ``--out``
writes benchmarks/FAMILIES.md's header with the run (the real run is the lead's, at base size)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_quick_run_writes_the_report_and_the_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.families import HEADER, MIN_COSINE, main

    out, figures = tmp_path / "FAMILIES.md", tmp_path / "families.json"
    argv = ["--quick", "--families", "bert,roberta", "--threads", "1", "--out", str(out), "--json", str(figures)]
    assert main(argv) == 0
    payload = json.loads(figures.read_text(encoding="utf-8"))
    assert payload["settings"]["quick"] is True
    assert payload["settings"]["repeats"] == 1
    assert [r["family"] for r in payload["results"]] == ["bert", "roberta"]
    for result in payload["results"]:
        assert set(result["t128_p50_ms"]) == {"bertonnx fp32", "torch fp32", "torch bf16"}
        assert all(value > 0 for value in result["t128_p50_ms"].values())
        assert all(value > 0 for value in result["corpus_texts_per_s"].values())
        assert result["corpus_passes"] == {name: 1 for name in result["t128_p50_ms"]}
        for name, cosine in result["mean_pooled_cosine_vs_torch_fp32"].items():
            assert cosine >= MIN_COSINE["bf16" if "bf16" in name else "fp32"]
    rows = {(row["family"], row["precision"]): row for row in payload["ratios"]}
    assert set(rows) == {("bert", "fp32"), ("roberta", "fp32")}
    assert rows["bert", "fp32"]["t128_vs_bert"] == 1.0
    assert rows["bert", "fp32"]["t128_within"] is True
    roberta = rows["roberta", "fp32"]
    speedup = payload["results"][1]["t128_p50_ms"]["torch fp32"] / payload["results"][1]["t128_p50_ms"]["bertonnx fp32"]
    assert roberta["t128_speedup"] == pytest.approx(speedup)
    assert roberta["t128_within"] == (abs(roberta["t128_vs_bert"] - 1) <= 0.15)
    written = out.read_text(encoding="utf-8")
    assert written.startswith(HEADER)
    assert "| roberta (roberta-base) | bertonnx fp32 | f32 |" in written
    assert "--quick: tiny models, figures mean nothing" in written
    assert "| roberta | fp32 |" in capsys.readouterr().out


def test_bad_options_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.families import main

    with pytest.raises(SystemExit):
        main(["--families", "bert,gpt2"])
    for flag, value, expected in (
        ("--repeats", "0", "--repeats must be at least 1, got 0"),
        ("--corpus-texts", "-3", "--corpus-texts must be at least 1, got -3"),
        ("--max-seconds", "0", "--max-seconds must be above 0, got 0.0"),
    ):
        with pytest.raises(SystemExit) as refused:
            main([flag, value])
        assert refused.value.code == 2
        assert expected in capsys.readouterr().err
