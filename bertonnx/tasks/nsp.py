"""``nsp``: next-sentence prediction: the probability that sentence B follows sentence A."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..batching import Batch
from ..manifest import NSP_IS_NEXT_INDEX
from .base import Encoder, ModelFacts, PerInput, encoder_for

__all__ = ["NSP_LABELS", "NSP_SCORES", "Nsp", "is_next_probability", "nsp_labels", "softmax"]

#: ``is_next``: ``[r]`` probability that B follows A; ``probabilities``: ``[r, 2]`` softmax;
#: ``logits``: ``[r, 2]`` raw logits (index 0 = "B follows A").
NSP_SCORES = ("is_next", "probabilities", "logits")
#: The NSP head's labels by logit index.
NSP_LABELS = {NSP_IS_NEXT_INDEX: "is_next", 1 - NSP_IS_NEXT_INDEX: "not_next"}


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
class Nsp(PerInput):
    """NSP scores per pair.

    Attributes:
        scores: one of ``NSP_SCORES``.
        encoder: how pairs are tokenized (``None``: the task only runs units).

    Raises:
        ValueError: unknown ``scores``.
    """

    scores: str = "is_next"
    encoder: Encoder | None = None
    name = "nsp"
    outputs = ("nsp_logits",)

    def __post_init__(self) -> None:
        if self.scores not in NSP_SCORES:
            raise ValueError(f"unknown NSP scores {self.scores!r}; expected one of {', '.join(NSP_SCORES)}")

    @classmethod
    def build(cls, model: ModelFacts, *, scores: str = "is_next", truncation: bool = False) -> Nsp:
        """The task for ``model`` (pairs up to the model's positions).

        Raises:
            ValueError: unknown ``scores``. TypeError: ``truncation`` is not a bool.
        """
        return cls(scores, encoder_for(model, truncation))

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


def nsp_labels(scores: np.ndarray) -> list[dict[str, float | str]]:
    """Both labels of one pair (``is_next``, ``not_next``) with their scores (``[2]``, probabilities or logits),
    highest first, as TEI's ``/predict`` gives a classifier's labels."""
    ranked = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    return [{"label": NSP_LABELS[i], "score": float(scores[i])} for i in ranked]
