"""``BertOnnxPredictor``: the callable class Ray Data maps over a dataset, one instance per actor.

An onnxruntime session cannot be pickled, so each actor builds its own in the constructor; and since
onnxruntime ignores ``OMP_NUM_THREADS`` and would start a thread per core in every actor, the constructor
takes ``threads`` and the caller asks Ray for the same ``num_cpus``::

    ds.map_batches(
        BertOnnxPredictor,
        fn_constructor_kwargs={"model_dir": "models/minilm", "threads": 2, "task": "embed"},
        concurrency=4,          # actors
        num_cpus=2,             # = threads: one onnxruntime thread per CPU Ray reserved
        batch_size=2048,        # rows sorted by length together; bigger pads less
        batch_format="pyarrow",
    )

This module imports pyarrow but not Ray: the class is plain Python and can be tried without a cluster.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import RandomWeightsWarning
from ..model import DEFAULT_VARIANT, BertOnnx
from ..tasks.tag import DEFAULT_IGNORE_LABELS
from ..tasks.zero_shot import DEFAULT_HYPOTHESIS_TEMPLATE
from .compute import TaskOptions, check_model_task, compute_rows, embedding_width, output_schema
from .readers import ROW_SCHEMA, check_value

__all__ = ["BertOnnxPredictor"]


class BertOnnxPredictor:
    """Computes a task on batches of rows; for ``Dataset.map_batches`` with a pool of actors.

    Input batches (a ``pyarrow.Table``, a dict of numpy arrays or a pandas DataFrame) need the
    ``text_column`` (and ``pair_column`` for pairs); an ``id`` column is passed through, and so is
    ``error`` (a reason to reject the row, as :mod:`bertonnx.corpus.readers` gives). The output has one
    row per input row: ``id`` (when given), ``n_tokens`` and the task's columns (see
    :func:`bertonnx.corpus.output_schema`), plus ``error`` when ``on_error='skip'`` (null results on a
    rejected row, and the reason).
    """

    def __init__(
        self,
        model_dir: str,
        *,
        variant: str = DEFAULT_VARIANT,
        threads: int = 1,
        task: str = "embed",
        pooling: str | None = None,
        normalize: bool = False,
        truncation: bool = False,
        on_error: str = "stop",
        text_column: str = "text",
        pair_column: str | None = None,
        max_batch_tokens: int | None = None,
        batch_size: int | None = None,
        aggregation_strategy: str = "simple",
        stride: int | None = None,
        ignore_labels: Sequence[str] = DEFAULT_IGNORE_LABELS,
        candidate_labels: str | Sequence[str] | None = None,
        hypothesis_template: str = DEFAULT_HYPOTHESIS_TEMPLATE,
        multi_label: bool = False,
        entailment_label: str | None = None,
    ) -> None:
        """Load the model in this actor.

        Args:
            model_dir: directory written by ``bertonnx export``, readable on every node.
            variant: model variant.
            threads: onnxruntime intra-op threads; give Ray the same ``num_cpus``.
            task: ``embed``, ``nsp`` or ``encode``.
            pooling: for ``embed``.
            normalize: for ``embed``: unit-length vectors.
            truncation: cut over-long inputs instead of rejecting them.
            on_error: ``stop`` (raise :class:`bertonnx.corpus.BadRowError`) or ``skip`` (keep the row with
                null results and an ``error``).
            text_column: input column of texts.
            pair_column: input column of second sentences (``nsp``, ``encode``).
            max_batch_tokens: padded tokens per ``session.run``.
            batch_size: inputs per ``session.run``.
            aggregation_strategy, stride, ignore_labels: for ``tag`` (see :meth:`bertonnx.BertOnnx.tag`).
            candidate_labels, hypothesis_template, multi_label, entailment_label: for ``zero-shot`` (see
                :meth:`bertonnx.BertOnnx.zero_shot`).

        Raises:
            ValueError, TypeError: bad options; ModelDirectoryError: a bad model directory.
        """
        limits: dict[str, Any] = {
            k: v for k, v in (("max_batch_tokens", max_batch_tokens), ("batch_size", batch_size)) if v is not None
        }
        self.options = TaskOptions(
            task,
            pooling,
            normalize,
            truncation,
            on_error,
            **limits,
            aggregation_strategy=aggregation_strategy,
            stride=stride,
            ignore_labels=tuple(ignore_labels),
            candidate_labels=candidate_labels
            if candidate_labels is None or isinstance(candidate_labels, str)
            else tuple(candidate_labels),
            hypothesis_template=hypothesis_template,
            multi_label=multi_label,
            entailment_label=entailment_label,
        )
        self.text_column = text_column
        self.pair_column = pair_column
        with warnings.catch_warnings():  # the driver warns once (run_ray_job), not once per actor
            warnings.simplefilter("ignore", RandomWeightsWarning)
            self.model = BertOnnx(model_dir, variant, threads=threads)
        check_model_task(self.model.manifest, task)
        self.schema = output_schema(
            task, embedding_width(self.model.manifest, self.options), self.options.aggregation_strategy
        )

    def __call__(self, batch: pa.Table | dict[str, np.ndarray] | Any) -> pa.Table:
        """Compute one batch.

        Raises:
            ValueError: the batch lacks the text (or pair) column; a bad row with ``on_error='stop'``.
        """
        table = _as_table(batch)
        for column in filter(None, (self.text_column, self.pair_column)):
            if column not in table.column_names:
                raise ValueError(
                    f"the batch has no column {column!r} (columns: {', '.join(table.column_names)}); "
                    "pass text_column/pair_column"
                )
        n = table.num_rows
        ids = table.column("id").cast(pa.int64()) if "id" in table.column_names else pa.array(np.arange(n))
        errors = table.column("error").to_pylist() if "error" in table.column_names else [None] * n
        texts = table.column(self.text_column).to_pylist()
        pairs = table.column(self.pair_column).to_pylist() if self.pair_column else [None] * n
        for i in range(n):  # the same verdicts as the file readers give
            if errors[i] is None:
                texts[i], errors[i] = check_value(texts[i], self.text_column)
            if errors[i] is None and self.pair_column:
                pairs[i], errors[i] = check_value(pairs[i], self.pair_column)
            if errors[i] is not None:
                texts[i] = pairs[i] = None
        rows = pa.table([ids, texts, pairs, errors], schema=ROW_SCHEMA)
        result = compute_rows(self.model, rows, self.options)
        out = result.table(self.schema, keep_rejected=self.options.on_error == "skip")
        return out if "id" in table.column_names else out.drop_columns(["id"])


def _as_table(batch: Any) -> pa.Table:
    if isinstance(batch, pa.Table):
        return batch
    if isinstance(batch, dict):  # numpy's object arrays (strings, None) go through lists
        return pa.table(
            {
                k: pa.array(list(v) if getattr(getattr(v, "dtype", None), "kind", "") == "O" else v)
                for k, v in batch.items()
            }
        )
    return pa.Table.from_pandas(batch, preserve_index=False)
