"""``graph``: the graph's own outputs, unchanged (``/encode``, KServe, ``BertOnnx.__call__``).

Per input, each asked-for output is its row; per-token outputs (``last_hidden_state``, ``token_logits``,
``start_logits``, ``end_logits``) are cut to the input's tokens (no padding). :func:`assemble` builds the
offline :class:`~bertonnx.outputs.BertOutput` from whole batches
instead, without a per-row copy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..batching import Batch
from ..manifest import GRAPH_OUTPUT_NAMES, OUTPUT_NAMES, PER_TOKEN_OUTPUTS
from .base import Encoder, ModelFacts, PerInput, encoder_for

__all__ = ["HIDDEN_STATES", "Graph", "assemble"]

HIDDEN_STATES = "last_hidden_state"


@dataclass(frozen=True)
class Graph(PerInput):
    """Chosen graph outputs per input (the ``encode`` task).

    Attributes:
        outputs: graph outputs to return, a non-empty subset of the export's outputs.
        whole_batch: answer a batch with its raw outputs as they are (one mapping for the whole batch, no
            copy), for :func:`assemble`; else one dict per row.
        encoder: how inputs are tokenized (``None``: the task only runs units, e.g. KServe's token ids).

    Raises:
        ValueError: ``outputs`` is empty or names an unknown output.
    """

    outputs: tuple[str, ...] = OUTPUT_NAMES
    whole_batch: bool = False
    encoder: Encoder | None = None
    name = "graph"

    @classmethod
    def build(
        cls,
        model: ModelFacts,
        *,
        outputs: tuple[str, ...] | None = None,
        truncation: bool = False,
        max_length: int | None = None,
    ) -> Graph:
        """The task for ``model``: every graph output by default; inputs up to ``max_length`` tokens (default:
        the model's positions).

        Raises:
            ValueError: an unknown output or ``max_length`` out of range. TypeError: ``truncation`` is not a bool.
        """
        return cls(tuple(outputs or model.output_names), encoder=encoder_for(model, truncation, max_length))

    def __post_init__(self) -> None:
        unknown = [name for name in self.outputs if name not in GRAPH_OUTPUT_NAMES]
        if unknown or not self.outputs:
            raise ValueError(
                f"outputs must be a non-empty subset of {', '.join(GRAPH_OUTPUT_NAMES)}, got {self.outputs}"
            )

    def postprocess(
        self, outputs: Mapping[str, np.ndarray], batch: Batch, rows: np.ndarray | None = None
    ) -> list[dict[str, np.ndarray]] | Mapping[str, np.ndarray]:
        """One dict per row of ``rows`` (every row when ``None``): each output's row, copied, hidden states
        per-token outputs cut to the row's tokens (float32); with ``whole_batch``, ``outputs`` itself."""
        if self.whole_batch:
            return outputs
        picked = range(len(batch)) if rows is None else rows
        return [
            {
                name: outputs[name][row, : batch.lengths[row]].copy()
                if name in PER_TOKEN_OUTPUTS
                else outputs[name][row].copy()
                for name in self.outputs
            }
            for row in picked
        ]


def assemble(
    parts: Sequence[tuple[Batch, Mapping[str, np.ndarray]]], names: Sequence[str], widths: Mapping[str, int]
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Whole batches' outputs back in the caller's order.

    Args:
        parts: each batch with its raw outputs (rows in the batch's order).
        names: the outputs to assemble.
        widths: each output's last dimension (used when there are no inputs).

    Returns:
        ``(outputs, lengths)``: per-row outputs ``[n, ...]``, with ``last_hidden_state`` ``[n, longest, hidden]``
        zero past each input's tokens; ``lengths`` ``[n]`` int64.
    """
    order = np.concatenate([batch.indices for batch, _ in parts]) if parts else np.zeros(0, dtype=np.int64)
    n = order.shape[0]
    lengths = np.zeros(n, dtype=np.int64)
    if n:
        lengths[order] = np.concatenate([batch.lengths for batch, _ in parts])
    assembled: dict[str, np.ndarray] = {}
    for name in names:
        if name == HIDDEN_STATES:
            longest = int(lengths.max()) if n else 0
            hidden = np.zeros((n, longest, widths[name]), dtype=np.float32)
            for batch, outputs in parts:
                states = outputs[name]
                for row, (index, length) in enumerate(zip(batch.indices, batch.lengths, strict=True)):
                    hidden[index, :length] = states[row, :length]
            assembled[name] = hidden
        else:
            array = np.zeros((n, widths[name]), dtype=np.float32)
            if n:
                array[order] = np.concatenate([outputs[name] for _, outputs in parts])
            assembled[name] = array
    return assembled, lengths
