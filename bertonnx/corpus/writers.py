"""Write a job's output and rejects atomically: to a temp file beside the target, renamed on success.

An interrupted or failed job leaves its target untouched (an older output stays whole, and no partial
file ever takes its name). Temp files are named ``.NAME.partial-*`` in the target's directory, so the
rename stays on one filesystem and is atomic.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..manifest import Manifest
from ..version import __version__
from .errors import CorpusFileError

if TYPE_CHECKING:
    from .compute import TaskOptions

__all__ = [
    "METADATA_PREFIX",
    "AtomicParquetWriter",
    "AtomicRejectsWriter",
    "check_writable",
    "output_metadata",
    "partial_path",
    "rejects_path",
    "replace",
]

REJECTS_SUFFIX = ".rejects.jsonl"
#: Every key-value pair a job writes into its Parquet files' metadata starts with this.
METADATA_PREFIX = "bertonnx."
#: The precision each variant computes in (bf16: where the CPU has AVX512-BF16 or AMX; OpenVINO computes
#: it in f32 elsewhere, which a local job records as what it measured on its machine).
VARIANT_PRECISION = {"fp32": "f32", "optimized": "f32", "int8": "int8", "bf16": "bf16"}


def output_metadata(
    manifest: Manifest, variant: str, options: TaskOptions, precision: str | None = None
) -> dict[str, str]:
    """The key-value metadata of a job's Parquet files: what computed the rows.

    Args:
        manifest: the export's manifest.
        variant: the variant that ran.
        options: the job's task and its settings.
        precision: the precision the model computed in (``BertOnnx.precision``); default: the variant's.

    Returns:
        ``bertonnx.version``, ``bertonnx.model_id`` (the checkpoint exported, with its revision when known),
        ``bertonnx.model_dir``, ``bertonnx.variant``, ``bertonnx.precision``, ``bertonnx.task``,
        ``bertonnx.pooling`` (the pooling that ran: the export's own ``pipeline`` or ``pooler`` by default),
        ``bertonnx.normalize``, ``bertonnx.prompt_name`` and ``bertonnx.dimensions`` (``embed`` only, else
        empty; the export's default prompt and ``truncate_dim`` when the job named none), ``bertonnx.truncation``
        (whether inputs were cut: a sentence-transformers export's own pipeline cuts by default),
        ``bertonnx.max_length`` (tokens per input: its ``max_seq_length``, else the positions) and
        ``bertonnx.weights`` (``pretrained`` or ``random``: any weight seeded rather than trained).
    """
    source = manifest.data.get("source") or {}
    model_id = str(source.get("model", "")) if isinstance(source, dict) else str(source)
    revision = source.get("revision") if isinstance(source, dict) else None
    embed = options.task == "embed"
    block = manifest.data.get("sentence_transformers") or None
    pooling = options.pooling or ("pipeline" if block else "pooler")
    own = block is not None and ((embed and pooling == "pipeline") or options.task == "sparse")  # cut at its length
    defaults: dict[str, Any] = block if own and block else {}  # its own defaults apply with its own pipeline
    dimensions = options.dimensions if options.dimensions is not None else defaults.get("truncate_dim")
    prompt_name = options.prompt_name or defaults.get("default_prompt_name")
    values = {
        "version": __version__,
        "model_id": f"{model_id}@{revision}" if revision else model_id,
        "model_dir": str(manifest.directory.absolute()),
        "variant": variant,
        "precision": precision or VARIANT_PRECISION.get(variant, variant),
        "task": options.task,
        "pooling": pooling if embed else "",
        "normalize": str(options.normalize).lower() if embed else "",
        "prompt_name": str(prompt_name or "") if embed else "",
        "dimensions": str(dimensions or "") if embed else "",
        "truncation": str(bool(options.truncation or own)).lower(),
        "max_length": str(defaults.get("max_seq_length", manifest.max_position_embeddings)),
        "weights": "random" if manifest.random_weights else "pretrained",
    }
    return {METADATA_PREFIX + key: value for key, value in values.items()}


def rejects_path(output: str | Path) -> Path:
    """``OUT.rejects.jsonl`` beside ``OUT.parquet`` (``OUT.rejects.jsonl`` beside ``OUT`` without the suffix)."""
    output = Path(output)
    stem = output.stem if output.suffix.lower() == ".parquet" else output.name
    return output.with_name(stem + REJECTS_SUFFIX)


def partial_path(target: Path) -> Path:
    """A fresh temp path beside ``target``: hidden, and skipped by Parquet dataset readers."""
    return target.with_name(f".{target.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def check_writable(target: str | Path, *, allow_directory: bool = False) -> Path:
    """Check that a file can be created beside ``target`` (before hours of work, not after).

    Raises:
        CorpusFileError: the directory is missing or not writable, or ``target`` is a directory (unless
            ``allow_directory``, for a Ray job's output).
    """
    target = Path(target)
    if target.is_dir() and not allow_directory:
        raise CorpusFileError(f"{target} is a directory (a Ray job's output?); remove it or pass another --output file")
    if not target.parent.is_dir():
        raise CorpusFileError(f"cannot write {target}: {target.parent} is not a directory; create it first")
    probe = partial_path(target)
    try:
        probe.touch(exist_ok=False)
        probe.unlink()
    except OSError as exc:
        raise CorpusFileError(f"cannot write {target}: {exc.strerror}; pick a writable --output path") from None
    return target


def replace(staged: Path, target: Path) -> None:
    """Move ``staged`` (a file or a directory) to ``target``, replacing whatever is there.

    A file over a file is one atomic ``os.replace``. Otherwise the old target is first renamed aside and
    removed after, so ``target`` is always either the old or the new output, never a mix.
    """
    if not target.exists() or (staged.is_file() and target.is_file()):
        os.replace(staged, target)
        return
    aside = partial_path(target)
    os.replace(target, aside)
    os.replace(staged, target)
    if aside.is_dir():
        shutil.rmtree(aside)
    else:
        aside.unlink()


def remove(path: Path) -> None:
    """Remove a temp file or directory if it exists."""
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


class AtomicParquetWriter:
    """Stream tables into ``target`` through a temp file; :meth:`commit` renames it into place.

    Used as a context manager, an exception (including ``KeyboardInterrupt``) removes the temp file.

    Raises:
        CorpusFileError: the temp file cannot be created.
    """

    def __init__(self, target: str | Path, schema: pa.Schema, *, compression: str = "zstd") -> None:
        self.target = Path(target)
        self.schema = schema
        self.rows = 0
        self._temp = partial_path(self.target)
        try:
            self._writer: pq.ParquetWriter | None = pq.ParquetWriter(self._temp, schema, compression=compression)
        except OSError as exc:
            raise CorpusFileError(f"cannot write {self.target}: {exc}; pick a writable --output path") from None

    def write(self, table: pa.Table) -> None:
        """Append ``table``'s rows (one row group per call)."""
        assert self._writer is not None, "write after commit or abort"
        if table.num_rows:
            self._writer.write_table(table)
            self.rows += table.num_rows

    def commit(self) -> Path:
        """Close the file and move it to ``target`` (an empty input gives a file with the schema and no rows)."""
        assert self._writer is not None, "commit twice or after abort"
        self._writer.close()
        self._writer = None
        replace(self._temp, self.target)
        return self.target

    def abort(self) -> None:
        """Close and delete the temp file; ``target`` stays as it was."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        remove(self._temp)

    def __enter__(self) -> AtomicParquetWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if kind is not None or self._writer is not None:
            self.abort()


class AtomicRejectsWriter:
    """JSON lines ``{"id": ..., "reason": ...}`` through a temp file, like :class:`AtomicParquetWriter`. A job
    that rejected nothing writes no rejects file (and removes one an earlier run left, which would mislead)."""

    def __init__(self, target: str | Path) -> None:
        self.target = Path(target)
        self.rows = 0
        self._temp = partial_path(self.target)
        try:
            self._handle = open(self._temp, "w", encoding="utf-8")  # noqa: SIM115 - closed by commit/abort
        except OSError as exc:
            raise CorpusFileError(
                f"cannot write {self.target}: {exc.strerror}; pick a writable --output path"
            ) from None

    def write(self, rejects: Iterable[tuple[int, str]]) -> None:
        """Append ``(id, reason)`` rows."""
        for row_id, reason in rejects:
            self._handle.write(json.dumps({"id": row_id, "reason": reason}, ensure_ascii=False) + "\n")
            self.rows += 1

    def commit(self) -> Path:
        self._handle.close()
        if self.rows:
            replace(self._temp, self.target)
        else:
            remove(self._temp)
            if self.target.is_file():
                self.target.unlink()
        return self.target

    def abort(self) -> None:
        self._handle.close()
        remove(self._temp)

    def __enter__(self) -> AtomicRejectsWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if not self._handle.closed:
            self.abort()
