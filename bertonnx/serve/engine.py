"""One engine run for inputs of any mix of requests: pad, run the graph once, give each input its answer.

The scheduler hands over inputs of different requests and kinds (an ``/embed`` with mean pooling, a
``/predict`` pair, a KServe row ...). The batch asks the session for the union of the outputs they need
and nothing more, then each input takes its part with the same functions the offline runtime uses
(:func:`bertonnx.outputs.pool`, the same normalisation), so its answer is what ``BertOnnx`` gives it
offline whatever it was batched with (fp32: within 1e-5; padding changes no result).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..batching import make_batch
from ..manifest import OUTPUT_NAMES
from ..model import BertOnnx
from ..outputs import pool, pooling_outputs

__all__ = ["EMBED", "GRAPH", "NSP", "TASK_KINDS", "Engine", "Task", "Work", "normalize_rows"]

#: A pooled vector per input (``/embed``, ``/v1/embeddings``).
EMBED = "embed"
#: NSP logits per pair (``/predict``).
NSP = "nsp"
#: Chosen graph outputs per input, hidden states cut to the input's tokens (``/encode``, KServe).
GRAPH = "graph"
TASK_KINDS = (EMBED, NSP, GRAPH)
#: Warm-up inputs: one short input alone, then a batch of longer ones, so the first requests do not pay
#: for the session's first allocations.
WARMUP_SHAPES = ((1, 8), (8, 64))


@dataclass(frozen=True)
class Task:
    """What a request wants from each of its inputs.

    Attributes:
        kind: ``embed``, ``nsp`` or ``graph``.
        pooling: for ``embed``: one of ``bertonnx.outputs.POOLING_MODES``.
        normalize: for ``embed``: unit L2 norm.
        outputs: for ``graph``: graph outputs to return.
    """

    kind: str
    pooling: str = "pooler"
    normalize: bool = False
    outputs: tuple[str, ...] = OUTPUT_NAMES

    def __post_init__(self) -> None:
        if self.kind not in TASK_KINDS:
            raise ValueError(f"kind must be one of {', '.join(TASK_KINDS)}, got {self.kind!r}")
        pooling_outputs(self.pooling)  # raises on an unknown pooling
        unknown = [name for name in self.outputs if name not in OUTPUT_NAMES]
        if unknown or not self.outputs:
            raise ValueError(f"outputs must be a non-empty subset of {', '.join(OUTPUT_NAMES)}, got {self.outputs}")

    def graph_outputs(self) -> tuple[str, ...]:
        """The session outputs this task reads."""
        if self.kind == EMBED:
            return pooling_outputs(self.pooling)
        if self.kind == NSP:
            return ("nsp_logits",)
        return self.outputs


@dataclass(frozen=True)
class Work:
    """One input ready for the engine: its token ids, segment ids and what its request wants."""

    ids: list[int]
    type_ids: list[int]
    task: Task

    def __len__(self) -> int:
        return len(self.ids)


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm, computed as ``BertOnnx.embed(normalize=True)`` computes them."""
    scaled: np.ndarray = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), np.finfo(np.float32).tiny)
    return scaled


class Engine:
    """Runs batches of :class:`Work` on one :class:`BertOnnx`; call it from one thread at a time."""

    def __init__(self, model: BertOnnx) -> None:
        self.model = model

    def run(self, works: Sequence[Work]) -> list[object]:
        """Run ``works`` as one padded batch.

        Returns:
            One answer per work, in order: ``embed``: ``[hidden]`` float32; ``nsp``: ``[2]`` float32 logits;
            ``graph``: a dict of the task's outputs (``last_hidden_state`` ``[tokens, hidden]``,
            ``pooler_output`` ``[hidden]``, ``nsp_logits`` ``[2]``, float32).
        """
        batch = make_batch(works, np.arange(len(works)))
        wanted = {name for work in works for name in work.task.graph_outputs()}
        outputs = self.model.run_batch(batch, [name for name in OUTPUT_NAMES if name in wanted])
        answers: list[object] = [None] * len(works)
        embeds: dict[tuple[str, bool], list[int]] = {}
        for row, work in enumerate(works):
            task = work.task
            if task.kind == EMBED:
                embeds.setdefault((task.pooling, task.normalize), []).append(row)
            elif task.kind == NSP:
                answers[row] = outputs["nsp_logits"][row].copy()
            else:
                answers[row] = {
                    name: outputs[name][row, : len(work)].copy()
                    if name == "last_hidden_state"
                    else outputs[name][row].copy()
                    for name in task.outputs
                }
        pooled: dict[str, np.ndarray] = {}
        for (pooling, normalize), rows in embeds.items():
            if pooling not in pooled:
                pooled[pooling] = pool(outputs, batch.attention_mask, pooling)
            vectors = pooled[pooling][rows]
            if normalize:
                vectors = normalize_rows(vectors)
            for row, vector in zip(rows, vectors, strict=True):
                answers[row] = vector
        return answers

    def warmup(self) -> None:
        """Run a few batches of every output so the session has allocated before the first request."""
        (encoding,) = self.model.encode("warm up")
        task = Task(GRAPH)
        for count, length in WARMUP_SHAPES:
            ids = (encoding.ids[:-1] * length)[: length - 1] + encoding.ids[-1:]
            self.run([Work(ids, [0] * length, task) for _ in range(count)])
