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

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import CorpusFileError

__all__ = [
    "AtomicParquetWriter",
    "AtomicRejectsWriter",
    "check_writable",
    "partial_path",
    "rejects_path",
    "replace",
]

REJECTS_SUFFIX = ".rejects.jsonl"


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
    """JSON lines ``{"id": ..., "reason": ...}`` through a temp file, like :class:`AtomicParquetWriter`."""

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
        replace(self._temp, self.target)
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
