"""Resolve what to export: a hub id or a local checkpoint, pretrained or seeded weights.

The export must work on machines that never reach the hub. ``bert-base-uncased``'s configuration and
vocabulary are shipped in ``export/assets`` so ``--weights random`` needs no network; pretrained weights
come from a local directory, the local hub cache, or (only when the hub answers) a download.

What is exported is the checkpoint's own architecture (``config.architectures``, one row of
:mod:`export.heads`), or the row ``--task`` names. A head the row needs but the weights lack is refused
unless the user opts in, and then recorded as seeded: a silently random head gives confident nonsense. A head
the weights hold but the row lacks is never dropped silently: the export refuses and names ``--task``.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerFast

from bertonnx.table import FAMILIES, Family

from .errors import ExportError
from .heads import ARCHITECTURES, ROWS, HeadRow, head_prefixes, row_for, row_for_config, rows_of
from .names import DEFAULT_MODEL, WEIGHT_CHOICES

ASSETS_DIR = Path(__file__).parent / "assets"
#: Hub ids whose configuration and vocabulary ship with bertonnx (no network needed for random weights).
BUILTIN_MODELS = {
    "bert-base-uncased": ASSETS_DIR / "bert-base-uncased",
    "google-bert/bert-base-uncased": ASSETS_DIR / "bert-base-uncased",
    # BERT-Tiny (2 layers, 128 wide): the reference pages' examples export it in seconds
    "google/bert_uncased_L-2_H-128_A-2": ASSETS_DIR / "bert_uncased_L-2_H-128_A-2",
}
#: Shipped configurations whose tokenizer files are another shipped model's (the same vocabulary, shipped once).
BUILTIN_TOKENIZERS = {ASSETS_DIR / "bert_uncased_L-2_H-128_A-2": ASSETS_DIR / "bert-base-uncased"}
HUB_PROBE_TIMEOUT_S = 5.0
#: Files fetched from the hub: configuration, tokenizer and one weights format.
HUB_PATTERNS = (
    "config.json",
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    # a sentence-transformers folder's pipeline (export/sentence.py): modules, their configs, dense weights
    "modules.json",
    "sentence_*_config.json",
    "config_sentence_transformers.json",
    "*/config.json",
    "*_Dense/model.safetensors",
)
HUB_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
INIT_STD_FALLBACK = 0.02

#: The architecture of the published weights of the built-in models: bert-base-uncased's checkpoint holds
#: the pooler, NSP and MLM heads although its config.json says ``BertForMaskedLM``.
BUILTIN_ARCHITECTURE = "BertForPreTraining"
#: Heads whose parameters are named ``classifier.`` alike (a sequence, token or multiple-choice classifier): the
#: weights alone cannot tell them apart.
CLASSIFIER_HEADS = ("token_classifier", "choice")


@dataclass
class Source:
    """A loaded model ready to export, with the facts the manifest records.

    Attributes:
        model: the transformers model of ``row``'s class, in eval mode.
        row: the exported architecture (:mod:`export.heads`).
        weights: provenance: ``kind`` (pretrained or random), ``seed``, ``random_heads`` (heads of ``row``
            seeded because the checkpoint lacks them).
        notes: what the export should tell the user (a changed architecture, dropped heads).
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerFast
    model_id: str
    kind: str  # "hub", "local" or "builtin-config"
    revision: str | None
    weights: dict[str, Any] = field(default_factory=dict)
    row: HeadRow = field(default_factory=lambda: ARCHITECTURES[BUILTIN_ARCHITECTURE])
    notes: list[str] = field(default_factory=list)

    @property
    def heads(self) -> dict[str, str]:
        """Each head of the row -> ``trained`` or ``seeded``."""
        seeded = self.weights.get("kind") == "random"
        random_heads = set(self.weights.get("random_heads") or [])
        return {h: "seeded" if seeded or h in random_heads else "trained" for h in self.row.heads}


def _hub_endpoint_host() -> tuple[str, int]:
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    return url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)


def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """True when the hub endpoint accepts a TCP connection within ``timeout`` seconds.

    huggingface_hub retries an unreachable hub for about 50 s before it gives up; one probe answers in
    milliseconds on a machine without network.
    """
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    host, port = _hub_endpoint_host()
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _unreachable_error(model_id: str) -> ExportError:
    return ExportError(
        f"pretrained weights for {model_id!r} are not in the local hub cache and the hub cannot be "
        "reached. Two ways out: pass a local checkpoint directory as MODEL (one holding config.json and "
        f"model.safetensors or pytorch_model.bin), or export the same architecture with seeded random "
        f"weights: `bertonnx export {model_id} OUTDIR --weights random`.",
        exit_code=ExportError.EXIT_HUB_UNREACHABLE,
    )


def _download(model_id: str, revision: str | None) -> Path:
    """Return a local snapshot of ``model_id``: from the cache, else from the hub when it answers."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    patterns = [*HUB_PATTERNS, *HUB_WEIGHT_FILES]
    try:
        path = Path(snapshot_download(model_id, revision=revision, allow_patterns=patterns, local_files_only=True))
        if _weights_file(path) is not None:
            return path
    except Exception:  # noqa: BLE001 - any cache miss means "go to the hub"
        pass
    if not hub_reachable():
        raise _unreachable_error(model_id)
    try:
        # One weights format is enough: prefer safetensors, fall back to the pickle only if needed.
        path = Path(snapshot_download(model_id, revision=revision, allow_patterns=[*HUB_PATTERNS, HUB_WEIGHT_FILES[0]]))
        if _weights_file(path) is None:
            path = Path(snapshot_download(model_id, revision=revision, allow_patterns=patterns))
    except (RepositoryNotFoundError, RevisionNotFoundError) as exc:
        raise ExportError(f"the hub has no model {model_id!r} at revision {revision or 'main'}: {exc}") from None
    except HfHubHTTPError as exc:
        raise ExportError(f"downloading {model_id!r} failed: {exc}") from None
    except OSError:
        raise _unreachable_error(model_id) from None
    return path


def _weights_file(directory: Path) -> Path | None:
    for name in HUB_WEIGHT_FILES:
        if (directory / name).is_file():
            return directory / name
    return None


def _read_config(directory: Path) -> tuple[PretrainedConfig, Family]:
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise ExportError(
            f"{directory} has no config.json, so it is not a transformers checkpoint directory. Pass a "
            "directory saved with `save_pretrained` (config.json + weights) or a hub id."
        )
    import json

    try:
        raw = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ExportError(f"{config_path} is not readable JSON: {exc}") from None
    family = FAMILIES.get(str(raw.get("model_type")))
    if family is None:
        raise ExportError(
            f"{config_path} describes model_type {raw.get('model_type')!r}, not a BERT model nor another encoder "
            f"family bertonnx exports ({', '.join(repr(f) for f in FAMILIES)}). Pass a checkpoint of one of them."
        )
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(directory), family


def _seeded_init(module: torch.nn.Module, seed: int, std: float, only: set[str] | None = None) -> None:
    """Fill every parameter from ``seed``: weights and biases ~ N(0, std), LayerNorm gains ~ 1 + N(0, std).

    Unlike transformers' own init (zero biases, unit LayerNorm) no two tensors end up identical: zero biases
    would hide a dropped or swapped bias from the parity gate, and the ONNX exporter merges identical
    initializers, which would break parameter counts read from the graph. ``only`` limits it to those
    parameter names (a missing head; a tied MLM decoder is the word embeddings and is not re-drawn).
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if only is not None and name not in only:
                continue
            values = torch.randn(param.shape, generator=generator) * std
            if "LayerNorm.weight" in name:
                values += 1.0
            param.copy_(values)


def _tokenizer_for(directory: Path) -> PreTrainedTokenizerFast:
    if (directory / "tokenizer.json").is_file() or (directory / "vocab.txt").is_file():
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(directory, use_fast=True)
        except Exception as exc:  # noqa: BLE001 - surface any tokenizer loading problem as one message
            raise ExportError(f"cannot load the tokenizer in {directory}: {exc}") from None
        if not isinstance(tokenizer, PreTrainedTokenizerFast):
            raise ExportError(f"{directory} has no fast tokenizer (tokenizer.json or vocab.txt) to export")
        return tokenizer
    raise ExportError(
        f"{directory} has no tokenizer files (tokenizer.json or vocab.txt); the runtime needs the "
        "tokenizer the model was trained with. Copy them into the checkpoint directory."
    )


def load_source(
    model: str,
    *,
    weights: str = "pretrained",
    seed: int = 0,
    allow_random_heads: bool = False,
    revision: str | None = None,
    task: str | None = None,
    labels: tuple[str, ...] | None = None,
) -> Source:
    """Load ``model`` as its own architecture (or ``task``'s) in eval mode, with its fast tokenizer.

    Args:
        model: a hub id (e.g. ``bert-base-uncased``) or a local checkpoint directory.
        weights: ``pretrained``, ``random`` (seeded, exact architecture) or ``auto`` (pretrained when
            they can be had, else random with a loud warning).
        seed: seed for random weights and for heads initialised at random.
        allow_random_heads: accept a checkpoint without a head the architecture needs, and seed it.
        revision: hub revision (branch, tag or commit).
        task: a ``--task`` name or class name (:data:`export.heads.TASK_ALIASES`); default: the
            checkpoint's ``config.architectures``.
        labels: label names of a seeded classification head (:func:`export.heads.label_names`), in index
            order; ``None`` keeps the config's own.

    Raises:
        ExportError: the directory is missing or not a BERT checkpoint, the hub cannot be reached, a head
            is missing without ``allow_random_heads``, the weights hold a head the architecture lacks
            without ``task``, ``task`` is unknown, or ``labels`` are given for a row without labels or for a
            trained head.
    """
    forced = row_for(task) if task is not None else None
    if weights not in WEIGHT_CHOICES:
        raise ExportError(f"--weights must be one of {', '.join(WEIGHT_CHOICES)}, got {weights!r}")
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ExportError(f"{path} is a file; MODEL must be a checkpoint directory or a hub id")
        local = str(path.resolve())
        return _from_directory(path, local, "local", None, weights, seed, allow_random_heads, forced, labels=labels)
    looks_like_path = model.startswith(("/", "./", "../", "~")) or model.endswith("/") or os.sep + os.sep in model
    if looks_like_path or model.count("/") > 1:
        raise ExportError(
            f"model directory {model} does not exist. Pass an existing checkpoint directory, or a hub id "
            f"such as {DEFAULT_MODEL!r}."
        )
    if weights == "random":
        directory = BUILTIN_MODELS.get(model)
        if directory is None:
            directory = _download(model, revision)
            return _from_directory(
                directory, model, "hub", directory.name, "random", seed, allow_random_heads, forced, labels=labels
            )
        forced = forced or ARCHITECTURES[BUILTIN_ARCHITECTURE]
        return _from_directory(
            directory,
            model,
            "builtin-config",
            None,
            "random",
            seed,
            allow_random_heads,
            forced,
            task is not None,
            labels=labels,
        )
    try:
        directory = _download(model, revision)
    except ExportError as exc:
        if weights != "auto" or exc.exit_code != ExportError.EXIT_HUB_UNREACHABLE or model not in BUILTIN_MODELS:
            raise
        banner = "!" * 78
        print(
            f"{banner}\n! PRETRAINED WEIGHTS UNAVAILABLE: the hub cannot be reached and {model!r} is not cached.\n"
            f"! FALLING BACK TO SEEDED RANDOM WEIGHTS (seed {seed}): exact architecture, meaningless outputs.\n"
            f"! Good for latency and parity checks only. The manifest records weights as random.\n{banner}",
            flush=True,
        )
        forced = forced or ARCHITECTURES[BUILTIN_ARCHITECTURE]
        return _from_directory(
            BUILTIN_MODELS[model],
            model,
            "builtin-config",
            None,
            "random",
            seed,
            False,
            forced,
            task is not None,
            labels=labels,
        )
    return _from_directory(
        directory, model, "hub", directory.name, "pretrained", seed, allow_random_heads, forced, labels=labels
    )


def _weight_names(path: Path) -> list[str]:
    """Parameter names stored in a weights file, without loading the tensors (safetensors) or memory-mapped."""
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            return list(handle.keys())
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - a legacy (non-zip) pickle cannot be memory-mapped; read it whole
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    return list(state)


def _head_kinds(names: list[str], family: Family) -> set[str]:
    """Heads whose parameters appear in ``names`` (``classifier`` stands for a sequence or token classifier:
    the two have the same parameter names)."""
    kinds = {head: "classifier" if head in CLASSIFIER_HEADS else head for head in head_prefixes(family)}
    owners: dict[str, set[str]] = {}
    for head, prefixes in head_prefixes(family).items():
        for prefix in prefixes:
            owners.setdefault(prefix, set()).add(kinds[head])
    found = set()
    for head, prefixes in head_prefixes(family).items():
        # a module several kinds of head share (ModernBERT's ``head.`` transform) tells none of them apart
        telling = tuple(prefix for prefix in prefixes if len(owners[prefix]) == 1)
        if any(name.startswith(telling) for name in names):
            found.add(kinds[head])
    return found


def _row_kinds(row: HeadRow) -> set[str]:
    return {"classifier" if h in CLASSIFIER_HEADS else h for h in row.heads}


def _choose_row(
    directory: Path, config: PretrainedConfig, family: Family, weights_file: Path | None, forced: HeadRow | None
) -> HeadRow:
    """The row to export: ``forced``, else ``config.architectures``, widened to the one row that holds every
    head the weights have (bert-base-uncased's config says BertForMaskedLM, its weights hold the pre-training
    heads). Weights with a head no such row explains are refused, never silently dropped."""
    if forced is not None:
        return forced
    row = row_for_config(getattr(config, "architectures", None), f"{directory / 'config.json'}", family)
    if weights_file is None:
        return row
    held = _head_kinds(_weight_names(weights_file), family)
    extra = held - _row_kinds(row)
    if not extra:
        return row
    wider = [r for r in ROWS if r.family is family and _row_kinds(r) == held]
    if len(wider) == 1 and not extra & {"classifier", "qa"}:
        return wider[0]
    if extra == {"pooler"}:  # an unused pooler (some MLM checkpoints keep one): noted when loading
        return row
    names = ", ".join(sorted(extra))
    raise ExportError(
        f"{weights_file} holds trained {names} weights but its config.json says {row.architecture}, which "
        f"has no such head; exporting it would drop them. Pass --task to say what to export: e.g. --task "
        f"{row.task_name} to export {row.architecture} and leave the {names} weights out."
    )


def _set_labels(
    config: PretrainedConfig, row: HeadRow, labels: tuple[str, ...], weights_file: Path | None, family: Family
) -> None:
    """Name the labels of ``row``'s seeded classification head: ``num_labels``, ``id2label``, ``label2id``.

    Raises:
        ExportError: ``row`` has no labelled head (fill-mask, question answering ...), or ``weights_file``
            holds a trained one, whose labels are its own.
    """
    if not row.labelled:
        labelled = " or ".join(dict.fromkeys(r.task_name for r in ROWS if r.labelled))
        raise ExportError(
            f"--labels and --num-labels name a classification head's labels; {row.architecture} ({row.task_name}) "
            f"has no labels. Pass --task {labelled} with them, or leave them out"
        )
    if weights_file is not None and "classifier" in _head_kinds(_weight_names(weights_file), family):
        own = ", ".join(str(v) for _, v in sorted((getattr(config, "id2label", None) or {}).items()))
        raise ExportError(
            f"{weights_file} holds a trained classifier head with its own labels ({own}); --labels and --num-labels "
            "name a seeded head only (--weights random, or --allow-random-heads on a checkpoint without the head). "
            "Leave them out, or edit id2label in the checkpoint's config.json"
        )
    config.id2label = dict(enumerate(labels))
    config.label2id = {name: i for i, name in enumerate(labels)}


def _from_directory(
    directory: Path,
    model_id: str,
    kind: str,
    revision: str | None,
    weights: str,
    seed: int,
    allow_random_heads: bool,
    forced: HeadRow | None = None,
    by_task: bool = True,
    labels: tuple[str, ...] | None = None,
) -> Source:
    import transformers

    config, family = _read_config(directory)
    if forced is not None and forced.family is not family:
        same = rows_of(family).get(forced.task_name)
        if same is None or not by_task:
            raise ExportError(
                f"{directory} is a {family.model_type!r} checkpoint; --task {forced.architecture} names a class of "
                f"another family. Pass a task name or one of {', '.join(rows_of(family))}"
            )
        forced = same
    tokenizer = _tokenizer_for(BUILTIN_TOKENIZERS.get(directory, directory))
    std = float(getattr(config, "initializer_range", INIT_STD_FALLBACK))
    weights_file = _weights_file(directory) if weights != "random" else None
    if weights != "random" and weights_file is None:
        raise ExportError(
            f"{directory} has no weights (model.safetensors or pytorch_model.bin). Pass a directory with "
            f"weights, or export the architecture with seeded weights: `--weights random`."
        )
    row = _choose_row(directory, config, family, weights_file, forced)
    if labels is not None:
        _set_labels(config, row, labels, weights_file, family)
    notes = []
    declared = list(getattr(config, "architectures", None) or [])
    if declared and row.architecture not in declared:
        how = "the heads its weights hold"
        if forced is not None:
            how = "--task" if by_task else "the heads of its published weights"
        notes.append(f"exporting {row.architecture} ({how}); config.json says {', '.join(declared)}")
    model_class = getattr(transformers, row.architecture)
    if weights == "random":
        torch.manual_seed(seed)
        net = model_class(config)
        _seeded_init(net, seed, std)
        provenance: dict[str, Any] = {"kind": "random", "seed": seed, "random_heads": []}
        return Source(net.eval(), tokenizer, model_id, kind, revision, provenance, row, notes)

    assert weights_file is not None
    torch.manual_seed(seed)
    try:
        named = {"config": config} if labels is not None else {}  # the labels set above
        net, info = model_class.from_pretrained(directory, output_loading_info=True, **named)
    except Exception as exc:  # noqa: BLE001 - one clear message for any unreadable checkpoint
        raise ExportError(f"cannot load {row.architecture} weights from {weights_file}: {exc}") from None
    missing = sorted(info["missing_keys"])
    base = f"{family.base}." if row.kind.name != "Model" else ""
    pooler_prefix = f"{base}pooler."
    prefixes = head_prefixes(family)
    head_keys = {
        head: [k for k in missing if k.startswith(prefixes[head]) and (head == "pooler") == k.startswith(pooler_prefix)]
        for head in row.heads
    }
    encoder_missing = [k for k in missing if k.startswith(base) and not k.startswith(pooler_prefix)]
    encoder_missing = [k for k in encoder_missing if not any(k in keys for keys in head_keys.values())]
    if encoder_missing:
        raise ExportError(
            f"{weights_file} lacks encoder weights ({', '.join(encoder_missing[:3])} ...); it is not a "
            f"complete {row.family.prefix} checkpoint."
        )
    random_heads = [head for head in row.heads if head_keys[head]]
    if random_heads and not allow_random_heads:
        missing_text = ", ".join(k for head in random_heads for k in head_keys[head][:4])
        raise ExportError(
            f"{directory} has no trained {' or '.join(random_heads)} head (missing {missing_text}) for "
            f"{row.architecture}. Exporting it would give made-up {' and '.join(random_heads)} answers. "
            + ("Leave out --task to export the class the checkpoint holds, pass " if forced is not None else "Pass ")
            + "--task feature-extraction to export the encoder alone, or --allow-random-heads to seed the "
            "missing head(s) and record them as seeded in the manifest."
        )
    for offset, head in enumerate(random_heads, start=1):
        _seeded_init(net, seed + offset, std, only=set(head_keys[head]))
    dropped = sorted(_head_kinds(list(info["unexpected_keys"]), family) - _row_kinds(row))
    if dropped:
        why = f"--task {row.task_name}" if forced is not None else f"{row.architecture} has no such head"
        notes.append(f"the checkpoint's {', '.join(dropped)} weights are not exported ({why})")
    provenance = {"kind": "pretrained", "seed": seed if random_heads else None, "random_heads": random_heads}
    return Source(net.eval(), tokenizer, model_id, kind, revision, provenance, row, notes)
