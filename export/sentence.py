"""Read a sentence-transformers folder's module pipeline for the export, and check it against
sentence-transformers itself.

A folder with ``modules.json`` is a sentence-transformers model: its first module (``Transformer``) is the
checkpoint exported as any other, the modules after it (``Pooling``, ``Dense``, ``Normalize``) say how to turn
its token states into an embedding, and ``config_sentence_transformers.json`` adds prompts, the similarity
function and ``truncate_dim``. This module reads those files by sentence-transformers' own rules (legacy
``pooling_mode_*`` keys, ``max_seq_length`` from ``sentence_bert_config.json`` or the tokenizer's
``model_max_length`` capped at the positions, ``do_lower_case``), writes each dense layer's weights as ``.npy``
files, and returns the manifest block :mod:`bertonnx.sentence` runs. A module bertonnx cannot run exactly (a
custom module, ``Router``, ``StaticEmbedding``, an untrusted activation ...) is refused in one line naming it:
skipping it would give vectors the model never gives.

A sentence-transformers ``CrossEncoder`` folder (``model_type`` ``CrossEncoder``, or a plain classifier whose
``config.json`` carries the cross-encoder's activation under the old or new key) gives the activation
``CrossEncoder.predict`` applies by default, recorded in the manifest's ``task`` block.

The gate (:func:`pipeline_figures`) runs the export's graph through :mod:`bertonnx.sentence` on the gate texts
(with every prompt the model has) and compares with ``SentenceTransformer(folder).encode``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertonnx.sentence import (
    BLOCK,
    MODEL_TYPES,
    POOLING_MODES,
    SPLADE_ACTIVATIONS,
    SPLADE_POOLING,
    SentencePipeline,
    prompt_length,
    read_pipeline,
)

from .errors import ExportError

MODULES_FILE = "modules.json"
ST_CONFIG_FILE = "config_sentence_transformers.json"
#: The Transformer module's config file names, tried in this order (as sentence-transformers does).
TRANSFORMER_CONFIG_FILES = (
    "sentence_bert_config.json",
    "sentence_roberta_config.json",
    "sentence_distilbert_config.json",
    "sentence_camembert_config.json",
    "sentence_albert_config.json",
    "sentence_xlm-roberta_config.json",
    "sentence_xlnet_config.json",
)
#: Legacy ``Pooling`` keys, in the order sentence-transformers concatenates their modes.
LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
#: torch activation classes (as sentence-transformers stores them) -> :data:`bertonnx.sentence.ACTIVATIONS`.
TORCH_ACTIVATIONS = {
    "torch.nn.modules.activation.Tanh": "tanh",
    "torch.nn.modules.linear.Identity": "identity",
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
    "torch.nn.modules.activation.ReLU": "relu",
    "torch.nn.modules.activation.GELU": "gelu",
    "torch.nn.modules.activation.SiLU": "silu",
    "torch.nn.modules.activation.LeakyReLU": "leaky_relu",
}
#: Module class names bertonnx runs (``modules.json``'s ``type`` ends with one of these).
SUPPORTED_MODULES = ("Transformer", "MLMTransformer", "Pooling", "Dense", "Normalize", "SpladePooling")
#: ``sentence_bert_config.json``'s ``transformer_task`` values bertonnx runs.
TRANSFORMER_TASKS = ("feature-extraction", "sequence-classification", "fill-mask")
#: sentence-transformers' default prompts of a SentenceTransformer (empty unless the folder says otherwise).
DEFAULT_PROMPT_NAMES = ("query", "document")
SIMILARITY_FUNCTIONS = ("cosine", "dot", "euclidean", "manhattan")
DENSE_FILE = "st_dense_{index}_{part}.npy"
#: The gate's limits on the whole pipeline: fp32 and fused variants within this max abs difference of
#: ``encode``; the lossy ones above these minimum cosines (int8 as the gate's hidden-state limit). Measured on
#: real all-MiniLM-L6-v2 weights and the gate texts: fp32 2.2e-7, optimized 2.1e-7, int8 min cosine 0.988,
#: bf16 min cosine 0.99999 (max abs 2e-4).
PIPELINE_MAX_ABS = 1e-5
PIPELINE_MIN_COSINE = {"int8": 0.98, "bf16": 0.999}


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ExportError(f"{path} is not readable JSON ({exc}); the sentence-transformers folder is broken") from None


def _class_name(entry: dict[str, Any], modules_path: Path) -> str:
    kind = str(entry.get("type", ""))
    name = kind.rsplit(".", 1)[-1]
    if not kind.startswith("sentence_transformers.") or name not in SUPPORTED_MODULES:
        raise ExportError(
            f"{modules_path}: module {entry.get('name', entry.get('idx'))!r} is {kind or 'of no type'}, which "
            f"bertonnx cannot run exactly (it runs {', '.join(SUPPORTED_MODULES)}); refusing to export without it"
        )
    return name


@dataclass
class SentenceFolder:
    """What a sentence-transformers folder says, read before its checkpoint is loaded.

    Attributes:
        root: the folder.
        checkpoint: the Transformer module's folder (the checkpoint to export).
        model_type: ``SentenceTransformer`` or ``CrossEncoder``.
        modules: ``(class name, folder)`` of each module after the Transformer.
        transformer_config: the Transformer's ``sentence_bert_config.json`` (or a legacy name), or ``{}``.
        st_config: ``config_sentence_transformers.json``, or ``{}``.
    """

    root: Path
    checkpoint: Path
    model_type: str
    modules: list[tuple[str, Path]] = field(default_factory=list)
    transformer_config: dict[str, Any] = field(default_factory=dict)
    st_config: dict[str, Any] = field(default_factory=dict)


def checkpoint_dir(model: str) -> str:
    """The checkpoint to load for ``model``: the Transformer module's folder of a local sentence-transformers
    folder whose Transformer lives in a subfolder (``0_Transformer``), else ``model`` unchanged."""
    path = Path(model).expanduser()
    if not (path / MODULES_FILE).is_file():
        return model
    folder = read_folder(path)
    return str(folder.checkpoint) if folder is not None and folder.checkpoint != path else model


def read_folder(path: Path) -> SentenceFolder | None:
    """The sentence-transformers pipeline of ``path``; ``None`` when it has no ``modules.json`` and is no
    cross-encoder.

    Raises:
        ExportError: a module bertonnx cannot run, a Transformer that is not the first module, a broken file.
    """
    modules_path = path / MODULES_FILE
    st_config = _read_json(path / ST_CONFIG_FILE) if (path / ST_CONFIG_FILE).is_file() else {}
    if not modules_path.is_file():
        if _old_cross_encoder(path):
            return SentenceFolder(path, path, "CrossEncoder", st_config=st_config)
        return None
    entries = _read_json(modules_path)
    if not isinstance(entries, list) or not entries:
        raise ExportError(f"{modules_path} lists no modules; the sentence-transformers folder is broken")
    # in the file's order, as sentence-transformers loads them (its "idx" is not read)
    names = [_class_name(e, modules_path) for e in entries]
    transformers = ("Transformer", "MLMTransformer")
    if names[0] not in transformers or any(n in transformers for n in names[1:]):
        raise ExportError(
            f"{modules_path}: bertonnx runs one Transformer module first, then Pooling, Dense, Normalize (or "
            f"SpladePooling); this folder's modules are {', '.join(names)}"
        )
    checkpoint = path / str(entries[0].get("path", ""))
    transformer_config: dict[str, Any] = {}
    for name in TRANSFORMER_CONFIG_FILES:
        if (checkpoint / name).is_file():
            transformer_config = _read_json(checkpoint / name)
            break
    default_task = "fill-mask" if names[0] == "MLMTransformer" else "feature-extraction"
    task = transformer_config.get("transformer_task", default_task)
    if task not in TRANSFORMER_TASKS:
        raise ExportError(
            f"{checkpoint}: the Transformer module's transformer_task is {task!r}; bertonnx runs "
            f"{', '.join(TRANSFORMER_TASKS)}"
        )
    model_type = str(st_config.get("model_type") or "SentenceTransformer")
    if task == "sequence-classification":
        model_type = "CrossEncoder"
    elif task == "fill-mask" or "SpladePooling" in names:
        model_type = "SparseEncoder"
    if model_type not in MODEL_TYPES:
        raise ExportError(f"{path / ST_CONFIG_FILE}: model_type {model_type!r} is not one bertonnx exports")
    if model_type == "SparseEncoder" and (task != "fill-mask" or names[1:] != ["SpladePooling"]):
        raise ExportError(
            f"{modules_path}: bertonnx runs a SparseEncoder as a fill-mask Transformer then SpladePooling; this "
            f"folder's modules are {', '.join(names)} ({task})"
        )
    modules = [(name, path / str(e.get("path", ""))) for name, e in zip(names[1:], entries[1:], strict=True)]
    if model_type == "SentenceTransformer" and ("Pooling" not in names or "SpladePooling" in names):
        raise ExportError(f"{modules_path}: no Pooling module; bertonnx needs one to make one vector per text")
    if model_type == "SentenceTransformer" and (names[1] != "Pooling" or names.count("Pooling") > 1):
        # Dense and Normalize read the pooled sentence_embedding: before Pooling there is none (encode fails too)
        raise ExportError(
            f"{modules_path}: Pooling must come once, right after the Transformer (Dense and Normalize work on its "
            f"vector); this folder's modules are {', '.join(names)}"
        )
    return SentenceFolder(path, checkpoint, model_type, modules, transformer_config, st_config)


def _old_cross_encoder(path: Path) -> bool:
    config_path = path / "config.json"
    if not config_path.is_file():
        return False
    config = _read_json(config_path)
    return isinstance(config, dict) and (
        "activation_fn" in (config.get("sentence_transformers") or {})
        or config.get("sbert_ce_default_activation_function") is not None
    )


def _activation_name(path: str, where: str) -> str:
    if path not in TORCH_ACTIVATIONS:
        raise ExportError(
            f"{where}: activation {path!r} is not one bertonnx computes ({', '.join(TORCH_ACTIVATIONS)}); "
            "refusing to export a pipeline it would run differently"
        )
    return TORCH_ACTIVATIONS[path]


def cross_encoder_activation(folder: SentenceFolder, num_labels: int) -> str:
    """The activation ``CrossEncoder.predict`` applies by default: ``config_sentence_transformers.json``'s
    ``activation_fn``, else ``config.json``'s ``sentence_transformers.activation_fn``, else its old
    ``sbert_ce_default_activation_function``, else sigmoid for one label and identity otherwise."""
    config = _read_json(folder.checkpoint / "config.json")
    candidates = [
        (folder.st_config.get("activation_fn"), folder.root / ST_CONFIG_FILE),
        ((config.get("sentence_transformers") or {}).get("activation_fn"), folder.checkpoint / "config.json"),
        (config.get("sbert_ce_default_activation_function"), folder.checkpoint / "config.json"),
    ]
    for value, where in candidates:
        if value is not None:
            return _activation_name(str(value), str(where))
    return "sigmoid" if num_labels == 1 else "identity"


def max_seq_length(folder: SentenceFolder, tokenizer_max_length: int, positions: int, table: int | None = None) -> int:
    """The length sentence-transformers cuts every input to: ``processor_kwargs.model_max_length`` (or the old
    ``tokenizer_args``), else ``max_seq_length`` from the Transformer's config, else the tokenizer's
    ``model_max_length`` capped at the model's positions.

    Args:
        positions: the tokens an input may have (``Family.usable_positions``: RoBERTa, XLM-RoBERTa and MPNet
            count positions from ``padding_idx + 1``, so their 514 position embeddings hold 512 tokens).
        table: ``max_position_embeddings``; a length equal to it (what sentence-transformers caps at and saves
            for such a model, whose ``encode`` then fails past ``positions``) is cut to ``positions``.

    Raises:
        ExportError: the length is above the positions (sentence-transformers would fail on long inputs).
    """
    config = folder.transformer_config
    kwargs = config.get("processor_kwargs") or config.get("tokenizer_args") or {}
    if kwargs.get("model_max_length") is not None:
        length = int(kwargs["model_max_length"])
    elif config.get("max_seq_length") is not None:
        length = int(config["max_seq_length"])
    else:
        length = min(int(tokenizer_max_length), positions)
    if length == table:
        length = min(length, positions)
    if not 1 <= length <= positions:
        raise ExportError(
            f"{folder.checkpoint}: max_seq_length {length} is outside 1..{positions} (the model's positions)"
        )
    return length


def lowercase_tokenizer(tokenizer: Any) -> None:
    """Put a ``Lowercase`` normalizer first in a fast tokenizer that has none, as sentence-transformers does
    for ``do_lower_case``: the exported ``tokenizer.json`` then lower-cases as ``encode`` does."""
    from tokenizers.normalizers import Lowercase, Sequence

    normalizer = tokenizer.backend_tokenizer.normalizer
    if isinstance(normalizer, Lowercase) or (
        isinstance(normalizer, Sequence) and any(isinstance(n, Lowercase) for n in normalizer)
    ):
        return
    steps: list[Any] = [Lowercase()]
    if isinstance(normalizer, Sequence):
        steps += list(normalizer)
    elif normalizer is not None:
        steps.append(normalizer)
    tokenizer.backend_tokenizer.normalizer = Sequence(steps)


def _pooling_modes(config: dict[str, Any], where: Path) -> tuple[str, ...]:
    mode = config.get("pooling_mode")
    if mode is None:
        modes = tuple(m for key, m in LEGACY_POOLING_KEYS.items() if config.get(key, False)) or ("mean",)
    else:
        modes = (mode,) if isinstance(mode, str) else tuple(mode)
    bad = [m for m in modes if m not in POOLING_MODES]
    if bad or not modes:
        raise ExportError(f"{where}: pooling mode {bad or modes} is not one of {', '.join(POOLING_MODES)}")
    return modes


def _dense_weights(directory: Path) -> dict[str, np.ndarray]:
    import torch

    safetensors_path, bin_path = directory / "model.safetensors", directory / "pytorch_model.bin"
    if safetensors_path.is_file():
        from safetensors.numpy import load_file

        return dict(load_file(str(safetensors_path)))
    if bin_path.is_file():
        state = torch.load(str(bin_path), map_location="cpu", weights_only=True)
        return {k: v.float().numpy() for k, v in state.items()}
    raise ExportError(f"{directory}: a Dense module without weights (model.safetensors or pytorch_model.bin)")


def _atomic_save(path: Path, array: np.ndarray) -> None:
    temporary = path.with_name(path.name + ".partial")
    with open(temporary, "wb") as handle:
        np.save(handle, array, allow_pickle=False)
    temporary.replace(path)


def _dense_step(index: int, directory: Path, width: int, staging: Path) -> tuple[dict[str, Any], int]:
    config = _read_json(directory / "config.json")
    where = directory / "config.json"
    for key in ("module_input_name", "module_output_name"):
        if config.get(key, "sentence_embedding") not in ("sentence_embedding", None):
            raise ExportError(
                f"{where}: a Dense module on {config[key]!r}; bertonnx runs dense layers on the embedding"
            )
    in_features, out_features = int(config["in_features"]), int(config["out_features"])
    if in_features != width:
        raise ExportError(f"{where}: in_features {in_features} but the embedding before it has {width} values")
    activation = _activation_name(
        str(config.get("activation_function", "torch.nn.modules.activation.Tanh")), str(where)
    )
    weights = _dense_weights(directory)
    weight = np.ascontiguousarray(weights["linear.weight"], dtype=np.float32)
    if weight.shape != (out_features, in_features):
        raise ExportError(
            f"{directory}: linear.weight has shape {weight.shape}, expected {(out_features, in_features)}"
        )
    record: dict[str, Any] = {
        "type": "dense",
        "in_features": in_features,
        "out_features": out_features,
        "activation": activation,
        "weight_file": DENSE_FILE.format(index=index, part="weight"),
        "bias_file": None,
    }
    _atomic_save(staging / record["weight_file"], weight)
    if config.get("bias", True):
        record["bias_file"] = DENSE_FILE.format(index=index, part="bias")
        _atomic_save(staging / record["bias_file"], np.ascontiguousarray(weights["linear.bias"], dtype=np.float32))
    return record, out_features


def build_block(
    folder: SentenceFolder, *, hidden_size: int, length: int, staging: Path, vocab_size: int = 0
) -> dict[str, Any]:
    """The manifest's ``sentence_transformers`` block; dense weights are written into ``staging``.

    Raises:
        ExportError: an inconsistent folder (a width that does not chain, a default prompt it lacks, a
            ``truncate_dim`` above the width, an unknown similarity function).
    """
    steps: list[dict[str, Any]] = []
    width = hidden_size
    for index, (name, directory) in enumerate(folder.modules, start=1):
        if name == "Pooling":
            config = _read_json(directory / "config.json")
            modes = _pooling_modes(config, directory / "config.json")
            dimension = config.get("embedding_dimension", config.get("word_embedding_dimension", width))
            if int(dimension) != width:
                raise ExportError(f"{directory}: Pooling on {dimension} values, the model gives {width}")
            steps.append(
                {"type": "pooling", "modes": list(modes), "include_prompt": bool(config.get("include_prompt", True))}
            )
            width *= len(modes)
        elif name == "Dense":
            record, width = _dense_step(index, directory, width, staging)
            steps.append(record)
        elif name == "SpladePooling":
            config = _read_json(directory / "config.json")
            strategy = config.get("pooling_strategy", "max")
            activation = config.get("activation_function", "relu")
            if strategy not in SPLADE_POOLING or activation not in SPLADE_ACTIVATIONS:
                raise ExportError(
                    f"{directory}: SpladePooling {strategy!r} with {activation!r} is not one bertonnx runs"
                )
            steps.append({"type": "splade", "pooling_strategy": strategy, "activation": activation})
            width = vocab_size
        else:
            steps.append({"type": "normalize"})
    config = folder.st_config
    prompts = {name: "" for name in DEFAULT_PROMPT_NAMES} if folder.model_type != "CrossEncoder" else {}
    prompts.update({str(k): "" if v is None else str(v) for k, v in (config.get("prompts") or {}).items()})
    default = config.get("default_prompt_name")
    if default is not None and default not in prompts:
        raise ExportError(f"{folder.root / ST_CONFIG_FILE}: default_prompt_name {default!r} is not among its prompts")
    similarity = config.get("similarity_fn_name") or ("dot" if folder.model_type == "SparseEncoder" else "cosine")
    if similarity not in SIMILARITY_FUNCTIONS:
        raise ExportError(f"{folder.root / ST_CONFIG_FILE}: similarity_fn_name {similarity!r} is unknown")
    truncate_dim = config.get("truncate_dim")
    if truncate_dim is not None and not 1 <= int(truncate_dim) <= width:
        raise ExportError(f"{folder.root / ST_CONFIG_FILE}: truncate_dim {truncate_dim} is outside 1..{width}")
    return {
        "model_type": folder.model_type,
        "max_seq_length": length,
        "do_lower_case": bool(folder.transformer_config.get("do_lower_case", False)),
        "steps": steps,
        "prompts": prompts,
        "default_prompt_name": default,
        "similarity_fn_name": similarity,
        "truncate_dim": None if truncate_dim is None else int(truncate_dim),
        "dimension": width,
        "source_version": (config.get("__version__") or {}).get("sentence_transformers"),
    }


@dataclass
class Prepared:
    """What :func:`prepare` found: the folder, the manifest block and the ``task`` block's additions."""

    folder: SentenceFolder | None = None
    block: dict[str, Any] | None = None
    task: dict[str, Any] = field(default_factory=dict)


def prepare(model: str, revision: str | None, source: Any, staging: Path) -> Prepared:
    """Read ``model``'s sentence-transformers folder (a local directory, or the hub snapshot the export loaded),
    lower-case the source tokenizer when the folder says so (before it is saved), write dense weights into
    ``staging`` and build the manifest block; nothing when ``model`` is no sentence-transformers folder."""
    if source.kind == "local":
        path = Path(model).expanduser()
    elif source.kind == "hub":
        from .source import _download

        path = _download(model, revision)  # the snapshot load_source used, from the local cache
    else:
        return Prepared()
    folder = read_folder(path)
    if folder is None:
        return Prepared()
    config = source.model.config
    task: dict[str, Any] = {}
    if folder.model_type == "CrossEncoder":
        if not source.row.architecture.endswith("ForSequenceClassification"):
            return Prepared(folder)  # --task exported something else: no cross-encoder to describe
        task["activation"] = cross_encoder_activation(folder, int(config.num_labels))
    if folder.model_type == "SparseEncoder" and not source.row.has_mlm:
        raise ExportError(
            f"{path} is a SparseEncoder, which needs the MLM head; {source.row.architecture} has none "
            "(leave out --task, or pass --task fill-mask)"
        )
    if folder.model_type == "SparseEncoder":
        task["tasks"] = [*source.row.runtime_tasks(None), "embed_sparse"]
    if bool(folder.transformer_config.get("do_lower_case", False)):
        lowercase_tokenizer(source.tokenizer)
    positions = source.row.family.usable_positions(int(config.max_position_embeddings))  # RoBERTa's: 514 - 2
    length = max_seq_length(
        folder, int(source.tokenizer.model_max_length), positions, int(config.max_position_embeddings)
    )
    block = build_block(
        folder, hidden_size=int(config.hidden_size), length=length, staging=staging, vocab_size=int(config.vocab_size)
    )
    return Prepared(folder, block, task)


# -- the gate -----------------------------------------------------------------------------------------------


def gate_texts() -> list[str]:
    """The gate's texts for the whole pipeline: every gate input's text and pair as single texts (empty,
    accents, CJK, digits, and texts over any ``max_seq_length`` up to 512 tokens)."""
    from .gate import GATE_INPUTS

    texts: list[str] = []
    for text, pair in GATE_INPUTS:
        for t in (text, pair):
            if t is not None and t not in texts:
                texts.append(t)
    return texts


@dataclass
class PipelineCase:
    """One prompt's gate texts, tokenized as the runtime does, and ``encode``'s vectors for them."""

    prompt_name: str | None
    prompt_tokens: int | None
    cases: list[Any]
    expected: np.ndarray


def reference_cases(folder: SentenceFolder, tokenizer_path: Path, block: dict[str, Any]) -> list[PipelineCase]:
    """``SentenceTransformer(folder).encode`` on the gate texts, once without naming a prompt (the default) and
    once per non-empty prompt, with the texts tokenized as the runtime will (prompt prepended, cut to
    ``max_seq_length``) one case per text.

    Raises:
        ExportError: sentence-transformers is not installed, or it reads the folder differently from this
            module (max_seq_length, prompts, truncate_dim).
    """
    try:
        from sentence_transformers import SentenceTransformer, SparseEncoder
    except ImportError:
        raise ExportError(
            "checking a sentence-transformers folder needs sentence-transformers: pip install "
            "'sentence-transformers>=5.7,<6' (the export extra has it); nothing was written"
        ) from None
    from tokenizers import Tokenizer

    from .gate import make_case

    sparse = block["model_type"] == "SparseEncoder"
    model_class = SparseEncoder if sparse else SentenceTransformer
    model = model_class(str(folder.root), device="cpu", local_files_only=True)
    pipeline = _pipeline(block, tokenizer_path.parent)
    model.max_seq_length = _capped_length(model.max_seq_length, model[0].auto_model.config, block)
    found = {
        "max_seq_length": model.max_seq_length,
        "prompts": dict(model.prompts),
        "default_prompt_name": model.default_prompt_name,
        "truncate_dim": getattr(model, "truncate_dim", None),
        "similarity_fn_name": model.similarity_fn_name,
    }
    for key, value in found.items():
        if value != block[key]:
            raise ExportError(
                f"{folder.root}: sentence-transformers reads {key} = {value!r}, bertonnx read {block[key]!r}"
            )
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.no_padding()
    tokenizer.enable_truncation(pipeline.max_seq_length, strategy="longest_first")
    special = {int(i) for i in model.tokenizer.all_special_ids}
    texts = gate_texts()
    names: list[str | None] = [None] + [n for n, p in pipeline.prompts.items() if p]
    results = []
    for name in names:
        prompt = pipeline.resolve_prompt(prompt_name=name)
        if sparse:
            expected = model.encode(texts, prompt_name=name, convert_to_sparse_tensor=False, batch_size=8).numpy()
        else:
            expected = model.encode(texts, prompt_name=name, convert_to_numpy=True, batch_size=8)
        tokens = prompt_length(tokenizer.encode(prompt).ids, special) if prompt else None
        cases = [make_case(f"text {i}", [tokenizer.encode((prompt or "") + t)]) for i, t in enumerate(texts)]
        for case in cases if sparse else ():  # SPLADE: the MLM head on every token
            case.masks = np.array([[0, i] for i in range(case.lengths[0])], dtype=np.int64)
        results.append(PipelineCase(name, tokens, cases, np.asarray(expected, dtype=np.float32)))
    return results


def _capped_length(length: int | None, config: Any, block: dict[str, Any]) -> int | None:
    """The length sentence-transformers reads, or the block's where it read the whole position table: without a
    ``max_seq_length`` it caps the tokenizer's at ``max_position_embeddings`` (514 for RoBERTa), which a
    RoBERTa-family model cannot fill (its ``encode`` fails past 512 tokens); bertonnx caps at the usable ones."""
    ours = int(block["max_seq_length"])
    if length is not None and length > ours and length == getattr(config, "max_position_embeddings", None):
        return ours
    return length


def gate_references(prepared: Prepared, tokenizer_path: Path, *, random_weights: bool) -> list[PipelineCase]:
    """What the gate checks the pipeline against: :func:`reference_cases` for a SentenceTransformer folder;
    for a cross-encoder, that ``CrossEncoder(folder)`` reads the same activation and length (its logits are
    the classifier's, gated already). Nothing for seeded weights (sentence-transformers loads the real ones).

    Raises:
        ExportError: sentence-transformers is missing or reads the folder differently.
    """
    if prepared.block is None or prepared.folder is None or random_weights:
        return []
    if prepared.block["model_type"] != "CrossEncoder":
        return reference_cases(prepared.folder, tokenizer_path, prepared.block)
    try:
        from sentence_transformers import CrossEncoder
        from sentence_transformers.util import fullname
    except ImportError:
        raise ExportError(
            "checking a cross-encoder folder needs sentence-transformers: pip install 'sentence-transformers>=5.7,<6'"
        ) from None
    model = CrossEncoder(str(prepared.folder.root), device="cpu", local_files_only=True)
    length = _capped_length(model.max_seq_length, model.config, prepared.block)
    found = {"activation": TORCH_ACTIVATIONS.get(fullname(model.activation_fn)), "max_seq_length": length}
    ours = {"activation": prepared.task.get("activation"), "max_seq_length": prepared.block["max_seq_length"]}
    if found != ours:
        raise ExportError(f"{prepared.folder.root}: sentence-transformers reads {found}, bertonnx read {ours}")
    return []


def _pipeline(block: dict[str, Any], staging: Path | None = None) -> SentencePipeline:
    pipeline = read_pipeline({BLOCK: block, "config": {}}, staging or Path("."))
    assert pipeline is not None
    return pipeline


def pipeline_figures(
    block: dict[str, Any], staging: Path, references: list[PipelineCase], outputs: list[list[dict[str, np.ndarray]]]
) -> dict[str, float]:
    """Worst max abs difference and minimum cosine between the export's pipeline (the variant's
    ``last_hidden_state`` through :mod:`bertonnx.sentence`) and ``encode``, over every prompt and text."""
    pipeline = _pipeline(block, staging)
    worst, least = 0.0, 1.0
    for reference, values in zip(references, outputs, strict=True):
        if pipeline.splade is not None:
            got = np.stack([pipeline.splade(v["mlm_logits"]) for v in values])
        else:
            got = np.concatenate(
                [
                    pipeline.run(
                        v["last_hidden_state"], c.feeds["attention_mask"], prompt_tokens=reference.prompt_tokens
                    )
                    for c, v in zip(reference.cases, values, strict=True)
                ]
            )
        expected = reference.expected
        if got.shape != expected.shape or not np.isfinite(got).all():
            return {"pipeline_max_abs": float("inf"), "pipeline_min_cosine": -1.0}
        worst = max(worst, float(np.max(np.abs(got - expected))))
        a, b = got.astype(np.float64), expected.astype(np.float64)
        cos = np.sum(a * b, axis=1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-30)
        least = min(least, float(np.min(cos)))
    return {"pipeline_max_abs": worst, "pipeline_min_cosine": least}


def pipeline_breaches(variant: str, figures: dict[str, float]) -> list[str]:
    """The gate's verdict on the whole pipeline of one variant."""
    if variant in PIPELINE_MIN_COSINE:
        limit = PIPELINE_MIN_COSINE[variant]
        value = figures["pipeline_min_cosine"]
        return [] if value >= limit else [f"{variant}: sentence-transformers pipeline min cosine {value:.6f} < {limit}"]
    value = figures["pipeline_max_abs"]
    ok = value <= PIPELINE_MAX_ABS
    return [] if ok else [f"{variant}: sentence-transformers pipeline max abs diff {value:.3g} > {PIPELINE_MAX_ABS:g}"]
