"""Result types returned by :class:`bertonnx.BertOnnx`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .manifest import NSP_IS_NEXT_INDEX

__all__ = ["POOLING_MODES", "BertOutput", "Tokenized", "is_next_probability", "pool", "pooling_outputs"]

#: ``pooler``: the trained pooler (tanh dense on [CLS]); ``cls``: the raw [CLS] state; ``mean``: mean of
#: all attended tokens including [CLS] and [SEP] (the sentence-transformers convention).
POOLING_MODES = ("pooler", "cls", "mean")


def is_next_probability(nsp_logits: np.ndarray) -> np.ndarray:
    """Softmax probability that sentence B follows sentence A, from NSP logits ``[..., 2]``."""
    logits = np.asarray(nsp_logits, dtype=np.float64)
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probability: np.ndarray = (shifted[..., NSP_IS_NEXT_INDEX] / shifted.sum(axis=-1)).astype(np.float32)
    return probability


def pooling_outputs(pooling: str) -> tuple[str, ...]:
    """The graph outputs :func:`pool` needs for ``pooling``: ask the session for these and nothing more.

    Raises:
        ValueError: ``pooling`` is not one of ``POOLING_MODES``.
    """
    if pooling not in POOLING_MODES:
        raise ValueError(f"unknown pooling {pooling!r}; expected one of {', '.join(POOLING_MODES)}")
    return ("pooler_output",) if pooling == "pooler" else ("last_hidden_state",)


def pool(outputs: dict[str, np.ndarray], attention_mask: np.ndarray, pooling: str) -> np.ndarray:
    """One vector per row of a batch, ``[b, hidden]`` float32.

    Args:
        outputs: graph outputs of the batch, holding at least :func:`pooling_outputs` of ``pooling``.
        attention_mask: ``[b, t]`` int64, 1 on each row's tokens (``mean`` averages over these).
        pooling: one of ``POOLING_MODES``.

    Raises:
        ValueError: ``pooling`` is not one of ``POOLING_MODES``.
    """
    pooling_outputs(pooling)
    if pooling == "pooler":
        vectors = outputs["pooler_output"]
    elif pooling == "cls":
        vectors = outputs["last_hidden_state"][:, 0]
    else:
        states = outputs["last_hidden_state"]
        mask = attention_mask[:, : states.shape[1], None].astype(np.float32)
        vectors = np.einsum("bth,bt->bh", states, mask[:, :, 0]) / mask.sum(axis=1)
    pooled: np.ndarray = np.asarray(vectors, dtype=np.float32)
    return pooled


@dataclass(frozen=True)
class Tokenized:
    """One input as the model sees it: WordPiece tokens with ``[CLS]``/``[SEP]``, ids and segment ids."""

    tokens: list[str]
    ids: list[int]
    type_ids: list[int]
    attention_mask: list[int]

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class BertOutput:
    """Outputs of a batch of inputs, in the caller's order.

    Attributes:
        last_hidden_state: ``[n, max_tokens, hidden]`` float32; positions past an input's length are zero.
            ``None`` when the call asked for no hidden states.
        pooler_output: ``[n, hidden]`` float32 (tanh of a dense layer on the ``[CLS]`` state).
        nsp_logits: ``[n, 2]`` float32; index 0 means "B follows A".
        lengths: ``[n]`` int64, tokens of each input including ``[CLS]`` and ``[SEP]``.
    """

    last_hidden_state: np.ndarray | None
    pooler_output: np.ndarray
    nsp_logits: np.ndarray
    lengths: np.ndarray

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def attention_mask(self) -> np.ndarray:
        """``[n, max_tokens]`` int64: 1 on each input's tokens, 0 on padding."""
        width = 0 if self.last_hidden_state is None else self.last_hidden_state.shape[1]
        return (np.arange(width)[None, :] < self.lengths[:, None]).astype(np.int64)

    @property
    def nsp_probability(self) -> np.ndarray:
        """``[n]`` float32: probability that B follows A."""
        return is_next_probability(self.nsp_logits)

    def token_states(self, index: int) -> np.ndarray:
        """``[tokens, hidden]``: the per-token states of input ``index`` without padding.

        Raises:
            ValueError: the call did not keep hidden states, or ``index`` is out of range.
        """
        if self.last_hidden_state is None:
            raise ValueError("this result has no hidden states; call the model with hidden_states=True")
        if not -len(self) <= index < len(self):
            raise ValueError(f"index {index} is out of range for {len(self)} inputs")
        return self.last_hidden_state[index, : int(self.lengths[index])]
