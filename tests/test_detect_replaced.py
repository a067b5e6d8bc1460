"""Replaced token detection (ELECTRA's discriminator) as a runtime task: ``BertOnnx.detect_replaced``, the
``detect-replaced`` command and ``/detect_replaced`` give ``torch.sigmoid(ElectraForPreTraining(...).logits)``
per token, special tokens dropped, with character offsets into the caller's string.

The export is the tiny seeded ``ElectraForPreTraining`` of tests/test_families.py (``family_export``, shared).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bertonnx import BertOnnx, HeadMissingError, InputTooLongError
from bertonnx.tasks.detect_replaced import replaced_probabilities

pytest.importorskip("torch")
pytest.importorskip("transformers")

ATOL = 1e-5
LONG = "Café déjà vu, 北京 and 😀 appear in the history of natural language processing. " * 40
TEXTS = [
    "the chef cooked the meal",
    "Café déjà vu: naïve façade, résumé.",
    "北京是中国的首都。 😀 👍🏽 and   whitespace\truns",
    "",
    LONG,
]


def _load(export: Path) -> BertOnnx:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return BertOnnx(export, threads=1)


@pytest.fixture(scope="module")
def discriminator(family_export: Any) -> tuple[Path, Path]:
    checkpoint, export, _ = family_export("ElectraForPreTraining")
    return checkpoint, export


def _torch_probabilities(checkpoint: Path, texts: list[str]) -> list[tuple[list[str], list[Any], np.ndarray]]:
    """Per text: tokens, offsets and ``torch.sigmoid(logits)`` of its non-special tokens, as ElectraForPreTraining's
    users compute them (the fast tokenizer, cut to 512 tokens)."""
    import torch
    from transformers import AutoTokenizer, ElectraForPreTraining

    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    model = ElectraForPreTraining.from_pretrained(str(checkpoint)).eval()
    found = []
    with torch.inference_mode():
        for text in texts:
            batch = tokenizer(
                text,
                return_tensors="pt",
                truncation=True,
                max_length=512,
                return_offsets_mapping=True,
                return_special_tokens_mask=True,
            )
            offsets = batch.pop("offset_mapping")[0].tolist()
            special = batch.pop("special_tokens_mask")[0].tolist()
            probabilities = torch.sigmoid(model(**batch).logits)[0].numpy()
            tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][0])
            keep = [i for i, s in enumerate(special) if not s]
            found.append(([tokens[i] for i in keep], [tuple(offsets[i]) for i in keep], probabilities[keep]))
    return found


def test_probabilities_equal_torch(discriminator: tuple[Path, Path]) -> None:
    checkpoint, export = discriminator
    model = _load(export)
    assert "detect_replaced" in model.tasks
    ours = model.detect_replaced(TEXTS, truncation=True)
    for found, (tokens, offsets, probabilities) in zip(ours, _torch_probabilities(checkpoint, TEXTS), strict=True):
        assert [t["token"] for t in found] == tokens
        assert [(t["start"], t["end"]) for t in found] == offsets
        assert [t["index"] for t in found] == list(range(1, len(tokens) + 1))  # [CLS] is 0
        np.testing.assert_allclose([t["score"] for t in found], probabilities, atol=ATOL, rtol=0)
    covered = [TEXTS[0][t["start"] : t["end"]] for t in ours[0]]  # offsets index the text
    assert "".join(covered) == TEXTS[0].replace(" ", "")
    assert covered == [t["token"].removeprefix("##") for t in ours[0]]
    assert ours[3] == []  # an empty text has only its special tokens
    assert len(ours[4]) == 510
    single = model.detect_replaced(TEXTS[1])
    assert single == ours[1]
    with pytest.raises(
        InputTooLongError, match=r"input 4 has \d+ tokens, more than max_length=512. Pass truncation=True"
    ):
        model.detect_replaced(TEXTS)


def test_sigmoid_is_stable_at_both_ends() -> None:
    logits = np.array([-1000.0, -20.0, 0.0, 20.0, 1000.0], dtype=np.float32)
    got = replaced_probabilities(logits)
    assert got.dtype == np.float32
    expected = [0.0, 2.0611537e-09, 0.5, 1.0, 1.0]  # 1 / (1 + e^20) = 2.06e-09, 1 - that is 1.0 in float32
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=0)


def test_command_and_route_equal_the_method(
    discriminator: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from fastapi.testclient import TestClient

    from bertonnx.cli import main
    from bertonnx.serve import create_app

    export = discriminator[1]
    model = _load(export)
    expected = model.detect_replaced(TEXTS[:3])
    assert main(["detect-replaced", str(export), *TEXTS[:3], "--json", "--threads", "1"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert list(payload)[:4] == ["model", "variant", "random_weights", "results"]  # every command's envelope
    printed = payload["results"]
    assert [[(t["token"], t["start"], t["end"]) for t in row] for row in printed] == [
        [(t["token"], t["start"], t["end"]) for t in row] for row in expected
    ]
    np.testing.assert_allclose(
        [t["score"] for row in printed for t in row], [t["score"] for row in expected for t in row], atol=1e-6
    )
    assert main(["detect-replaced", str(export), TEXTS[0], "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "0:3  'the'" in out
    assert main(["detect-replaced", str(export), LONG, "--threads", "1"]) == 2
    assert "--truncation" in capsys.readouterr().err
    with TestClient(create_app(export, threads=1)) as client:
        import time

        deadline = time.monotonic() + 60
        while client.get("/ready").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        got = client.post("/detect_replaced", json={"inputs": [*TEXTS[:3], LONG], "truncate": True})
        assert got.status_code == 200, got.text
        offline = model.detect_replaced([*TEXTS[:3], LONG], truncation=True)
        assert [[(t["index"], t["token"], t["start"], t["end"]) for t in row] for row in got.json()] == [
            [(t["index"], t["token"], t["start"], t["end"]) for t in row] for row in offline
        ]
        np.testing.assert_allclose(
            [t["score"] for row in got.json() for t in row], [t["score"] for row in offline for t in row], atol=1e-6
        )
        one = client.post("/detect_replaced", json={"inputs": TEXTS[0]})
        assert [t["token"] for t in one.json()] == [t["token"] for t in expected[0]]
        refused = client.post("/detect_replaced", json={"inputs": [LONG]})
        assert refused.status_code == 422
        assert '"truncate": true' in refused.json()["error"]


def test_exports_without_the_discriminator_say_so(family_export: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from fastapi.testclient import TestClient

    from bertonnx.cli import main
    from bertonnx.serve import create_app

    export = family_export("ElectraModel")[1]
    model = _load(export)
    assert "detect_replaced" not in model.tasks
    message = r"no replaced-token-detection head; it was exported from ElectraModel .* an ElectraForPreTraining"
    with pytest.raises(HeadMissingError, match=message):
        model.detect_replaced("the chef cooked the meal")
    roberta = _load(family_export("RobertaModel")[1])
    with pytest.raises(HeadMissingError, match=r"ElectraForPreTraining checkpoint \(Roberta has no class"):
        roberta.detect_replaced("a")
    assert main(["detect-replaced", str(export), "a", "--threads", "1"]) == 2
    assert "no replaced-token-detection head" in capsys.readouterr().err
    with TestClient(create_app(export, threads=1)) as client:
        import time

        deadline = time.monotonic() + 60
        while client.get("/ready").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        refused = client.post("/detect_replaced", json={"inputs": "a"})
        assert refused.status_code == 422
        assert "no replaced-token-detection head" in refused.json()["error"]
