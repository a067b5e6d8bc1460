"""Nothing silently ignored (issue 33): a misspelled JSON field is a 422 naming it, and a corpus job's
``--output`` whose name says another format is refused before anything runs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest


def test_an_unknown_json_field_is_a_422_naming_it(tiny_export: Path) -> None:
    from fastapi.testclient import TestClient

    from bertonnx.serve import create_app

    with TestClient(create_app(tiny_export, threads=1)) as client:
        deadline = time.monotonic() + 60
        while client.get("/ready").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        answer = client.post("/embed", json={"inputs": "a", "normalise": False})
        assert answer.status_code == 422
        assert "unknown field 'normalise' (did you mean 'normalize'?)" in answer.json()["error"]
        openai = client.post("/v1/embeddings", json={"input": "a", "user": "me", "encodingformat": "float"})
        assert openai.status_code == 422
        assert "unknown field 'encodingformat' (did you mean 'encoding_format'?)" in openai.json()["error"]["message"]
        assert client.post("/v1/embeddings", json={"input": "a", "user": "me", "model": "x"}).status_code == 200


def test_batch_refuses_an_output_named_for_another_format(
    tiny_export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bertonnx.corpus.cli import main

    texts = tmp_path / "texts.txt"
    texts.write_text("a\nb\n", encoding="utf-8")
    code = main([str(tiny_export), "--input", str(texts), "--output", str(tmp_path / "out.csv")])
    assert code == 2
    assert "the job writes Parquet, not .csv; name it out.parquet" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["texts.txt"]
