"""The export keeps each checkpoint's own heads (issue 19): every tiny class exported without flags, the
manifest's task block, heads compared with torch, the gate failing on a broken head, ``--task``, and (slow)
bert-base-uncased's pre-training export with its MLM head."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch
import transformers
from onnx import numpy_helper

from bertonnx import BertOnnx, RuntimeOptions
from bertonnx.info import _weights_between
from bertonnx.manifest import MANIFEST_FILE, MLM_HEAD_FILE, read_manifest
from bertonnx.session import open_variant_session
from bertonnx_export.errors import ExportError
from bertonnx_export.heads import ARCHITECTURES
from bertonnx_export.pipeline import ExportOptions, run_export

from .heads import build_tiny_checkpoint

EXACT_ATOL = 1e-4
#: name -> (architecture, build_tiny_checkpoint options, variants exported)
CASES: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    "encoder": ("BertModel", {}, ("fp32",)),
    "pretraining": ("BertForPreTraining", {}, ("fp32",)),
    "masked-lm": ("BertForMaskedLM", {}, ("fp32",)),
    "nsp": ("BertForNextSentencePrediction", {}, ("fp32",)),
    "sentiment": ("BertForSequenceClassification", {}, ("fp32", "optimized")),
    "multi-label": ("BertForSequenceClassification", {"problem_type": "multi_label_classification"}, ("fp32",)),
    "cross-encoder": ("BertForSequenceClassification", {"num_labels": 1}, ("fp32",)),
    "regression": ("BertForSequenceClassification", {"num_labels": 1, "problem_type": "regression"}, ("fp32",)),
    "ner": ("BertForTokenClassification", {}, ("fp32",)),
    "qa": ("BertForQuestionAnswering", {}, ("fp32",)),
}
#: What each case's manifest must say: tasks, num_labels, problem type.
EXPECTED_TASKS = {
    "encoder": (["embed"], None, None),
    "pretraining": (["embed", "nsp", "fill_mask"], None, None),
    "masked-lm": (["embed", "fill_mask"], None, None),
    "nsp": (["embed", "nsp"], None, None),
    "sentiment": (["embed", "classify"], 3, None),
    "multi-label": (["embed", "classify"], 3, "multi_label_classification"),
    "cross-encoder": (["embed", "classify", "rerank"], 1, None),
    "regression": (["embed", "classify", "rerank"], 1, "regression"),
    "ner": (["embed", "tag"], 5, None),
    "qa": (["embed", "answer"], None, None),
}
PAIRS = [
    ("The film was wonderful.", None),
    ("he went to the store.", "he bought a gallon of milk."),
    ("Café déjà vu, 北京 and the [MASK] of France.", "Paris is the [MASK]."),
]


def _quiet(message: str) -> None:
    pass


def _session(path: Path) -> Any:
    return open_variant_session(path, "fp32", RuntimeOptions(allow_spinning=False))


@pytest.fixture(scope="session")
def head_exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Each case's tiny checkpoint and its export made without flags: name -> (checkpoint, export)."""
    root = tmp_path_factory.mktemp("heads")
    built = {}
    for name, (architecture, options, variants) in CASES.items():
        checkpoint = build_tiny_checkpoint(architecture, root / f"{name}-checkpoint", **options)
        outdir = root / f"{name}-export"
        run_export(ExportOptions(outdir=outdir, model=str(checkpoint), variants=variants), log=_quiet)
        built[name] = (checkpoint, outdir)
    return built


def _feeds(export: Path, index: int) -> dict[str, np.ndarray]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(export / "tokenizer.json"))
    text, pair = PAIRS[index]
    enc = tokenizer.encode(text, pair) if pair else tokenizer.encode(text)
    ids = np.array([enc.ids], dtype=np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.array([enc.type_ids])}


@pytest.mark.parametrize("name", list(CASES))
def test_every_class_exports_without_flags(head_exports: dict[str, tuple[Path, Path]], name: str) -> None:
    checkpoint, export = head_exports[name]
    architecture = CASES[name][0]
    row = ARCHITECTURES[architecture]
    manifest = read_manifest(export)
    tasks, num_labels, problem_type = EXPECTED_TASKS[name]
    assert manifest.architecture == architecture
    assert list(manifest.tasks) == tasks
    assert manifest.heads == {head: "trained" for head in row.heads}
    assert manifest.num_labels == num_labels
    assert manifest.problem_type == problem_type
    labels = json.loads((checkpoint / "config.json").read_text()).get("id2label") if num_labels else None
    assert manifest.id2label == ({int(k): v for k, v in labels.items()} if labels else None)
    assert manifest.graph_outputs == row.outputs
    assert not manifest.random_weights
    assert json.loads((export / "config.json").read_text())["architectures"] == [architecture]
    assert ("nsp" in manifest.data) == ("nsp" in row.heads)
    assert (manifest.mlm_head is not None) == row.has_mlm == (export / MLM_HEAD_FILE).is_file()
    for variant, record in manifest.variants.items():
        assert record["parity"]["passed"], variant
        measured = {key.removesuffix("_max_abs") for key in record["parity"] if key.endswith("_max_abs")}
        expected = set(row.outputs) | ({"mlm_logits"} if row.has_mlm else set())
        assert expected <= measured, variant  # every head was compared with torch
        for output in expected:
            assert record["parity"][f"{output}_max_abs"] <= EXACT_ATOL, (variant, output)
    assert manifest.data["parity_gate"]["reference"] == f"transformers {architecture} (PyTorch, fp32)"
    if row.has_mlm:
        assert manifest.data["parity_gate"]["masked_inputs"] > 0
        assert manifest.record(manifest.mlm_head.file)


def test_bert_model_export_has_no_invented_head(head_exports: dict[str, tuple[Path, Path]]) -> None:
    _, export = head_exports["encoder"]
    manifest = read_manifest(export)
    assert manifest.weights == {"kind": "pretrained", "seed": None, "random_heads": [], "note": None}
    assert "nsp_logits" not in manifest.graph_outputs
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RandomWeightsWarning (or any other) fails the test
        model = BertOnnx(export, "fp32")
    vectors = model.embed(["a plain encoder", "no NSP head"], pooling="mean")
    assert vectors.shape == (2, 32)
    with pytest.raises(ValueError, match="this export has no NSP head; it was exported from BertModel"):
        model.nsp("a", "b")


@pytest.mark.parametrize("name", ["sentiment", "multi-label", "cross-encoder", "regression", "ner", "qa", "nsp"])
def test_head_outputs_equal_torch(head_exports: dict[str, tuple[Path, Path]], name: str) -> None:
    """The checkpoint's own head is in the graph: its outputs equal the transformers class's on the same ids."""
    checkpoint, export = head_exports[name]
    architecture = CASES[name][0]
    model = getattr(transformers, architecture).from_pretrained(checkpoint).eval()
    session = _session(export / "model.onnx")
    for index in range(len(PAIRS)):
        feeds = _feeds(export, index)
        with torch.inference_mode():
            out = model(**{k: torch.from_numpy(v) for k, v in feeds.items()})
        got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))
        if architecture == "BertForQuestionAnswering":
            expected = {"start_logits": out.start_logits, "end_logits": out.end_logits}
        else:
            output = {"BertForTokenClassification": "token_logits", "BertForNextSentencePrediction": "nsp_logits"}
            expected = {output.get(architecture, "logits"): out.logits}
        for output, value in expected.items():
            np.testing.assert_allclose(got[output], value.numpy(), atol=EXACT_ATOL, rtol=0, err_msg=output)


@pytest.mark.parametrize("name", ["pretraining", "masked-lm"])
def test_mlm_head_on_mask_positions_equals_torch(head_exports: dict[str, tuple[Path, Path]], name: str) -> None:
    """Hidden states gathered at the [MASK] positions, through mlm_head.onnx, give torch's MLM logits there."""
    checkpoint, export = head_exports[name]
    manifest = read_manifest(export)
    head = manifest.mlm_head
    assert head is not None
    model = getattr(transformers, CASES[name][0]).from_pretrained(checkpoint).eval()
    encoder = _session(export / "model.onnx")
    mlm = _session(export / head.file)
    feeds = _feeds(export, 2)
    masks = np.argwhere(feeds["input_ids"][0] == 103)[:, 0]
    assert len(masks) == 2
    (hidden,) = encoder.run(["last_hidden_state"], feeds)
    (logits,) = mlm.run([head.output], {head.input: hidden[0, masks]})
    with torch.inference_mode():
        out = model(**{k: torch.from_numpy(v) for k, v in feeds.items()})
    reference = (out.prediction_logits if name == "pretraining" else out.logits)[0, masks].numpy()
    assert logits.shape == (2, head.vocab_size)
    np.testing.assert_allclose(logits, reference, atol=EXACT_ATOL, rtol=0)
    assert (np.argsort(-logits, -1)[:, :5] == np.argsort(-reference, -1)[:, :5]).all()


def _scale_head(graph_path: Path, output: str, start: str) -> None:
    """Double the weights between ``start`` and ``output`` in the (not yet externalized) graph."""
    model = onnx.load(str(graph_path))
    names = _weights_between(model.graph, output, stop=start)
    assert names
    for init in model.graph.initializer:
        if init.name in names:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * 2.0, init.name))
    onnx.save(model, str(graph_path))


def test_gate_fails_on_a_tampered_classifier(tmp_path: Path) -> None:
    checkpoint = build_tiny_checkpoint("BertForSequenceClassification", tmp_path / "ckpt")
    options = ExportOptions(
        outdir=tmp_path / "out",
        model=str(checkpoint),
        variants=("fp32",),
        tamper=lambda path: _scale_head(path, "logits", "pooler_output"),
    )
    with pytest.raises(ExportError, match=r"parity gate failed[\s\S]*fp32: logits max abs diff") as caught:
        run_export(options, log=_quiet)
    assert caught.value.exit_code == ExportError.EXIT_GATE_FAILED
    assert "last_hidden_state" not in str(caught.value)  # only the broken head is named
    assert not (tmp_path / "out").exists()


def test_gate_fails_on_a_tampered_mlm_head(tmp_path: Path) -> None:
    checkpoint = build_tiny_checkpoint("BertForMaskedLM", tmp_path / "ckpt")

    def tamper(path: Path) -> None:
        head = onnx.load(str(path.parent / MLM_HEAD_FILE))
        bias = next(i for i in head.graph.initializer if list(i.dims) == [30522])
        bias.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(bias) + 0.5, bias.name))
        onnx.save(head, str(path.parent / MLM_HEAD_FILE))

    options = ExportOptions(outdir=tmp_path / "out", model=str(checkpoint), variants=("fp32",), tamper=tamper)
    with pytest.raises(ExportError, match=r"fp32: mlm_logits max abs diff"):
        run_export(options, log=_quiet)
    assert not (tmp_path / "out").exists()


def test_task_exports_only_the_encoder_of_a_classifier(
    head_exports: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    checkpoint, _ = head_exports["sentiment"]
    lines: list[str] = []
    options = ExportOptions(
        outdir=tmp_path / "out", model=str(checkpoint), variants=("fp32",), task="feature-extraction"
    )
    manifest = run_export(options, log=lines.append)
    assert manifest["task"]["architecture"] == "BertModel"
    assert manifest["task"]["heads"] == {"pooler": "trained"}
    assert not manifest["weights"]["random_heads"]
    assert any("classifier weights are not exported (--task feature-extraction)" in line for line in lines)
    assert not any("nsp head" in line for line in lines)


def test_weights_with_a_head_the_config_lacks_are_refused(
    head_exports: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    """A classifier's weights under a config that says BertModel: refused with the way out, never dropped."""
    checkpoint, _ = head_exports["sentiment"]
    for name in ("model.safetensors", "config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / "ckpt").mkdir(exist_ok=True)
        (tmp_path / "ckpt" / name).write_bytes((checkpoint / name).read_bytes())
    config = json.loads((checkpoint / "config.json").read_text())
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps({**config, "architectures": ["BertModel"]}))
    with pytest.raises(ExportError, match=r"holds trained classifier weights but its config\.json says BertModel") as e:
        run_export(ExportOptions(outdir=tmp_path / "out", model=str(tmp_path / "ckpt")), log=_quiet)
    assert "--task feature-extraction" in str(e.value)
    assert "nsp" not in str(e.value)


def test_unknown_task_is_refused(head_exports: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    checkpoint, _ = head_exports["encoder"]
    with pytest.raises(ExportError, match="--task must be one of feature-extraction, pretraining, fill-mask"):
        run_export(ExportOptions(outdir=tmp_path / "out", model=str(checkpoint), task="sentiment"), log=_quiet)


def test_manifest_without_task_block_reads_as_pretraining(tmp_path: Path) -> None:
    config = {k: 1 for k in ("num_hidden_layers", "num_attention_heads", "hidden_size", "intermediate_size")}
    config |= {"vocab_size": 3, "max_position_embeddings": 8, "type_vocab_size": 2}
    data = {
        "format": "bertonnx-model",
        "format_version": 1,
        "config": config,
        "variants": {},
        "files": {},
        "weights": {"kind": "pretrained", "seed": 0, "random_heads": ["nsp"]},
    }
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(data))
    manifest = read_manifest(tmp_path)
    assert manifest.architecture == "BertForPreTraining"
    assert manifest.tasks == ("embed", "nsp")
    assert manifest.heads == {"pooler": "trained", "nsp": "seeded"}
    assert manifest.mlm_head is None
    assert manifest.id2label is None
    assert manifest.num_labels is None
    assert manifest.problem_type is None
    assert manifest.graph_outputs == ("last_hidden_state", "pooler_output", "nsp_logits")


def test_build_tiny_checkpoint_refuses_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="architecture must be one of BertModel"):
        build_tiny_checkpoint("RobertaModel", tmp_path)
    with pytest.raises(ValueError, match="num_labels=2 but id2label has 3 labels"):
        build_tiny_checkpoint(
            "BertForSequenceClassification", tmp_path, num_labels=2, id2label={0: "a", 1: "b", 2: "c"}
        )


@pytest.mark.slow
def test_bert_base_pretraining_export_keeps_the_mlm_head(tmp_path: Path) -> None:
    """bert-base-uncased with seeded weights, fp32: the brief's parameter counts, and the MLM head's logits
    at the mask positions equal BertForPreTraining's."""
    from bertonnx_export.source import load_source

    outdir = tmp_path / "bert-base"
    run_export(
        ExportOptions(outdir=outdir, model="bert-base-uncased", weights="random", variants=("fp32",)), log=_quiet
    )
    manifest = read_manifest(outdir)
    assert manifest.architecture == "BertForPreTraining"
    assert manifest.tasks == ("embed", "nsp", "fill_mask")
    assert manifest.data["parameters"] == {
        "bert_model": 109_482_240,
        "token_embeddings": 23_440_896,
        "pooler": 590_592,
        "nsp_head": 1_538,
        "exported_total": 109_483_778,
    }
    head = manifest.mlm_head
    assert head is not None
    assert head.vocab_size == 30522
    parity = manifest.variants["fp32"]["parity"]
    assert parity["mlm_logits_max_abs"] <= EXACT_ATOL
    assert parity["mlm_top1_agreement"] == 1.0
    assert manifest.data["task"]["mlm_head"]["parameters_without_tied_decoder"] == 768 * 768 + 768 + 2 * 768 + 30522

    source = load_source("bert-base-uncased", weights="random", seed=0)
    feeds = _feeds(outdir, 2)
    masks = np.argwhere(feeds["input_ids"][0] == 103)[:, 0]
    (hidden,) = _session(outdir / "model.onnx").run(["last_hidden_state"], feeds)
    (logits,) = _session(outdir / head.file).run([head.output], {head.input: hidden[0, masks]})
    with torch.inference_mode():
        reference = source.model(**{k: torch.from_numpy(v) for k, v in feeds.items()}).prediction_logits[0, masks]
    np.testing.assert_allclose(logits, reference.numpy(), atol=EXACT_ATOL, rtol=0)


@pytest.mark.slow
def test_minilm_exports_as_an_embedding_model_without_flags(minilm_checkpoint: Path, tmp_path: Path) -> None:
    """Real all-MiniLM-L6-v2 weights (a BertModel): no flag needed, no head invented, no warning on load."""
    outdir = tmp_path / "minilm"
    manifest = run_export(ExportOptions(outdir=outdir, model=str(minilm_checkpoint), variants=("fp32",)), log=_quiet)
    assert manifest["task"]["architecture"] == "BertModel"
    assert manifest["task"]["heads"] == {"pooler": "trained"}
    assert manifest["weights"] == {"kind": "pretrained", "seed": None, "random_heads": [], "note": None}
    assert manifest["variants"]["fp32"]["parity"]["passed"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = BertOnnx(outdir, "fp32")
    assert model.embed(["a sentence"], pooling="mean").shape == (1, 384)
