"""The task layer: for each task, which graph outputs it needs and how they become answers.

Every way into the model (:class:`bertonnx.BertOnnx`'s methods, the server's engine, the corpus job)
runs the same steps through :mod:`bertonnx.driver`: tokenize, plan length-sorted batches, run the
session for **only the outputs the task names**, then ``task.postprocess`` turns that batch's raw outputs
into answers, which the driver puts back in the caller's order. Each piece of post-processing
(pooling and normalisation, the NSP softmax, ...) exists once, here.

A task is a small frozen (hashable) dataclass with:

- ``name``: the runtime task name (``embed``, ``nsp``, ``graph``, ...);
- ``outputs``: the graph outputs it reads (the session is asked for these and nothing more);
- ``postprocess(outputs, batch, rows=None)``: answers for ``rows`` of the batch (all rows when ``None``),
  as an array whose first axis is those rows, or a list with one answer per row.

Adding a task is one module here and its routes; nothing in the driver changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from ..batching import Batch
from .embed import POOLING_MODES, Embed, normalize_rows, pool, pooling_outputs
from .graph import Graph
from .nsp import NSP_SCORES, Nsp, is_next_probability, softmax

__all__ = [
    "NSP_SCORES",
    "POOLING_MODES",
    "Embed",
    "Graph",
    "Nsp",
    "Task",
    "is_next_probability",
    "normalize_rows",
    "pool",
    "pooling_outputs",
    "softmax",
]


class Task(Protocol):
    """What the driver needs of a task (see the module docstring)."""

    @property
    def name(self) -> str: ...

    @property
    def outputs(self) -> tuple[str, ...]: ...

    def postprocess(self, outputs: Mapping[str, np.ndarray], batch: Batch, rows: np.ndarray | None = None) -> Any: ...
