"""``choose``: multiple choice: which of several choices best completes a context (``...ForMultipleChoice``).

Each ``(context, choice)`` pair is one unit (context as segment 0, choice as segment 1), run through the
graph's ``choice_logits`` (one logit per pair: the classifier on the pooled first token, as transformers'
``BertForMultipleChoice``); a question's choices are its units, batched by the token budget like any other
pairs, and its answer is the softmax over its choices' logits, as ``torch.softmax(model(...).logits, -1)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np

from ..batching import Batch, TokenSequence
from .base import Encoder, ModelFacts, PerInput, Prepared, encoder_for
from .nsp import softmax

__all__ = ["CHOICE_LOGITS", "Choice", "Choose"]

#: The graph output of a multiple-choice export: ``[b]`` float32, one logit per (context, choice) pair.
CHOICE_LOGITS = "choice_logits"


class Choice(TypedDict):
    """One question's answer: the best choice, and every choice's probability in the choices' order."""

    index: int
    choice: str
    score: float
    scores: list[float]


@dataclass(frozen=True)
class Choose(PerInput):
    """Multiple choice's steps.

    Attributes:
        encoder: how ``(context, choice)`` pairs are tokenized (``None``: the task only runs units).
    """

    encoder: Encoder | None = None
    name = "choose"
    outputs = (CHOICE_LOGITS,)

    @classmethod
    def build(cls, model: ModelFacts, *, truncation: bool = False) -> Choose:
        """The task on ``model``'s multiple-choice head.

        Raises:
            TypeError: ``truncation`` is not a bool.
        """
        return cls(encoder_for(model, truncation))

    def prepare(
        self, first: Sequence[str], second: Sequence[Any] | None = None, first_index: int = 0, *, strict: bool = True
    ) -> Prepared:
        """Each context paired with each of its choices (``second``: per context, a list of at least 2 choices).

        Raises:
            TypeError: the choices of a context are not a list of strings.
            ValueError: fewer than 2 choices; a pair too long without truncation (errors name the context).
        """
        if second is None:
            raise ValueError("choose needs the choices of every context")
        contexts, choices = list(first), [_choices(c, first_index + i) for i, c in enumerate(second)]
        units: list[TokenSequence] = []
        for offset, (context, options) in enumerate(zip(contexts, choices, strict=True)):
            prepared = super().prepare([context] * len(options), options, first_index + offset, strict=True)
            units += prepared.units
        kept = list(range(first_index, first_index + len(contexts)))
        return Prepared(units, [len(options) for options in choices], choices, kept)

    def postprocess(
        self, outputs: Mapping[str, np.ndarray], batch: Batch, rows: np.ndarray | None = None
    ) -> np.ndarray:
        """``[r]`` float32: each pair's logit."""
        logits = outputs[CHOICE_LOGITS]
        return logits if rows is None else logits[rows]

    def finish(self, prepared: Prepared, answers: Sequence[Any]) -> list[Any]:
        """Per context: the choice with the highest probability (the first on a tie) and every probability."""
        found: list[Choice] = []
        for options, logits in zip(prepared.state, prepared.grouped(answers), strict=True):
            probabilities = softmax(np.asarray(logits, dtype=np.float32))
            best = int(np.argmax(probabilities))
            found.append(
                {
                    "index": best,
                    "choice": options[best],
                    "score": float(probabilities[best]),
                    "scores": [float(p) for p in probabilities],
                }
            )
        return found


def _choices(value: object, index: int) -> list[str]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError(f"the choices of context {index} must be a list of strings, got {type(value).__name__}")
    items = list(value)
    if len(items) < 2:
        raise ValueError(f"context {index} has {len(items)} choice(s); give at least 2 to choose from")
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"the choices of context {index} must be strings, got {type(item).__name__}")
    return items
