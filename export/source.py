"""Resolve what to export: a hub id or a local checkpoint, pretrained or seeded weights.

The export must work on machines that never reach the hub. ``bert-base-uncased``'s configuration and
vocabulary are shipped in ``export/assets`` so ``--weights random`` needs no network; pretrained weights
come from a local directory, the local hub cache, or (only when the hub answers) a download. Missing heads
are refused unless the user opts in, and then recorded as random: a silently random NSP head would give
confident nonsense.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from transformers import BertConfig, BertForPreTraining, PreTrainedTokenizerFast

from .errors import ExportError
from .names import DEFAULT_MODEL, WEIGHT_CHOICES

ASSETS_DIR = Path(__file__).parent / "assets"
#: Hub ids whose configuration and vocabulary ship with bertonnx (no network needed for random weights).
BUILTIN_MODELS = {
    "bert-base-uncased": ASSETS_DIR / "bert-base-uncased",
    "google-bert/bert-base-uncased": ASSETS_DIR / "bert-base-uncased",
}
HUB_PROBE_TIMEOUT_S = 5.0
#: Files fetched from the hub: configuration, tokenizer and one weights format.
HUB_PATTERNS = (
    "config.json",
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
HUB_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
INIT_STD_FALLBACK = 0.02

#: Parameter-name prefixes of the parts we export, as named in ``BertForPreTraining``.
ENCODER_PREFIX = "bert."
POOLER_PREFIX = "bert.pooler."
NSP_PREFIX = "cls.seq_relationship."
MLM_PREFIX = "cls.predictions."


@dataclass
class Source:
    """A loaded model ready to export, with the facts the manifest records."""

    model: BertForPreTraining
    tokenizer: PreTrainedTokenizerFast
    model_id: str
    kind: str  # "hub", "local" or "builtin-config"
    revision: str | None
    weights: dict[str, Any] = field(default_factory=dict)


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


def _read_config(directory: Path) -> BertConfig:
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
    if raw.get("model_type") != "bert":
        raise ExportError(
            f"{config_path} describes model_type {raw.get('model_type')!r}, not a BERT model; bertonnx "
            "exports BERT checkpoints (model_type 'bert') only."
        )
    return BertConfig.from_pretrained(directory)


def _seeded_init(module: torch.nn.Module, seed: int, std: float) -> None:
    """Fill every parameter from ``seed``: weights and biases ~ N(0, std), LayerNorm gains ~ 1 + N(0, std).

    Unlike transformers' own init (zero biases, unit LayerNorm) no two tensors end up identical: zero biases
    would hide a dropped or swapped bias from the parity gate, and the ONNX exporter merges identical
    initializers, which would break parameter counts read from the graph.
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
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
) -> Source:
    """Load ``model`` as a ``BertForPreTraining`` in eval mode, with its fast tokenizer.

    Args:
        model: a hub id (e.g. ``bert-base-uncased``) or a local checkpoint directory.
        weights: ``pretrained``, ``random`` (seeded, exact architecture) or ``auto`` (pretrained when
            they can be had, else random with a loud warning).
        seed: seed for random weights and for heads initialised at random.
        allow_random_heads: accept a checkpoint without pooler or NSP head and seed them.
        revision: hub revision (branch, tag or commit).

    Raises:
        ExportError: the directory is missing or not a BERT checkpoint, the hub cannot be reached, or a
            head is missing without ``allow_random_heads``.
    """
    if weights not in WEIGHT_CHOICES:
        raise ExportError(f"--weights must be one of {', '.join(WEIGHT_CHOICES)}, got {weights!r}")
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ExportError(f"{path} is a file; MODEL must be a checkpoint directory or a hub id")
        return _from_directory(path, str(path.resolve()), "local", None, weights, seed, allow_random_heads)
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
            return _from_directory(directory, model, "hub", directory.name, "random", seed, allow_random_heads)
        return _from_directory(directory, model, "builtin-config", None, "random", seed, allow_random_heads)
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
        return _from_directory(BUILTIN_MODELS[model], model, "builtin-config", None, "random", seed, False)
    return _from_directory(directory, model, "hub", directory.name, "pretrained", seed, allow_random_heads)


def _from_directory(
    directory: Path,
    model_id: str,
    kind: str,
    revision: str | None,
    weights: str,
    seed: int,
    allow_random_heads: bool,
) -> Source:
    config = _read_config(directory)
    tokenizer = _tokenizer_for(directory)
    std = float(getattr(config, "initializer_range", INIT_STD_FALLBACK))
    if weights == "random":
        torch.manual_seed(seed)
        net = BertForPreTraining(config)
        _seeded_init(net, seed, std)
        provenance: dict[str, Any] = {"kind": "random", "seed": seed, "random_heads": []}
        return Source(net.eval(), tokenizer, model_id, kind, revision, provenance)

    weights_file = _weights_file(directory)
    if weights_file is None:
        raise ExportError(
            f"{directory} has no weights (model.safetensors or pytorch_model.bin). Pass a directory with "
            f"weights, or export the architecture with seeded weights: `--weights random`."
        )
    torch.manual_seed(seed)
    try:
        net, info = BertForPreTraining.from_pretrained(directory, output_loading_info=True)
    except Exception as exc:  # noqa: BLE001 - one clear message for any unreadable checkpoint
        raise ExportError(f"cannot load BERT weights from {weights_file}: {exc}") from None
    missing = sorted(info["missing_keys"])
    encoder_missing = [k for k in missing if k.startswith(ENCODER_PREFIX) and not k.startswith(POOLER_PREFIX)]
    if encoder_missing:
        raise ExportError(
            f"{weights_file} lacks encoder weights ({', '.join(encoder_missing[:3])} ...); it is not a "
            "complete BERT checkpoint."
        )
    heads = {
        "pooler": [k for k in missing if k.startswith(POOLER_PREFIX)],
        "nsp": [k for k in missing if k.startswith(NSP_PREFIX)],
    }
    random_heads = [head for head, keys in heads.items() if keys]
    if random_heads and not allow_random_heads:
        raise ExportError(
            f"{directory} has no trained {' or '.join(random_heads)} head "
            f"(missing {', '.join(k for head in random_heads for k in heads[head])}), e.g. a plain BertModel "
            "checkpoint. Exporting it would give made-up NSP answers. Pass --allow-random-heads to seed the "
            "missing head(s) and record them as random in the manifest."
        )
    for offset, head in enumerate(random_heads, start=1):
        module = net.bert.pooler if head == "pooler" else net.cls.seq_relationship
        _seeded_init(module, seed + offset, std)
    provenance = {"kind": "pretrained", "seed": seed if random_heads else None, "random_heads": random_heads}
    return Source(net.eval(), tokenizer, model_id, kind, revision, provenance)
