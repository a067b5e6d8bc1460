"""The local corpus job: read rows -> :func:`compute_rows` a chunk at a time -> stream to Parquet.

Memory is bounded by one chunk (the sorting window) whatever the corpus size. Output and rejects are
written to temp files and renamed only when every row is done, so an interrupted job leaves no partial
output. Input rows = output rows + rejects, always.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..model import DEFAULT_VARIANT, BertOnnx
from .compute import (
    TEXT_TASKS,
    TaskOptions,
    check_model_task,
    compute_rows,
    default_chunk_rows,
    embedding_width,
    output_schema,
)
from .readers import InputFile, count_rows, open_input, read_split, whole_file
from .writers import AtomicParquetWriter, AtomicRejectsWriter, check_writable, output_metadata, rejects_path

__all__ = ["JobSummary", "check_job", "run_local_job"]


@dataclass(frozen=True)
class JobSummary:
    """What a finished job did.

    Attributes:
        input: the input file.
        output: the Parquet file (local job) or directory of Parquet files (Ray job).
        rejects: the rejects file (JSON lines, one ``{"id", "reason"}`` per rejected row; written only when a row
            was rejected, and ``null`` in :meth:`as_dict` when none was).
        task: the corpus task (``embed``, ``nsp``, ``encode``, ``classify``, ``tag``, ``sparse``, ``zero-shot``).
        rows: input rows read.
        outputs: rows written to ``output``.
        rejected: rows written to ``rejects``; ``rows == outputs + rejected``.
        seconds: wall time of the job, model loading included.
        runner: ``local`` or ``ray (N actors x K threads)``.
    """

    input: str
    output: str
    rejects: str
    task: str
    rows: int
    outputs: int
    rejected: int
    seconds: float
    runner: str

    @property
    def inputs_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        written = self.rejects if self.rejected else None  # no rejects file is written when nothing was rejected
        return {**asdict(self), "rejects": written, "inputs_per_second": round(self.inputs_per_second, 2)}

    def text(self) -> str:
        lines = [
            f"{self.task}: {self.rows:,} rows from {self.input} in {self.seconds:.1f} s "
            f"({self.inputs_per_second:.1f} inputs/s, {self.runner})",
            f"  wrote {self.outputs:,} rows to {self.output}",
            f"  rejected {self.rejected:,} rows -> {self.rejects}" if self.rejected else "  rejected no row",
        ]
        return "\n".join(lines)


def check_job(source: InputFile, options: TaskOptions) -> None:
    """Check that the task fits the input's columns (before any model is loaded).

    Raises:
        ValueError: a task of single texts (``embed``, ``tag``, ``sparse``, ``zero-shot``) with a pair column,
            or ``nsp`` without one.
    """
    if options.task == "embed" and source.pair_column:
        raise ValueError(
            "embed takes single texts; drop --pair-column, or use --task encode, nsp or classify for pairs"
        )
    if options.task == "zero-shot" and source.pair_column:
        raise ValueError("zero-shot classifies single texts against its candidate labels; drop --pair-column")
    if options.task in TEXT_TASKS and source.pair_column:  # tag, sparse: one text a row
        raise ValueError(f"{options.task} takes single texts; drop --pair-column")
    if options.task == "nsp" and not source.pair_column:
        raise ValueError(
            "nsp scores sentence pairs; pass --pair-column with a .jsonl, .csv or .parquet input holding both"
        )


def run_local_job(
    model_dir: str | Path,
    input_path: str | Path,
    output_path: str | Path,
    options: TaskOptions,
    *,
    text_column: str | None = None,
    pair_column: str | None = None,
    variant: str = DEFAULT_VARIANT,
    threads: int | None = None,
    chunk_rows: int | None = None,
    progress: bool | None = None,
) -> JobSummary:
    """Run a corpus job on this machine.

    Args:
        model_dir: directory written by ``bertonnx export``.
        input_path: ``.txt``, ``.jsonl``, ``.csv`` or ``.parquet``.
        output_path: the Parquet file to write; rejects go to ``OUT.rejects.jsonl`` beside it.
        options: task, pooling, truncation, on_error and batch limits.
        text_column: column of texts (default ``text``; none for ``.txt``).
        pair_column: column of second sentences.
        variant: model variant.
        threads: intra-op threads (default: physical cores).
        chunk_rows: rows sorted and computed together (default 2048, 256 for ``encode``).
        progress: show a progress bar; default: when stderr is a terminal.

    Returns:
        A :class:`JobSummary`.

    Raises:
        CorpusFileError: a bad input or output file (nothing is written).
        BadRowError: a bad row with ``on_error='stop'`` (nothing is written).
        ModelDirectoryError: a bad model directory.
    """
    started = time.perf_counter()
    source = open_input(input_path, text_column, pair_column)
    check_job(source, options)
    output = check_writable(output_path)
    rejects = rejects_path(output)
    check_writable(rejects)
    chunk_rows = chunk_rows or default_chunk_rows(options.task)
    model = BertOnnx(model_dir, variant, threads=threads)
    check_model_task(model.manifest, options.task)
    schema = output_schema(
        options.task, embedding_width(model.manifest, options), options.aggregation_strategy
    ).with_metadata(output_metadata(model.manifest, variant, options, model.precision))
    show = sys.stderr.isatty() if progress is None else progress
    bar = _progress_bar(count_rows(source) if show else None, show)
    rows = 0
    try:
        with AtomicParquetWriter(output, schema) as out, AtomicRejectsWriter(rejects) as bad:
            for chunk in read_split(source, whole_file(source), chunk_rows):
                result = compute_rows(model, chunk, options)
                out.write(result.table(schema))
                bad.write(result.rejects())
                rows += chunk.num_rows
                bar.update(chunk.num_rows)
            assert rows == out.rows + bad.rows, "every input row is an output or a reject"
            bad.commit()
            out.commit()
    finally:
        bar.close()
    return JobSummary(
        str(source.path), str(output), str(rejects), options.task, rows, out.rows, bad.rows,
        time.perf_counter() - started, "local",
    )  # fmt: skip


def _progress_bar(total: int | None, show: bool) -> Any:
    """A tqdm bar counting inputs (with inputs/s), silent when ``show`` is False."""
    from tqdm import tqdm

    return tqdm(total=total, unit=" inputs", disable=not show, dynamic_ncols=True, smoothing=0.1)
