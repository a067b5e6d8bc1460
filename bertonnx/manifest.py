"""The model directory contract shared by the export step and the runtime.

An export writes one directory: ONNX variants, tokenizer files, ``config.json`` and the manifest
``bertonnx.json``. The manifest records where the weights came from, the architecture numbers, the
graph's inputs and outputs, every file's sha256 and size, and each variant's parity figures. Both sides
import their names from here so the contract has one definition.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ModelDirectoryError

__all__ = [
    "BF16_PRECISION",
    "CONFIG_FILE",
    "EXTERNAL_DATA_SUFFIX",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "INPUT_NAMES",
    "MANIFEST_FILE",
    "NSP_IS_NEXT_INDEX",
    "ONNXRUNTIME_BACKEND",
    "OPENVINO_BACKEND",
    "OUTPUT_NAMES",
    "TOKENIZER_FILE",
    "VARIANT_BACKENDS",
    "VARIANT_FILES",
    "FileRecord",
    "Manifest",
    "read_manifest",
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
OUTPUT_NAMES = ("last_hidden_state", "pooler_output", "nsp_logits")

#: As in transformers' ``BertForPreTraining``: logit 0 means "sentence B follows sentence A".
NSP_IS_NEXT_INDEX = 0

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
        return int(self.data["config"]["max_position_embeddings"])

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
        raise ModelDirectoryError(
            f"model directory {directory} does not exist. Create one with "
            f"`bertonnx export bert-base-uncased {directory}` (add `--weights random` offline)."
        )
    path = directory / MANIFEST_FILE
    if not path.is_file():
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
