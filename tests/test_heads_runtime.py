"""The checkpoint's own heads at run time: ``classify``, ``rerank`` and ``fill_mask`` equal transformers'
pipelines (and torch) on the same tiny checkpoints, exported without flags; asking a head an export lacks
is a ``HeadMissingError`` naming what it has.

Limits: fp32 and optimized scores within 1e-4 of transformers, labels and tokens identical (fill-mask
tokens whose probabilities tie within ``TIE_RTOL`` may swap places); int8 within ``INT8_SCORE_ATOL`` on
classifier scores, with the top label identical wherever transformers' top two are further apart than that.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bertonnx import BertOnnx, HeadMissingError

from .heads import build_tiny_checkpoint

ATOL = 1e-4
#: int8 is lossy: classifier probabilities of the tiny seeded heads move by at most this much.
INT8_SCORE_ATOL = 0.02
#: Fill-mask candidates whose probabilities agree within this relative tolerance are ties.
TIE_RTOL = 1e-4
TEXTS = [
    "i loved this film, it was wonderful",
    "the service was slow and the food was cold",
    "Ünïcödé text, with digits 12345 and CJK 汉字",
    "a",
]
PAIRS = ["what did you think?", "tell me more", "汉字 ok", "b"]
LONG = "the weather is nice today " * 200  # ~1,000 tokens: over 512 without truncation
CHECKPOINTS: dict[str, dict[str, Any]] = {
    "single": {"architecture": "BertForSequenceClassification"},
    "multi": {"architecture": "BertForSequenceClassification", "problem_type": "multi_label_classification"},
    "regression": {"architecture": "BertForSequenceClassification", "num_labels": 2, "problem_type": "regression"},
    "rerank": {"architecture": "BertForSequenceClassification", "num_labels": 1},
    "mlm": {"architecture": "BertForMaskedLM"},
    "encoder": {"architecture": "BertModel"},
}
#: Variants exported per checkpoint (all three for the single-label classifier: the lossy limit is judged there).
VARIANTS = {"single": ("fp32", "optimized", "int8")}


@pytest.fixture(scope="module")
def heads(
    tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path, tiny_export: Path
) -> dict[str, tuple[Path, Path]]:
    """``name -> (checkpoint, export)`` for every entry of ``CHECKPOINTS``, exported without flags, and
    ``pretraining``: the session's tiny ``BertForPreTraining`` (conftest), whose export has the MLM head."""
    from bertonnx_export.pipeline import ExportOptions, run_export

    root = tmp_path_factory.mktemp("heads")
    built = {"pretraining": (tiny_checkpoint, tiny_export)}
    for name, spec in CHECKPOINTS.items():
        spec = dict(spec)
        checkpoint = build_tiny_checkpoint(spec.pop("architecture"), root / name / "checkpoint", **spec)
        outdir = root / name / "model"
        run_export(
            ExportOptions(outdir=outdir, model=str(checkpoint), variants=VARIANTS.get(name, ("fp32",))),
            log=lambda message: None,
        )
        built[name] = (checkpoint, outdir)
    return built


def _load(export: Path, variant: str = "fp32") -> BertOnnx:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # exports of trained (here: seeded but saved) checkpoints never warn
        return BertOnnx(export, variant)


def _pipeline(task: str, checkpoint: Path, **kwargs: Any) -> Any:
    from transformers import pipeline

    return pipeline(task, model=str(checkpoint), device="cpu", **kwargs)


# -- classify -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["single", "multi", "regression"])
def test_classify_equals_the_text_classification_pipeline(heads: dict[str, tuple[Path, Path]], name: str) -> None:
    checkpoint, export = heads[name]
    reference = _pipeline("text-classification", checkpoint, top_k=None)
    inputs = [*TEXTS, LONG]
    expected = reference(inputs, truncation=True, max_length=512)
    expected_pairs = reference([{"text": a, "text_pair": b} for a, b in zip(TEXTS, PAIRS, strict=True)])
    for variant in VARIANTS.get(name, ("fp32",)):
        if variant == "int8":
            continue
        model = _load(export, variant)
        _assert_ranked(model.classify(inputs, top_k=None, truncation=True), expected, ATOL)
        _assert_ranked(model.classify(TEXTS, PAIRS, top_k=None), expected_pairs, ATOL)
        top = model.classify(TEXTS[0])
        assert top == [model.classify([TEXTS[0]], top_k=None)[0][0]]  # one string in: one list out, top_k=1
        assert len(model.classify(TEXTS, top_k=2)[0]) == 2


def _assert_ranked(got: list[list[dict[str, Any]]], expected: list[list[dict[str, Any]]], atol: float) -> None:
    assert len(got) == len(expected)
    for ours, theirs in zip(got, expected, strict=True):
        assert [d["label"] for d in ours] == [d["label"] for d in theirs]
        np.testing.assert_allclose([d["score"] for d in ours], [d["score"] for d in theirs], atol=atol, rtol=0)


def test_classify_int8_within_its_limit(heads: dict[str, tuple[Path, Path]]) -> None:
    checkpoint, export = heads["single"]
    expected = _pipeline("text-classification", checkpoint, top_k=None)(TEXTS)
    got = _load(export, "int8").classify(TEXTS, top_k=None)
    for ours, theirs in zip(got, expected, strict=True):
        by_label = {d["label"]: d["score"] for d in ours}
        np.testing.assert_allclose(
            [by_label[d["label"]] for d in theirs], [d["score"] for d in theirs], atol=INT8_SCORE_ATOL
        )
        if theirs[0]["score"] - theirs[1]["score"] > INT8_SCORE_ATOL:
            assert ours[0]["label"] == theirs[0]["label"]


def test_classify_labels_come_from_id2label(heads: dict[str, tuple[Path, Path]]) -> None:
    from transformers import AutoConfig

    checkpoint, export = heads["single"]
    labels = set(AutoConfig.from_pretrained(checkpoint).id2label.values())
    assert {d["label"] for d in _load(export).classify("hello", top_k=None)} == labels


# -- rerank ---------------------------------------------------------------------------------------------


def test_rerank_equals_the_cross_encoder_in_torch(heads: dict[str, tuple[Path, Path]]) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    checkpoint, export = heads["rerank"]
    query, texts = "what is the weather like?", [*TEXTS, LONG]
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    torch_model = AutoModelForSequenceClassification.from_pretrained(checkpoint).eval()
    with torch.no_grad():
        batch = tokenizer(
            [query] * len(texts), texts, truncation=True, max_length=512, padding=True, return_tensors="pt"
        )
        logits = torch_model(**batch).logits[:, 0].numpy()
    expected = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    ranked = _load(export).rerank(query, texts, truncation=True)
    assert [r["index"] for r in ranked] == list(np.argsort(-expected, kind="stable"))
    np.testing.assert_allclose([r["score"] for r in ranked], np.sort(expected)[::-1], atol=ATOL, rtol=0)
    raw = _load(export).rerank(query, texts, truncation=True, raw_scores=True)
    np.testing.assert_allclose(sorted(r["score"] for r in raw), np.sort(logits), atol=ATOL, rtol=0)


def test_rerank_long_text_without_truncation_names_it(heads: dict[str, tuple[Path, Path]]) -> None:
    with pytest.raises(ValueError, match=r"input 1 has \d+ tokens, more than max_length=512"):
        _load(heads["rerank"][1]).rerank("q", ["short", LONG])


# -- fill-mask ------------------------------------------------------------------------------------------

MASKED = [
    "the capital of france is [MASK].",
    "i [MASK] this film, it was [MASK]!",
    "Ünïcödé [MASK] 汉字",
    "[MASK]",
]


@pytest.mark.parametrize("name", ["mlm", "pretraining"])
def test_fill_mask_equals_the_fill_mask_pipeline(heads: dict[str, tuple[Path, Path]], name: str) -> None:
    checkpoint, export = heads[name]
    reference = _pipeline("fill-mask", checkpoint, top_k=5)
    model = _load(export)
    got = model.fill_mask(MASKED)
    for text, ours in zip(MASKED, got, strict=True):
        theirs = reference(text)
        theirs = [theirs] if isinstance(theirs[0], dict) else theirs  # the pipeline unwraps one mask
        assert len(ours) == len(theirs) == text.count("[MASK]")
        for our_mask, their_mask in zip(ours, theirs, strict=True):
            _assert_fills(our_mask, their_mask)
    assert model.fill_mask(MASKED[0], top_k=2) == [got[0][0][:2]]  # one string in: per mask a list


def _assert_fills(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> None:
    np.testing.assert_allclose([d["score"] for d in ours], [d["score"] for d in theirs], rtol=TIE_RTOL, atol=1e-7)
    for mine, ref in zip(ours, theirs, strict=True):
        if mine["token"] != ref["token"]:  # a tie within TIE_RTOL: same probability, order undefined
            assert mine["score"] == pytest.approx(ref["score"], rel=TIE_RTOL)
            continue
        assert mine == {**ref, "score": mine["score"]}


def test_fill_mask_needs_a_mask(heads: dict[str, tuple[Path, Path]]) -> None:
    model = _load(heads["mlm"][1])
    with pytest.raises(ValueError, match=r"input 1 has no \[MASK\] token"):
        model.fill_mask(["a [MASK]", "no mask here"])
    with pytest.raises(ValueError, match="top_k must be >= 1, got 0"):
        model.fill_mask("a [MASK]", top_k=0)


# -- what the export has ----------------------------------------------------------------------------------


def test_asking_a_head_the_export_lacks_names_what_it_has(heads: dict[str, tuple[Path, Path]]) -> None:
    encoder = _load(heads["encoder"][1])  # loads with no RandomWeightsWarning (warnings are errors here)
    assert encoder.tasks == ("embed",)
    with pytest.raises(HeadMissingError, match=r"this export has no NSP head; it was exported from BertModel"):
        encoder.nsp("a", "b")
    with pytest.raises(HeadMissingError, match=r"no MLM head; it was exported from BertModel and offers embed"):
        encoder.fill_mask("a [MASK]")
    with pytest.raises(HeadMissingError, match=r"no classification head; it was exported from BertModel"):
        encoder.classify("a")
    with pytest.raises(
        HeadMissingError, match=r"no one-logit cross-encoder head; .* BertForSequenceClassification with 3"
    ):
        _load(heads["single"][1]).rerank("q", ["a"])
    with pytest.raises(HeadMissingError, match=r"no pooler; it was exported from BertForMaskedLM .* pooling 'cls'"):
        _load(heads["mlm"][1]).embed("a")
    assert _load(heads["mlm"][1]).embed("a", "cls").shape == (1, 32)
    out = encoder("hello")
    assert out.nsp_logits.shape == (1, 0)  # no NSP head: no made-up logits


# -- the command line -------------------------------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    from bertonnx.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_heads_equal_the_offline_answers(
    heads: dict[str, tuple[Path, Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    single, rerank, mlm = heads["single"][1], heads["rerank"][1], heads["mlm"][1]
    code, out, _ = _cli(capsys, "classify", "--json", str(single), TEXTS[0], "--pair", PAIRS[0], "--all-labels")
    assert code == 0
    assert json.loads(out)["results"] == _load(single).classify([TEXTS[0]], [PAIRS[0]], top_k=None)
    code, out, _ = _cli(capsys, "rerank", str(rerank), "--json", "the query", *TEXTS)
    assert code == 0
    expected = _load(rerank).rerank("the query", TEXTS)
    assert [(r["index"], r["score"], r["text"]) for r in json.loads(out)["results"]] == [
        (r["index"], r["score"], TEXTS[r["index"]]) for r in expected
    ]
    code, out, _ = _cli(capsys, "fill-mask", "--top-k", "3", str(mlm), MASKED[1], "--json")
    assert code == 0
    assert json.loads(out)["results"] == [_load(mlm).fill_mask(MASKED[1], top_k=3)]
    code, out, _ = _cli(capsys, "fill-mask", str(mlm), MASKED[0])
    assert code == 0
    assert out.startswith(MASKED[0])
    assert "[MASK] 1:" in out


def test_cli_head_errors_are_one_line(heads: dict[str, tuple[Path, Path]], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, "rerank", str(heads["single"][1]), "query", "text")
    assert code == 2
    assert not out
    assert err.count("\n") == 1
    assert "no one-logit cross-encoder head" in err
    code, _, err = _cli(capsys, "fill-mask", str(heads["encoder"][1]), "a [MASK]")
    assert code == 2
    assert "this export has no MLM head; it was exported from BertModel" in err
    code, _, err = _cli(capsys, "classify", str(heads["single"][1]), "a", "b", "--pair", "x")
    assert code == 2
    assert "2 texts but 1 --pair values" in err
    code, _, err = _cli(capsys, "classify", str(heads["single"][1]), LONG)
    assert code == 2
    assert "--truncation" in err
    assert err.count("\n") == 1


def test_walkthrough_shows_fill_mask(heads: dict[str, tuple[Path, Path]], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "walkthrough", str(heads["pretraining"][1]))
    assert code == 0
    assert '7. fill-mask "the capital of france is [MASK]."' in out
    top = _load(heads["pretraining"][1]).fill_mask("the capital of france is [MASK].")[0][0]
    assert top["sequence"] in out
    code, out, _ = _cli(capsys, "walkthrough", str(heads["encoder"][1]))
    assert code == 0
    assert "6. NSP: this export has no NSP head (BertModel)" in out


# -- the server -------------------------------------------------------------------------------------------


def _serve(export: Path) -> Any:
    """A started app (lifespan run) whose model is loaded; close it with ``client.__exit__``."""
    import time

    from fastapi.testclient import TestClient

    from bertonnx.serve import create_app

    client = TestClient(create_app(export))
    client.__enter__()
    deadline = time.monotonic() + 30
    while client.get("/ready").status_code != 200:
        assert time.monotonic() < deadline, "the model did not load within 30 s"
        time.sleep(0.02)
    return client


def test_server_routes_equal_the_offline_answers(heads: dict[str, tuple[Path, Path]]) -> None:
    single, rerank, mlm, pretraining = (heads[name][1] for name in ("single", "rerank", "mlm", "pretraining"))
    client = _serve(single)
    try:
        model = _load(single)
        body = client.post("/predict", json={"inputs": [TEXTS[0], [TEXTS[1], PAIRS[1]]]}).json()
        expected = [model.classify(TEXTS[0], top_k=None), model.classify(TEXTS[1], PAIRS[1], top_k=None)]
        _assert_ranked(body, expected, 1e-6)
        assert (
            client.post("/predict", json={"inputs": TEXTS[2]}).json()[0]["label"]
            == model.classify(TEXTS[2])[0]["label"]
        )
        raw = client.post("/predict", json={"inputs": TEXTS[0], "raw_scores": True}).json()
        logits = model.classify_scores(TEXTS[0], function="none")[0]
        np.testing.assert_allclose(sorted(p["score"] for p in raw), np.sort(logits), atol=1e-6)
        info = client.get("/info").json()["task"]
        assert info["architecture"] == "BertForSequenceClassification"
        assert info["labels"] == model.labels
        answer = client.post("/rerank", json={"query": "q", "texts": ["a"]})
        assert answer.status_code == 422
        assert "no one-logit cross-encoder head" in answer.json()["error"]
        infer = {
            "inputs": [
                {"name": name, "shape": [1, 3], "datatype": "INT64", "data": data}
                for name, data in (
                    ("input_ids", [101, 7592, 102]),
                    ("attention_mask", [1, 1, 1]),
                    ("token_type_ids", [0, 0, 0]),
                )
            ],
            "outputs": [{"name": "logits"}],
        }
        (tensor,) = client.post(f"/v2/models/{single.name}/infer", json=infer).json()["outputs"]
        assert tensor["name"] == "logits"
        assert tensor["shape"] == [1, 3]
        np.testing.assert_allclose(tensor["data"], model.classify_scores("hello", function="none")[0], atol=1e-5)
    finally:
        client.__exit__(None, None, None)
    client = _serve(rerank)
    try:
        body = client.post("/rerank", json={"query": "the query", "texts": TEXTS, "return_text": True}).json()
        expected = _load(rerank).rerank("the query", TEXTS)
        assert [r["index"] for r in body] == [r["index"] for r in expected]
        np.testing.assert_allclose([r["score"] for r in body], [r["score"] for r in expected], atol=1e-6)
        assert [r["text"] for r in body] == [TEXTS[r["index"]] for r in expected]
    finally:
        client.__exit__(None, None, None)
    client = _serve(mlm)
    try:
        body = client.post("/fill_mask", json={"inputs": MASKED, "top_k": 3}).json()
        expected = _load(mlm).fill_mask(MASKED, top_k=3)
        assert [[[c["token"] for c in mask] for mask in text] for text in body] == [
            [[c["token"] for c in mask] for mask in text] for text in expected
        ]
        assert body[1][1][0]["sequence"] == expected[1][1][0]["sequence"]
        missing = client.post("/fill_mask", json={"inputs": ["a [MASK]", "none"]})
        assert missing.status_code == 422
        assert "input 1 has no [MASK] token" in missing.json()["error"]
        nsp = client.post("/predict", json={"inputs": ["a", "b"]})
        assert nsp.status_code == 422
        assert "no NSP head; it was exported from BertForMaskedLM" in nsp.json()["error"]
    finally:
        client.__exit__(None, None, None)
    client = _serve(pretraining)
    try:  # a pre-training export keeps NSP on /predict
        body = client.post("/predict", json={"inputs": ["the weather is nice", "i agree"]}).json()
        assert {p["label"] for p in body} == {"is_next", "not_next"}
        is_next = next(p["score"] for p in body if p["label"] == "is_next")
        assert is_next == pytest.approx(_load(pretraining).nsp("the weather is nice", "i agree"), abs=1e-6)
    finally:
        client.__exit__(None, None, None)


# -- the corpus job ---------------------------------------------------------------------------------------


def test_batch_classify_writes_label_and_score(heads: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from bertonnx.corpus import TaskOptions
    from bertonnx.corpus.compute import compute_rows, output_schema
    from bertonnx.corpus.job import run_local_job

    export = heads["single"][1]
    rows = [{"text": text, "pair": pair} for text, pair in zip(TEXTS, PAIRS, strict=True)]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in [*rows, {"text": None, "pair": "x"}]))
    output = tmp_path / "out.parquet"
    options = TaskOptions("classify", on_error="skip")
    run_local_job(export, source, output, options, pair_column="pair", progress=False)
    table = pq.read_table(output)
    assert table.column_names == ["id", "n_tokens", "label", "score"]
    expected = [ranked[0] for ranked in _load(export).classify(TEXTS, PAIRS)]
    assert table.column("label").to_pylist() == [p["label"] for p in expected]
    np.testing.assert_allclose(table.column("score").to_numpy(), [p["score"] for p in expected], atol=1e-6)
    chunk = pa.table(
        {"id": pa.array([0, 1], pa.int64()), "text": ["a", None], "pair": [None, None], "error": [None, "bad row"]}
    )
    kept = compute_rows(_load(export), chunk, options).table(output_schema("classify", 32), keep_rejected=True)
    assert kept.column("label").to_pylist() == [_load(export).classify("a")[0]["label"], None]
    with pytest.raises(HeadMissingError, match="no classification head; it was exported from BertModel"):
        run_local_job(heads["encoder"][1], source, tmp_path / "x.parquet", options, pair_column="pair")
