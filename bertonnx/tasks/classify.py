"""``classify`` and ``rerank``: the checkpoint's sequence-classification head (``logits`` [b, num_labels]).

Scores follow ``transformers.pipeline("text-classification")``'s default: identity for regression,
sigmoid for multi-label and for one-logit heads, softmax otherwise. A reranker is a one-logit cross-encoder
run on ``(query, text)`` pairs, scored by sigmoid (TEI's ``/rerank``; ``raw_scores`` keeps the logit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from ..batching import Batch
from .nsp import softmax

__all__ = [
    "CLASSIFY_FUNCTIONS",
    "Classify",
    "LabelScore",
    "RankedIndex",
    "default_function",
    "rank_labels",
    "rank_texts",
    "sigmoid",
]

#: How logits become scores: ``softmax`` (single-label), ``sigmoid`` (multi-label, one logit), ``none``
#: (regression, or raw logits).
CLASSIFY_FUNCTIONS = ("softmax", "sigmoid", "none")
LOGITS = "logits"


class LabelScore(TypedDict):
    """One label of one input, as ``pipeline("text-classification")`` gives it."""

    label: str
    score: float


class RankedIndex(TypedDict):
    """One text of a rerank request, as TEI's ``/rerank`` gives it."""

    index: int
    score: float


def default_function(problem_type: str | None, num_labels: int) -> str:
    """The function ``pipeline("text-classification")`` applies by default for this head."""
    if problem_type == "regression":
        return "none"
    if problem_type == "multi_label_classification" or num_labels == 1:
        return "sigmoid"
    return "softmax"


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Logistic function, computed in float64, returned float32."""
    values = np.asarray(logits, dtype=np.float64)
    result: np.ndarray = (1.0 / (1.0 + np.exp(-values))).astype(np.float32)
    return result


@dataclass(frozen=True)
class Classify:
    """Scores of every label per input, ``[r, num_labels]`` float32.

    Attributes:
        function: one of ``CLASSIFY_FUNCTIONS``.

    Raises:
        ValueError: unknown ``function``.
    """

    function: str = "softmax"
    name = "classify"
    outputs = (LOGITS,)

    def __post_init__(self) -> None:
        if self.function not in CLASSIFY_FUNCTIONS:
            raise ValueError(f"unknown function {self.function!r}; expected one of {', '.join(CLASSIFY_FUNCTIONS)}")

    def postprocess(
        self, outputs: Mapping[str, np.ndarray], batch: Batch, rows: np.ndarray | None = None
    ) -> np.ndarray:
        """``[r, num_labels]`` float32 scores of ``rows`` (every row when ``None``)."""
        logits = outputs[LOGITS]
        if rows is not None:
            logits = logits[rows]
        if self.function == "softmax":
            return softmax(logits)
        if self.function == "sigmoid":
            return sigmoid(logits)
        return logits


def rank_labels(scores: np.ndarray, labels: Sequence[str], top_k: int | None) -> list[LabelScore]:
    """One input's labels sorted by score (highest first; ties keep label order), the first ``top_k``
    (all when ``None``)."""
    order = np.argsort(-scores.astype(np.float64), kind="stable")
    if top_k is not None:
        order = order[:top_k]
    return [{"label": labels[i], "score": float(scores[i])} for i in order]


def rank_texts(scores: np.ndarray) -> list[RankedIndex]:
    """``[n]`` scores as ``[{"index", "score"}]`` sorted by score, highest first (ties keep input order)."""
    order = np.argsort(-scores.astype(np.float64), kind="stable")
    return [{"index": int(i), "score": float(scores[i])} for i in order]
