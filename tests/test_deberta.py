"""DeBERTa-v2/v3 beyond what tests/test_families.py checks for every family.

test_families.py puts every DeBERTa class (v3's settings: relative attention over 256 log buckets, c2p + p2c,
shared keys, no absolute positions, no segments) through the gate and the pipelines, as every family. Here: the
graph takes ``token_type_ids`` only when the config embeds segments; the relative-position gathers of a graph
exported at optimum's 16-token dummy input run at every length up to the limit (bucket edges included); the
other sequence-classification problem types (multi-label, regression, a one-logit reranker) equal the pipelines;
an MLM head laid out as deberta-v3-base's published weights hold it (``lm_predictions``) is refused, not seeded.

The tokenizer is the ``tokenizers`` Unigram saved as ``DebertaV2TokenizerFast`` (tests/families.py): the slow
``DebertaV2Tokenizer`` needs ``sentencepiece`` and a SentencePiece model file, neither of which is here, so the
runtime's tokens are compared with the fast tokenizer only.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from bertonnx.manifest import read_manifest

from .families import build_family_checkpoint
from .test_families import EXACT_ATOL, PAIRS, TEXTS, _assert_ranked, _load, _pipeline

pytest.importorskip("torch")
pytest.importorskip("transformers")

#: name -> (class, config attributes, num_labels)
CHECKPOINTS: dict[str, tuple[str, dict[str, Any], int | None]] = {
    "segments": ("DebertaV2Model", {"type_vocab_size": 2}, None),
    "multi_label": ("DebertaV2ForSequenceClassification", {"problem_type": "multi_label_classification"}, None),
    "regression": ("DebertaV2ForSequenceClassification", {"problem_type": "regression"}, 2),
    "reranker": ("DebertaV2ForSequenceClassification", {}, 1),
}
#: Lengths around optimum's dummy input (16 tokens) and the log buckets' edge (|relative position| 128).
LENGTHS = (1, 2, 15, 16, 17, 64, 127, 128, 129, 130, 200, 256, 257, 384, 511, 512)


@pytest.fixture(scope="module")
def deberta_export(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Path, Path]]:
    """``name -> (checkpoint, export)`` of :data:`CHECKPOINTS`, each built once on first use: fp32, and the
    ``segments`` one also bf16 (OpenVINO compiles the graph only without the traced ``If``)."""
    from bertonnx_export.pipeline import ExportOptions, run_export

    root = tmp_path_factory.mktemp("deberta")
    built: dict[str, tuple[Path, Path]] = {}

    def get(name: str) -> tuple[Path, Path]:
        import torch

        if name not in built:
            architecture, config, num_labels = CHECKPOINTS[name]
            checkpoint = build_family_checkpoint(
                architecture, root / name / "checkpoint", num_labels=num_labels, config=config
            )
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    variants = ("fp32", "bf16") if name == "segments" else ("fp32",)
                    options = ExportOptions(outdir=root / name / "model", model=str(checkpoint), variants=variants)
                    run_export(options, log=lambda _: None)
            finally:
                torch.set_num_threads(threads)
            built[name] = (checkpoint, root / name / "model")
        return built[name]

    return get


@functools.cache
def _torch_model(checkpoint: Path) -> Any:
    from transformers import AutoModel

    return AutoModel.from_pretrained(str(checkpoint)).eval()


def _torch_states(checkpoint: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import torch

    model = _torch_model(checkpoint)
    with torch.inference_mode():
        return model(**{k: torch.from_numpy(v) for k, v in feeds.items()}).last_hidden_state.numpy()


def test_segments_only_when_the_config_embeds_them(deberta_export: Any) -> None:
    checkpoint, export = deberta_export("segments")
    manifest = read_manifest(export)
    assert manifest.input_names == ("input_ids", "attention_mask", "token_type_ids")
    assert manifest.config["type_vocab_size"] == 2
    assert manifest.variants["fp32"]["parity"]["last_hidden_state_max_abs"] <= EXACT_ATOL
    assert manifest.variants["bf16"]["parity"]["passed"], manifest.variants["bf16"]["parity"]
    graph = onnx.load(str(export / "model.onnx"), load_external_data=False)
    assert "If" not in {node.op_type for node in graph.graph.node}  # build_rpos traced as Python
    plain = read_manifest(deberta_export("multi_label")[1])  # v3's type_vocab_size 0
    assert plain.input_names == ("input_ids", "attention_mask")
    assert plain.config["type_vocab_size"] == 0
    # the runtime feeds the second segment's ids, and they change the states (the test would see them dropped)
    model = _load(export)
    firsts, seconds = [a for a, _ in PAIRS[:3]], [b for _, b in PAIRS[:3]]
    out = model(firsts, seconds)
    for index, encoding in enumerate(model.encode(firsts, seconds)):
        feeds = {
            "input_ids": np.array([encoding.ids]),
            "attention_mask": np.ones((1, len(encoding.ids)), dtype=np.int64),
            "token_type_ids": np.array([encoding.type_ids]),
        }
        assert 1 in encoding.type_ids
        expected = _torch_states(checkpoint, feeds)[0]
        np.testing.assert_allclose(out.token_states(index), expected, atol=EXACT_ATOL, rtol=0)
        unsegmented = _torch_states(checkpoint, {**feeds, "token_type_ids": np.zeros_like(feeds["token_type_ids"])})
        assert np.abs(unsegmented[0] - expected).max() > 100 * EXACT_ATOL


def test_relative_positions_at_every_length(deberta_export: Any) -> None:
    """One graph, exported at a 16-token dummy input, against PyTorch at each of :data:`LENGTHS`, alone and
    all of them right-padded in one batch (the bucketed relative positions are rebuilt from the run's length)."""
    import onnxruntime as ort

    checkpoint, export = deberta_export("segments")
    session = ort.InferenceSession(str(export / "model.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    vocab = read_manifest(export).config["vocab_size"]
    rows = [rng.integers(4, vocab - 1, size=n) for n in LENGTHS]
    batch = {
        "input_ids": np.zeros((len(rows), max(LENGTHS)), dtype=np.int64),
        "attention_mask": np.zeros((len(rows), max(LENGTHS)), dtype=np.int64),
        "token_type_ids": np.zeros((len(rows), max(LENGTHS)), dtype=np.int64),
    }
    for index, row in enumerate(rows):
        batch["input_ids"][index, : len(row)] = row
        batch["attention_mask"][index, : len(row)] = 1
        batch["token_type_ids"][index, len(row) // 2 : len(row)] = 1
    (padded,) = session.run(["last_hidden_state"], batch)
    worst = 0.0
    for index, n in enumerate(LENGTHS):
        feeds = {name: value[index : index + 1, :n] for name, value in batch.items()}
        expected = _torch_states(checkpoint, feeds)[0]
        (alone,) = session.run(["last_hidden_state"], feeds)
        worst = max(worst, float(np.abs(alone[0] - expected).max()), float(np.abs(padded[index, :n] - expected).max()))
        assert worst <= EXACT_ATOL, (n, worst)


@pytest.mark.parametrize("name", ["multi_label", "regression"])
def test_problem_types_equal_the_pipeline(deberta_export: Any, name: str) -> None:
    checkpoint, export = deberta_export(name)
    reference = _pipeline("text-classification", checkpoint, top_k=None)
    model = _load(export)
    _assert_ranked(model.classify(TEXTS, top_k=None, truncation=True), reference(TEXTS, truncation=True))
    firsts, seconds = [a for a, _ in PAIRS[:3]], [b for _, b in PAIRS[:3]]
    expected = reference([{"text": a, "text_pair": b} for a, b in PAIRS[:3]])
    _assert_ranked(model.classify(firsts, seconds, top_k=None), expected)


def test_rerank_equals_the_pipeline(deberta_export: Any) -> None:
    checkpoint, export = deberta_export("reranker")
    model = _load(export)
    assert "rerank" in model.tasks
    query = "What is the capital of France?"
    texts = ["Paris is the capital and largest city of France.", "北京是中国的首都。", "", TEXTS[5]]
    reference = _pipeline("text-classification", checkpoint, top_k=None)
    theirs = [reference({"text": query, "text_pair": text}, truncation=True)[0]["score"] for text in texts]
    ours = model.rerank(query, texts, truncation=True)
    # each text's score equals the pipeline's (seeded scores may tie within 1e-4, so the order is checked on ours)
    assert sorted(r["index"] for r in ours) == list(range(len(texts)))
    np.testing.assert_allclose([r["score"] for r in ours], [theirs[r["index"]] for r in ours], atol=EXACT_ATOL, rtol=0)
    assert [r["score"] for r in ours] == sorted((r["score"] for r in ours), reverse=True)


def test_weights_of_the_other_mlm_head_are_refused(tmp_path: Path) -> None:
    """deberta-v3-base's published weights hold the MLM head as ``lm_predictions.lm_head`` while its config says
    nothing of ``legacy`` (so True: transformers builds ``cls.predictions`` and seeds it). The export refuses it as
    a missing head rather than export made-up fill-mask answers. (transformers 4.57 cannot run that head either:
    with ``legacy`` False it ties ``lm_head.dense`` to the word embeddings.)"""
    from safetensors.torch import load_file, save_file

    from bertonnx_export.errors import ExportError
    from bertonnx_export.pipeline import ExportOptions, run_export

    checkpoint = build_family_checkpoint("DebertaV2ForMaskedLM", tmp_path / "checkpoint")
    weights = load_file(str(checkpoint / "model.safetensors"))
    renames = {
        "cls.predictions.transform.": "lm_predictions.lm_head.",
        "cls.predictions.bias": "lm_predictions.lm_head.bias",
    }
    published = {}
    for name, tensor in weights.items():
        for old, new in renames.items():
            name = name.replace(old, new)
        if not name.startswith("cls.predictions.decoder"):
            published[name] = tensor.contiguous()
    assert "lm_predictions.lm_head.dense.weight" in published
    save_file(published, str(checkpoint / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ExportError, match=r"has no trained mlm head \(missing cls\.predictions\."):
        run_export(ExportOptions(outdir=tmp_path / "model", model=str(checkpoint)), log=lambda _: None)
