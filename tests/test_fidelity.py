"""Issue 34's classes of difference from transformers' pipelines, one test per class (each failed before its
fix): an empty second text, pair truncation, answer's default ``doc_stride``, fill-mask's ``[PAD]`` and
``targets``, the shape of every task's answer (docs/tasks.md, "Shapes"), and the server's input forms.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bertonnx import BertOnnx

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ATOL = 1e-4
LONG_A = " ".join(f"word{i % 17} alpha" for i in range(300))
LONG_B = " ".join(f"other{i % 13} beta" for i in range(400))


def _pipe(task: str, checkpoint: Path, **kwargs: Any) -> Any:
    return transformers.pipeline(task, model=str(checkpoint), device="cpu", **kwargs)


def _labels(found: list[dict[str, Any]]) -> dict[str, float]:
    return {item["label"]: float(item["score"]) for item in found}


def _assert_labels(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> None:
    assert [item["label"] for item in ours] == [item["label"] for item in theirs]
    mine, reference = _labels(ours), _labels(theirs)
    for label, score in reference.items():
        assert mine[label] == pytest.approx(score, abs=ATOL), label


# -- 1. an exactly empty second text is no pair ----------------------------------------------------------------


def test_empty_second_text_is_dropped_as_the_pipeline_drops_it(
    pipeline_heads: dict[str, tuple[Path, Path]], tiny_checkpoint: Path, tiny_export: Path
) -> None:
    checkpoint, export = pipeline_heads["single"]
    model = BertOnnx(export)
    theirs = _pipe("text-classification", checkpoint)({"text": "hello world", "text_pair": ""}, top_k=None)
    _assert_labels(model.classify("hello world", "", top_k=None), theirs)
    assert model.tokenize("hello world", "").tokens == ["[CLS]", "hello", "world", "[SEP]"]

    checkpoint, export = pipeline_heads["rerank"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    torch_model = transformers.AutoModelForSequenceClassification.from_pretrained(checkpoint).eval()
    texts = ["", "the weather is nice", ""]
    with torch.no_grad():  # one pair at a time, as the pipeline tokenizes (a batch call would keep the empty pair)
        logits = [float(torch_model(**tokenizer("what is it?", t, return_tensors="pt")).logits[0, 0]) for t in texts]
    ranked = BertOnnx(export).rerank("what is it?", texts, raw_scores=True)
    assert {r["index"]: r["score"] for r in ranked} == pytest.approx(dict(enumerate(logits)), abs=ATOL)

    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_checkpoint)
    nsp_model = transformers.BertForPreTraining.from_pretrained(tiny_checkpoint).eval()
    with torch.no_grad():
        logits = nsp_model(**tokenizer("the weather is nice", "", return_tensors="pt")).seq_relationship_logits[0]
    assert BertOnnx(tiny_export).nsp("the weather is nice", "") == pytest.approx(
        float(torch.softmax(logits, -1)[0]), abs=ATOL
    )


# -- 2. pair truncation is the fast tokenizer's longest_first ---------------------------------------------------


def test_long_pairs_are_cut_as_the_pipeline_cuts_them(pipeline_heads: dict[str, tuple[Path, Path]]) -> None:
    """Both sides over half the budget: the odd token of the 509-token budget goes to the longer (second)."""
    checkpoint, export = pipeline_heads["single"]
    model = BertOnnx(export)
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    for a, b in ((LONG_A, LONG_B), (LONG_B, LONG_A), (LONG_A, LONG_A)):
        want = tokenizer(a, b, truncation=True, max_length=512)
        got = model.tokenize(a, b, truncation=True)
        assert (got.ids, got.type_ids) == (want["input_ids"], want["token_type_ids"])
    theirs = _pipe("text-classification", checkpoint)(
        {"text": LONG_A, "text_pair": LONG_B}, top_k=None, truncation=True, max_length=512
    )
    _assert_labels(model.classify(LONG_A, LONG_B, top_k=None, truncation=True), theirs)


# -- 3. answer's doc_stride defaults to the pipeline's rule -----------------------------------------------------

QA_CONTEXT = " ".join(f"Paragraph {i}: the café in Zürich opened in {1900 + i}, said Angela Merkel." for i in range(12))


@pytest.mark.parametrize("max_seq_len", [48, 100, 200, 384])
def test_answer_default_doc_stride_is_the_pipelines(
    tiny_qa_checkpoint: Path, tiny_qa_export: Path, max_seq_len: int
) -> None:
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_qa_checkpoint, model_max_length=512)
    pipe = transformers.pipeline("question-answering", model=str(tiny_qa_checkpoint), tokenizer=tokenizer, device="cpu")
    theirs = pipe(question="Who spoke?", context=QA_CONTEXT, max_seq_len=max_seq_len, top_k=3)
    ours = BertOnnx(tiny_qa_export).answer("Who spoke?", QA_CONTEXT, top_k=3, max_seq_len=max_seq_len)
    assert [(a["start"], a["end"]) for a in ours] == [(a["start"], a["end"]) for a in theirs]
    np.testing.assert_allclose([a["score"] for a in ours], [a["score"] for a in theirs], atol=ATOL, rtol=1e-3)


# -- 4. fill-mask: [PAD] dropped from sequences, targets --------------------------------------------------------


def _assert_fills(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> None:
    assert [(d["token"], d["token_str"], d["sequence"]) for d in ours] == [
        (d["token"], d["token_str"], d["sequence"]) for d in theirs
    ]
    np.testing.assert_allclose([d["score"] for d in ours], [d["score"] for d in theirs], atol=1e-6, rtol=1e-4)


def test_fill_mask_targets_from_the_command_line_and_http(
    pipeline_heads: dict[str, tuple[Path, Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from fastapi.testclient import TestClient

    from bertonnx.cli import main
    from bertonnx.serve import create_app

    export = pipeline_heads["mlm"][1]
    text, targets = "the capital of france is [MASK].", ["paris", "london"]
    want = BertOnnx(export).fill_mask(text, targets=targets)
    assert main(["fill-mask", str(export), text, "--target", "paris", "--target", "london", "--json"]) == 0
    _assert_fills(json.loads(capsys.readouterr().out)["results"][0][0], want[0])
    with TestClient(create_app(export)) as client:
        for _ in range(1500):
            if client.get("/ready").status_code == 200:
                break
            time.sleep(0.02)
        _assert_fills(client.post("/fill_mask", json={"inputs": text, "targets": targets}).json()[0], want[0])


def test_fill_mask_drops_pad_and_takes_targets(pipeline_heads: dict[str, tuple[Path, Path]]) -> None:
    checkpoint, export = pipeline_heads["mlm"]
    model, pipe = BertOnnx(export), _pipe("fill-mask", checkpoint)
    for text in ("[PAD] the [MASK] is [MASK] [PAD].", "a [PAD] [MASK]", "[MASK] [PAD] [MASK] [SEP] [MASK]"):
        theirs = pipe(text, top_k=3)
        theirs = [theirs] if isinstance(theirs[0], dict) else theirs
        for our_mask, their_mask in zip(model.fill_mask(text, top_k=3), theirs, strict=True):
            _assert_fills(our_mask, their_mask)
    text = "the capital of france is [MASK]."
    for targets in (["paris", "london", "the"], "paris", ["paris", "paris"]):
        _assert_fills(model.fill_mask(text, targets=targets)[0], pipe(text, targets=targets))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = model.fill_mask(text, targets=["parisxyz", "london"], top_k=1)[0]
    assert any("'parisxyz' is not in the vocabulary" in str(w.message) for w in caught)
    _assert_fills(ours, pipe(text, targets=["parisxyz", "london"], top_k=1))
    with pytest.raises(ValueError, match="no target is left"):
        model.fill_mask(text, targets=[])
    with pytest.raises(TypeError, match="targets must be a string or a list of strings"):
        model.fill_mask(text, targets=[3])  # type: ignore[list-item]


# -- 5. the shape of every task's answer (docs/tasks.md, "Shapes") ----------------------------------------------


def test_answer_shapes_follow_the_documented_rule(
    pipeline_heads: dict[str, tuple[Path, Path]], tiny_qa_checkpoint: Path, tiny_qa_export: Path
) -> None:
    """Shapes depend on the call (a string or a list, ``top_k``), never on what was found; where the pipeline's
    shape depends on the data (one answer, one mask) the table in docs/tasks.md says so."""
    checkpoint, export = pipeline_heads["single"]
    model, pipe = BertOnnx(export), _pipe("text-classification", checkpoint)
    assert isinstance(model.classify("a"), list)
    assert isinstance(pipe("a"), list)
    assert len(model.classify("a")) == len(pipe("a")) == 1
    assert all(isinstance(x, list) for x in model.classify(["a", "b"]))  # per input a list; the pipeline: a dict
    assert all(isinstance(x, dict) for x in pipe(["a", "b"]))
    checkpoint, export = pipeline_heads["mlm"]
    mlm, fill = BertOnnx(export), _pipe("fill-mask", checkpoint)
    assert isinstance(mlm.fill_mask("a [MASK]")[0], list)  # per mask a list, even for one mask
    assert isinstance(fill("a [MASK]")[0], dict)  # the pipeline unwraps one mask
    qa = BertOnnx(tiny_qa_export)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_qa_checkpoint, model_max_length=512)
    answer = transformers.pipeline("question-answering", model=str(tiny_qa_checkpoint), tokenizer=tokenizer)
    context = " ".join(["Paris"] * 20)  # every span of the best 16 is "Paris": one answer, its scores summed
    one = qa.answer("who?", context, top_k=3, max_answer_len=1)
    theirs = answer(question="who?", context=context, top_k=3, max_answer_len=1)
    assert isinstance(one, list)
    assert len(one) == 1
    assert isinstance(theirs, dict)
    assert one[0] == {**theirs, "score": pytest.approx(theirs["score"], abs=ATOL)}
    assert isinstance(qa.answer("who?", "Paris"), dict)
    assert isinstance(qa.answer(["who?"], "Paris"), list)


# -- 6. the server's input forms are offline's -------------------------------------------------------------------


def test_server_bare_two_strings_are_one_pair(pipeline_heads: dict[str, tuple[Path, Path]]) -> None:
    from fastapi.testclient import TestClient

    from bertonnx.serve import create_app

    export = pipeline_heads["single"][1]
    model = BertOnnx(export)
    with TestClient(create_app(export)) as client:
        for _ in range(1500):
            if client.get("/ready").status_code == 200:
                break
            time.sleep(0.02)
        pair = client.post("/predict", json={"inputs": ["i loved it", "me too"]}).json()
        _assert_labels(pair, model.classify("i loved it", "me too", top_k=None))
        nested = client.post("/predict", json={"inputs": [["i loved it", "me too"]]}).json()
        assert nested == [pair]
        texts = client.post("/predict", json={"inputs": ["i loved it", "me too", "x"]}).json()
        for ours, want in zip(texts, model.classify(["i loved it", "me too", "x"], top_k=None), strict=True):
            _assert_labels(ours, want)
        one = client.post("/predict", json={"inputs": "i loved it"}).json()
        _assert_labels(one, model.classify("i loved it", top_k=None))
