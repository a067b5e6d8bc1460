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
from ..sentence import ACTIVATIONS, activate, classifier_activation
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


def _cross_encoder(model: ModelFacts, truncation: bool | None) -> tuple[str | None, bool, int | None]:
    """A sentence-transformers cross-encoder export's activation and its cut (``CrossEncoder.predict`` always
    truncates to its ``max_seq_length``); ``(None, truncation or False, None)`` for any other export."""
    activation = classifier_activation(model.manifest.data)
    pipeline = getattr(model, "sentence", None)
    if activation is None or pipeline is None:
        return None, bool(truncation), None
    cut = check_bool(truncation, "truncation") if truncation is not None else True
    return activation, cut, pipeline.max_seq_length if cut else None


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
        if self.function not in CLASSIFY_FUNCTIONS and self.function not in ACTIVATIONS:
            known = ", ".join(dict.fromkeys([*CLASSIFY_FUNCTIONS, *ACTIVATIONS]))
            raise ValueError(f"unknown function {self.function!r}; expected one of {known}")

    @classmethod
    def build(
        cls,
        model: ModelFacts,
        *,
        function: str | None = None,
        raw_scores: bool = False,
        rank: bool = True,
        top_k: int | None = 1,
        truncation: bool | None = None,
    ) -> Classify:
        """The task for ``model``'s classifier: scores as ``pipeline("text-classification")`` gives them by
        default (:func:`default_function`), or the logits with ``raw_scores``. An export of a
        sentence-transformers ``CrossEncoder`` scores with its own activation and cuts inputs to its
        ``max_seq_length`` by default, as ``CrossEncoder.predict``.

        Raises:
            ValueError: unknown ``function``; ``top_k`` below 1. TypeError: an option has the wrong type.
        """
        if top_k is not None:
            check_positive_int(top_k, "top_k")
        labels = tuple(model.labels)
        activation, cut, limit = _cross_encoder(model, truncation)
        default = activation or default_function(model.manifest.problem_type, len(labels))
        chosen = function or ("none" if raw_scores else default)
        return cls(chosen, encoder_for(model, cut, limit), labels, rank, top_k)

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
        if self.function in ("none", "identity"):
            return logits
        return activate(self.function, logits)

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
    activation: str = "sigmoid"
    name = "rerank"
    outputs = (LOGITS,)

    @classmethod
    def build(cls, model: ModelFacts, *, raw_scores: bool = False, truncation: bool | None = None) -> Rerank:
        """The task for ``model``'s one-logit head; an export of a sentence-transformers ``CrossEncoder`` scores
        with its own activation and cuts pairs to its ``max_seq_length`` by default, as ``CrossEncoder.rank``.

        Raises:
            TypeError: an option has the wrong type.
        """
        activation, cut, limit = _cross_encoder(model, truncation)
        return cls(check_bool(raw_scores, "raw_scores"), encoder_for(model, cut, limit), activation or "sigmoid")

    def postprocess(
        self, outputs: Mapping[str, np.ndarray], batch: Batch, rows: np.ndarray | None = None
    ) -> np.ndarray:
        """``[r]`` float32: each pair's score."""
        logits = outputs[LOGITS]
        if rows is not None:
            logits = logits[rows]
        if self.raw_scores or self.activation == "identity":
            scores = logits
        else:
            scores = sigmoid(logits) if self.activation == "sigmoid" else activate(self.activation, logits)
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
