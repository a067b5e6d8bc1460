"""Multiple choice (``BertForMultipleChoice``): the head that proved the house (issue 29), on every surface.

A tiny seeded checkpoint, exported without flags; ``choose`` equals torch's softmax over
``BertForMultipleChoice(...).logits`` and its argmax, offline, from the command and over HTTP; an export
without the head says so.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bertonnx import BertOnnx, HeadMissingError

from .heads import build_tiny_checkpoint

ATOL = 1e-5
QUESTIONS = [
    ("The cat sat on the", ["mat", "moon", "idea of justice", "ünïcödé 汉字"]),
    ("What do you drink in the morning?", ["coffee", "tea"]),
    ("a", ["b", "c", "d"]),
]


@pytest.fixture(scope="module")
def choice(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from bertonnx_export.pipeline import ExportOptions, run_export

    root = tmp_path_factory.mktemp("choose")
    checkpoint = build_tiny_checkpoint("BertForMultipleChoice", root / "checkpoint")
    outdir = root / "model"
    run_export(ExportOptions(outdir=outdir, model=str(checkpoint), variants=("fp32", "int8")), log=lambda m: None)
    return checkpoint, outdir


def _torch_choices(checkpoint: Path, context: str, choices: list[str]) -> np.ndarray:
    import torch
    from transformers import AutoTokenizer, BertForMultipleChoice

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = BertForMultipleChoice.from_pretrained(checkpoint).eval()
    feeds = tokenizer([context] * len(choices), choices, return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = model(**{k: v[None] for k, v in feeds.items()}).logits
    return torch.softmax(logits, -1)[0].numpy()


def test_choose_equals_torch(choice: tuple[Path, Path]) -> None:
    checkpoint, export = choice
    model = BertOnnx(export)
    assert model.tasks == ("embed", "choose")
    found = model.choose([q for q, _ in QUESTIONS], [c for _, c in QUESTIONS])
    for (context, choices), answer in zip(QUESTIONS, found, strict=True):
        expected = _torch_choices(checkpoint, context, choices)
        np.testing.assert_allclose(answer["scores"], expected, atol=ATOL)
        assert answer["index"] == int(np.argmax(expected))
        assert answer["choice"] == choices[answer["index"]]
        assert answer["score"] == pytest.approx(float(expected.max()), abs=ATOL)
    alone = model.choose(*QUESTIONS[0])
    assert alone == found[0]  # one context alone or among others: the same answer
    int8 = BertOnnx(export, "int8").choose(*QUESTIONS[0])
    np.testing.assert_allclose(int8["scores"], found[0]["scores"], atol=0.05)


def test_choose_errors_name_the_fix(choice: tuple[Path, Path], tiny_export: Path) -> None:
    model = BertOnnx(choice[1])
    with pytest.raises(ValueError, match="context 0 has 1 choice"):
        model.choose("only one", ["choice"])
    with pytest.raises(TypeError, match="must be a list of strings"):
        model.choose("a", "bc")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="2 contexts but 1 lists of choices"):
        model.choose(["a", "b"], [["c", "d"]])
    pretraining = BertOnnx(tiny_export)
    with pytest.raises(HeadMissingError, match=r"no multiple-choice head; .* a BertForMultipleChoice checkpoint"):
        pretraining.choose("a", ["b", "c"])


def test_choose_from_the_command_and_the_server(choice: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    from fastapi.testclient import TestClient

    from bertonnx.cli import main
    from bertonnx.serve import create_app

    export = choice[1]
    context, choices = QUESTIONS[0]
    offline = BertOnnx(export).choose(context, choices)
    assert main(["choose", str(export), "--context", context, *choices, "--json"]) == 0
    printed: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert printed["results"] == [offline]
    assert main(["choose", str(export), "--context", context, "one"]) == 2
    assert "1 choice(s); give at least 2" in capsys.readouterr().err
    with TestClient(create_app(export)) as client:
        deadline = time.monotonic() + 30
        while client.get("/ready").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        one = client.post("/choose", json={"context": context, "choices": choices})
        assert one.status_code == 200, one.text
        assert one.json() == offline
        many = client.post("/choose", json={"context": [q for q, _ in QUESTIONS], "choices": [c for _, c in QUESTIONS]})
        assert many.json() == BertOnnx(export).choose([q for q, _ in QUESTIONS], [c for _, c in QUESTIONS])
        bad = client.post("/choose", json={"context": context, "choices": ["only"]})
        assert bad.status_code == 422
        assert "give at least 2" in bad.json()["error"]
        metadata = client.get(f"/v2/models/{export.name}").json()
        assert {o["name"]: o["shape"] for o in metadata["outputs"]} == {
            "last_hidden_state": [-1, -1, 32],
            "pooler_output": [-1, 32],
            "choice_logits": [-1],
        }
