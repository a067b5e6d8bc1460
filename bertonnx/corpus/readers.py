"""Read a corpus file as Arrow tables of ``(id, text, pair, error)`` rows, streaming, in input order.

One reader serves the local job and every Ray read task, so both see the same rows with the same ``id``
(the input row number, from 0) and the same verdict on each row. A row that cannot be an input (null,
not a string, not a JSON object, a missing field) is not dropped: it keeps its ``id`` and carries the
reason in ``error``. A file that cannot be read at all (missing, a directory, not UTF-8, unknown column
or extension) raises :class:`CorpusFileError` instead.

Formats: ``.txt`` (one text a line; a blank line is an empty text and keeps its row), ``.jsonl``
(one JSON object a line), ``.csv`` (a header row, then one row a record) and ``.parquet``. Memory stays
bounded: a reader holds one chunk of rows at a time.

For parallel reads a file is cut into :class:`Split` s that know their first ``id``: ``.txt`` and
``.jsonl`` at line starts (found by one pass that counts newlines), ``.parquet`` at row groups. A
``.csv`` file is one split, since a quoted field may hold a newline.
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import CorpusFileError

__all__ = [
    "DEFAULT_TEXT_COLUMN",
    "EXTENSIONS",
    "READ_CHUNK_ROWS",
    "ROW_SCHEMA",
    "InputFile",
    "Split",
    "check_value",
    "count_rows",
    "open_input",
    "plan_splits",
    "read_metadata",
    "read_output",
    "read_split",
    "whole_file",
]

#: File extension -> format.
EXTENSIONS = {".txt": "txt", ".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet"}
DEFAULT_TEXT_COLUMN = "text"
#: Rows per table a reader yields (the job's sorting window is separate: see ``compute``).
READ_CHUNK_ROWS = 1024
#: Bytes read at a time while counting lines.
_SCAN_BLOCK_BYTES = 1 << 20
#: Lines looked at for the first JSON object whose fields are checked against the columns asked for.
_JSONL_PROBE_LINES = 100
_UTF8_FIX = "re-encode it as UTF-8 (e.g. iconv -f latin1 -t utf-8 IN > OUT)"

#: What a reader yields: ``text``/``pair`` are null on a bad row, whose ``error`` says why.
ROW_SCHEMA = pa.schema([("id", pa.int64()), ("text", pa.string()), ("pair", pa.string()), ("error", pa.string())])


@dataclass(frozen=True)
class InputFile:
    """A checked input file.

    Attributes:
        path: the file.
        format: ``txt``, ``jsonl``, ``csv`` or ``parquet``.
        text_column: column (or JSON field) holding the texts; ``None`` for ``.txt``.
        pair_column: column holding the second sentences, or ``None``.
        size_bytes: file size.
    """

    path: Path
    format: str
    text_column: str | None
    pair_column: str | None
    size_bytes: int


@dataclass(frozen=True)
class Split:
    """A contiguous part of a file: rows ``first_id`` .. ``first_id + num_rows - 1``.

    ``start``/``stop`` are a byte range beginning at a line start (``.txt``, ``.jsonl``), row-group
    indices (``.parquet``), or unused (``.csv``, always one split). ``num_rows`` is ``None`` when not
    counted.
    """

    first_id: int
    start: int
    stop: int
    num_rows: int | None


def open_input(path: str | Path, text_column: str | None = None, pair_column: str | None = None) -> InputFile:
    """Check that ``path`` is a readable corpus file holding the columns asked for.

    Args:
        path: a ``.txt``, ``.jsonl``, ``.csv`` or ``.parquet`` file.
        text_column: the column of texts (default ``text``; not allowed for ``.txt``).
        pair_column: the column of second sentences, or ``None``.

    Raises:
        CorpusFileError: the file is missing, a directory, of an unknown extension, not a Parquet file,
            or lacks a column; or a column was named for a ``.txt`` file.
    """
    path = Path(path)
    if not path.exists():
        raise CorpusFileError(f"{path} does not exist; check the --input path")
    if path.is_dir():
        raise CorpusFileError(f"{path} is a directory; pass one file ({', '.join(sorted(set(EXTENSIONS)))})")
    fmt = EXTENSIONS.get(path.suffix.lower())
    if fmt is None:
        raise CorpusFileError(
            f"{path}: unknown extension {path.suffix or '(none)'!r}; expected one of "
            f"{', '.join(EXTENSIONS)} (rename it, e.g. to .txt for one text a line)"
        )
    try:
        size = path.stat().st_size
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise CorpusFileError(f"cannot read {path}: {exc.strerror}; check its permissions") from None
    if fmt == "txt":
        if text_column is not None or pair_column is not None:
            raise CorpusFileError(
                f"{path} is a .txt file (one text a line, no columns); drop --text-column/--pair-column, or "
                "use .jsonl, .csv or .parquet for named columns and pairs"
            )
        return InputFile(path, fmt, None, None, size)
    text_column = text_column or DEFAULT_TEXT_COLUMN
    columns = [text_column] + ([pair_column] if pair_column else [])
    available = _columns(path, fmt)
    if available is not None:
        missing = [c for c in columns if c not in available]
        if missing:
            where = "in the first JSON object" if fmt == "jsonl" else "in the file"
            raise CorpusFileError(
                f"{path}: no column {missing[0]!r} {where} (columns: {', '.join(available) or 'none'}); "
                "pass --text-column/--pair-column with one of those"
            )
    return InputFile(path, fmt, text_column, pair_column, size)


def _columns(path: Path, fmt: str) -> list[str] | None:
    if fmt == "parquet":
        try:
            return list(pq.read_schema(path).names)
        except (pa.ArrowException, OSError) as exc:
            raise CorpusFileError(f"{path} is not a readable Parquet file ({exc}); check the file") from None
    if fmt == "csv":
        with open(path, encoding="utf-8", newline="") as handle:
            try:
                header = next(csv.reader(handle), None)
            except UnicodeDecodeError as exc:
                raise CorpusFileError(f"{path}: the header is not UTF-8 ({exc.reason}); {_UTF8_FIX}") from None
        if header is None:
            raise CorpusFileError(f"{path} is empty; a .csv file needs a header row naming its columns")
        return header
    with open(path, "rb") as handle:  # jsonl: the fields of the first object, if one is near the top
        for number, raw in zip(range(_JSONL_PROBE_LINES), handle, strict=False):
            try:
                value = json.loads(_decode(raw, path, number))
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return list(value)
    return None


def whole_file(source: InputFile) -> Split:
    """The whole file as one split (the local job reads it so)."""
    if source.format == "parquet":
        metadata = pq.ParquetFile(source.path).metadata
        return Split(0, 0, metadata.num_row_groups, metadata.num_rows)
    return Split(0, 0, source.size_bytes, None)


def count_rows(source: InputFile) -> int:
    """Rows in the file: lines of ``.txt``/``.jsonl``, Parquet metadata rows, or a full ``.csv`` parse."""
    if source.format == "parquet":
        return int(pq.ParquetFile(source.path).metadata.num_rows)
    if source.format == "csv":
        return sum(len(t) for t in read_split(source, whole_file(source)))
    return _count_lines(source.path, 0, source.size_bytes)


def _count_lines(path: Path, start: int, stop: int) -> int:
    """Lines in bytes ``[start, stop)``, the last one counted even without its newline."""
    count, last = 0, b"\n"
    with open(path, "rb") as handle:
        handle.seek(start)
        remaining = stop - start
        while remaining > 0:
            block = handle.read(min(_SCAN_BLOCK_BYTES, remaining))
            if not block:
                break
            count += block.count(b"\n")
            last = block[-1:]
            remaining -= len(block)
    return count + (last != b"\n")


def plan_splits(source: InputFile, target_bytes: int) -> list[Split]:
    """Cut the file into splits of about ``target_bytes`` each, every one knowing its first ``id``.

    Raises:
        ValueError: ``target_bytes`` < 1.
    """
    if target_bytes < 1:
        raise ValueError(f"target_bytes must be >= 1, got {target_bytes}")
    if source.format == "csv":
        return [whole_file(source)]
    if source.format == "parquet":
        metadata = pq.ParquetFile(source.path).metadata
        splits, first_id, start, size, rows = [], 0, 0, 0, 0
        for group in range(metadata.num_row_groups):
            size += metadata.row_group(group).total_byte_size
            rows += metadata.row_group(group).num_rows
            if size >= target_bytes or group == metadata.num_row_groups - 1:
                splits.append(Split(first_id, start, group + 1, rows))
                first_id, start, size, rows = first_id + rows, group + 1, 0, 0
        return splits or [Split(0, 0, 0, 0)]
    cuts = [0]
    with open(source.path, "rb") as handle:
        boundary = target_bytes
        while boundary < source.size_bytes:
            handle.seek(boundary - 1)
            handle.readline()  # to the end of the line holding byte boundary-1: the next line starts here
            cut = handle.tell()
            if cut >= source.size_bytes:
                break
            cuts.append(cut)
            boundary = cut + target_bytes
    cuts.append(source.size_bytes)
    splits, first_id = [], 0
    for start, stop in itertools.pairwise(cuts):
        rows = _count_lines(source.path, start, stop) if stop > start else 0
        splits.append(Split(first_id, start, stop, rows))
        first_id += rows
    return splits


def read_split(source: InputFile, split: Split, chunk_rows: int = READ_CHUNK_ROWS) -> Iterator[pa.Table]:
    """Yield the split's rows as :data:`ROW_SCHEMA` tables of at most ``chunk_rows`` rows, in order.

    Raises:
        CorpusFileError: the file is not UTF-8 (naming the line), or not valid CSV.
    """
    rows = _Rows(split.first_id, chunk_rows, source.pair_column is not None)
    if source.format == "parquet":
        yield from _read_parquet(source, split, rows)
        return
    if source.format == "csv":
        yield from _read_csv(source, rows)
        return
    with open(source.path, "rb") as handle:
        handle.seek(split.start)
        position = split.start
        while position < split.stop:
            raw = handle.readline()
            if not raw:
                break
            position += len(raw)
            line = _decode(raw, source.path, rows.next_id)
            if rows.next_id == 0:
                line = line.removeprefix("\ufeff")
            if source.format == "txt":
                rows.add(line, None, None)
            else:
                rows.add(*_jsonl_row(line, source))
            if rows.full():
                yield rows.flush()
    if rows.pending():
        yield rows.flush()


def _decode(raw: bytes, path: Path, row_id: int) -> str:
    if raw.endswith(b"\n"):
        raw = raw[:-1]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorpusFileError(
            f"{path}: line {row_id + 1} is not UTF-8 ({exc.reason} at byte {exc.start}); {_UTF8_FIX}"
        ) from None


def check_value(value: object, column: str) -> tuple[str | None, str | None]:
    """``(text, None)`` for a string, else ``(None, reason)``: why the ``column`` value cannot be an input."""
    if isinstance(value, str):
        return value, None
    if value is None:
        return None, f"{column!r} is null"
    return None, f"{column!r} is {type(value).__name__}, not a string"


def _jsonl_row(line: str, source: InputFile) -> tuple[str | None, str | None, str | None]:
    if not line.strip():
        return None, None, "blank line, expected a JSON object"
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        return None, None, f"not valid JSON ({exc.msg} at column {exc.colno})"
    if not isinstance(value, dict):
        return None, None, f"a JSON {type(value).__name__}, expected an object"
    return _fields(value, source)


def _fields(record: dict[str, object], source: InputFile) -> tuple[str | None, str | None, str | None]:
    assert source.text_column is not None  # set for every columned format by open_input
    columns = [source.text_column] + ([source.pair_column] if source.pair_column else [])
    values: list[str | None] = []
    for column in columns:
        if column not in record:
            return None, None, f"no {column!r} field"
        value, error = check_value(record[column], column)
        if error:
            return None, None, error
        values.append(value)
    return values[0], values[1] if len(values) > 1 else None, None


def _read_csv(source: InputFile, rows: _Rows) -> Iterator[pa.Table]:
    csv.field_size_limit(1 << 30)  # a long text is a row to reject for its length, not a parse error
    with open(source.path, encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
            for record in reader:
                if not record:
                    rows.add(None, None, "blank line, expected a CSV record")
                elif len(record) != len(header):
                    rows.add(None, None, f"has {len(record)} fields, the header has {len(header)}")
                else:
                    rows.add(*_fields(dict(zip(header, record, strict=True)), source))
                if rows.full():
                    yield rows.flush()
        except UnicodeDecodeError as exc:
            raise CorpusFileError(
                f"{source.path}: row {rows.next_id} (line {reader.line_num + 1}) is not UTF-8 ({exc.reason}); "
                f"{_UTF8_FIX}"
            ) from None
        except csv.Error as exc:
            raise CorpusFileError(
                f"{source.path}: not valid CSV at line {reader.line_num} ({exc}); fix the file"
            ) from None
    if rows.pending():
        yield rows.flush()


def _read_parquet(source: InputFile, split: Split, rows: _Rows) -> Iterator[pa.Table]:
    assert source.text_column is not None
    columns = [source.text_column] + ([source.pair_column] if source.pair_column else [])
    parquet = pq.ParquetFile(source.path)
    groups = list(range(split.start, split.stop)) if split.stop > split.start else []
    if not groups:
        return
    for batch in parquet.iter_batches(batch_size=rows.chunk_rows, row_groups=groups, columns=columns):
        values = [batch.column(i).to_pylist() for i in range(len(columns))]
        for record in zip(*values, strict=True):
            rows.add(*_fields(dict(zip(columns, record, strict=True)), source))
            if rows.full():
                yield rows.flush()
    if rows.pending():
        yield rows.flush()


class _Rows:
    """Collects rows into :data:`ROW_SCHEMA` tables, numbering them from ``first_id``."""

    def __init__(self, first_id: int, chunk_rows: int, has_pairs: bool) -> None:
        self.next_id = first_id
        self.chunk_rows = chunk_rows
        self.has_pairs = has_pairs
        self._clear()

    def _clear(self) -> None:
        self.ids: list[int] = []
        self.texts: list[str | None] = []
        self.pairs: list[str | None] = []
        self.errors: list[str | None] = []

    def add(self, text: str | None, pair: str | None, error: str | None) -> None:
        self.ids.append(self.next_id)
        self.texts.append(text)
        self.pairs.append(pair)
        self.errors.append(error)
        self.next_id += 1

    def full(self) -> bool:
        return len(self.ids) >= self.chunk_rows

    def pending(self) -> bool:
        return bool(self.ids)

    def flush(self) -> pa.Table:
        table = pa.table([self.ids, self.texts, self.pairs, self.errors], schema=ROW_SCHEMA)
        self._clear()
        return table


def read_output(path: str | Path) -> pa.Table:
    """Read a job's output, a Parquet file (local job) or a directory of Parquet files (Ray job), sorted by ``id``.

    Two jobs on the same input gave the same rows when their ``read_output`` tables are equal (within the
    float tolerance of their runtimes).

    Raises:
        CorpusFileError: ``path`` does not exist.
    """
    path = Path(path)
    if not path.exists():
        raise CorpusFileError(f"{path} does not exist; pass the --output of a finished job")
    table = pq.read_table(path)
    return table.sort_by("id")


def read_metadata(path: str | Path) -> dict[str, str]:
    """What computed a job's output: the ``bertonnx.*`` key-value metadata of its Parquet file (of its first
    part file, for a Ray job's directory), without the prefix (see :func:`bertonnx.corpus.writers.output_metadata`).

    Raises:
        CorpusFileError: ``path`` does not exist or holds no Parquet file.
    """
    path = Path(path)
    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    if not files or not files[0].is_file():
        raise CorpusFileError(f"{path} holds no Parquet file; pass the --output of a finished job")
    metadata = pq.read_schema(files[0]).metadata or {}
    prefix = b"bertonnx."
    return {key[len(prefix) :].decode(): value.decode() for key, value in metadata.items() if key.startswith(prefix)}
