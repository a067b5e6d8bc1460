"""Ray Data source and sink of a corpus job: our readers as read tasks, our atomic writers as write tasks.

Ray's own ``read_text``/``read_json``/``read_csv`` know no row numbers (its ``monotonically_increasing_id``
is unique but neither consecutive nor deterministic) and judge bad rows differently from the local job
(``read_text`` drops blank lines; a bad JSON line fails the whole file). So the read tasks run
:func:`bertonnx.corpus.readers.read_split` on splits that know their first ``id``, and every row gets the
same ``id`` and verdict as in the local job.

The sink writes each write task's rows to ``part-NNNNNN.parquet`` in a hidden staging directory beside
the output (a retried write task rewrites the same file, atomically) and its rejected rows to a rejects
part. On completion the driver checks that the ids of outputs and rejects are exactly ``0 .. n-1``, each
once, merges the rejects into ``OUT.rejects.jsonl`` by id, and renames the staging directory to the
output. A failed job removes the staging directory and leaves the old output alone.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from ray.data import Datasource, ReadTask
from ray.data.block import Block, BlockAccessor, BlockMetadata
from ray.data.datasource import Datasink, WriteResult

from .readers import ROW_SCHEMA, InputFile, Split, read_split
from .writers import AtomicParquetWriter, AtomicRejectsWriter, partial_path, rejects_path, remove, replace

__all__ = ["CorpusDatasink", "CorpusDatasource", "SinkResult"]

_REJECTS_PART = ".rejects-{:06d}.jsonl"


class CorpusDatasource(Datasource):
    """Read tasks over a corpus file, one per :class:`~bertonnx.corpus.readers.Split`.

    Args:
        source: from :func:`~bertonnx.corpus.readers.open_input`.
        splits: from :func:`~bertonnx.corpus.readers.plan_splits`.
        chunk_rows: rows per block a read task yields.
    """

    def __init__(self, source: InputFile, splits: list[Split], chunk_rows: int) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.source = source
        self.splits = splits
        self.chunk_rows = chunk_rows

    def get_name(self) -> str:
        return f"Corpus({self.source.path.name})"

    def estimate_inmemory_data_size(self) -> int:
        return self.source.size_bytes

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        # One task per split, whatever `parallelism` asks: the splits were cut to fit the cluster already.
        tasks = []
        for split in self.splits:
            size = (
                (split.stop - split.start)
                if self.source.format in ("txt", "jsonl")
                else self.source.size_bytes // max(1, len(self.splits))
            )
            metadata = BlockMetadata(
                num_rows=split.num_rows, size_bytes=int(size), input_files=(str(self.source.path),), exec_stats=None
            )
            read = functools.partial(_read, self.source, split, self.chunk_rows)
            tasks.append(ReadTask(read, metadata, schema=ROW_SCHEMA, per_task_row_limit=per_task_row_limit))
        return tasks


def _read(source: InputFile, split: Split, chunk_rows: int) -> Iterator[pa.Table]:
    yield from read_split(source, split, chunk_rows)


@dataclass(frozen=True)
class SinkResult:
    """Rows the sink committed: ``outputs`` to the Parquet directory, ``rejected`` to the rejects file."""

    outputs: int
    rejected: int
    parts: int


class CorpusDatasink(Datasink[dict[str, int]]):
    """Writes computed rows to a directory of Parquet files and rejected rows to ``OUT.rejects.jsonl``.

    Args:
        output: the output directory to create (or replace).
        schema: the output schema (:func:`bertonnx.corpus.output_schema`).
        expected_rows: rows the input holds, when known; the commit checks it.
    """

    def __init__(self, output: Path, schema: pa.Schema, expected_rows: int | None = None) -> None:
        self.output = output
        self.rejects = rejects_path(output)
        self.schema = schema
        self.expected_rows = expected_rows
        self.staging = partial_path(output)
        self.result: SinkResult | None = None

    def get_name(self) -> str:
        return "CorpusParquet"

    def on_write_start(self, schema: Any = None) -> None:
        self.staging.mkdir(exist_ok=True)

    def write(self, blocks: Iterable[Block], ctx: Any) -> dict[str, int]:
        self.staging.mkdir(exist_ok=True)
        name = f"part-{ctx.task_idx:06d}.parquet"
        outputs = rejected = 0
        with (
            AtomicParquetWriter(self.staging / name, self.schema) as out,
            AtomicRejectsWriter(self.staging / _REJECTS_PART.format(ctx.task_idx)) as bad,
        ):
            for block in blocks:
                table = BlockAccessor.for_block(block).to_arrow()
                if "error" in table.column_names:
                    failed = pc.is_valid(table.column("error"))
                    ids = table.column("id").filter(failed).to_pylist()
                    bad.write(zip(ids, table.column("error").filter(failed).to_pylist(), strict=True))
                    table = table.filter(pc.invert(failed)).drop_columns(["error"])
                out.write(table.select(self.schema.names).cast(self.schema))
            outputs, rejected = out.rows, bad.rows
            bad.commit()
            out.commit()
        return {"outputs": outputs, "rejected": rejected}

    def on_write_complete(self, write_result: WriteResult[dict[str, int]]) -> None:
        self.staging.mkdir(exist_ok=True)
        for leftover in self.staging.glob(".*.partial-*"):  # temp files of write tasks lost with their node
            leftover.unlink()
        parts = sorted(self.staging.glob("part-*.parquet"))
        if not parts:  # an empty input: one empty file carrying the schema
            with AtomicParquetWriter(self.staging / "part-000000.parquet", self.schema) as empty:
                empty.commit()
            parts = [self.staging / "part-000000.parquet"]
        rejects = []
        for path in sorted(self.staging.glob(".rejects-*.jsonl")):
            with open(path, encoding="utf-8") as handle:
                rejects += [json.loads(line) for line in handle]
            path.unlink()
        rejects.sort(key=lambda row: row["id"])
        output_ids = [pq.read_table(p, columns=["id"]).column("id").to_numpy() for p in parts]
        ids = np.concatenate([*output_ids, np.array([r["id"] for r in rejects], dtype=np.int64)])
        _check_ids(ids, self.expected_rows)
        with AtomicRejectsWriter(self.rejects) as bad:
            bad.write((r["id"], r["reason"]) for r in rejects)
            bad.commit()
        replace(self.staging, self.output)
        self.result = SinkResult(int(sum(len(i) for i in output_ids)), len(rejects), len(parts))

    def on_write_failed(self, error: Exception) -> None:
        remove(self.staging)


def _check_ids(ids: np.ndarray, expected_rows: int | None) -> None:
    """Every input row exactly once: the ids of outputs and rejects are ``0 .. n-1`` with no repeat.

    Raises:
        RuntimeError: a row is missing or written twice (a bug, never a user error).
    """
    n = len(ids) if expected_rows is None else expected_rows
    counts = np.bincount(ids, minlength=n) if len(ids) else np.zeros(n, dtype=np.int64)
    if len(counts) != n or (counts != 1).any():
        missing = np.flatnonzero(counts[:n] == 0)[:5].tolist()
        repeated = np.flatnonzero(counts > 1)[:5].tolist()
        raise RuntimeError(
            f"the Ray job's rows do not match its input ({len(ids)} written for {n} read; missing ids "
            f"{missing}, repeated ids {repeated}); nothing was committed. Please report this"
        )
