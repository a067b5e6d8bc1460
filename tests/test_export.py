"""The export step: the directory it writes, the graph, the parity gate and every refusal."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from transformers import AutoTokenizer, BertForPreTraining

from bertonnx import BertOnnx, RuntimeOptions
from bertonnx.manifest import INPUT_NAMES, MANIFEST_FILE, OUTPUT_NAMES, VARIANT_FILES, sha256_file
from bertonnx.session import open_variant_session
from bertonnx_export.cli import main as export_main
from bertonnx_export.errors import ExportError
from bertonnx_export.graph import BertWithHeads
from bertonnx_export.pipeline import ExportOptions, run_export

from .conftest import save_tiny_checkpoint

EXACT_ATOL = 1e-4


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".partial-" in p.name or ".old-" in p.name)


def test_directory_contents_and_manifest_hashes(tiny_export: Path) -> None:
    manifest = json.loads((tiny_export / MANIFEST_FILE).read_text())
    on_disk = {p.name for p in tiny_export.iterdir()} - {MANIFEST_FILE}
    assert set(manifest["files"]) == on_disk
    assert set(VARIANT_FILES.values()) | {"tokenizer.json", "config.json"} <= on_disk
    for name, record in manifest["files"].items():
        assert sha256_file(tiny_export / name) == record["sha256"], name
        assert (tiny_export / name).stat().st_size == record["size"], name
    for variant, record in manifest["variants"].items():  # weights live in external data, memory-mapped
        expected = "model_bf16.bin" if variant == "bf16" else record["file"] + ".data"  # OpenVINO IR keeps a .bin
        assert record["data_file"] == expected, variant
        assert (tiny_export / record["data_file"]).stat().st_size > (tiny_export / record["file"]).stat().st_size
    assert manifest["weights"] == {"kind": "pretrained", "seed": None, "random_heads": [], "note": None}
    assert manifest["config"]["hidden_size"] == 32
    assert all(v["parity"]["passed"] for v in manifest["variants"].values())
    fusions = manifest["variants"]["optimized"]["fusions"]
    assert fusions["Attention"] == 2
    assert fusions["SkipLayerNormalization"] == 4
    assert manifest["versions"]["torch"]
    assert manifest["versions"]["onnxruntime"]
    assert manifest["versions"]["openvino"]


def test_tokenizer_has_nothing_baked_in(tiny_export: Path) -> None:
    saved = json.loads((tiny_export / "tokenizer.json").read_text())
    assert saved["padding"] is None
    assert saved["truncation"] is None


#: Every file a fp32-only export holds; a new file must be checked here for what it tells tools.
FP32_EXPORT_FILES = {
    "bertonnx.json",
    "config.json",
    "mlm_head.onnx",  # the MLM head of a BertForPreTraining checkpoint, a graph of its own
    "mlm_head.onnx.data",
    "model.onnx",
    "model.onnx.data",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
}


def test_export_files_describe_the_runtime(limited_export: Path) -> None:
    """A source whose tokenizer pads and truncates to 128 (as MiniLM's does) leaves no trace of it: every file
    says 512 positions, no padding, no truncation."""
    assert {p.name for p in limited_export.iterdir()} == FP32_EXPORT_FILES
    tokenizer_config = json.loads((limited_export / "tokenizer_config.json").read_text())
    assert tokenizer_config["model_max_length"] == 512
    assert "max_length" not in tokenizer_config  # was 128: fastembed truncated every text there
    assert not set(tokenizer_config) & {"stride", "truncation_strategy", "pad_to_multiple_of", "padding_side"}
    saved = json.loads((limited_export / "tokenizer.json").read_text())
    assert saved["padding"] is None
    assert saved["truncation"] is None
    config = json.loads((limited_export / "config.json").read_text())
    assert config["max_position_embeddings"] == 512
    assert config["architectures"] == ["BertForPreTraining"]
    special = json.loads((limited_export / "special_tokens_map.json").read_text())
    assert {k: v["content"] for k, v in special.items()} == {
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
        "pad_token": "[PAD]",
        "sep_token": "[SEP]",
        "unk_token": "[UNK]",
    }


def test_transformers_reads_the_runtime_limits(limited_export: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(limited_export)
    model = BertOnnx(limited_export)
    assert tokenizer.model_max_length == 512
    assert "max_length" not in tokenizer.init_kwargs
    assert tokenizer.backend_tokenizer.truncation is None
    assert tokenizer.backend_tokenizer.padding is None
    long_text, longer_text = " ".join(["word"] * 300), " ".join(["word"] * 600)
    assert tokenizer(long_text)["input_ids"] == model.tokenize(long_text).ids  # 302 tokens, not 128
    assert len(model.tokenize(long_text).ids) == 302
    assert tokenizer(longer_text, truncation=True)["input_ids"] == model.tokenize(longer_text, truncation=True).ids
    pair = tokenizer(long_text, "and a second sentence", return_token_type_ids=True)
    ours = model.tokenize(long_text, "and a second sentence")
    assert (pair["input_ids"], pair["token_type_ids"]) == (ours.ids, ours.type_ids)


def test_optimum_runs_the_export_as_the_runtime(limited_export: Path) -> None:
    from optimum.onnxruntime import ORTModelForCustomTasks

    tokenizer = AutoTokenizer.from_pretrained(limited_export)
    texts, pairs = [" ".join(["word"] * 300), "the weather is nice"], ["a pair", "i agree with you"]
    feeds = tokenizer(texts, pairs, padding=True, return_tensors="np", return_token_type_ids=True)
    got = ORTModelForCustomTasks.from_pretrained(limited_export, file_name="model.onnx")(**feeds)
    want = BertOnnx(limited_export)(texts, pairs)
    assert got["last_hidden_state"].shape == (2, 305, 32)
    np.testing.assert_allclose(got["pooler_output"], want.pooler_output, atol=1e-5, rtol=0)
    np.testing.assert_allclose(got["nsp_logits"], want.nsp_logits, atol=1e-5, rtol=0)
    for i in range(2):
        n = want.lengths[i]
        np.testing.assert_allclose(got["last_hidden_state"][i, :n], want.token_states(i), atol=1e-5, rtol=0)


def test_fastembed_embeds_as_the_runtime(limited_export: Path, tmp_path: Path) -> None:
    """fastembed loads the directory itself (no hub) and truncates only at 512, as the runtime does."""
    from fastembed import TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType

    name = f"bertonnx/limited-{tmp_path.name}"  # fastembed keeps custom models in a process-wide registry
    TextEmbedding.add_custom_model(
        model=name,
        pooling=PoolingType.MEAN,
        normalization=True,
        sources=ModelSource(hf=name),
        dim=32,
        model_file="model.onnx",
    )
    fastembed = TextEmbedding(name, specific_model_path=str(limited_export), cache_dir=str(tmp_path), threads=1)
    texts = ["the weather is nice", " ".join(["word"] * 300), " ".join(["other"] * 600)]
    got = np.stack(list(fastembed.embed(texts)))
    want = BertOnnx(limited_export).embed(texts, "mean", normalize=True, truncation=True)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_graph_inputs_outputs_and_dynamic_axes(tiny_export: Path) -> None:
    graph = onnx.load(str(tiny_export / "model.onnx")).graph
    inputs = {v.name: v for v in graph.input}
    assert tuple(inputs) == INPUT_NAMES
    for value in inputs.values():
        assert value.type.tensor_type.elem_type == onnx.TensorProto.INT64
        assert [d.dim_param for d in value.type.tensor_type.shape.dim] == ["batch_size", "sequence_length"]
    shapes = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in graph.output}
    assert shapes == {
        "last_hidden_state": ["batch_size", "sequence_length", 32],
        "pooler_output": ["batch_size", 32],
        "nsp_logits": ["batch_size", 2],
    }


@pytest.mark.parametrize("variant", list(VARIANT_FILES))
@pytest.mark.parametrize(("batch", "seq"), [(3, 7), (2, 300)])
def test_variants_run_at_new_shapes_and_match_torch(
    tiny_export: Path, tiny_checkpoint: Path, variant: str, batch: int, seq: int
) -> None:
    rng = np.random.default_rng(batch * seq)
    feeds = {
        "input_ids": rng.integers(1000, 30000, size=(batch, seq)),
        "attention_mask": np.ones((batch, seq), dtype=np.int64),
        "token_type_ids": (np.arange(seq) >= seq // 2).astype(np.int64)[None].repeat(batch, 0),
    }
    feeds["attention_mask"][0, seq - 3 :] = 0  # one padded row
    path = tiny_export / VARIANT_FILES[variant]
    session = open_variant_session(path, variant, RuntimeOptions())
    got = dict(zip(OUTPUT_NAMES, session.run(list(OUTPUT_NAMES), feeds), strict=True))
    reference = BertWithHeads(BertForPreTraining.from_pretrained(tiny_checkpoint)).eval()
    with torch.inference_mode():
        want = reference(**{k: torch.from_numpy(v) for k, v in feeds.items()})
    assert got["last_hidden_state"].shape == (batch, seq, 32)
    assert got["pooler_output"].shape == (batch, 32)
    assert got["nsp_logits"].shape == (batch, 2)
    atol = EXACT_ATOL if variant not in ("int8", "bf16") else 0.05
    for name in OUTPUT_NAMES:
        np.testing.assert_allclose(got[name], want[name].numpy(), atol=atol, rtol=0, err_msg=f"{variant} {name}")


def _swap_pooler_activation(path: Path) -> None:
    """Replace the pooler's Tanh by a Sigmoid: a plausible, silent export bug."""
    model = onnx.load(str(path))
    tanh = [node for node in model.graph.node if node.op_type == "Tanh"]
    assert len(tanh) == 1
    tanh[0].op_type = "Sigmoid"
    onnx.save(model, str(path))


def test_gate_fails_on_broken_graph_and_leaves_nothing(tiny_checkpoint: Path, tmp_path: Path) -> None:
    outdir = tmp_path / "broken"
    options = ExportOptions(outdir=outdir, model=str(tiny_checkpoint), tamper=_swap_pooler_activation)
    with pytest.raises(ExportError, match=r"(?s)parity gate failed.*fp32: pooler_output max abs diff") as caught:
        run_export(options, log=lambda message: None)
    assert caught.value.exit_code == ExportError.EXIT_GATE_FAILED
    assert not outdir.exists()
    assert _leftovers(tmp_path) == []


def test_interrupted_export_leaves_nothing(tiny_checkpoint: Path, tmp_path: Path) -> None:
    def interrupt(path: Path) -> None:
        raise KeyboardInterrupt

    outdir = tmp_path / "interrupted"
    with pytest.raises(KeyboardInterrupt):
        run_export(ExportOptions(outdir=outdir, model=str(tiny_checkpoint), tamper=interrupt), log=lambda m: None)
    assert not outdir.exists()
    assert _leftovers(tmp_path) == []


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = export_main(list(args))
    return code, capsys.readouterr().err


def test_refuses_missing_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, err = _cli(capsys, str(tmp_path / "nope" / "ckpt"), str(tmp_path / "out"))
    assert code == ExportError.EXIT_REFUSED
    assert "does not exist" in err
    assert not (tmp_path / "out").exists()


def test_refuses_non_bert_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ckpt = tmp_path / "gpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    code, err = _cli(capsys, str(ckpt), str(tmp_path / "out"))
    assert code == ExportError.EXIT_REFUSED
    assert "model_type 'gpt2', not a BERT model" in err


def test_refuses_bert_model_as_pretraining_without_heads(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ckpt = save_tiny_checkpoint(tmp_path / "bare", with_heads=False)
    code, err = _cli(capsys, str(ckpt), str(tmp_path / "out"), "--task", "pretraining")
    assert code == ExportError.EXIT_REFUSED
    assert "has no trained nsp or mlm head" in err
    assert "for BertForPreTraining" in err
    assert "--allow-random-heads" in err
    assert not (tmp_path / "out").exists()


def test_random_heads_are_seeded_and_recorded(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ckpt = save_tiny_checkpoint(tmp_path / "bare", with_heads=False)
    outs = []
    for name in ("a", "b"):
        args = ("--task", "pretraining", "--allow-random-heads", "--seed", "7", "--variants", "fp32")
        code, _ = _cli(capsys, str(ckpt), str(tmp_path / name), *args)
        assert code == 0
        outs.append(json.loads((tmp_path / name / MANIFEST_FILE).read_text()))
    weights = outs[0]["weights"]
    assert weights["kind"] == "pretrained"
    assert weights["random_heads"] == ["nsp", "mlm"]
    assert weights["seed"] == 7
    assert "RANDOM HEADS" in weights["note"]
    assert outs[0]["task"]["heads"] == {"pooler": "trained", "nsp": "seeded", "mlm": "seeded"}
    # same seed, same head: the export is reproducible
    assert outs[0]["files"]["model.onnx"]["sha256"] == outs[1]["files"]["model.onnx"]["sha256"]
    assert outs[0]["files"]["mlm_head.onnx.data"]["sha256"] == outs[1]["files"]["mlm_head.onnx.data"]["sha256"]


def test_refuses_existing_outdir_unless_force(
    capsys: pytest.CaptureFixture[str], tiny_checkpoint: Path, tmp_path: Path
) -> None:
    outdir = tmp_path / "out"
    outdir.mkdir()
    (outdir / "keep.txt").write_text("user data")
    code, err = _cli(capsys, str(tiny_checkpoint), str(outdir))
    assert code == ExportError.EXIT_REFUSED
    assert "already exists; pass --force" in err
    code, err = _cli(capsys, str(tiny_checkpoint), str(outdir), "--force")
    assert code == ExportError.EXIT_REFUSED
    assert "not a bertonnx export" in err
    assert (outdir / "keep.txt").read_text() == "user data"


def test_force_replaces_an_earlier_export(
    capsys: pytest.CaptureFixture[str], tiny_checkpoint: Path, tmp_path: Path
) -> None:
    outdir = tmp_path / "out"
    assert _cli(capsys, str(tiny_checkpoint), str(outdir), "--variants", "fp32")[0] == 0
    assert _cli(capsys, str(tiny_checkpoint), str(outdir), "--variants", "fp32,int8", "--force")[0] == 0
    manifest = json.loads((outdir / MANIFEST_FILE).read_text())
    assert set(manifest["variants"]) == {"fp32", "int8"}
    assert not (outdir / "model_optimized.onnx").exists()
    assert _leftovers(tmp_path) == []


def test_unreachable_hub_names_both_ways_out(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-cache"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache" / "hub"))
    code, err = _cli(capsys, "bert-base-uncased", str(tmp_path / "out"))
    assert code == ExportError.EXIT_HUB_UNREACHABLE
    assert "cannot be reached" in err
    assert "local checkpoint directory" in err
    assert "--weights random" in err


def test_unknown_variant_is_refused(capsys: pytest.CaptureFixture[str], tiny_checkpoint: Path, tmp_path: Path) -> None:
    code, err = _cli(capsys, str(tiny_checkpoint), str(tmp_path / "out"), "--variants", "fp32,fp16")
    assert code == ExportError.EXIT_REFUSED
    assert "--variants must name one or more of fp32, optimized, int8, bf16, got fp16" in err


@pytest.mark.slow
def test_bert_base_random_export(bert_base_export: Path) -> None:
    manifest = json.loads((bert_base_export / MANIFEST_FILE).read_text())
    assert manifest["weights"]["kind"] == "random"
    assert manifest["weights"]["note"].startswith("RANDOM WEIGHTS")
    assert manifest["config"] == {
        "model_type": "bert",
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "hidden_size": 768,
        "intermediate_size": 3072,
        "vocab_size": 30522,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-12,
    }
    assert manifest["parameters"] == {
        "bert_model": 109_482_240,
        "token_embeddings": 23_440_896,
        "pooler": 590_592,
        "nsp_head": 1_538,
        "exported_total": 109_483_778,
    }
    for variant, record in manifest["variants"].items():
        assert record["parity"]["passed"], variant
        if variant == "bf16":  # the accurate fast path: cosines, not max abs (bf16 keeps 8 mantissa bits)
            assert record["parity"]["last_hidden_state_min_cosine"] >= 0.999
            assert record["parity"]["pooler_output_min_cosine"] >= 0.999
        elif variant != "int8":
            for name in OUTPUT_NAMES:
                assert record["parity"][f"{name}_max_abs"] <= EXACT_ATOL
    assert manifest["variants"]["optimized"]["fusions"] == {
        "EmbedLayerNormalization": 1,
        "Attention": 12,
        "SkipLayerNormalization": 24,
        "BiasGelu": 12,
    }
    for name, record in manifest["files"].items():
        assert (bert_base_export / name).stat().st_size == record["size"]
