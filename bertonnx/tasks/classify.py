"""``classify`` and ``rerank``: the checkpoint's sequence-classification head (``logits`` [b, num_labels]).

Scores follow ``transformers.pipeline("text-classification")``'s default: identity for regression,
sigmoid for multi-label and for one-logit heads, softmax otherwise. A reranker is a one-logit cross-encoder
run on ``(query, text)`` pairs, scored by sigmoid (TEI's ``/rerank``; ``raw_scores`` keeps the logit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np

from ..batching import Batch
from .base import Encoder, ModelFacts, PerInput, Prepared, check_bool, check_positive_int, encoder_for
from .nsp import softmax

__all__ = [
    "CLASSIFY_FUNCTIONS",
    "Classify",
    "LabelScore",
    "RankedIndex",
    "Rerank",
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
class Classify(PerInput):
    """Scores of every label per input, ``[num_labels]`` float32; with ``rank``, the labels sorted by score.

    Attributes:
        function: one of ``CLASSIFY_FUNCTIONS``.
        encoder: how inputs are tokenized (``None``: the task only runs units).
        labels: label names in logit order (for ``rank``).
        rank: ``finish`` gives ``[{"label", "score"}]`` per input, highest first, instead of the score rows.
        top_k: with ``rank``, labels per input (``None``: every label).

    Raises:
        ValueError: unknown ``function``.
    """

    function: str = "softmax"
    encoder: Encoder | None = None
    labels: tuple[str, ...] = ()
    rank: bool = False
    top_k: int | None = None
    name = "classify"
    outputs = (LOGITS,)

    def __post_init__(self) -> None:
        if self.function not in CLASSIFY_FUNCTIONS:
            raise ValueError(f"unknown function {self.function!r}; expected one of {', '.join(CLASSIFY_FUNCTIONS)}")

    @classmethod
    def build(
        cls,
        model: ModelFacts,
        *,
        function: str | None = None,
        raw_scores: bool = False,
        rank: bool = True,
        top_k: int | None = 1,
        truncation: bool = False,
    ) -> Classify:
        """The task for ``model``'s classifier: scores as ``pipeline("text-classification")`` gives them by
        default (:func:`default_function`), or the logits with ``raw_scores``.

        Raises:
            ValueError: unknown ``function``; ``top_k`` below 1. TypeError: an option has the wrong type.
        """
        if top_k is not None:
            check_positive_int(top_k, "top_k")
        labels = tuple(model.labels)
        chosen = function or ("none" if raw_scores else default_function(model.manifest.problem_type, len(labels)))
        return cls(chosen, encoder_for(model, truncation), labels, rank, top_k)

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

    def finish(self, prepared: Prepared, answers: Sequence[Any]) -> list[Any]:
        """Per input: its score row, or with ``rank`` its labels sorted by score."""
        if not self.rank:
            return list(answers)
        return [rank_labels(scores, self.labels, self.top_k) for scores in answers]


@dataclass(frozen=True)
class Rerank(PerInput):
    """A one-logit cross-encoder's score per ``(query, text)`` pair; :meth:`rank` sorts a query's texts.

    Attributes:
        raw_scores: the logit instead of its sigmoid.
        encoder: how pairs are tokenized (``None``: the task only runs units).
    """

    raw_scores: bool = False
    encoder: Encoder | None = None
    name = "rerank"
    outputs = (LOGITS,)

    @classmethod
    def build(cls, model: ModelFacts, *, raw_scores: bool = False, truncation: bool = False) -> Rerank:
        """The task for ``model``'s one-logit head.

        Raises:
            TypeError: an option has the wrong type.
        """
        return cls(check_bool(raw_scores, "raw_scores"), encoder_for(model, truncation))

    def postprocess(
        self, outputs: Mapping[str, np.ndarray], batch: Batch, rows: np.ndarray | None = None
    ) -> np.ndarray:
        """``[r]`` float32: each pair's score."""
        logits = outputs[LOGITS]
        if rows is not None:
            logits = logits[rows]
        scores = logits if self.raw_scores else sigmoid(logits)
        return scores[:, 0]

    def rank(self, scores: Sequence[Any]) -> list[RankedIndex]:
        """A query's texts by score (every text's score, in the texts' order), highest first."""
        return rank_texts(np.asarray(scores, dtype=np.float32).reshape(-1))


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
