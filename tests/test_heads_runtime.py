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
    "pretraining": {"architecture": "BertForPreTraining"},
    "encoder": {"architecture": "BertModel"},
}
#: Variants exported per checkpoint (all three for the single-label classifier: the lossy limit is judged there).
VARIANTS = {"single": ("fp32", "optimized", "int8")}


@pytest.fixture(scope="module")
def heads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """``name -> (checkpoint, export)`` for every entry of ``CHECKPOINTS``, exported without flags."""
    from bertonnx_export.pipeline import ExportOptions, run_export

    root = tmp_path_factory.mktemp("heads")
    built = {}
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
