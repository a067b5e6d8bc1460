"""The corpus job on Ray: Ray Data read tasks, a pool of :class:`BertOnnxPredictor` actors, Parquet write tasks.

Thread rule: each actor runs onnxruntime with ``threads_per_actor`` intra-op threads and asks Ray for
that many CPUs (``num_cpus``), so actors never oversubscribe the cores (onnxruntime ignores
``OMP_NUM_THREADS`` and would otherwise start a thread per core in every actor).

Output layout: Ray writes in parallel, so the output is a directory of Parquet files
(``OUT.parquet/part-NNNNNN.parquet``), readable as one table by pyarrow, pandas, DuckDB or Spark; row
order across files depends on scheduling, the ``id`` column does not. The commit checks that the ids of
outputs and rejects are exactly ``0 .. n-1`` once each; :func:`bertonnx.corpus.read_output` returns the
rows sorted by ``id``, equal to the local job's within float32 noise. Failed actors are restarted and their
batch retried (Ray Data starts its actors with ``max_restarts=-1`` and ``max_task_retries=-1``): a batch's
rows reach the sink only from the attempt that finished, so nothing is lost or written twice.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from ..extras import require_extra
from ..loading import warn_if_random
from ..manifest import read_manifest
from ..model import DEFAULT_VARIANT
from ..ray_cluster import connect
from .compute import TaskOptions, check_model_task, default_chunk_rows, embedding_width, output_schema
from .errors import BadRowError, CorpusFileError, RayJobError
from .job import JobSummary, check_job
from .predictor import BertOnnxPredictor
from .readers import open_input, plan_splits
from .writers import check_writable, output_metadata, rejects_path, remove

__all__ = ["IO_TASK_CPUS", "run_ray_job"]

#: CPUs Ray reserves for a read or write task. They parse or write text and Parquet, a small fraction of
#: the work; reserving a whole CPU each would leave none for the actors on a node they fill.
IO_TASK_CPUS = 0.0
#: Bytes of input per read task, at least (small files get one task; big ones one per ~64 MB).
MIN_SPLIT_BYTES = 1 << 20
MAX_SPLIT_BYTES = 64 << 20
#: Read tasks per actor, so every actor has input queued while others read.
SPLITS_PER_ACTOR = 4


def run_ray_job(
    model_dir: str | Path,
    input_path: str | Path,
    output_path: str | Path,
    options: TaskOptions,
    *,
    address: str | None = None,
    actors: int | None = None,
    threads_per_actor: int = 1,
    text_column: str | None = None,
    pair_column: str | None = None,
    variant: str = DEFAULT_VARIANT,
    chunk_rows: int | None = None,
    progress: bool | None = None,
    predictor: type[BertOnnxPredictor] = BertOnnxPredictor,
) -> JobSummary:
    """Run a corpus job on Ray; its rows equal :func:`~bertonnx.corpus.job.run_local_job`'s.

    Args:
        model_dir, input_path: as for the local job; each must be readable at the same path on every node.
        output_path: the output directory of Parquet files to create (replacing an older one only on
            success); rejects go to ``OUT.rejects.jsonl`` beside it.
        options: task, pooling, truncation, on_error and batch limits.
        address: ``None`` starts a local cluster (unless this process already called ``ray.init``);
            ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT`` joins one.
        actors: actors in the pool (default: the cluster's CPUs // ``threads_per_actor``).
        threads_per_actor: onnxruntime threads per actor, and the CPUs Ray reserves for each.
        text_column, pair_column, variant, chunk_rows, progress: as for the local job.
        predictor: the callable class the actors run (a subclass of :class:`BertOnnxPredictor`).

    Returns:
        A :class:`~bertonnx.corpus.job.JobSummary`.

    Raises:
        ImportError: Ray is not installed.
        CorpusFileError, BadRowError, ModelDirectoryError, ValueError: as for the local job.
        RayJobError: Ray could not finish the job (lost beyond its retries); nothing was written.
        ConnectionError: the cluster at ``address`` cannot be joined.
    """
    require_extra("ray", "`bertonnx batch --ray`")
    import ray

    started = time.perf_counter()
    source = open_input(Path(input_path).absolute(), text_column, pair_column)
    check_job(source, options)
    output = check_writable(Path(output_path).absolute(), allow_directory=True)
    check_writable(rejects_path(output))
    manifest = read_manifest(model_dir)
    manifest.require_variant(variant)
    warn_if_random(manifest)  # once, here: the actors load the model quietly
    check_model_task(manifest, options.task)
    chunk_rows = chunk_rows or default_chunk_rows(options.task)
    schema = output_schema(
        options.task, embedding_width(manifest, options), options.aggregation_strategy
    ).with_metadata(
        output_metadata(manifest, variant, options)  # the variant's precision (the actors load the model)
    )
    show = sys.stderr.isatty() if progress is None else progress
    owns_ray = not ray.is_initialized()
    if owns_ray:
        connect(ray, address, show)
    try:
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = show
        context.raise_original_map_exception = True  # a BadRowError reaches us as itself, not as its text
        cpus = int(ray.cluster_resources().get("CPU", 1))  # type: ignore[no-untyped-call]
        actors = actors or max(1, cpus // threads_per_actor)
        if actors * threads_per_actor > cpus:
            raise ValueError(
                f"{actors} actors x {threads_per_actor} threads need {actors * threads_per_actor} CPUs; the cluster "
                f"has {cpus}. Lower --actors or --threads-per-actor, or add nodes"
            )
        split_bytes = min(MAX_SPLIT_BYTES, max(MIN_SPLIT_BYTES, source.size_bytes // (SPLITS_PER_ACTOR * actors) + 1))
        splits = plan_splits(source, split_bytes)
        expected = None if any(s.num_rows is None for s in splits) else sum(s.num_rows or 0 for s in splits)
        from .ray_io import CorpusDatasink, CorpusDatasource

        dataset = ray.data.read_datasource(CorpusDatasource(source, splits, chunk_rows), num_cpus=IO_TASK_CPUS)
        dataset = dataset.map_batches(
            predictor,
            fn_constructor_kwargs={
                "model_dir": str(manifest.directory.absolute()),
                "variant": variant,
                "threads": threads_per_actor,
                "task": options.task,
                "pooling": options.pooling,
                "normalize": options.normalize,
                "truncation": options.truncation,
                "on_error": options.on_error,
                "pair_column": "pair" if source.pair_column else None,
                "max_batch_tokens": options.max_batch_tokens,
                "batch_size": options.batch_size,
                "aggregation_strategy": options.aggregation_strategy,
                "stride": options.stride,
                "ignore_labels": options.ignore_labels,
                "candidate_labels": options.candidate_labels,
                "hypothesis_template": options.hypothesis_template,
                "multi_label": options.multi_label,
                "entailment_label": options.entailment_label,
            },
            compute=ray.data.ActorPoolStrategy(size=actors),
            num_cpus=threads_per_actor,
            batch_size=chunk_rows,
            batch_format="pyarrow",
            udf_modifying_row_count=False,
        )
        sink = CorpusDatasink(output, schema, expected)
        try:
            dataset.write_datasink(sink, ray_remote_args={"num_cpus": IO_TASK_CPUS})
        except Exception as exc:  # Ray wraps a worker's exception: surface ours as they are, name its own
            user_error = _user_error(exc)
            if user_error is None and isinstance(exc, ray.exceptions.RayError):
                reason = (str(exc).strip().splitlines() or [""])[0][:300]
                raise RayJobError(
                    f"the Ray cluster could not finish the job ({type(exc).__name__}: {reason}); nothing was "
                    "written and an older output is unchanged. Check the cluster (`ray status`) and rerun"
                ) from exc
            raise user_error or exc from None
        finally:  # Ray cleans up after an Exception; after Ctrl-C (or a commit that failed) we do
            if sink.result is None:
                remove(sink.staging)
    finally:
        if owns_ray:
            ray.shutdown()
    assert sink.result is not None
    rows = sink.result.outputs + sink.result.rejected
    return JobSummary(
        str(source.path), str(output), str(sink.rejects), options.task, rows, sink.result.outputs,
        sink.result.rejected, time.perf_counter() - started,
        f"ray, {actors} actors x {threads_per_actor} threads",
    )  # fmt: skip


def _user_error(exc: BaseException) -> BaseException | None:
    """The :class:`BadRowError` or :class:`CorpusFileError` inside a Ray exception, if any."""
    seen: set[int] = set()
    stack: list[Any] = [exc]
    while stack:
        error = stack.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, BadRowError):
            return BadRowError(error.row_id, error.reason)
        if isinstance(error, CorpusFileError):
            return CorpusFileError(str(error).splitlines()[-1].split("CorpusFileError: ")[-1])
        stack += [getattr(error, "cause", None), error.__cause__, error.__context__]
    return None
