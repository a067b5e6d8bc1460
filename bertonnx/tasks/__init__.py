"""The task layer: every task's four steps, and the one registry callers build tasks from.

Every way into the model (:class:`bertonnx.BertOnnx`'s methods, the server's routes, the corpus job) builds
its task with :func:`make_task` (the export's head is checked and every default chosen here, once) and runs
its steps (:mod:`bertonnx.tasks.base`): ``prepare`` (tokenize or window, check the options) -> the graph runs
``task.outputs`` only, on batches planned by the token budget (:mod:`bertonnx.driver` offline, the scheduler in
the server) -> ``postprocess`` per unit -> ``finish`` per input (merge windows, rank, shape). Each piece of
post-processing exists once, in its task's module.

Adding a task is one module here, one :data:`TASK_TYPES` entry and one row of :data:`bertonnx.table.TASKS`
(the head it needs), then the routes and commands that expose it.
"""

from __future__ import annotations

from typing import Any

from .answer import Answer
from .base import Encoder, ModelFacts, PerInput, Prepared, Task
from .choose import Choose
from .classify import Classify, Rerank
from .detect_replaced import DetectReplaced
from .embed import DEFAULT_POOLING, POOLING_MODES, Embed, normalize_rows, pool, pooling_outputs
from .embed_sparse import EmbedSparse
from .fill_mask import FillMask
from .graph import Graph
from .nsp import NSP_SCORES, Nsp, is_next_probability, nsp_labels, softmax
from .tag import Tag
from .zero_shot import ZeroShot

__all__ = [
    "DEFAULT_POOLING",
    "NSP_SCORES",
    "POOLING_MODES",
    "TASK_TYPES",
    "Answer",
    "Choose",
    "Classify",
    "DetectReplaced",
    "Embed",
    "EmbedSparse",
    "Encoder",
    "FillMask",
    "Graph",
    "ModelFacts",
    "Nsp",
    "PerInput",
    "Prepared",
    "Rerank",
    "Tag",
    "Task",
    "ZeroShot",
    "is_next_probability",
    "make_task",
    "normalize_rows",
    "nsp_labels",
    "pool",
    "pooling_outputs",
    "softmax",
]

#: Task name (:data:`bertonnx.table.TASKS`) -> the class holding its steps; each has ``build(model, **options)``.
TASK_TYPES: dict[str, Any] = {
    "embed": Embed,
    "embed_sparse": EmbedSparse,
    "nsp": Nsp,
    "classify": Classify,
    "rerank": Rerank,
    "fill_mask": FillMask,
    "tag": Tag,
    "answer": Answer,
    "choose": Choose,
    "detect_replaced": DetectReplaced,
    "encode": Graph,
    "zero_shot": ZeroShot,
}


def make_task(model: ModelFacts, name: str, **options: Any) -> Any:
    """The task ``name`` on ``model`` with the caller's options, checked (defaults chosen here, once).

    Raises:
        ValueError: an unknown task name.
        HeadMissingError: the export lacks the task's head.
        TypeError, ValueError: a bad option (the message names it).
    """
    if name not in TASK_TYPES:
        raise ValueError(f"unknown task {name!r}; expected one of {', '.join(TASK_TYPES)}")
    if name != "encode":
        model.require(name)
    return TASK_TYPES[name].build(model, **options)
