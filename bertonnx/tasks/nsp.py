"""``nsp``: next-sentence prediction: the probability that sentence B follows sentence A."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..batching import Batch
from ..manifest import NSP_IS_NEXT_INDEX

__all__ = ["NSP_SCORES", "Nsp", "is_next_probability", "softmax"]

#: ``is_next``: ``[r]`` probability that B follows A; ``probabilities``: ``[r, 2]`` softmax;
#: ``logits``: ``[r, 2]`` raw logits (index 0 = "B follows A").
NSP_SCORES = ("is_next", "probabilities", "logits")


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, computed in float64 (shifted by the row maximum), returned float32."""
    values = np.asarray(logits, dtype=np.float64)
    shifted = np.exp(values - values.max(axis=-1, keepdims=True))
    probabilities: np.ndarray = (shifted / shifted.sum(axis=-1, keepdims=True)).astype(np.float32)
    return probabilities


def is_next_probability(nsp_logits: np.ndarray) -> np.ndarray:
    """Softmax probability that sentence B follows sentence A, from NSP logits ``[..., 2]``; float32."""
    return softmax(nsp_logits)[..., NSP_IS_NEXT_INDEX]


@dataclass(frozen=True)
class Nsp:
    """NSP scores per pair.

    Attributes:
        scores: one of ``NSP_SCORES``.

    Raises:
        ValueError: unknown ``scores``.
    """

    scores: str = "is_next"
    name = "nsp"
    outputs = ("nsp_logits",)

    def __post_init__(self) -> None:
        if self.scores not in NSP_SCORES:
            raise ValueError(f"unknown NSP scores {self.scores!r}; expected one of {', '.join(NSP_SCORES)}")

    def postprocess(
        self, outputs: Mapping[str, np.ndarray], batch: Batch, rows: np.ndarray | None = None
    ) -> np.ndarray:
        """``[r]`` or ``[r, 2]`` float32 scores of ``rows`` (every row when ``None``), as ``scores`` says."""
        logits = outputs["nsp_logits"]
        if rows is not None:
            logits = logits[rows]
        if self.scores == "logits":
            return logits
        probabilities = softmax(logits)
        return probabilities[:, NSP_IS_NEXT_INDEX] if self.scores == "is_next" else probabilities
