"""``fill_mask``: the masked-language-model head's top tokens for each ``[MASK]``.

The main graph gives ``last_hidden_state``; only the rows at ``[MASK]`` positions are gathered (one
``[m, hidden]`` array for the whole batch) and run through the small MLM-head graph (``hidden_states``
``[m, hidden]`` -> ``mlm_logits`` ``[m, vocab]``), so the vocabulary projection costs one row per mask,
not one per token. Answers follow ``transformers.pipeline("fill-mask")``: per mask, the ``top_k`` tokens
by softmax probability with ``score``, ``token`` (id), ``token_str`` and ``sequence`` (the input with that
mask filled, decoded without special tokens when the input has one mask, with them when it has several).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from ..batching import Batch, TokenSequence
from ..errors import HeadMissingError
from .base import Encoder, ModelFacts, PerInput, Prepared, check_positive_int, encoder_for
from .nsp import softmax

__all__ = ["DEFAULT_TOP_K", "FillMask", "MaskFill", "check_masks"]

HIDDEN_STATES = "last_hidden_state"
#: Candidates per mask by default (the pipeline's ``top_k``).
DEFAULT_TOP_K = 5


class MaskFill(TypedDict):
    """One candidate for one ``[MASK]``, as ``pipeline("fill-mask")`` gives it."""

    score: float
    token: int
    token_str: str
    sequence: str


def check_masks(encodings: Sequence[TokenSequence], mask_token_id: int, first_index: int = 0) -> None:
    """Raise unless every input holds at least one ``[MASK]``.

    Raises:
        ValueError: an input has no ``[MASK]`` (the message names its index).
    """
    for offset, encoding in enumerate(encodings):
        if mask_token_id not in encoding.ids:
            raise ValueError(
                f"input {first_index + offset} has no [MASK] token (or truncation cut it off); write [MASK] "
                "where a token should be predicted, e.g. 'the capital of france is [MASK].'"
            )


@dataclass(frozen=True)
class FillMask(PerInput):
    """Top tokens per ``[MASK]``.

    Attributes:
        head: runs the MLM head: ``[m, hidden]`` float32 hidden states -> ``[m, vocab]`` float32 logits.
        decode: ``(ids, skip_special_tokens) -> text``, as the tokenizer decodes.
        mask_token_id: the id of ``[MASK]``.
        top_k: candidates per mask.
        encoder: how texts are tokenized (``None``: the task only runs units).
    """

    head: Callable[[np.ndarray], np.ndarray]
    decode: Callable[[list[int], bool], str]
    mask_token_id: int
    top_k: int = 5
    encoder: Encoder | None = None
    name = "fill_mask"
    outputs = (HIDDEN_STATES,)

    def prepare(
        self, first: Sequence[str], second: Sequence[str] | None = None, first_index: int = 0, *, strict: bool = True
    ) -> Prepared:
        """Tokenize the texts; each must hold a ``[MASK]`` (one without is refused, or rejected with ``strict=False``).

        Raises:
            ValueError: a text has no ``[MASK]`` (or truncation cut it off); as :meth:`Encoder.prepare`.
        """
        prepared = super().prepare(first, second, first_index, strict=strict)
        if strict:
            check_masks(prepared.units, self.mask_token_id, first_index)
            return prepared
        kept = [(i, u) for i, u in zip(prepared.kept, prepared.units, strict=True) if self.mask_token_id in u.ids]
        for index in sorted(set(prepared.kept) - {i for i, _ in kept}):
            prepared.rejected[index] = ValueError(f"input {index} has no [MASK] token (or truncation cut it off)")
        prepared.kept, prepared.units = [i for i, _ in kept], [u for _, u in kept]
        return prepared

    @classmethod
    def build(cls, model: ModelFacts, *, top_k: int = DEFAULT_TOP_K, truncation: bool = False) -> FillMask:
        """The task on ``model``'s MLM head.

        Raises:
            TypeError, ValueError: ``top_k`` is not an int >= 1, or ``truncation`` not a bool.
        """
        check_positive_int(top_k, "top_k")
        if model.mask_token_id is None:
            raise HeadMissingError.for_task("fill_mask", model.manifest.architecture, model.manifest.tasks)
        return cls(
            model.run_mlm_head, model.tokenizer.decode, model.mask_token_id, top_k, encoder_for(model, truncation)
        )

    def postprocess(
        self, outputs: Mapping[str, np.ndarray], batch: Batch, rows: np.ndarray | None = None
    ) -> list[list[list[MaskFill]]]:
        """Per row of ``rows`` (every row when ``None``): per mask, in position order, ``top_k`` candidates."""
        picked = np.arange(len(batch)) if rows is None else np.asarray(rows)
        ids = batch.input_ids[picked]
        where, positions = np.nonzero(ids == self.mask_token_id)
        answers: list[list[list[MaskFill]]] = [[] for _ in picked]
        if not len(where):
            return answers
        states = np.ascontiguousarray(outputs[HIDDEN_STATES][picked[where], positions], dtype=np.float32)
        probabilities = softmax(self.head(states))
        k = min(self.top_k, probabilities.shape[1])
        best = np.argpartition(-probabilities, k - 1, axis=1)[:, :k]
        for mask, (row, position) in enumerate(zip(where.tolist(), positions.tolist(), strict=True)):
            candidates = best[mask][np.argsort(-probabilities[mask, best[mask]], kind="stable")]
            tokens = ids[row, : batch.lengths[picked[row]]].tolist()
            single = int(np.count_nonzero(ids[row] == self.mask_token_id)) == 1
            fills: list[MaskFill] = []
            for token in candidates.tolist():
                tokens[position] = token
                fills.append(
                    {
                        "score": float(probabilities[mask, token]),
                        "token": token,
                        "token_str": self.decode([token], False),
                        "sequence": self.decode(tokens, single),
                    }
                )
            answers[row].append(fills)
        return answers
