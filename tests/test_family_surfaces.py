"""Every family beyond BERT on the server and in corpus jobs: each route and each corpus task answers exactly what
the offline :class:`bertonnx.BertOnnx` methods give, over unicode, a pair and an input over the model's limit.

The exports are the tiny seeded ones of tests/test_families.py (``family_export`` in conftest.py: built once per
session, shared), plus one one-label classifier per family for ``/rerank``. Each export gets one in-process app
(``TestClient``, its lifespan run); corpus jobs run in-process through ``bertonnx batch``'s ``main``.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bertonnx import BertOnnx
from bertonnx.serve import ServeOptions
from bertonnx.table import FAMILIES

from .families import CLASSES, FAMILY_PREFIXES

pytest.importorskip("torch")
pytest.importorskip("transformers")

ATOL = 1e-6
READY_TIMEOUT_S = 60
_LONG = "Café déjà vu, 北京 and 😀 appear in the history of natural language processing since the 1950s. "
#: Over 512 tokens with every family's tokenizer.
LONG = _LONG * 40
TEXTS = ["the weather is nice", "Café déjà vu: naïve façade, résumé.", "北京是中国的首都。東京は日本の首都です。"]
PAIR = ("What is the capital of France?", "Paris is the capital and largest city of France.")
QUESTION = "Where does John Smith live?"
CONTEXT = "John Smith lives in New York and works for the United Nations in Geneva."


def _class(family: str, suffix: str) -> str:
    return FAMILY_PREFIXES[family] + suffix


def _load(export: Path) -> BertOnnx:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return BertOnnx(export, threads=1)


@contextmanager
def _serve(export: Path, **options: Any) -> Iterator[Any]:
    """A started in-process app on ``export`` whose model is loaded."""
    from fastapi.testclient import TestClient

    from bertonnx.serve import create_app

    with TestClient(create_app(export, ServeOptions(**options), threads=1)) as client:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while client.get("/ready").status_code != 200:
            assert time.monotonic() < deadline, f"the model did not load within {READY_TIMEOUT_S} s"
            time.sleep(0.02)
        yield client


def _same(got: Any, expected: Any, where: str = "") -> None:
    """``got`` (parsed JSON) equals ``expected`` (offline answers): same structure, keys, strings and integers;
    floats within :data:`ATOL`."""
    if isinstance(expected, np.ndarray):
        expected = expected.tolist()
    if isinstance(expected, dict):
        assert isinstance(got, dict), (where, got)
        assert set(got) == set(expected), (where, got, expected)
        for key in expected:
            _same(got[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, (list, tuple)):
        assert isinstance(got, list), (where, got)
        assert len(got) == len(expected), (where, got, expected)
        for index, (ours, theirs) in enumerate(zip(got, expected, strict=True)):
            _same(ours, theirs, f"{where}[{index}]")
    elif isinstance(expected, (float, np.floating)) and not isinstance(expected, bool):
        assert got == pytest.approx(float(expected), abs=ATOL), (where, got, expected)
    else:
        assert got == expected, (where, got, expected)


def _ok(response: Any) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


# -- the server ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", list(CLASSES))
def test_server_routes_equal_offline(family_export: Any, family: str) -> None:
    texts = [*TEXTS, LONG]
    # the encoder: /embed, /v1/embeddings, /tokenize
    export = family_export(_class(family, "Model"))[1]
    model = _load(export)
    poolings = ["cls", "mean", *(["pooler"] if FAMILIES[family].pooler else [])]
    with _serve(export, pooling="mean") as client:
        for pooling in poolings:
            body = {"inputs": texts, "pooling": pooling, "truncate": True}
            _same(_ok(client.post("/embed", json=body)), model.embed(texts, pooling, normalize=True, truncation=True))
        too_long = [*TEXTS, _LONG * (model.max_length // 8)]  # over the limit (ModernBERT's is 8,192)
        refused = client.post("/embed", json={"inputs": too_long, "pooling": "mean"})
        assert refused.status_code == 422, refused.text  # over the limit without truncation
        error = refused.json()["error"]  # "N tokens, more than the model's limit of L" or "more than L tokens, ..."
        assert "the model's limit" in error, error
        assert f" {model.max_length}" in error, error
        vectors = [d["embedding"] for d in _ok(client.post("/v1/embeddings", json={"input": TEXTS}))["data"]]
        _same(vectors, model.embed(TEXTS, "mean", normalize=True))
        tokens = _ok(client.post("/tokenize", json={"inputs": [TEXTS[1], list(PAIR)]}))
        encodings = [*model.encode([TEXTS[1]]), *model.encode([PAIR[0]], [PAIR[1]])]
        assert [t["ids"] for t in tokens] == [e.ids for e in encodings]
        assert [t["tokens"] for t in tokens] == [e.tokens for e in encodings]
        # KServe v2: the family's own graph inputs (no token_type_ids where it has no segments)
        metadata = _ok(client.get(f"/v2/models/{export.name}"))
        assert [i["name"] for i in metadata["inputs"]] == list(FAMILIES[family].inputs)
        (encoding,) = model.encode([TEXTS[1]])
        feeds = {
            "input_ids": encoding.ids,
            "attention_mask": [1] * len(encoding.ids),
            "token_type_ids": encoding.type_ids,
        }
        body = {
            "inputs": [
                {"name": name, "shape": [1, len(encoding.ids)], "datatype": "INT64", "data": feeds[name]}
                for name in FAMILIES[family].inputs
            ],
            "outputs": [{"name": "last_hidden_state"}],
        }
        (output,) = _ok(client.post(f"/v2/models/{export.name}/infer", json=body))["outputs"]
        states = np.array(output["data"], dtype=np.float32).reshape(output["shape"])[0]
        np.testing.assert_allclose(states, model([TEXTS[1]]).token_states(0), atol=1e-5, rtol=0)
    # sequence classification: /predict over texts and a pair; /rerank on a one-logit classifier
    export = family_export(_class(family, "ForSequenceClassification"))[1]
    model = _load(export)
    with _serve(export) as client:
        got = _ok(client.post("/predict", json={"inputs": [*texts, list(PAIR)], "truncate": True}))
        expected = [*model.classify(texts, top_k=None, truncation=True), model.classify(*PAIR, top_k=None)]
        _same(got, expected)
    export = family_export(_class(family, "ForSequenceClassification"), 1)[1]
    model = _load(export)
    with _serve(export) as client:
        got = _ok(client.post("/rerank", json={"query": PAIR[0], "texts": texts, "truncate": True}))
        _same(got, model.rerank(PAIR[0], texts, truncation=True))
    # token classification: /tag, the long text in windows
    export = family_export(_class(family, "ForTokenClassification"))[1]
    model = _load(export)
    with _serve(export) as client:
        body = {"inputs": texts, "ignore_labels": [], "stride": 32, "aggregation_strategy": "first"}
        _same(_ok(client.post("/tag", json=body)), model.tag(texts, "first", ignore_labels=(), stride=32))
        body = {"inputs": TEXTS[1], "ignore_labels": [], "aggregation_strategy": "none"}
        _same(_ok(client.post("/tag", json=body)), model.tag(TEXTS[1], "none", ignore_labels=()))
    # question answering: /answer over a short and a long context
    export = family_export(_class(family, "ForQuestionAnswering"))[1]
    model = _load(export)
    with _serve(export) as client:
        body = {"question": [QUESTION, QUESTION], "context": [CONTEXT, CONTEXT * 40], "top_k": 2}
        _same(_ok(client.post("/answer", json=body)), model.answer([QUESTION] * 2, [CONTEXT, CONTEXT * 40], top_k=2))
    # masked LM: /fill_mask with the family's own mask token
    export = family_export(_class(family, "ForMaskedLM"))[1]
    model = _load(export)
    mask = model.tokenizer.mask_token
    masked = [f"the capital of france is {mask}.", f"{mask} déjà vu, 北京 {mask}", f"{mask} {LONG}"]
    with _serve(export) as client:
        got = _ok(client.post("/fill_mask", json={"inputs": masked, "top_k": 3, "truncate": True}))
        _same(got, model.fill_mask(masked, top_k=3, truncation=True))
    # multiple choice: /choose
    export = family_export(_class(family, "ForMultipleChoice"))[1]
    model = _load(export)
    with _serve(export) as client:
        body = {"context": [PAIR[0], TEXTS[1]], "choices": [["Paris", "北京", "Lyon"], ["yes", "no"]]}
        _same(_ok(client.post("/choose", json=body)), model.choose(body["context"], body["choices"]))


# -- corpus jobs ---------------------------------------------------------------------------------------------


def _job(export: Path, directory: Path, name: str, rows: list[str], *options: str) -> Any:
    import pyarrow.parquet as pq

    from bertonnx.corpus.cli import main as batch

    source = directory / f"{name}.jsonl"
    source.write_text("".join(json.dumps({"text": text}) + "\n" for text in rows), encoding="utf-8")
    output = directory / f"{name}.parquet"
    argv = [str(export), "--input", str(source), "--output", str(output), "--threads", "1", *options]
    assert batch(argv) == 0
    table = pq.read_table(output)
    assert table.column("id").to_pylist() == list(range(len(rows)))
    return table


@pytest.mark.parametrize("family", list(CLASSES))
def test_corpus_jobs_equal_offline(family_export: Any, family: str, tmp_path: Path) -> None:
    rows = [*TEXTS, "", LONG]
    export = family_export(_class(family, "Model"))[1]
    model = _load(export)
    table = _job(export, tmp_path, "embed", rows, "--pooling", "mean", "--truncation")
    expected = model.embed(rows, "mean", truncation=True)
    np.testing.assert_allclose(np.array(table.column("embedding").to_pylist()), expected, atol=1e-5, rtol=0)
    assert table.column("n_tokens").to_pylist() == [len(e.ids) for e in model.encode(rows, truncation=True)]

    export = family_export(_class(family, "ForSequenceClassification"))[1]
    model = _load(export)
    table = _job(export, tmp_path, "classify", rows, "--task", "classify", "--truncation")
    best = [ranked[0] for ranked in model.classify(rows, truncation=True)]
    assert table.column("label").to_pylist() == [b["label"] for b in best]
    np.testing.assert_allclose(table.column("score").to_pylist(), [b["score"] for b in best], atol=1e-6, rtol=0)

    export = family_export(_class(family, "ForTokenClassification"))[1]
    model = _load(export)
    table = _job(export, tmp_path, "tag", rows, "--task", "tag", "--stride", "32", "--keep-all")
    found = table.column("entities").to_pylist()
    offline = model.tag(rows, ignore_labels=(), stride=32)
    _same(found, offline)  # the pipeline's field names, entity_group included
