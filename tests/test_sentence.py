"""sentence-transformers folders answered as sentence-transformers runs them (issue 30).

Tiny models are built with sentence-transformers' own API (a seeded BERT from ``tests/heads.py`` + Pooling of
each mode, with and without Dense and Normalize, prompts, ``truncate_dim``; a CrossEncoder), saved, and
compared with ``SentenceTransformer.encode`` / ``CrossEncoder.predict``: the numpy pipeline on the model's own
token states for every mode (fast, no ONNX), and whole exports made without flags.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from bertonnx import BertOnnx, HeadMissingError
from bertonnx.manifest import read_manifest
from bertonnx.options import RuntimeOptions
from bertonnx.sentence import (
    SentencePipeline,
    SpladeStep,
    activate,
    check_dimensions,
    classifier_activation,
    normalize,
    pool,
    prompt_length,
    read_pipeline,
    sparse_pairs,
)
from bertonnx_export import sentence as st_export
from bertonnx_export.errors import ExportError
from bertonnx_export.pipeline import ExportOptions, run_export

from .conftest import VOCAB
from .heads import build_tiny_checkpoint

warnings.filterwarnings("ignore", category=DeprecationWarning)
sentence_transformers = pytest.importorskip("sentence_transformers")
from sentence_transformers import CrossEncoder, SentenceTransformer, models  # noqa: E402
from sentence_transformers.util import fullname  # noqa: E402

HIDDEN = 32
EXACT = 1e-5
LONG = "The history of natural language processing generally started in the 1950s. " * 20
TEXTS = [
    "",
    "a",
    "Hello, world!",
    "Café déjà vu: naïve façade, résumé.",
    "北京是中国的首都。東京は日本の首都です。",
    "Call 555-0199 before 10:30 on 2024-03-05; it costs $1,234.56.",
    "The quick brown fox jumps over the lazy dog.",
    LONG,  # over every max_seq_length used here
]


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_checkpoint("BertModel", tmp_path_factory.mktemp("st-bert") / "bert")


def make_st(
    bert: Path,
    directory: Path,
    *,
    modes: str | tuple[str, ...] = "mean",
    include_prompt: bool = True,
    dense: tuple[tuple[int, torch.nn.Module | None], ...] = (),
    normalize_module: bool = False,
    max_seq_length: int | None = 48,
    do_lower_case: bool = False,
    **kwargs: Any,
) -> SentenceTransformer:
    """A tiny SentenceTransformer built with its own API and saved to ``directory``."""
    torch.manual_seed(0)
    transformer = models.Transformer(str(bert), max_seq_length=max_seq_length, do_lower_case=do_lower_case)
    pooling = models.Pooling(HIDDEN, pooling_mode=modes, include_prompt=include_prompt)
    chain: list[torch.nn.Module] = [transformer, pooling]
    width = pooling.get_embedding_dimension()
    for out, activation in dense:
        chain.append(models.Dense(width, out, activation_function=activation))
        width = out
    if normalize_module:
        chain.append(models.Normalize())
    model = SentenceTransformer(modules=chain, device="cpu", **kwargs)
    model.save(str(directory))
    return model


def folder_pipeline(directory: Path, staging: Path) -> SentencePipeline:
    """The pipeline the export would record for ``directory`` (read by export/sentence.py, run by bertonnx)."""
    folder = st_export.read_folder(directory)
    assert folder is not None
    config = json.loads((folder.checkpoint / "config.json").read_text())
    tokenizer_length = json.loads((folder.checkpoint / "tokenizer_config.json").read_text())["model_max_length"]
    length = st_export.max_seq_length(folder, tokenizer_length, config["max_position_embeddings"])
    staging.mkdir(parents=True, exist_ok=True)
    block = st_export.build_block(folder, hidden_size=config["hidden_size"], length=length, staging=staging)
    pipeline = read_pipeline({"sentence_transformers": block, "config": config}, staging)
    assert pipeline is not None
    return pipeline


def ours_on_st_states(
    model: SentenceTransformer, pipeline: SentencePipeline, texts: list[str], **options: Any
) -> np.ndarray:
    """Our numpy pipeline on the token states sentence-transformers' own Transformer gives for ``texts``."""
    prompt = pipeline.resolve_prompt(options.pop("prompt", None), options.pop("prompt_name", None))
    features = model.preprocess(texts, prompt=prompt)
    tokens = None
    if prompt:
        special = set(model.tokenizer.all_special_ids)
        tokens = prompt_length(model.tokenizer(prompt, truncation=True)["input_ids"], special)
        assert tokens == features["prompt_length"]
    with torch.inference_mode():
        out = model[0]({k: v for k, v in features.items() if isinstance(v, torch.Tensor)})
    states = out["token_embeddings"].numpy()
    return pipeline.run(states, features["attention_mask"].numpy(), prompt_tokens=tokens, **options)


POOLING_CASES = [
    "cls",
    "max",
    "mean",
    "mean_sqrt_len_tokens",
    "weightedmean",
    "lasttoken",
    ("cls", "mean", "max"),
]


@pytest.mark.parametrize("modes", POOLING_CASES, ids=lambda m: m if isinstance(m, str) else "+".join(m))
@pytest.mark.parametrize("include_prompt", [True, False])
def test_every_pooling_mode_matches_encode(bert_dir: Path, tmp_path: Path, modes: Any, include_prompt: bool) -> None:
    model = make_st(
        bert_dir,
        tmp_path / "st",
        modes=modes,
        include_prompt=include_prompt,
        prompts={"query": "query: ", "passage": "represent this passage for retrieval: "},
    )
    pipeline = folder_pipeline(tmp_path / "st", tmp_path / "staging")
    for name in (None, "query", "passage"):
        expected = model.encode(TEXTS, prompt_name=name, convert_to_numpy=True)
        got = ours_on_st_states(model, pipeline, TEXTS, prompt_name=name)
        np.testing.assert_allclose(got, expected, atol=EXACT, rtol=0)
    if not include_prompt:  # the prompt's tokens really are left out: pooling with them differs
        with_prompt = pool(np.ones((1, 4, 2), np.float32) * np.arange(4)[None, :, None], np.ones((1, 4)), ["mean"])
        without = pool(
            np.ones((1, 4, 2), np.float32) * np.arange(4)[None, :, None], np.ones((1, 4)), ["mean"], prompt_tokens=2
        )
        assert with_prompt[0, 0] == pytest.approx(1.5)
        assert without[0, 0] == pytest.approx(2.5)


@pytest.mark.parametrize(
    "dense",
    [
        ((24, torch.nn.Tanh()),),
        ((24, torch.nn.GELU()), (16, None)),  # None: sentence-transformers' Identity
        ((20, torch.nn.ReLU()), (12, torch.nn.Sigmoid())),
        ((16, torch.nn.SiLU()),),
    ],
    ids=["tanh", "gelu+identity", "relu+sigmoid", "silu"],
)
@pytest.mark.parametrize("normalize_module", [False, True], ids=["plain", "normalize"])
def test_dense_and_normalize_match_encode(bert_dir: Path, tmp_path: Path, dense: Any, normalize_module: bool) -> None:
    model = make_st(bert_dir, tmp_path / "st", modes="mean", dense=dense, normalize_module=normalize_module)
    pipeline = folder_pipeline(tmp_path / "st", tmp_path / "staging")
    assert pipeline.dimension == dense[-1][0]
    np.testing.assert_allclose(
        ours_on_st_states(model, pipeline, TEXTS), model.encode(TEXTS, convert_to_numpy=True), atol=EXACT, rtol=0
    )
    for name in [n for step in pipeline.steps if (n := getattr(step, "activation", None))]:
        assert name in ("tanh", "gelu", "identity", "relu", "sigmoid", "silu")


def test_matryoshka_order_and_errors(bert_dir: Path, tmp_path: Path) -> None:
    """``truncate_dim`` is the default; ``dimensions`` overrides it; the cut comes after Normalize and before
    ``normalize_embeddings``, as in ``encode``; 0 or above the width is one clear error."""
    model = make_st(bert_dir, tmp_path / "st", dense=((24, torch.nn.Tanh()),), normalize_module=True, truncate_dim=8)
    pipeline = folder_pipeline(tmp_path / "st", tmp_path / "staging")
    assert pipeline.truncate_dim == 8
    default = ours_on_st_states(model, pipeline, TEXTS)
    np.testing.assert_allclose(default, model.encode(TEXTS), atol=EXACT, rtol=0)
    assert default.shape == (len(TEXTS), 8)
    assert np.all(np.linalg.norm(default, axis=1) < 0.999)
    for dims in (4, 24):
        got = ours_on_st_states(model, pipeline, TEXTS, dimensions=dims, normalize_result=True)
        expected = model.encode(TEXTS, truncate_dim=dims, normalize_embeddings=True)
        np.testing.assert_allclose(got, expected, atol=EXACT, rtol=0)
    for bad in (0, -1, 25):
        with pytest.raises(ValueError, match=r"dimensions must be between 1 and 24 \(this model's width\), got"):
            check_dimensions(bad, 24)
    with pytest.raises(TypeError, match="dimensions must be an int, got float"):
        check_dimensions(8.0, 24)


def test_prompts_resolve_as_encode(bert_dir: Path, tmp_path: Path) -> None:
    model = make_st(
        bert_dir,
        tmp_path / "st",
        include_prompt=False,
        prompts={"query": "query: ", "doc": "passage: "},
        default_prompt_name="query",
    )
    pipeline = folder_pipeline(tmp_path / "st", tmp_path / "staging")
    assert dict(pipeline.prompts) == model.prompts
    assert pipeline.default_prompt_name == "query"
    assert pipeline.resolve_prompt() == "query: "
    assert pipeline.resolve_prompt(prompt_name="doc") == "passage: "
    assert pipeline.resolve_prompt(prompt="custom: ") == "custom: "
    for options in ({}, {"prompt_name": "doc"}, {"prompt": "custom prompt: "}, {"prompt_name": "document"}):
        expected = model.encode(TEXTS, **options)
        np.testing.assert_allclose(ours_on_st_states(model, pipeline, TEXTS, **options), expected, atol=EXACT, rtol=0)
    with pytest.raises(
        ValueError, match=r"unknown prompt_name 'nope'; this model's prompts are 'query', 'document', 'doc'"
    ):
        pipeline.resolve_prompt(prompt_name="nope")
    with pytest.raises(ValueError, match="pass either prompt or prompt_name, not both"):
        pipeline.resolve_prompt(prompt="x", prompt_name="doc")


def test_legacy_pooling_keys_and_lengths(bert_dir: Path, tmp_path: Path) -> None:
    """An old folder (MiniLM's layout): ``pooling_mode_*`` booleans, ``word_embedding_dimension``,
    ``max_seq_length`` in ``sentence_bert_config.json`` beating the tokenizer's ``model_max_length``."""
    make_st(bert_dir, tmp_path / "st", modes="mean", max_seq_length=None)
    root = tmp_path / "st"
    legacy = {
        "word_embedding_dimension": HIDDEN,
        "pooling_mode_cls_token": True,
        "pooling_mode_mean_tokens": False,
        "pooling_mode_max_tokens": True,
        "pooling_mode_mean_sqrt_len_tokens": False,
    }
    (root / "1_Pooling" / "config.json").write_text(json.dumps(legacy))
    pipeline = folder_pipeline(root, tmp_path / "staging")
    assert pipeline.describe() == ["pooling(cls+max)"]
    assert pipeline.dimension == 2 * HIDDEN
    assert pipeline.max_seq_length == 512  # the tokenizer's model_max_length, capped at the positions
    (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256, "do_lower_case": False}))
    assert folder_pipeline(root, tmp_path / "staging2").max_seq_length == 256
    model = SentenceTransformer(str(root), device="cpu")
    assert model.max_seq_length == 256
    np.testing.assert_allclose(
        ours_on_st_states(model, folder_pipeline(root, tmp_path / "s3"), TEXTS), model.encode(TEXTS), atol=EXACT
    )


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("my_package.MyModule", "module '1' is my_package.MyModule, which bertonnx cannot run exactly"),
        ("sentence_transformers.models.Router", "module '1' is sentence_transformers.models.Router"),
        ("sentence_transformers.models.StaticEmbedding", "is sentence_transformers.models.StaticEmbedding"),
        ("sentence_transformers.models.LSTM", "is sentence_transformers.models.LSTM"),
    ],
)
def test_modules_bertonnx_cannot_run_are_refused(bert_dir: Path, tmp_path: Path, kind: str, message: str) -> None:
    make_st(bert_dir, tmp_path / "st")
    modules = json.loads((tmp_path / "st" / "modules.json").read_text())
    modules[1]["type"] = kind
    (tmp_path / "st" / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ExportError, match=message) as caught:
        st_export.read_folder(tmp_path / "st")
    assert "\n" not in str(caught.value)
    assert "refusing to export without it" in str(caught.value)


def test_modules_run_in_the_files_order_and_pooling_comes_first(bert_dir: Path, tmp_path: Path) -> None:
    """modules.json's order is the order sentence-transformers runs (its ``idx`` is not read): Dense listed
    before Pooling is refused in one line (encode fails on it too), not a KeyError at the gate."""
    make_st(bert_dir, tmp_path / "st", dense=((HIDDEN, None),), normalize_module=True)
    modules = json.loads((tmp_path / "st" / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["Transformer", "Pooling", "Dense", "Normalize"]
    modules[1], modules[2] = modules[2], modules[1]  # idx kept: 0, 2, 1, 3
    (tmp_path / "st" / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ExportError, match="Pooling must come once, right after the Transformer") as caught:
        st_export.read_folder(tmp_path / "st")
    assert "modules are Transformer, Dense, Pooling, Normalize" in str(caught.value)
    with pytest.raises(KeyError):  # what sentence-transformers does with that order
        SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(TEXTS[:1])
    modules[1], modules[2] = modules[2], modules[1]
    modules[2], modules[3] = modules[3], modules[2]  # Normalize before Dense: runnable, and run in that order
    (tmp_path / "st" / "modules.json").write_text(json.dumps(modules))
    folder = st_export.read_folder(tmp_path / "st")
    assert folder is not None
    assert [name for name, _ in folder.modules] == ["Pooling", "Normalize", "Dense"]


def test_untrusted_dense_activation_is_refused(bert_dir: Path, tmp_path: Path) -> None:
    make_st(bert_dir, tmp_path / "st", dense=((16, torch.nn.Tanh()),))
    config_path = tmp_path / "st" / "2_Dense" / "config.json"
    config = json.loads(config_path.read_text())
    config["activation_function"] = "my_package.Swish"
    config_path.write_text(json.dumps(config))
    with pytest.raises(ExportError, match=r"activation .my_package\.Swish. is not one bertonnx computes"):
        folder_pipeline(tmp_path / "st", tmp_path / "staging")


def test_numpy_activations_match_torch() -> None:
    x = np.linspace(-6, 6, 1001, dtype=np.float32)
    t = torch.from_numpy(x)
    for name, module in {
        "tanh": torch.nn.Tanh(),
        "gelu": torch.nn.GELU(),
        "relu": torch.nn.ReLU(),
        "sigmoid": torch.nn.Sigmoid(),
        "silu": torch.nn.SiLU(),
        "leaky_relu": torch.nn.LeakyReLU(),
        "identity": torch.nn.Identity(),
    }.items():
        np.testing.assert_allclose(activate(name, x), module(t).numpy(), atol=1e-6, rtol=0, err_msg=name)
    with pytest.raises(ValueError, match="unknown activation 'swish'; expected one of identity, tanh"):
        activate("swish", x)
    assert normalize(np.zeros((1, 3), np.float32)).tolist() == [[0.0, 0.0, 0.0]]


# -- whole exports, made without flags ------------------------------------------------------------------


@pytest.fixture(scope="module")
def rich_folder(bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SentenceTransformer]:
    """Every feature at once: a cased tokenizer with ``do_lower_case``, weighted-mean pooling without the
    prompt, two dense layers, Normalize, prompts with a default, ``truncate_dim``, ``max_seq_length`` 40."""
    from transformers import BertTokenizerFast

    bert = tmp_path_factory.mktemp("cased") / "bert"
    shutil.copytree(bert_dir, bert)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        (bert / name).unlink(missing_ok=True)
    BertTokenizerFast(vocab_file=str(VOCAB), do_lower_case=False).save_pretrained(bert)
    root = tmp_path_factory.mktemp("rich") / "st"
    make_st(
        bert,
        root,
        modes="weightedmean",
        include_prompt=False,
        dense=((24, torch.nn.Tanh()), (16, None)),
        normalize_module=True,
        max_seq_length=None,
        prompts={"query": "Query: ", "document": "Passage: "},
        default_prompt_name="query",
        truncate_dim=12,
    )
    config_path = root / "sentence_bert_config.json"  # the keys as older sentence-transformers saved them
    config = {**json.loads(config_path.read_text()), "max_seq_length": 40, "do_lower_case": True}
    config_path.write_text(json.dumps(config))
    return root, SentenceTransformer(str(root), device="cpu")


@pytest.fixture(scope="module")
def rich_export(rich_folder: tuple[Path, SentenceTransformer], tmp_path_factory: pytest.TempPathFactory) -> Path:
    outdir = tmp_path_factory.mktemp("rich-export") / "model"
    run_export(ExportOptions(outdir=outdir, model=str(rich_folder[0])), log=lambda message: None)
    return outdir


def test_export_records_the_pipeline_and_gates_it(rich_export: Path) -> None:
    manifest = read_manifest(rich_export)
    block = manifest.data["sentence_transformers"]
    assert block["model_type"] == "SentenceTransformer"
    assert block["max_seq_length"] == 40
    assert block["do_lower_case"] is True
    assert [s["type"] for s in block["steps"]] == ["pooling", "dense", "dense", "normalize"]
    assert block["steps"][0] == {"type": "pooling", "modes": ["weightedmean"], "include_prompt": False}
    assert [s["activation"] for s in block["steps"][1:3]] == ["tanh", "identity"]
    assert block["prompts"] == {"query": "Query: ", "document": "Passage: "}
    assert block["default_prompt_name"] == "query"
    assert block["truncate_dim"] == 12
    assert block["dimension"] == 16
    assert block["similarity_fn_name"] == "cosine"
    for step in block["steps"][1:3]:  # dense weights: files the manifest lists, so the runtime verifies them
        for name in (step["weight_file"], step["bias_file"]):
            assert name in manifest.files
            assert manifest.record(name).verify(rich_export, check_hash=True)
    for variant, record in manifest.variants.items():
        parity = record["parity"]
        assert parity["passed"], variant
        if variant in ("fp32", "optimized"):
            assert parity["pipeline_max_abs"] <= EXACT, variant
        else:
            assert parity["pipeline_min_cosine"] >= st_export.PIPELINE_MIN_COSINE[variant], variant


def test_exported_pipeline_equals_encode(rich_folder: tuple[Path, SentenceTransformer], rich_export: Path) -> None:
    """The export's graph + tokenizer.json + numpy pipeline equals ``encode`` by default and with each prompt,
    for texts over ``max_seq_length`` and with capitals (``do_lower_case`` lives in the exported tokenizer)."""
    from tokenizers import Tokenizer

    from bertonnx.session import open_variant_session

    _, model = rich_folder
    texts = [*TEXTS, "HELLO World, ÉCOLE", "Hello world, école"]
    pipeline = read_pipeline(read_manifest(rich_export).data, rich_export)
    assert pipeline is not None
    tokenizer = Tokenizer.from_file(str(rich_export / "tokenizer.json"))
    tokenizer.enable_truncation(pipeline.max_seq_length)
    session = open_variant_session(rich_export / "model.onnx", "fp32", RuntimeOptions())
    special = set(model.tokenizer.all_special_ids)
    for options in ({}, {"prompt_name": "document"}, {"prompt": "x: "}):
        prompt = pipeline.resolve_prompt(**options)
        tokens = prompt_length(tokenizer.encode(prompt).ids, special) if prompt else None
        rows = []
        for text in texts:
            enc = tokenizer.encode((prompt or "") + text)
            feeds = {
                "input_ids": np.array([enc.ids], np.int64),
                "attention_mask": np.ones((1, len(enc.ids)), np.int64),
                "token_type_ids": np.zeros((1, len(enc.ids)), np.int64),
            }
            (states,) = session.run(["last_hidden_state"], feeds)
            rows.append(pipeline.run(states, feeds["attention_mask"], prompt_tokens=tokens)[0])
        np.testing.assert_allclose(np.stack(rows), model.encode(texts, **options), atol=EXACT, rtol=0)
    lower, upper = np.stack(rows[-2:])
    np.testing.assert_allclose(lower, upper, atol=1e-6)  # lower-cased as the folder asks


@pytest.mark.parametrize("variant", ["fp32", "optimized"])
def test_bertonnx_embed_defaults_to_the_pipeline(
    rich_folder: tuple[Path, SentenceTransformer], rich_export: Path, variant: str
) -> None:
    """``BertOnnx(export).embed(texts)`` is ``encode(texts)``; prompts and ``dimensions`` as ``encode``'s
    ``prompt_name`` / ``prompt`` / ``truncate_dim``; an explicit pooling still overrides."""
    _, model = rich_folder
    bert = BertOnnx(rich_export, variant)
    assert bert.sentence is not None
    assert bert.sentence.describe() == [
        "pooling(weightedmean, without prompt)",
        "dense(32->24, tanh)",
        "dense(24->16, identity)",
        "normalize",
    ]
    np.testing.assert_allclose(bert.embed(TEXTS), model.encode(TEXTS), atol=EXACT, rtol=0)
    for options, theirs in (
        ({"prompt_name": "document"}, {"prompt_name": "document"}),
        ({"prompt": "x: "}, {"prompt": "x: "}),
        ({"dimensions": 5, "normalize": True}, {"truncate_dim": 5, "normalize_embeddings": True}),
    ):
        np.testing.assert_allclose(bert.embed(TEXTS, **options), model.encode(TEXTS, **theirs), atol=EXACT, rtol=0)
    assert bert.embed([]).shape == (0, 12)
    plain = bert.embed(TEXTS[:3], pooling="mean")
    assert plain.shape == (3, HIDDEN)
    with pytest.raises(ValueError, match=r"dimensions must be between 1 and 16 \(this model's width\), got 17"):
        bert.embed(TEXTS, dimensions=17)
    with pytest.raises(ValueError, match="unknown prompt_name 'passage'; this model's prompts are 'query', 'document'"):
        bert.embed(TEXTS, prompt_name="passage")


def test_old_manifest_behaves_as_before(rich_export: Path, tmp_path: Path) -> None:
    """An export written before the block (the same directory, its manifest without it) loads and embeds
    exactly as before: pooler output, no prompt, no cut at max_seq_length."""
    old = tmp_path / "old"
    shutil.copytree(rich_export, old)
    manifest_path = old / "bertonnx.json"
    data = json.loads(manifest_path.read_text())
    data.pop("sentence_transformers")
    manifest_path.write_text(json.dumps(data))
    assert read_pipeline(data, old) is None
    assert classifier_activation(data) is None
    bert = BertOnnx(old, "fp32")
    assert bert.sentence is None
    short = TEXTS[:-1]
    np.testing.assert_array_equal(bert.embed(short), bert.embed(short, pooling="pooler"))
    np.testing.assert_allclose(bert.embed(short[2:3])[0], bert([short[2]]).pooler_output[0], atol=1e-6)
    with pytest.raises(ValueError, match="more than max_length=512"):
        bert.embed([LONG * 3])
    with pytest.raises(ValueError, match="prompt_name 'query' needs an export of a sentence-transformers folder"):
        bert.embed(short, prompt_name="query")


def test_roberta_folder_is_cut_at_its_usable_positions(tmp_path: Path) -> None:
    """RoBERTa counts positions from ``padding_idx + 1``: 512 of its 514 position embeddings hold tokens.
    sentence-transformers saves such a folder with the tokenizer's length capped at 514 (its ``encode`` then
    fails past 512 tokens); the export cuts at 512, passes its gate (texts up to 512 tokens and past them) and
    embeds as ``encode`` at 512. A length above 514 stays refused."""
    from .families import build_family_checkpoint

    checkpoint = build_family_checkpoint("RobertaModel", tmp_path / "roberta")
    transformer = models.Transformer(str(checkpoint), max_seq_length=514)
    model = SentenceTransformer(modules=[transformer, models.Pooling(HIDDEN, "mean")], device="cpu")
    model.save(str(tmp_path / "st"))
    outdir = tmp_path / "export"
    run_export(ExportOptions(outdir=outdir, model=str(tmp_path / "st"), variants=("fp32",)), log=lambda m: None)
    block = read_manifest(outdir).data["sentence_transformers"]
    assert block["max_seq_length"] == 512
    texts = [*TEXTS, LONG * 3]  # over 512 tokens
    model.max_seq_length = 512
    np.testing.assert_allclose(BertOnnx(outdir).embed(texts), model.encode(texts), atol=EXACT, rtol=0)
    folder = st_export.read_folder(tmp_path / "st")
    assert folder is not None
    assert st_export.max_seq_length(folder, 514, 512, 514) == 512
    folder.transformer_config["max_seq_length"] = 600
    with pytest.raises(ExportError, match=r"max_seq_length 600 is outside 1\.\.512"):
        st_export.max_seq_length(folder, 514, 512, 514)


# -- cross-encoders --------------------------------------------------------------------------------------


def _cross_encoder(tmp_path: Path, num_labels: int, activation: torch.nn.Module | None = None) -> CrossEncoder:
    checkpoint = build_tiny_checkpoint("BertForSequenceClassification", tmp_path / "cls", num_labels=num_labels)
    kwargs = {"activation_fn": activation} if activation is not None else {}
    model = CrossEncoder(str(checkpoint), max_length=64, device="cpu", **kwargs)
    model.save(str(tmp_path / "ce"))
    return model


@pytest.mark.parametrize(
    ("num_labels", "activation", "expected"),
    [(1, None, "sigmoid"), (1, torch.nn.Identity(), "identity"), (3, None, "identity"), (1, torch.nn.Tanh(), "tanh")],
)
def test_cross_encoder_activation_new_and_old_keys(
    tmp_path: Path, num_labels: int, activation: torch.nn.Module | None, expected: str
) -> None:
    _cross_encoder(tmp_path, num_labels, activation)
    folder = st_export.read_folder(tmp_path / "ce")
    assert folder is not None
    assert folder.model_type == "CrossEncoder"
    assert st_export.cross_encoder_activation(folder, num_labels) == expected
    # sentence-transformers < 4: no modules.json, the activation in config.json's old key
    old = tmp_path / "old"
    shutil.copytree(tmp_path / "cls", old)
    config = json.loads((old / "config.json").read_text())
    config["sbert_ce_default_activation_function"] = fullname(activation or torch.nn.Sigmoid())
    (old / "config.json").write_text(json.dumps(config))
    folder = st_export.read_folder(old)
    assert folder is not None
    assert folder.model_type == "CrossEncoder"
    ours = st_export.cross_encoder_activation(folder, num_labels)
    assert ours == (expected if activation is not None else "sigmoid")
    assert st_export.TORCH_ACTIVATIONS[fullname(CrossEncoder(str(old), device="cpu").activation_fn)] == ours


def test_cross_encoder_export_scores_as_predict(tmp_path: Path) -> None:
    from bertonnx.session import open_variant_session

    model = _cross_encoder(tmp_path, 1)
    outdir = tmp_path / "export"
    options = ExportOptions(outdir=outdir, model=str(tmp_path / "ce"), variants=("fp32", "optimized"))
    run_export(options, log=lambda message: None)
    manifest = read_manifest(outdir)
    assert manifest.task["activation"] == "sigmoid"
    assert classifier_activation(manifest.data) == "sigmoid"
    assert manifest.data["sentence_transformers"]["model_type"] == "CrossEncoder"
    assert manifest.data["sentence_transformers"]["max_seq_length"] == 64
    pairs = [("what is the capital of france?", "paris is the capital of france."), ("a", LONG), ("Café", "北京")]
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(outdir / "tokenizer.json"))
    tokenizer.enable_truncation(64, strategy="longest_first")
    session = open_variant_session(outdir / "model.onnx", "fp32", RuntimeOptions())
    got = []
    for query, doc in pairs:
        enc = tokenizer.encode(query, doc)
        feeds = {
            "input_ids": np.array([enc.ids], np.int64),
            "attention_mask": np.ones((1, len(enc.ids)), np.int64),
            "token_type_ids": np.array([enc.type_ids], np.int64),
        }
        (logits,) = session.run(["logits"], feeds)
        got.append(activate(classifier_activation(manifest.data) or "identity", logits)[0, 0])
    np.testing.assert_allclose(np.array(got), model.predict(pairs), atol=EXACT, rtol=0)
    bert = BertOnnx(outdir, "optimized")
    scores = bert.classify_scores([q for q, _ in pairs], [d for _, d in pairs])[:, 0]
    np.testing.assert_allclose(scores, model.predict(pairs), atol=EXACT, rtol=0)
    documents = [d for _, d in pairs]
    ranked = bert.rerank(pairs[0][0], documents)
    expected = model.rank(pairs[0][0], documents)
    assert [r["index"] for r in ranked] == [r["corpus_id"] for r in expected]
    np.testing.assert_allclose([r["score"] for r in ranked], [r["score"] for r in expected], atol=EXACT, rtol=0)
    # over HTTP too, a body without truncate cuts at max_seq_length as predict does (LONG * 3 is over 512 tokens)
    documents.append(LONG * 3)
    pairs.append(("a", LONG * 3))
    import time

    from fastapi.testclient import TestClient

    from bertonnx.serve import create_app

    with TestClient(create_app(outdir, threads=1)) as client:
        deadline = time.monotonic() + 60
        while client.get("/ready").status_code != 200:
            assert time.monotonic() < deadline, "the server was not ready in time"
            time.sleep(0.05)
        reply = client.post("/rerank", json={"query": pairs[0][0], "texts": documents})
        assert reply.status_code == 200, reply.text
        served = sorted(reply.json(), key=lambda rank: rank["index"])
        np.testing.assert_allclose(
            [r["score"] for r in served], model.predict([(pairs[0][0], d) for d in documents]), atol=EXACT, rtol=0
        )
        for query, doc in pairs:
            reply = client.post("/predict", json={"inputs": [query, doc]})
            assert reply.status_code == 200, reply.text
            np.testing.assert_allclose(reply.json()[0]["score"], model.predict([(query, doc)])[0], atol=EXACT, rtol=0)


# -- real weights ----------------------------------------------------------------------------------------

_SENTENCE = "the weather is nice today and i agree with you about the plan for café résumé naïve 北京 東京 market "
WORDS = (_SENTENCE + "prices rose 3.5% in 2024 while researchers published results on language models").split()


def mixed_texts(n: int = 240, seed: int = 0) -> list[str]:
    """``n`` seeded texts from 1 to ~450 words (a tenth over MiniLM's 256-token limit), unicode and digits."""
    rng = np.random.default_rng(seed)
    texts = []
    for i in range(n):
        words = int(rng.integers(300, 450)) if i % 10 == 0 else int(rng.integers(1, 40))
        texts.append(" ".join(rng.choice(WORDS, size=words)).capitalize() + ".")
    return texts


def embed_export(export: Path, texts: list[str], variant: str = "fp32", batch: int = 16) -> np.ndarray:
    """The export's default embedding of ``texts``: its tokenizer, graph and recorded pipeline."""
    from tokenizers import Tokenizer

    from bertonnx.manifest import VARIANT_FILES
    from bertonnx.session import open_variant_session

    pipeline = read_pipeline(read_manifest(export).data, export)
    assert pipeline is not None
    tokenizer = Tokenizer.from_file(str(export / "tokenizer.json"))
    tokenizer.enable_truncation(pipeline.max_seq_length)
    session = open_variant_session(export / VARIANT_FILES[variant], variant, RuntimeOptions())
    out = []
    for start in range(0, len(texts), batch):
        encodings = [tokenizer.encode(t) for t in texts[start : start + batch]]
        length = max(len(e.ids) for e in encodings)
        feeds = {
            k: np.zeros((len(encodings), length), np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")
        }
        for row, enc in enumerate(encodings):
            feeds["input_ids"][row, : len(enc.ids)] = enc.ids
            feeds["attention_mask"][row, : len(enc.ids)] = 1
        (states,) = session.run(["last_hidden_state"], feeds)
        out.append(pipeline.run(states, feeds["attention_mask"]))
    return np.concatenate(out)


@pytest.mark.slow
def test_minilm_folder_exported_without_flags_gives_encode(minilm_checkpoint: Path, minilm_st_export: Path) -> None:
    """The real all-MiniLM-L6-v2 folder, exported without flags: its default embedding is ``encode``'s (mean
    pooling, Normalize, cut at max_seq_length 256), not the pooler output it gave before."""
    outdir = minilm_st_export
    block = read_manifest(outdir).data["sentence_transformers"]
    assert block["max_seq_length"] == 256
    assert [s["type"] for s in block["steps"]] == ["pooling", "normalize"]
    texts = mixed_texts()
    model = SentenceTransformer(str(minilm_checkpoint), device="cpu")
    assert sum(len(model.tokenizer(t)["input_ids"]) > 256 for t in texts) >= 20
    expected = model.encode(texts, batch_size=32)
    for variant, limit in (("fp32", 0.99999), ("bf16", 0.999)):
        got = BertOnnx(outdir, variant).embed(texts)  # no options: the folder's own pipeline
        cosines = np.sum(got * expected, axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
        assert cosines.min() >= limit, (variant, cosines.min())
    np.testing.assert_allclose(BertOnnx(outdir).embed(texts), expected, atol=EXACT, rtol=0)
    np.testing.assert_allclose(embed_export(outdir, texts), expected, atol=EXACT, rtol=0)


# -- sparse (SPLADE) -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("strategy", "activation"), [("max", "relu"), ("sum", "log1p_relu")])
def test_splade_step_matches_splade_pooling(strategy: str, activation: str) -> None:
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    rng = np.random.default_rng(0)
    logits = rng.standard_normal((2, 7, 50)).astype(np.float32) * 3
    mask = np.array([[1] * 7, [1] * 4 + [0] * 3])
    module = SpladePooling(strategy, activation).eval()
    features = {"token_embeddings": torch.from_numpy(logits), "attention_mask": torch.from_numpy(mask)}
    expected = module(features)["sentence_embedding"].numpy()
    step = SpladeStep(strategy, activation)
    got = np.stack([step(logits[0]), step(logits[1, :4])])
    np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)
    ids, weights = sparse_pairs(got[0], top_k=5)
    top = torch.topk(torch.from_numpy(got[0]), 5).indices.sort().values.numpy()
    assert ids.tolist() == top.tolist()
    np.testing.assert_array_equal(weights, got[0][top])
    ids, _ = sparse_pairs(got[0], threshold=1.0)
    assert ids.tolist() == np.flatnonzero(got[0] > 1.0).tolist()
    with pytest.raises(ValueError, match="top_k must be a positive int or None, got 0"):
        sparse_pairs(got[0], top_k=0)


def test_sparse_encoder_export_matches_encode(
    tmp_path: Path, rich_export: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A SparseEncoder (fill-mask Transformer + SpladePooling) exports with its MLM head; the MLM head on every
    token + :class:`SpladeStep` equals ``SparseEncoder.encode``, and top-k pruning its ``max_active_dims``."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import SpladePooling
    from tokenizers import Tokenizer

    from bertonnx.session import open_variant_session

    checkpoint = build_tiny_checkpoint("BertForMaskedLM", tmp_path / "mlm")
    transformer = models.Transformer(str(checkpoint), transformer_task="fill-mask", max_seq_length=48)
    SparseEncoder(modules=[transformer, SpladePooling("max")], device="cpu", prompts={"query": "query: "}).save(
        str(tmp_path / "se")
    )
    model = SparseEncoder(str(tmp_path / "se"), device="cpu")
    outdir = tmp_path / "export"
    options = ExportOptions(outdir=outdir, model=str(tmp_path / "se"), variants=("fp32", "optimized"))
    run_export(options, log=lambda message: None)
    manifest = read_manifest(outdir)
    assert "embed_sparse" in manifest.tasks
    pipeline = read_pipeline(manifest.data, outdir)
    assert pipeline is not None
    assert pipeline.splade == SpladeStep("max", "relu")
    assert pipeline.similarity_fn_name == "dot"
    tokenizer = Tokenizer.from_file(str(outdir / "tokenizer.json"))
    tokenizer.enable_truncation(pipeline.max_seq_length)
    session = open_variant_session(outdir / "model.onnx", "fp32", RuntimeOptions())
    head = open_variant_session(outdir / "mlm_head.onnx", "fp32", RuntimeOptions())
    rows = []
    for text in TEXTS:
        ids = tokenizer.encode(text).ids
        feeds = {
            "input_ids": np.array([ids], np.int64),
            "attention_mask": np.ones((1, len(ids)), np.int64),
            "token_type_ids": np.zeros((1, len(ids)), np.int64),
        }
        (states,) = session.run(["last_hidden_state"], feeds)
        (logits,) = head.run(["mlm_logits"], {"hidden_states": states[0]})
        rows.append(pipeline.splade(logits))
    expected = model.encode(TEXTS, convert_to_sparse_tensor=False).numpy()
    np.testing.assert_allclose(np.stack(rows), expected, atol=EXACT, rtol=0)
    pruned = model.encode(TEXTS, convert_to_sparse_tensor=False, max_active_dims=8).numpy()
    for row, reference in zip(rows, pruned, strict=True):
        ids, weights = sparse_pairs(row, top_k=8)
        assert ids.tolist() == np.flatnonzero(reference).tolist()
        np.testing.assert_allclose(weights, reference[ids], atol=EXACT, rtol=0)
    bert = BertOnnx(outdir, "optimized")  # the runtime's embed_sparse task: the same pairs
    for options, reference_rows in (({}, expected), ({"top_k": 8}, pruned)):
        for answer, reference in zip(bert.embed_sparse(TEXTS, **options), reference_rows, strict=True):
            assert answer["indices"].tolist() == np.flatnonzero(reference).tolist()
            np.testing.assert_allclose(answer["values"], reference[answer["indices"]], atol=EXACT, rtol=0)
    with pytest.raises(ValueError, match="threshold must be a number >= 0, got -1"):
        bert.embed_sparse(TEXTS, threshold=-1)
    _assert_embed_sparse_route(outdir, expected)
    _assert_sparse_corpus_job(outdir, tmp_path, bert.embed_sparse(TEXTS))
    queried = bert.embed_sparse(TEXTS, prompt_name="query")
    _assert_sparse_corpus_job(outdir, tmp_path, queried, prompt_name="query")
    prompted = model.encode(TEXTS, prompt_name="query", convert_to_sparse_tensor=False).numpy()
    for answer, reference in zip(queried, prompted, strict=True):
        assert answer["indices"].tolist() == np.flatnonzero(reference).tolist()
        np.testing.assert_allclose(answer["values"], reference[answer["indices"]], atol=EXACT, rtol=0)
    _assert_embed_sparse_command(outdir, rich_export, tmp_path, capsys)
    with pytest.raises(HeadMissingError):  # an export without SPLADE (a SentenceTransformer's BertModel)
        BertOnnx(rich_export, "fp32").embed_sparse(TEXTS)


def test_server_routes_answer_as_encode(rich_folder: tuple[Path, SentenceTransformer], rich_export: Path) -> None:
    """``/embed`` (TEI: unit length by default; ``prompt_name``, ``dimensions``) and ``/v1/embeddings`` (OpenAI's
    ``dimensions``) of a sentence-transformers export give ``encode``'s vectors; ``/info`` shows the pipeline."""
    import time

    from fastapi.testclient import TestClient

    from bertonnx.serve import create_app

    _, model = rich_folder
    with TestClient(create_app(rich_export, threads=1)) as client:
        deadline = time.monotonic() + 60
        while client.get("/ready").status_code != 200:
            assert time.monotonic() < deadline, "the server was not ready in time"
            time.sleep(0.05)
        # /tokenize shows what embed feeds: up to max_seq_length, not the positions
        bert = BertOnnx(rich_export)
        limit = bert.sentence.max_seq_length if bert.sentence is not None else 0
        assert limit < bert.max_length
        fed = client.post("/tokenize", json={"inputs": LONG, "truncate": True})
        assert fed.status_code == 200, fed.text
        assert len(fed.json()[0]["ids"]) == limit == len(bert.tokenize(LONG, truncation=True).ids)
        refused = client.post("/tokenize", json={"inputs": LONG})
        assert refused.status_code == 422
        assert f"more than the model's limit of {limit}" in refused.json()["error"]
        info = client.get("/info").json()
        assert info["pooling"] == "pipeline"
        assert info["sentence_transformers"]["pipeline"][0] == "pooling(weightedmean, without prompt)"
        assert info["sentence_transformers"]["similarity_fn_name"] == "cosine"
        tei = client.post("/embed", json={"inputs": TEXTS}).json()
        expected = model.encode(TEXTS, normalize_embeddings=True)
        np.testing.assert_allclose(np.array(tei), expected, atol=EXACT, rtol=0)
        tei = client.post("/embed", json={"inputs": TEXTS, "normalize": False, "prompt_name": "document"}).json()
        np.testing.assert_allclose(np.array(tei), model.encode(TEXTS, prompt_name="document"), atol=EXACT, rtol=0)
        tei = client.post("/embed", json={"inputs": TEXTS, "normalize": False, "prompt": "zz: "}).json()
        np.testing.assert_allclose(np.array(tei), model.encode(TEXTS, prompt="zz: "), atol=EXACT, rtol=0)
        both = client.post("/embed", json={"inputs": TEXTS, "prompt": "zz: ", "prompt_name": "document"})
        assert both.status_code == 422, both.text
        body = {"input": TEXTS, "dimensions": 6}
        data = client.post("/v1/embeddings", json=body).json()["data"]
        expected = model.encode(TEXTS, truncate_dim=6, normalize_embeddings=True)
        np.testing.assert_allclose(np.array([d["embedding"] for d in data]), expected, atol=EXACT, rtol=0)
        bad = client.post("/embed", json={"inputs": "a", "prompt_name": "nope"})
        assert bad.status_code == 422
        assert "unknown prompt_name 'nope'" in bad.json()["error"]


def test_corpus_job_embeds_as_encode(
    rich_folder: tuple[Path, SentenceTransformer], rich_export: Path, tmp_path: Path
) -> None:
    """``bertonnx batch`` without options on a sentence-transformers export writes ``encode``'s vectors (width
    ``truncate_dim``, texts over ``max_seq_length`` cut, not rejected)."""
    import pyarrow.parquet as pq

    from bertonnx.cli import main

    _, model = rich_folder
    texts = [t for t in TEXTS if t]  # a .txt keeps blank lines as rows: no empty text here
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    output = tmp_path / "out.parquet"
    assert main(["batch", str(rich_export), "--input", str(source), "--output", str(output)]) == 0
    table = pq.read_table(output)
    vectors = np.array(table.column("embedding").to_pylist(), dtype=np.float32)
    np.testing.assert_allclose(vectors, model.encode(texts), atol=EXACT, rtol=0)
    meta = table.schema.metadata  # what computed the rows, as it ran (not the options' absence)
    assert meta[b"bertonnx.pooling"] == b"pipeline"
    assert meta[b"bertonnx.truncation"] == b"true"
    assert meta[b"bertonnx.max_length"] == str(model.max_seq_length).encode()
    assert meta[b"bertonnx.dimensions"] == str(model.truncate_dim or "").encode()
    assert main(["batch", str(rich_export), "--input", str(source), "--output", str(output), "--dimensions", "4"]) == 0
    assert pq.read_table(output).schema.metadata[b"bertonnx.dimensions"] == b"4"


def _assert_embed_sparse_route(export: Path, expected: np.ndarray) -> None:
    """TEI's ``POST /embed_sparse`` gives ``SparseEncoder.encode``'s non-zero weights as ``{"index", "value"}``."""
    import time

    from fastapi.testclient import TestClient

    from bertonnx.serve import create_app

    with TestClient(create_app(export, threads=1)) as client:
        deadline = time.monotonic() + 60
        while client.get("/ready").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        answer = client.post("/embed_sparse", json={"inputs": TEXTS})
        assert answer.status_code == 200, answer.text
        for found, reference in zip(answer.json(), expected, strict=True):
            assert [pair["index"] for pair in found] == np.flatnonzero(reference).tolist()
            values = [pair["value"] for pair in found]
            np.testing.assert_allclose(values, reference[np.flatnonzero(reference)], atol=EXACT, rtol=0)
        pruned = client.post("/embed_sparse", json={"inputs": TEXTS[0], "top_k": 3}).json()
        assert len(pruned[0]) == 3
        assert client.post("/embed_sparse", json={"inputs": ["a"], "top_k": 0}).status_code == 422


def _assert_sparse_corpus_job(export: Path, tmp_path: Path, offline: list[Any], prompt_name: str | None = None) -> None:
    """``bertonnx batch --task sparse`` (``--prompt-name``): one row per text, its ``{"index", "value"}`` pairs
    as offline."""
    from bertonnx.corpus import TaskOptions, read_output
    from bertonnx.corpus.job import run_local_job

    source = tmp_path / "texts.txt"
    source.write_text("".join(text.replace("\n", " ") + "\n" for text in TEXTS), encoding="utf-8")
    output = tmp_path / "sparse.parquet"
    options = TaskOptions("sparse", prompt_name=prompt_name)
    run_local_job(export, source, output, options, variant="optimized", progress=False)
    rows = read_output(output).column("sparse").to_pylist()
    assert len(rows) == len(TEXTS)
    for row, answer in zip(rows, offline, strict=True):
        assert [pair["index"] for pair in row] == answer["indices"].tolist()
        np.testing.assert_allclose([pair["value"] for pair in row], answer["values"], atol=1e-6, rtol=0)


def _assert_embed_sparse_command(
    export: Path, rich_export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bertonnx embed-sparse`` prints ``BertOnnx.embed_sparse``'s pairs (JSON lines, or one object with
    ``--json``; ``--top-k`` and ``--threshold`` as the keywords); a bad option, or an export without SPLADE, is
    one line on stderr and exit 2."""
    from bertonnx.cli import main

    bert = BertOnnx(export)
    source = tmp_path / "sparse-texts.txt"
    source.write_text("".join(text + "\n" for text in TEXTS), encoding="utf-8")
    full = bert.embed_sparse(TEXTS)
    threshold = float(np.median(np.concatenate([answer["values"] for answer in full])))
    for argv, options in (
        ([*TEXTS], {}),
        (["--top-k", "3", *TEXTS], {"top_k": 3}),
        (["--input", str(source), "--threshold", repr(threshold), "--json"], {"threshold": threshold}),
    ):
        assert main(["embed-sparse", str(export), *argv]) == 0
        out = capsys.readouterr().out
        if "--json" in argv:
            payload = json.loads(out)
            assert list(payload)[:4] == ["model", "variant", "random_weights", "results"]  # every command's envelope
            assert (payload["top_k"], payload["threshold"], payload["variant"]) == (None, threshold, "fp32")
            lines = payload["results"]
        else:
            lines = [json.loads(line) for line in out.splitlines()]
        assert [line["text"] for line in lines] == TEXTS
        for line, answer in zip(lines, bert.embed_sparse(TEXTS, **options), strict=True):
            assert line["indices"] == answer["indices"].tolist()
            assert line["values"] == answer["values"].tolist()
            assert line["tokens"] == [bert.tokenizer.decode([i], False) for i in line["indices"]]
        counts = [len(line["indices"]) for line in lines]  # the options took effect (every text has more weights)
        if "top_k" in options:
            assert max(counts) == 3
        if "threshold" in options:
            assert min(value for line in lines for value in line["values"]) > threshold
            assert sum(counts) < sum(len(answer["indices"]) for answer in full)
    for argv, message in (
        ([str(export), "a", "--top-k", "0"], "argument --top-k: expected a whole number >= 1, got 0"),
        ([str(export), "a", "--threshold", "-1"], "argument --threshold: expected a number >= 0, got -1"),
        ([str(rich_export), "a"], "this export has no "),
    ):
        assert main(["embed-sparse", *argv]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert len(captured.err.strip().splitlines()) == 1, captured.err
        assert message in captured.err
        assert "Traceback" not in captured.err


def test_corpus_job_embeds_with_the_pipeline_prompts_and_dimensions(
    rich_folder: tuple[Path, SentenceTransformer], rich_export: Path, tmp_path: Path
) -> None:
    """``bertonnx batch`` embeds as ``encode`` by default, and takes ``prompt_name`` and ``dimensions`` (the
    column's width follows them), equal to ``BertOnnx.embed`` with the same options."""
    from bertonnx.corpus import TaskOptions, read_output
    from bertonnx.corpus.job import run_local_job

    _, model = rich_folder
    texts = [text for text in TEXTS if text and "\n" not in text]
    source = tmp_path / "texts.txt"
    source.write_text("".join(text + "\n" for text in texts), encoding="utf-8")
    bert = BertOnnx(rich_export)
    prompt = next(iter(model.prompts))
    for options, expected in (
        (TaskOptions("embed"), bert.embed(texts)),
        (TaskOptions("embed", prompt_name=prompt, dimensions=8), bert.embed(texts, prompt_name=prompt, dimensions=8)),
    ):
        output = tmp_path / "out.parquet"
        run_local_job(rich_export, source, output, options, progress=False)
        got = np.array(read_output(output).column("embedding").to_pylist(), dtype=np.float32)
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)
    np.testing.assert_allclose(bert.embed(texts), model.encode(texts), atol=EXACT, rtol=0)
