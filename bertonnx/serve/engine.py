"""One engine run for inputs of any mix of requests: pad, run the graph once, give each input its answer.

The scheduler hands over inputs of different requests and tasks (an ``/embed`` with mean pooling, a
``/predict`` pair, a KServe row ...). :func:`bertonnx.driver.run_mixed` asks the session for the union of
the outputs their tasks need and nothing more, then each task (:mod:`bertonnx.tasks`, the same objects
the offline runtime uses) answers its own rows, so an input's answer is what ``BertOnnx`` gives it offline
whatever it was batched with (fp32: within 1e-5; padding changes no result).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .. import driver
from ..batching import make_batch
from ..model import BertOnnx
from ..tasks import Graph, Task

__all__ = ["Engine", "Work"]

#: Warm-up inputs: one short input alone, then a batch of longer ones, so the first requests do not pay
#: for the session's first allocations.
WARMUP_SHAPES = ((1, 8), (8, 64))


@dataclass(frozen=True)
class Work:
    """One input ready for the engine: its token ids, segment ids and the task its request wants."""

    ids: Sequence[int]
    type_ids: Sequence[int]
    task: Task

    def __len__(self) -> int:
        return len(self.ids)


class Engine:
    """Runs batches of :class:`Work` on one :class:`BertOnnx`; call it from one thread at a time."""

    def __init__(self, model: BertOnnx) -> None:
        self.model = model

    def run(self, works: Sequence[Work]) -> list[object]:
        """Run ``works`` as one padded batch.

        Returns:
            One answer per work, in order, as its task gives it (e.g. ``Embed``: ``[hidden]`` float32;
            ``Nsp``: scores; ``Graph``: a dict of outputs, hidden states ``[tokens, hidden]``).
        """
        batch = make_batch(works, np.arange(len(works)))
        return driver.run_mixed(self.model.run_batch, batch, [work.task for work in works])

    def warmup(self) -> None:
        """Run a few batches of every output so the session has allocated before the first request."""
        (encoding,) = self.model.encode("warm up")
        task = Graph(self.model.output_names)
        for count, length in WARMUP_SHAPES:
            ids = (encoding.ids[:-1] * length)[: length - 1] + encoding.ids[-1:]
            self.run([Work(ids, [0] * length, task) for _ in range(count)])
