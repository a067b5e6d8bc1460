"""``fill_mask``: the masked-language-model head's top tokens for each ``[MASK]``.

The main graph gives ``last_hidden_state``; only the rows at ``[MASK]`` positions are gathered (one
``[m, hidden]`` array for the whole batch) and run through the small MLM-head graph (``hidden_states``
``[m, hidden]`` -> ``mlm_logits`` ``[m, vocab]``), so the vocabulary projection costs one row per mask,
not one per token. Answers follow ``transformers.pipeline("fill-mask")``: per mask, the ``top_k`` tokens
by softmax probability with ``score``, ``token`` (id), ``token_str`` and ``sequence`` (the input with that
mask filled, without ``[PAD]`` tokens, decoded without special tokens when the input has one mask, with them
when it has several). With ``targets`` the candidates are those tokens only, scored by their probability in
the softmax over the whole vocabulary, as the pipeline's ``targets`` (:func:`target_ids`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from ..batching import Batch, TokenSequence
from ..errors import HeadMissingError
from .base import Encoder, ModelFacts, PerInput, Prepared, check_positive_int, encoder_for
from .nsp import softmax

__all__ = ["DEFAULT_TOP_K", "FillMask", "MaskFill", "Targets", "check_masks", "target_ids"]

HIDDEN_STATES = "last_hidden_state"
#: Candidates per mask by default (the pipeline's ``top_k``).
DEFAULT_TOP_K = 5
#: ``targets``: a token, tokens, or ``None`` (every token of the vocabulary).
Targets = str | Sequence[str] | None
#: Dropped from each candidate's ``sequence``, as the pipeline drops ``pad_token_id``.
PAD_TOKEN = "[PAD]"
#: BERT's mask token, named in errors where the tokenizer names none.
MASK_TOKEN = "[MASK]"


class MaskFill(TypedDict):
    """One candidate for one ``[MASK]``, as ``pipeline("fill-mask")`` gives it."""

    score: float
    token: int
    token_str: str
    sequence: str


def check_masks(
    encodings: Sequence[TokenSequence], mask_token_id: int, first_index: int = 0, mask_token: str = MASK_TOKEN
) -> None:
    """Raise unless every input holds at least one mask token (``mask_token``: the export's own, ``[MASK]``,
    ``<mask>`` ...).

    Raises:
        ValueError: an input has no mask token (the message names its index and the token to write).
    """
    for offset, encoding in enumerate(encodings):
        if mask_token_id not in encoding.ids:
            raise ValueError(
                f"input {first_index + offset} has no {mask_token} token (or truncation cut it off); write "
                f"{mask_token} where a token should be predicted, e.g. 'the capital of france is {mask_token}.'"
            )


def target_ids(
    targets: str | Sequence[str], token_to_id: Callable[[str], int | None], first_token: Callable[[str], int | None]
) -> tuple[int, ...]:
    """The token ids of ``targets``, as ``FillMaskPipeline.get_target_ids`` finds them: a vocabulary entry's
    id; else (with a warning) the first token of the target tokenized alone; a target giving no token is
    ignored (with a warning). Repeated ids count once; the result is sorted.

    Args:
        targets: a token or a list of tokens.
        token_to_id: the vocabulary lookup.
        first_token: the first token id of a text tokenized without special tokens (``None``: no token).

    Raises:
        TypeError: ``targets`` is not a string or a list of strings.
        ValueError: no target is left (an empty list, or only targets giving no token).
    """
    items = [targets] if isinstance(targets, str) else targets
    if not isinstance(items, Sequence) or not all(isinstance(item, str) for item in items):
        raise TypeError(f"targets must be a string or a list of strings, got {type(targets).__name__}")
    found: set[int] = set()
    for target in items:
        id_ = token_to_id(target)
        if id_ is None:
            id_ = first_token(target)
            if id_ is None:
                warnings.warn(
                    f"target {target!r} is not in the vocabulary and gives no token; it is ignored", stacklevel=3
                )
                continue
            warnings.warn(
                f"target {target!r} is not in the vocabulary; its first token (id {id_}) stands in for it, "
                "as the pipeline does; pass vocabulary tokens to avoid this",
                stacklevel=3,
            )
        found.add(id_)
    if not found:
        raise ValueError(f"no target is left of {list(items)!r}; pass at least one token of the vocabulary")
    return tuple(sorted(found))


@dataclass(frozen=True)
class FillMask(PerInput):
    """Top tokens per ``[MASK]``.

    Attributes:
        head: runs the MLM head: ``[m, hidden]`` float32 hidden states -> ``[m, vocab]`` float32 logits.
        decode: ``(ids, skip_special_tokens) -> text``, as the tokenizer decodes.
        mask_token_id: the id of ``[MASK]``.
        top_k: candidates per mask.
        encoder: how texts are tokenized (``None``: the task only runs units).
        targets: the only candidate ids (``None``: the whole vocabulary).
        pad_token_id: dropped from ``sequence`` (``None``: none).
        mask_token: the mask token's text, named in errors.
    """

    head: Callable[[np.ndarray], np.ndarray]
    decode: Callable[[list[int], bool], str]
    mask_token_id: int
    top_k: int = 5
    encoder: Encoder | None = None
    targets: tuple[int, ...] | None = None
    pad_token_id: int | None = None
    mask_token: str = MASK_TOKEN
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
            check_masks(prepared.units, self.mask_token_id, first_index, self.mask_token)
            return prepared
        kept = [(i, u) for i, u in zip(prepared.kept, prepared.units, strict=True) if self.mask_token_id in u.ids]
        for index in sorted(set(prepared.kept) - {i for i, _ in kept}):
            prepared.rejected[index] = ValueError(
                f"input {index} has no {self.mask_token} token (or truncation cut it off)"
            )
        prepared.kept, prepared.units = [i for i, _ in kept], [u for _, u in kept]
        return prepared

    @classmethod
    def build(
        cls,
        model: ModelFacts,
        *,
        top_k: int = DEFAULT_TOP_K,
        truncation: bool = False,
        targets: Targets = None,
    ) -> FillMask:
        """The task on ``model``'s MLM head; ``targets`` limits the candidates to those tokens (:func:`target_ids`).

        Raises:
            TypeError, ValueError: ``top_k`` is not an int >= 1, ``truncation`` not a bool, or ``targets``
                not a list of strings holding at least one token.
        """
        check_positive_int(top_k, "top_k")
        if model.mask_token_id is None:
            raise HeadMissingError.for_task("fill_mask", model.manifest.architecture, model.manifest.tasks)
        tokenizer = model.tokenizer

        def first_token(text: str) -> int | None:
            ids = tokenizer.encode([text], None, truncation=False, max_length=None)[0].ids[1:-1]
            return ids[0] if ids else None

        ids = None if targets is None else target_ids(targets, tokenizer.token_to_id, first_token)
        return cls(
            model.run_mlm_head,
            tokenizer.decode,
            model.mask_token_id,
            top_k,
            encoder_for(model, truncation),
            ids,
            tokenizer.token_to_id(PAD_TOKEN),
            tokenizer.mask_token or MASK_TOKEN,
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
        if self.targets is not None:
            probabilities = probabilities[:, list(self.targets)]
        k = min(self.top_k, probabilities.shape[1])
        best = np.argpartition(-probabilities, k - 1, axis=1)[:, :k]
        for mask, (row, position) in enumerate(zip(where.tolist(), positions.tolist(), strict=True)):
            candidates = best[mask][np.argsort(-probabilities[mask, best[mask]], kind="stable")]
            tokens = ids[row, : batch.lengths[picked[row]]].tolist()
            single = int(np.count_nonzero(ids[row] == self.mask_token_id)) == 1
            fills: list[MaskFill] = []
            for column in candidates.tolist():
                token = column if self.targets is None else self.targets[column]
                tokens[position] = token
                kept = tokens if self.pad_token_id is None else [t for t in tokens if t != self.pad_token_id]
                fills.append(
                    {
                        "score": float(probabilities[mask, column]),
                        "token": token,
                        "token_str": self.decode([token], False),
                        "sequence": self.decode(kept, single),
                    }
                )
            answers[row].append(fills)
        return answers
