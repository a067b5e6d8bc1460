"""The model directory contract shared by the export step and the runtime.

An export writes one directory: ONNX variants, tokenizer files, ``config.json`` and the manifest
``bertonnx.json``. The manifest records where the weights came from, the architecture numbers, the
graph's inputs and outputs, every file's sha256 and size, and each variant's parity figures. Both sides
import their names from here so the contract has one definition.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ModelDirectoryError, VariantMissingError
from .table import OUTPUTS

__all__ = [
    "BF16_PRECISION",
    "CONFIG_FILE",
    "EXTERNAL_DATA_SUFFIX",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "GRAPH_OUTPUT_NAMES",
    "HEAD_SEEDED",
    "HEAD_TRAINED",
    "INPUT_NAMES",
    "LEGACY_ARCHITECTURE",
    "MANIFEST_FILE",
    "MLM_HEAD_FILE",
    "MLM_HEAD_INPUT",
    "MLM_HEAD_OUTPUT",
    "NSP_IS_NEXT_INDEX",
    "ONNXRUNTIME_BACKEND",
    "OPENVINO_BACKEND",
    "OUTPUT_NAMES",
    "PER_TOKEN_OUTPUTS",
    "REFUSED_VARIANTS_KEY",
    "TOKENIZER_FILE",
    "VARIANT_BACKENDS",
    "VARIANT_FILES",
    "FileRecord",
    "Manifest",
    "MlmHeadRecord",
    "looks_like_hub_id",
    "read_manifest",
    "refusal_text",
    "sha256_file",
]

MANIFEST_FILE = "bertonnx.json"
FORMAT_NAME = "bertonnx-model"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"

#: Variant name -> file name. ``fp32`` is the graph as exported; ``optimized`` carries onnxruntime's
#: transformer fusions; ``int8`` is quantized per row (batch-invariant int8); ``bf16`` is the graph as
#: OpenVINO IR, run by OpenVINO with bf16 matrix products (the accurate fast path on CPUs with AVX512-BF16 or AMX).
VARIANT_FILES: dict[str, str] = {
    "fp32": "model.onnx",
    "optimized": "model_optimized.onnx",
    "int8": "model_int8.onnx",
    "bf16": "model_bf16.xml",
}
ONNXRUNTIME_BACKEND = "onnxruntime"
OPENVINO_BACKEND = "openvino"
#: The engine that runs each variant (the manifest records it too). OpenVINO is an optional dependency.
VARIANT_BACKENDS: dict[str, str] = {
    "fp32": ONNXRUNTIME_BACKEND,
    "optimized": ONNXRUNTIME_BACKEND,
    "int8": ONNXRUNTIME_BACKEND,
    "bf16": OPENVINO_BACKEND,
}
#: OpenVINO's inference precision for the ``bf16`` variant.
BF16_PRECISION = "bf16"

#: A variant's weights live beside its graph in ``<file>.data`` (ONNX external data): onnxruntime then
#: memory-maps them instead of copying them out of the protobuf, which nearly halves load time and peak RSS.
EXTERNAL_DATA_SUFFIX = ".data"

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
#: Every output name an export's graph may give (which ones: ``Manifest.graph_outputs``), all float32; their
#: axes and meaning: :data:`bertonnx.table.OUTPUTS`.
GRAPH_OUTPUT_NAMES = tuple(OUTPUTS)
#: The outputs with a value per token (``[b, t, ...]``): an input's row is cut to its own tokens, so its
#: answer never depends on the padding of the batch it ran in.
PER_TOKEN_OUTPUTS = tuple(name for name, output in OUTPUTS.items() if output.per_token)
#: The outputs of a ``BertForPreTraining`` export's main graph (the only graph exports before the task
#: block gave).
OUTPUT_NAMES = ("last_hidden_state", "pooler_output", "nsp_logits")
#: The masked-language-model head is a second, small graph run only on the hidden states gathered at the
#: ``[MASK]`` positions: ``hidden_states`` [n, hidden] float32 -> ``mlm_logits`` [n, vocab] float32. Fill-mask
#: then costs a vocabulary projection per mask, not per token.
MLM_HEAD_FILE = "mlm_head.onnx"
MLM_HEAD_INPUT = "hidden_states"
MLM_HEAD_OUTPUT = "mlm_logits"
#: What an export written before the task block holds.
LEGACY_ARCHITECTURE = "BertForPreTraining"
HEAD_TRAINED = "trained"
HEAD_SEEDED = "seeded"

#: As in transformers' ``BertForPreTraining``: logit 0 means "sentence B follows sentence A".
NSP_IS_NEXT_INDEX = 0

#: The manifest block of lossy variants (int8, bf16) the export did not write because they missed their parity
#: gate: ``{variant: {"measure", "value", "limit", "breaches", "parity"}}``. Absent in older exports.
REFUSED_VARIANTS_KEY = "refused_variants"
#: Variants the export could not build for the model's family, with why (``unavailable_variants``).
UNAVAILABLE_VARIANTS_KEY = "unavailable_variants"

_HASH_CHUNK_BYTES = 1 << 22
_REQUIRED_CONFIG_KEYS = (
    "num_hidden_layers",
    "num_attention_heads",
    "hidden_size",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "type_vocab_size",
)


def sha256_file(path: Path) -> str:
    """Return the hex sha256 of a file, read in 4 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _breach_figure(measure: str, value: float, limit: float) -> str:
    """``value`` as people read it (cosines with 5 decimals, agreements with 3, differences with 3 significant
    digits), with more digits when fewer would not show it on the wrong side of ``limit``."""
    above = measure.endswith("_max_abs")
    kind = "g" if above else "f"
    digits = 5 if measure.endswith("_min_cosine") else 3
    for extra in range(12):
        text = f"{value:.{digits + extra}{kind}}"
        if (float(text) > limit) if above else (float(text) < limit):
            return text
    return repr(value)


def refusal_text(record: dict[str, Any]) -> str:
    """A ``refused_variants`` record's first breach in words, e.g. ``logits_score_max_abs = 0.036 > 0.01``
    (a ``*_max_abs`` measure is breached above its limit, a cosine or an agreement below it)."""
    measure, value, limit = str(record["measure"]), float(record["value"]), float(record["limit"])
    sign = ">" if measure.endswith("_max_abs") else "<"
    return f"{measure} = {_breach_figure(measure, value, limit)} {sign} {limit:g}"


@dataclass(frozen=True)
class FileRecord:
    """One file of the model directory as the manifest records it."""

    name: str
    sha256: str
    size: int

    def verify(self, directory: Path, *, check_hash: bool) -> Path:
        """Check that the file exists with the recorded size (and sha256 when ``check_hash``).

        Returns:
            The file's path.

        Raises:
            ModelDirectoryError: the file is missing, or its size or hash differs from the manifest.
        """
        path = directory / self.name
        if not path.is_file():
            raise ModelDirectoryError(
                f"{path} is missing; the manifest {MANIFEST_FILE} lists it. Re-run the export to "
                "rebuild the directory, or choose a variant that is present."
            )
        size = path.stat().st_size
        if size != self.size:
            raise ModelDirectoryError(
                f"{path} is {size} bytes but the manifest records {self.size}: the file is truncated or "
                "was replaced. Re-run the export (or copy the directory again)."
            )
        if check_hash:
            actual = sha256_file(path)
            if actual != self.sha256:
                raise ModelDirectoryError(
                    f"{path} has sha256 {actual} but the manifest records {self.sha256}: the file is "
                    "corrupt or was replaced. Re-run the export (or copy the directory again)."
                )
        return path


@dataclass(frozen=True)
class MlmHeadRecord:
    """The masked-language-model head graph of an export (one fp32 file shared by every variant).

    Attributes:
        file: graph file name in the model directory.
        data_file: its external-data file, or ``None``.
        input: input name, ``hidden_states`` [n, hidden] float32 (hidden states at the mask positions).
        output: output name, ``mlm_logits`` [n, vocab_size] float32.
        vocab_size: width of ``mlm_logits``.
    """

    file: str
    data_file: str | None
    input: str
    output: str
    vocab_size: int

    @property
    def files(self) -> list[str]:
        """The head's graph, then its external-data file when it has one."""
        return [self.file, *([self.data_file] if self.data_file else [])]


@dataclass(frozen=True)
class Manifest:
    """The parsed ``bertonnx.json`` of a model directory."""

    directory: Path
    data: dict[str, Any]
    files: dict[str, FileRecord]

    @property
    def config(self) -> dict[str, Any]:
        """Architecture numbers (layers, heads, hidden, ffn, vocab, positions, segment types)."""
        return dict(self.data["config"])

    @property
    def hidden_size(self) -> int:
        return int(self.data["config"]["hidden_size"])

    @property
    def max_position_embeddings(self) -> int:
        """The tokens an input may have, special tokens included (the usable positions: 512 for RoBERTa's 514
        position embeddings, whose first two are the padding offset)."""
        return int(self.data["config"]["max_position_embeddings"])

    @property
    def model_type(self) -> str:
        """The encoder family (``bert``, ``roberta``, ``xlm-roberta``, ``distilbert``, ``mpnet``, ``electra``)."""
        return str(self.data["config"].get("model_type", "bert"))

    @property
    def input_names(self) -> tuple[str, ...]:
        """The main graph's inputs in order (no ``token_type_ids`` for a family without segments)."""
        inputs = (self.data.get("graph") or {}).get("inputs")
        return tuple(str(i["name"]) for i in inputs) if inputs else INPUT_NAMES

    @property
    def variants(self) -> dict[str, dict[str, Any]]:
        """Variant name -> its record (file, parity figures, fusion counts)."""
        return dict(self.data["variants"])

    @property
    def weights(self) -> dict[str, Any]:
        """Weights provenance: kind (pretrained or random), seed, heads initialised at random."""
        return dict(self.data["weights"])

    @property
    def random_weights(self) -> bool:
        """True when any exported weight was initialised from a seed rather than trained."""
        weights = self.data["weights"]
        return weights.get("kind") == "random" or bool(weights.get("random_heads"))

    @property
    def task(self) -> dict[str, Any]:
        """The ``task`` block; an export written before it existed reads as ``BertForPreTraining`` with the
        ``embed`` and ``nsp`` tasks, a pooler and an NSP head (seeded when ``weights.random_heads`` says so)."""
        block = self.data.get("task")
        if isinstance(block, dict):
            return dict(block)
        seeded = set(self.data["weights"].get("random_heads") or [])
        random = self.data["weights"].get("kind") == "random"
        return {
            "architecture": LEGACY_ARCHITECTURE,
            "tasks": ["embed", "nsp"],
            "heads": {h: HEAD_SEEDED if random or h in seeded else HEAD_TRAINED for h in ("pooler", "nsp")},
            "num_labels": None,
            "id2label": None,
            "problem_type": None,
            "mlm_head": None,
        }

    @property
    def architecture(self) -> str:
        """The transformers class exported, e.g. ``BertModel`` or ``BertForSequenceClassification``."""
        return str(self.task["architecture"])

    @property
    def tasks(self) -> tuple[str, ...]:
        """Runtime tasks this export offers among ``embed``, ``nsp``, ``classify``, ``rerank``, ``fill_mask``,
        ``tag``, ``answer``, ``choose``, ``embed_sparse``, ``detect_replaced`` and ``zero_shot`` (``graph``, the raw
        outputs, is offered by every export and not listed). ``zero_shot`` is listed for a classifier whose labels
        name entailment (an NLI model); any classifier of two labels or more runs it given ``entailment_label``."""
        offered = tuple(str(name) for name in self.task["tasks"])
        labels = (self.id2label or {}).values()
        if "classify" in offered and "zero_shot" not in offered and any(_is_entailment(label) for label in labels):
            offered += ("zero_shot",)
        return offered

    @property
    def heads(self) -> dict[str, str]:
        """Head name (``pooler``, ``nsp``, ``mlm``, ``classifier``, ``token_classifier``, ``qa``) ->
        ``trained`` or ``seeded``; only the heads the export has."""
        return {str(k): str(v) for k, v in self.task["heads"].items()}

    @property
    def num_labels(self) -> int | None:
        """Width of ``logits`` / ``token_logits`` for classifier exports, else ``None``."""
        value = self.task.get("num_labels")
        return None if value is None else int(value)

    @property
    def id2label(self) -> dict[int, str] | None:
        """Label names by index for classifier exports (keys are ints), else ``None``."""
        labels = self.task.get("id2label")
        return None if labels is None else {int(k): str(v) for k, v in labels.items()}

    @property
    def problem_type(self) -> str | None:
        """``single_label_classification``, ``multi_label_classification``, ``regression`` or ``None`` (as the
        checkpoint's config says; ``None`` for a classifier means single-label, or a score when
        ``num_labels == 1``)."""
        value = self.task.get("problem_type")
        return None if value is None else str(value)

    @property
    def mlm_head(self) -> MlmHeadRecord | None:
        """The masked-language-model head graph, or ``None`` when the export has no MLM head."""
        record = self.task.get("mlm_head")
        if not record:
            return None
        return MlmHeadRecord(
            file=str(record["file"]),
            data_file=record.get("data_file"),
            input=str(record.get("input", MLM_HEAD_INPUT)),
            output=str(record.get("output", MLM_HEAD_OUTPUT)),
            vocab_size=int(record.get("vocab_size", self.data["config"]["vocab_size"])),
        )

    @property
    def graph_outputs(self) -> tuple[str, ...]:
        """Output names of the main graph (every variant gives the same), in graph order."""
        graph = self.data.get("graph") or {}
        outputs = graph.get("outputs")
        return tuple(str(o["name"]) for o in outputs) if outputs else OUTPUT_NAMES

    @property
    def refused_variants(self) -> dict[str, dict[str, Any]]:
        """Lossy variants the export did not write because they missed their parity gate -> the record of
        the breach (``measure``, ``value``, ``limit``, ``breaches``, ``parity``); empty for older exports."""
        return dict(self.data.get(REFUSED_VARIANTS_KEY) or {})

    def require_variant(self, variant: str) -> None:
        """Raise :class:`~bertonnx.errors.VariantMissingError` unless the export holds ``variant``; its
        ``reason`` says why when the export refused the variant at its parity gate or could not build it for
        the family (MPNet's, ModernBERT's and DeBERTa's ``optimized``)."""
        if variant not in self.data["variants"]:
            refused = self.refused_variants.get(variant)
            unavailable = (self.data.get(UNAVAILABLE_VARIANTS_KEY) or {}).get(variant)
            reason = None
            if refused:
                reason = f"it failed its parity gate at export: {refusal_text(refused)}"
            elif unavailable:  # re-exporting cannot build it either
                reason = f"it cannot be built for this model: {unavailable}"
            raise VariantMissingError(self.directory, variant, list(self.data["variants"]), reason)

    def variant_files(self, variant: str) -> list[str]:
        """The files of ``variant``: its graph, then its external-data file when it has one."""
        record = self.data["variants"][variant]
        return [record["file"], *([record["data_file"]] if record.get("data_file") else [])]

    def record(self, name: str) -> FileRecord:
        """The manifest record of file ``name``.

        Raises:
            ModelDirectoryError: the manifest does not list the file.
        """
        try:
            return self.files[name]
        except KeyError:
            raise ModelDirectoryError(
                f"{self.directory / MANIFEST_FILE} does not list {name!r}; the directory is incomplete. "
                "Re-run the export."
            ) from None


#: ``owner/name`` as the hub spells a model id.
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
#: A name with no folder in it (``bert-base-uncased``): a hub id without an owner, or a folder here.
_BARE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
#: First path parts the hub keeps for its own pages, so no model id starts with them: ``models/x`` is a folder.
_HUB_RESERVED = frozenset({"models", "datasets", "spaces", "docs", "api"})


def looks_like_hub_id(text: str) -> bool:
    """True when a model path that does not exist reads as a hub id (``dslim/bert-base-NER``): ``owner/name``,
    no ``./``, ``/`` or ``~`` in front, and an owner that is neither a local folder nor a name the hub keeps
    (``models/sentiment`` is a folder not made yet)."""
    if not _HUB_ID.fullmatch(text):
        return False
    owner = text.split("/")[0]
    return owner.lower() not in _HUB_RESERVED and not Path(owner).exists()


def read_manifest(model_dir: str | Path) -> Manifest:
    """Read and check the manifest of an exported model directory.

    Args:
        model_dir: directory written by ``bertonnx export``.

    Returns:
        The parsed manifest.

    Raises:
        TypeError: ``model_dir`` is not a path.
        ModelDirectoryError: the directory does not exist, is not a bertonnx export, or its manifest is
            unreadable or of an unknown format version.
    """
    if not isinstance(model_dir, (str, Path)):
        raise TypeError(f"model_dir must be a str or pathlib.Path, got {type(model_dir).__name__}")
    directory = Path(model_dir).expanduser()
    if directory.exists() and not directory.is_dir():
        raise ModelDirectoryError(
            f"{directory} is a file, not a model directory; point at the directory written by `bertonnx export` "
            "(the one holding bertonnx.json)"
        )
    if not directory.is_dir():
        if looks_like_hub_id(str(model_dir)):
            raise ModelDirectoryError(
                f"model directory {model_dir} does not exist; it looks like a hub id. Export that model first, "
                f"then pass the folder: `bertonnx export {model_dir} models/{str(model_dir).split('/')[1]}`."
            )
        if _BARE_NAME.fullmatch(str(model_dir)):  # bert-base-uncased: a hub id without an owner, or a folder name
            raise ModelDirectoryError(
                f"model directory {model_dir} does not exist. If it is a hub id, export it first, then pass the "
                f"folder: `bertonnx export {model_dir} models/{model_dir}`; a folder of that name is made by "
                f"`bertonnx export bert-base-uncased {model_dir}` (add `--weights random` offline)."
            )
        raise ModelDirectoryError(
            f"model directory {directory} does not exist. Create one with "
            f"`bertonnx export bert-base-uncased {directory}` (add `--weights random` offline)."
        )
    path = directory / MANIFEST_FILE
    if not path.is_file():
        if (directory / "config.json").is_file():
            raise ModelDirectoryError(
                f"{directory} is a checkpoint, not a bertonnx export: it has no {MANIFEST_FILE}. Export it "
                f"first, then pass the folder: `bertonnx export {directory} models/{directory.resolve().name}`."
            )
        raise ModelDirectoryError(
            f"{directory} is not a bertonnx export: it has no {MANIFEST_FILE}. Point at a directory "
            f"written by `bertonnx export`, or create one with `bertonnx export bert-base-uncased {directory}`."
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelDirectoryError(f"{path} is not readable JSON ({exc}); re-run the export.") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise ModelDirectoryError(
            f"{path} is not a bertonnx manifest (expected format {FORMAT_NAME!r}); re-run the export."
        )
    if data.get("format_version") != FORMAT_VERSION:
        raise ModelDirectoryError(
            f"{path} has format_version {data.get('format_version')!r}; this bertonnx reads version "
            f"{FORMAT_VERSION}. Re-export with this version of bertonnx."
        )
    missing = [key for key in ("config", "variants", "weights", "files") if key not in data]
    missing += [f"config.{key}" for key in _REQUIRED_CONFIG_KEYS if key not in data.get("config", {})]
    if missing:
        raise ModelDirectoryError(f"{path} lacks {', '.join(missing)}; re-run the export.")
    files = {
        name: FileRecord(name=name, sha256=str(rec["sha256"]), size=int(rec["size"]))
        for name, rec in data["files"].items()
    }
    return Manifest(directory=directory, data=data, files=files)


def _is_entailment(label: str) -> bool:
    """Whether a classifier label names entailment (``pipeline("zero-shot-classification")``'s test)."""
    return label.lower().startswith("entail")
