"""``detect_replaced``: replaced token detection, the task ELECTRA's discriminator was trained on.

An ``ElectraForPreTraining`` checkpoint gives one logit per token (the graph's ``rtd_logits``): how likely that
token was put there by a generator rather than written by the text's author. Its users read it as
``torch.sigmoid(model(**inputs).logits)``; this task gives the same float32 probabilities per token, special
tokens dropped, each token with its character offsets into the caller's string (from the fast tokenizer, never
found by searching the text), so ``text[start:end]`` is the token as written.

Each text is one unit; a text over the model's positions is refused (:class:`~bertonnx.errors.InputTooLongError`)
unless ``truncation`` cuts it, as every other per-input task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, cast

import numpy as np

from ..batching import Batch
from .base import Encoder, ModelFacts, PerInput, Prepared, encoder_for

if TYPE_CHECKING:
    from tokenizers import Encoding

__all__ = ["RTD_LOGITS", "DetectReplaced", "ReplacedToken", "replaced_probabilities"]

#: The graph output of a discriminator export: ``[b, t]`` float32, one logit per token ("replaced").
RTD_LOGITS = "rtd_logits"


class ReplacedToken(TypedDict):
    """One token of a text: its position among the input's tokens (``[CLS]`` = 0), its vocabulary string, its
    character offsets into the text and the probability that it was replaced."""

    index: int
    token: str
    start: int
    end: int
    score: float


def replaced_probabilities(logits: np.ndarray) -> np.ndarray:
    """The sigmoid of ``logits`` in float32 (``torch.sigmoid``), stable for logits of either sign."""
    values = np.asarray(logits, dtype=np.float32)
    positive = np.exp(-np.abs(values))  # in (0, 1]: never overflows
    probabilities: np.ndarray = np.where(values >= 0, 1 / (1 + positive), positive / (1 + positive))
    return probabilities.astype(np.float32, copy=False)


@dataclass(frozen=True)
class DetectReplaced(PerInput):
    """Replaced token detection's steps: per text one unit; per unit its tokens' probabilities.

    Attributes:
        encoder: how texts are tokenized (``None``: the task only runs units).
    """

    encoder: Encoder | None = None
    name = "detect_replaced"
    outputs = (RTD_LOGITS,)

    @classmethod
    def build(cls, model: ModelFacts, *, truncation: bool = False) -> DetectReplaced:
        """The task on ``model``'s replaced-token-detection head.

        Raises:
            TypeError: ``truncation`` is not a bool.
        """
        return cls(encoder_for(model, truncation))

    def postprocess(
        self, outputs: Mapping[str, np.ndarray], batch: Batch, rows: np.ndarray | None = None
    ) -> list[np.ndarray]:
        """Per row of ``rows`` (every row when ``None``), ``P(replaced)`` of each of its tokens (no padding)."""
        logits = outputs[RTD_LOGITS]
        picked = range(len(batch)) if rows is None else rows.tolist()
        return [replaced_probabilities(logits[row, : batch.lengths[row]]) for row in picked]

    def finish(self, prepared: Prepared, answers: Sequence[Any]) -> list[list[ReplacedToken]]:
        """Per text, its tokens but the special ones, each with its offsets and ``P(replaced)``."""
        found = []
        for unit, probabilities in zip(prepared.units, answers, strict=True):
            encoding = cast("Encoding", unit)
            special = encoding.special_tokens_mask
            found.append(
                [
                    ReplacedToken(index=i, token=token, start=start, end=end, score=float(probabilities[i]))
                    for i, (token, (start, end)) in enumerate(zip(encoding.tokens, encoding.offsets, strict=True))
                    if not special[i]
                ]
            )
        return found
