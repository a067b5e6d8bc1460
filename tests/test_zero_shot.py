"""Zero-shot classification on NLI sequence classifiers, equal to ``pipeline("zero-shot-classification")``.

Tiny seeded NLI classifiers (``contradiction, neutral, entailment``; one BERT with entailment at index 0, so its
contradiction logit is the last) of BERT and RoBERTa, exported without flags; their answers equal the
pipeline's for one label, several, ``multi_label``, a custom template, unicode and premises longer than the
model takes (cut, the hypothesis kept whole), offline, from the command, over HTTP and from a corpus job; bad
input is one clear error on each surface.
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bertonnx import BertOnnx, HeadMissingError

from .families import build_family_checkpoint
from .heads import build_tiny_checkpoint

ATOL = 1e-5
NLI_LABELS = {0: "contradiction", 1: "neutral", 2: "entailment"}
#: Entailment first: the pipeline then takes the last logit as contradiction.
ENTAILMENT_FIRST = {0: "ENTAILMENT", 1: "neutral", 2: "contradiction"}
MAX_TOKENS = 512
LONG = " ".join(["the history of natural language processing generally started in the 1950s."] * 90)
TEXTS = [
    "I have a problem with my iphone that needs to be resolved asap!!",
    "The quick brown fox jumps over the lazy dog.",
    "Café déjà vu: naïve façade, 北京是中国的首都 😀",
    LONG,
]
LABELS = ["urgent", "not urgent", "phone", "tablet", "computer"]


def _relabel(checkpoint: Path, id2label: dict[int, str]) -> None:
    """Name the classifier's logits (the weights stay): ``id2label`` and ``label2id`` as transformers saves them."""
    path = checkpoint / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["id2label"] = {str(k): v for k, v in id2label.items()}
    config["label2id"] = {v: k for k, v in id2label.items()}
    path.write_text(json.dumps(config), encoding="utf-8")


def _sharpen(checkpoint: Path, architecture: str) -> None:
    """Unit LayerNorms and a N(0, 1) classifier (as ``conftest.sharp_checkpoint``): with the seeded 0.05-scale
    weights every pair gets the same logits, and every label ~1/n, which tests no ranking."""
    import torch
    import transformers

    model = getattr(transformers, architecture).from_pretrained(checkpoint)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("LayerNorm.weight"):
                param.fill_(1.0)
            elif name.endswith("LayerNorm.bias"):
                param.zero_()
            elif name.startswith("classifier."):
                scale = 1.0 if name.endswith("weight") else 0.1
                param.copy_(torch.randn(param.shape, generator=generator) * scale)
    model.save_pretrained(checkpoint)


def _limit_tokens(checkpoint: Path) -> None:
    """The tokenizer's ``model_max_length`` set to the positions, as published tokenizers say it (the pipeline
    cuts to it; the export writes the same)."""
    path = checkpoint / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["model_max_length"] = MAX_TOKENS
    path.write_text(json.dumps(config), encoding="utf-8")


@pytest.fixture(scope="module")
def nli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[Path, Path]]]:
    """``name -> (checkpoint, export)``: ``bert`` and ``roberta`` (entailment last) and ``bert-first``."""
    import torch

    from bertonnx_export.pipeline import ExportOptions, run_export

    root = tmp_path_factory.mktemp("zero_shot")
    built: dict[str, tuple[Path, Path]] = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is far faster than two on a busy 2-core machine
    try:
        for name, labels in (("bert", NLI_LABELS), ("bert-first", ENTAILMENT_FIRST), ("roberta", NLI_LABELS)):
            checkpoint = root / name / "checkpoint"
            if name == "roberta":
                build_family_checkpoint("RobertaForSequenceClassification", checkpoint)
                _relabel(checkpoint, labels)
                _sharpen(checkpoint, "RobertaForSequenceClassification")
            else:
                build_tiny_checkpoint("BertForSequenceClassification", checkpoint, id2label=labels)
                _limit_tokens(checkpoint)
                _sharpen(checkpoint, "BertForSequenceClassification")
            outdir = root / name / "model"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run_export(ExportOptions(outdir=outdir, model=str(checkpoint), variants=("fp32",)), log=lambda m: None)
            built[name] = (checkpoint, outdir)
        yield built
    finally:
        torch.set_num_threads(threads)


_PIPELINES: dict[Path, Any] = {}


def _pipeline(checkpoint: Path, texts: str | list[str], labels: Any, **options: Any) -> Any:
    from transformers import pipeline

    if checkpoint not in _PIPELINES:
        _PIPELINES[checkpoint] = pipeline("zero-shot-classification", model=str(checkpoint), device="cpu")
    return _PIPELINES[checkpoint](texts, candidate_labels=labels, **options)


def _assert_equal(found: Any, expected: Any) -> None:
    if isinstance(expected, dict):
        found, expected = [found], [expected]
    assert len(found) == len(expected)
    for ours, theirs in zip(found, expected, strict=True):
        assert ours["sequence"] == theirs["sequence"]
        assert ours["labels"] == theirs["labels"], (ours, theirs)
        np.testing.assert_allclose(ours["scores"], theirs["scores"], atol=ATOL)


@pytest.mark.parametrize("name", ["bert", "bert-first", "roberta"])
def test_zero_shot_equals_the_pipeline(nli: dict[str, tuple[Path, Path]], name: str) -> None:
    checkpoint, export = nli[name]
    model = BertOnnx(export)
    for options in ({}, {"multi_label": True}, {"hypothesis_template": "Dieser Text handelt von {}."}):
        found = model.zero_shot(TEXTS, LABELS, **options)
        _assert_equal(found, _pipeline(checkpoint, TEXTS, LABELS, **options))
    odd = ["ünïcödé façade", "北京 汉字", "emoji 😀🎉", "a"]
    _assert_equal(model.zero_shot(TEXTS, odd), _pipeline(checkpoint, TEXTS, odd))
    one = model.zero_shot(TEXTS[0], ["phone"])  # one label: scored against contradiction, as multi_label
    _assert_equal(one, _pipeline(checkpoint, TEXTS[0], ["phone"]))
    assert isinstance(one, dict)
    commas = model.zero_shot(TEXTS[1], " urgent, phone ,,tablet ")  # one string: split at commas
    assert commas == model.zero_shot(TEXTS[1], ["urgent", "phone", "tablet"])
    _assert_equal(commas, _pipeline(checkpoint, TEXTS[1], " urgent, phone ,,tablet "))


def test_all_pairs_go_through_the_token_budget(nli: dict[str, tuple[Path, Path]]) -> None:
    """Every (text, hypothesis) pair of every text is one unit of the driver's batches: small batches, one text
    among others or alone, give the same answers."""
    model = BertOnnx(nli["bert"][1])
    task = model.task("zero_shot", candidate_labels=LABELS)
    prepared = task.prepare(TEXTS[:3])
    assert len(prepared.units) == 3 * len(LABELS)
    runs: list[int] = []
    original = model.run_batch

    def counting(batch: Any, outputs: Any = None) -> Any:
        runs.append(len(batch.indices))
        return original(batch, outputs)

    model.run_batch = counting  # type: ignore[method-assign]
    whole = model.zero_shot(TEXTS[:3], LABELS)
    assert runs == [15]  # the three texts' 15 pairs in one run
    runs.clear()
    small = model.zero_shot(TEXTS[:3], LABELS, batch_size=4)
    assert runs == [4, 4, 4, 3]
    for ours, theirs in zip(small, whole, strict=True):
        assert ours["labels"] == theirs["labels"]
        np.testing.assert_allclose(ours["scores"], theirs["scores"], atol=1e-6)
    alone = model.zero_shot(TEXTS[2], LABELS)
    np.testing.assert_allclose(alone["scores"], whole[2]["scores"], atol=1e-6)


def test_a_long_text_is_cut_not_its_hypothesis(nli: dict[str, tuple[Path, Path]]) -> None:
    model = BertOnnx(nli["roberta"][1])
    task = model.task("zero_shot", candidate_labels=["x", "a much longer label than the other one"])
    units = task.prepare([LONG]).units
    assert [len(unit.ids) for unit in units] == [MAX_TOKENS, MAX_TOKENS]
    hypothesis = model.tokenizer.encode([task.hypotheses[1]], None, truncation=False, max_length=None)[0]
    kept = hypothesis.ids[1:-1]
    assert units[1].ids[-len(kept) - 1 : -1] == kept  # the hypothesis whole, before the final </s>
    with pytest.raises(ValueError, match=r"input 1 has \d+ tokens, more than max_length=512"):
        model.zero_shot(["short", LONG], ["x"], truncation=False)


def test_bad_input_is_one_clear_error(nli: dict[str, tuple[Path, Path]], tmp_path: Path, tiny_export: Path) -> None:
    model = BertOnnx(nli["bert"][1])
    with pytest.raises(ValueError, match=r"candidate_labels must be at least one label, got \[\]; give a list"):
        model.zero_shot("a text", [])
    with pytest.raises(ValueError, match="candidate_labels must be at least one label, got ' , '"):
        model.zero_shot("a text", " , ")
    with pytest.raises(ValueError, match=r"hypothesis_template must be a template with \{\} where the label goes"):
        model.zero_shot("a text", ["a"], hypothesis_template="no slot")
    with pytest.raises(ValueError, match=r"str\.format refused it"):
        model.zero_shot("a text", ["a"], hypothesis_template="{label}")
    with pytest.raises(TypeError, match="multi_label must be a bool"):
        model.zero_shot("a text", ["a"], multi_label="yes")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="leave no room for the text"):
        model.zero_shot("a text", ["word " * 600])
    with pytest.raises(ValueError, match="entailment_label must be one of this export's labels: 'contradiction'"):
        model.zero_shot("a text", ["a"], entailment_label="yes")
    unnamed = _without_entailment(nli["bert"][1], tmp_path / "unnamed")
    other = BertOnnx(unnamed)
    with pytest.raises(ValueError, match=r"none of its labels \('negative', 'neutral', 'positive'\) starts with"):
        other.zero_shot("a text", ["a", "b"])
    named = other.zero_shot(TEXTS[:2], LABELS, entailment_label="positive")  # the override: same logits
    _assert_equal(named, model.zero_shot(TEXTS[:2], LABELS))
    with pytest.raises(HeadMissingError, match=r"no NLI classification head; .* BertForSequenceClassification"):
        BertOnnx(tiny_export).zero_shot("a", ["b"])


def _without_entailment(export: Path, target: Path) -> Path:
    """A copy of ``export`` whose classifier's labels do not name entailment (``negative, neutral, positive``)."""
    shutil.copytree(export, target)
    path = target / "bertonnx.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["task"]["id2label"] = {"0": "negative", "1": "neutral", "2": "positive"}
    path.write_text(json.dumps(manifest), encoding="utf-8")
    return target


def _ready(client: Any) -> None:
    deadline = time.monotonic() + 30
    while client.get("/ready").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_zero_shot_from_the_command(nli: dict[str, tuple[Path, Path]], capsys: pytest.CaptureFixture[str]) -> None:
    from bertonnx.cli import main

    export = nli["bert"][1]
    model = BertOnnx(export)
    offline = model.zero_shot(TEXTS[0], LABELS, multi_label=True, hypothesis_template="It is {}.")
    argv = ["zero-shot", str(export), TEXTS[0], "--candidate-labels", "urgent, not urgent, phone"]
    argv += ["--candidate-labels", "tablet,computer", "--multi-label", "--hypothesis-template", "It is {}.", "--json"]
    assert main(argv) == 0
    found = json.loads(capsys.readouterr().out)
    assert list(found)[:4] == ["model", "variant", "random_weights", "results"]  # every command's envelope
    assert (found["model"], found["results"]) == (str(export), [offline])
    assert found["random_weights"] is model.manifest.random_weights
    assert main(["zero-shot", str(export), *TEXTS[:2], "--candidate-labels", "phone,tablet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[1] for line in lines] == TEXTS[:2]
    for argv, said in (
        (["--candidate-labels", " , "], "--candidate-labels must be at least one label"),
        (["--candidate-labels", "a", "--hypothesis-template", "no slot"], "--hypothesis-template must be a template"),
        (["--candidate-labels", "a", "--entailment-label", "yes"], "--entailment-label must be one of this export's"),
    ):
        assert main(["zero-shot", str(export), "a text", *argv]) == 2
        err = capsys.readouterr().err
        assert said in err, err
        assert len(err.strip().splitlines()) == 1, err
    assert main(["zero-shot", str(export), "a text"]) == 2
    assert "the following arguments are required: --candidate-labels" in capsys.readouterr().err


def test_zero_shot_over_http(nli: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from bertonnx.serve import ServeOptions, create_app

    export = nli["roberta"][1]
    model = BertOnnx(export)
    with TestClient(create_app(export)) as client:
        _ready(client)
        one = client.post("/zero_shot", json={"inputs": TEXTS[0], "candidate_labels": LABELS})
        assert one.status_code == 200, one.text
        _assert_equal(one.json(), model.zero_shot(TEXTS[0], LABELS))
        body = {"inputs": TEXTS, "candidate_labels": "urgent, phone", "multi_label": True}
        many = client.post("/zero_shot", json={**body, "hypothesis_template": "It is {}."})
        assert many.status_code == 200, many.text
        _assert_equal(
            many.json(), model.zero_shot(TEXTS, "urgent, phone", multi_label=True, hypothesis_template="It is {}.")
        )
        for bad, said in (
            ({"candidate_labels": []}, "candidate_labels must be at least one label"),
            ({"candidate_labels": ["a"], "hypothesis_template": "no slot"}, "hypothesis_template must be a template"),
            ({"candidate_labels": ["a"], "labels": ["b"]}, "unknown field 'labels'"),
            ({"candidate_labels": ["a"], "entailment_label": "yes"}, "entailment_label must be one of"),
        ):
            answer = client.post("/zero_shot", json={"inputs": "a text", **bad})
            assert answer.status_code == 422, answer.text
            assert said in answer.json()["error"]
        unknown = client.post("/zero_shot", json={"inputs": "a", "candidate_label": "b"})
        assert unknown.status_code == 422
        assert "did you mean 'candidate_labels'" in unknown.json()["error"]
        assert '"candidate_labels": ["a", "b", ...]' in unknown.json()["error"]  # the route's example body
        assert "/zero_shot" in client.get("/openapi.json").json()["paths"]
    # texts x labels that no queue of this size ever holds: 413 naming the limit, not a 429 to retry forever
    with TestClient(create_app(export, ServeOptions(max_queue=64, max_client_batch_size=32))) as client:
        _ready(client)
        labels = [f"label {i}" for i in range(5)]
        answer = client.post("/zero_shot", json={"inputs": ["a text"] * 13, "candidate_labels": labels})
        assert answer.status_code == 413, answer.text
        assert "retry-after" not in answer.headers
        assert "65 model inputs (rows the model runs" in answer.json()["error"]
        assert "more than --max-queue 64; split the request" in answer.json()["error"]
        fits = client.post("/zero_shot", json={"inputs": ["a text"] * 12, "candidate_labels": labels})
        assert fits.status_code == 200, fits.text
    unnamed = _without_entailment(nli["bert"][1], tmp_path / "unnamed")
    with TestClient(create_app(unnamed)) as client:
        _ready(client)
        answer = client.post("/zero_shot", json={"inputs": "a text", "candidate_labels": ["a"]})
        assert answer.status_code == 422
        assert "none of its labels ('negative', 'neutral', 'positive') starts with 'entail'" in answer.json()["error"]


def test_zero_shot_corpus_job(nli: dict[str, tuple[Path, Path]], tmp_path: Path, capsys: Any) -> None:
    import pyarrow.parquet as pq

    from bertonnx.cli import main

    export = nli["bert"][1]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"text": text}) + "\n" for text in TEXTS), encoding="utf-8")
    output = tmp_path / "out.parquet"
    argv = ["batch", str(export), "--input", str(source), "--output", str(output), "--task", "zero-shot"]
    assert main([*argv, "--candidate-labels", ",".join(LABELS), "--multi-label"]) == 0
    table = pq.read_table(output)
    assert table.column_names == ["id", "n_tokens", "labels", "scores"]
    offline = BertOnnx(export).zero_shot(TEXTS, LABELS, multi_label=True)
    rows = table.to_pylist()
    for row, answer in zip(rows, offline, strict=True):
        assert row["labels"] == answer["labels"]
        np.testing.assert_allclose(row["scores"], answer["scores"], atol=1e-6)
    assert rows[3]["n_tokens"] == len(LABELS) * MAX_TOKENS  # the long text: each pair cut to the positions
    capsys.readouterr()
    assert main([*argv]) == 2
    assert "zero-shot needs its candidate labels" in capsys.readouterr().err
    assert main([*argv, "--candidate-labels", "a", "--hypothesis-template", "x"]) == 2
    assert "--hypothesis-template must be a template" in capsys.readouterr().err
    unnamed = _without_entailment(export, tmp_path / "unnamed")
    assert main(["zero-shot", str(unnamed), "a text", "--candidate-labels", "a"]) == 2
    err = capsys.readouterr().err
    assert "--entailment-label must be given for this export" in err
    assert "none of its labels ('negative', 'neutral', 'positive')" in err
    argv[1] = str(unnamed)
    assert main([*argv, "--candidate-labels", "a"]) == 2
    assert "none of its labels ('negative', 'neutral', 'positive')" in capsys.readouterr().err
    assert main([*argv, "--candidate-labels", "a", "--entailment-label", "positive"]) == 0


def test_zero_shot_ray_predictor_equals_offline(nli: dict[str, tuple[Path, Path]]) -> None:
    """The callable Ray Data maps over a dataset (tried without a cluster) takes the zero-shot options too."""
    import pyarrow as pa

    from bertonnx.corpus.predictor import BertOnnxPredictor

    export = nli["bert"][1]
    predictor = BertOnnxPredictor(
        str(export), task="zero-shot", candidate_labels=LABELS, hypothesis_template="It is {}."
    )
    out = predictor(pa.table({"id": [0, 1], "text": TEXTS[:2]})).to_pylist()
    offline = BertOnnx(export).zero_shot(TEXTS[:2], LABELS, hypothesis_template="It is {}.")
    for row, answer in zip(out, offline, strict=True):
        assert row["labels"] == answer["labels"]
        np.testing.assert_allclose(row["scores"], answer["scores"], atol=1e-6)
