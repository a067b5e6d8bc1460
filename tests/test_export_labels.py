"""Any head's checkpoint offline: ``--task`` with ``--labels`` or ``--num-labels`` gives a seeded classification head
its labels (a three-label classifier, a one-logit reranker, a BIO tagger), always recorded as seeded; what
contradicts itself is refused in one line with exit 2. Tiny checkpoints (``tests/heads.py``), fp32 only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertonnx import BertOnnx, RandomWeightsWarning
from bertonnx.cli import main
from bertonnx.command import EXIT_OK, EXIT_USAGE
from bertonnx.manifest import MANIFEST_FILE

from .heads import build_tiny_checkpoint

pytestmark = pytest.mark.filterwarnings("ignore::bertonnx.RandomWeightsWarning")  # asserted where it matters
BIO = "O,B-PER,I-PER,B-ORG,I-ORG,B-LOC,I-LOC,B-MISC,I-MISC"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny encoder alone (``BertModel``) and a tiny trained three-label classifier."""
    root = tmp_path_factory.mktemp("label-checkpoints")
    return {name: build_tiny_checkpoint(name, root / name) for name in ("BertModel", "BertForSequenceClassification")}


def _export(capsys: pytest.CaptureFixture[str], model: Path, out: Path, *options: str) -> dict:
    code = main(["export", str(model), str(out), "--variants", "fp32", *options])
    err = capsys.readouterr().err
    assert code == EXIT_OK, err
    manifest: dict = json.loads((out / MANIFEST_FILE).read_text(encoding="utf-8"))
    return manifest


def test_labels_name_a_random_classifier_everywhere(
    capsys: pytest.CaptureFixture[str], checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "sentiment"
    manifest = _export(
        capsys,
        checkpoints["BertModel"],
        out,
        *("--task", "text-classification", "--labels", "negative,neutral,positive", "--weights", "random"),
    )
    assert manifest["task"]["num_labels"] == 3
    assert manifest["task"]["id2label"] == {"0": "negative", "1": "neutral", "2": "positive"}
    assert manifest["weights"]["kind"] == "random"
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert config["label2id"] == {"negative": 0, "neutral": 1, "positive": 2}
    model = BertOnnx(out)
    assert model.labels == ["negative", "neutral", "positive"]
    assert {answer["label"] for answer in model.classify("i loved this film", top_k=None)} == set(model.labels)
    assert main(["classify", str(out), "i loved this film"]) == EXIT_OK
    assert "RANDOM WEIGHTS" in capsys.readouterr().err  # the banner says the answer is a seeded head's


def test_num_labels_one_on_a_trained_encoder_is_a_reranker_with_a_seeded_head(
    capsys: pytest.CaptureFixture[str], checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "reranker"
    options = ("--task", "text-classification", "--num-labels", "1", "--allow-random-heads")
    manifest = _export(capsys, checkpoints["BertModel"], out, *options)
    assert manifest["task"]["id2label"] == {"0": "LABEL_0"}
    assert "rerank" in manifest["task"]["tasks"]
    assert manifest["weights"]["kind"] == "pretrained"
    assert manifest["weights"]["random_heads"] == ["classifier"]
    assert manifest["weights"]["note"].startswith("RANDOM HEADS: the classifier head was seeded")
    with pytest.warns(RandomWeightsWarning, match="RANDOM HEADS: the classifier head was seeded"):
        reranker = BertOnnx(out)
    ranked = reranker.rerank("what is deep learning?", ["cheese", "deep learning is machine learning"])
    assert sorted(r["index"] for r in ranked) == [0, 1]
    # parity rebuilds the PyTorch reference with the same one-label head
    assert main(["parity", str(out)]) == EXIT_OK, capsys.readouterr().err


def test_bio_labels_make_a_tagger(
    capsys: pytest.CaptureFixture[str], checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "ner"
    options = ("--task", "token-classification", "--labels", BIO, "--weights", "random")
    manifest = _export(capsys, checkpoints["BertModel"], out, *options)
    assert list(manifest["task"]["id2label"].values()) == BIO.split(",")
    text = "Angela Merkel met Emmanuel Macron in Zürich."
    entities = BertOnnx(out).tag(text, ignore_labels=())
    assert entities
    assert {e["entity_group"] for e in entities} <= {"O", "PER", "ORG", "LOC", "MISC"}


@pytest.mark.parametrize(
    ("model", "options", "message"),
    [
        (
            "BertModel",
            ["--task", "text-classification", "--labels", "a,b", "--num-labels", "3"],
            "--labels gives 2 names but --num-labels says 3; drop --num-labels",
        ),
        ("BertModel", ["--task", "text-classification", "--labels", "a,b,a"], "--labels names 'a' more than once"),
        (
            "BertModel",
            ["--task", "text-classification", "--labels", "a,,b"],
            "--labels has an empty name (label 2 of 3)",
        ),
        ("BertModel", ["--task", "text-classification", "--num-labels", "0"], "expected a whole number >= 1, got 0"),
        ("BertModel", ["--opset", "0"], "argument --opset: expected an opset 14 to 21"),  # 0 was the default, silently
        ("BertModel", ["--opset", "13"], "(attention needs 14; 21 is the highest tried), got 13"),  # was exit 70
        ("BertModel", ["--opset", "99"], "expected an opset 14 to 21"),
        (
            "BertModel",
            ["--task", "fill-mask", "--labels", "a,b"],
            "BertForMaskedLM (fill-mask) has no labels. Pass --task text-classification or token-classification",
        ),
        (
            "BertForSequenceClassification",
            ["--labels", "bad,good"],
            "holds a trained classifier head with its own labels (negative, neutral, positive)",
        ),
    ],
)
def test_labels_that_contradict_are_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
    checkpoints: dict[str, Path],
    tmp_path: Path,
    model: str,
    options: list[str],
    message: str,
) -> None:
    weights = ["--weights", "random"] if model == "BertModel" else []
    code = main(["export", str(checkpoints[model]), str(tmp_path / "out"), "--variants", "fp32", *weights, *options])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip() and not line.startswith("[export]")]
    assert code == EXIT_USAGE, lines
    assert len(lines) == 1, lines
    assert message in lines[0]
    assert not (tmp_path / "out").exists()


def test_variants_naming_none_is_refused(
    capsys: pytest.CaptureFixture[str], checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    """``--variants ""`` was every variant, silently."""
    code = main(
        ["export", str(checkpoints["BertModel"]), str(tmp_path / "out"), "--weights", "random", "--variants", ""]
    )
    assert code == EXIT_USAGE
    assert "--variants '' names no variant; give some of fp32, optimized, int8, bf16" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
