"""Result types returned by :class:`bertonnx.BertOnnx`.

``POOLING_MODES``, ``pool``, ``pooling_outputs`` and ``is_next_probability`` are re-exported from the
task layer (:mod:`bertonnx.tasks`), where they live.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .tasks.embed import POOLING_MODES, pool, pooling_outputs
from .tasks.nsp import is_next_probability

__all__ = ["POOLING_MODES", "BertOutput", "Tokenized", "is_next_probability", "pool", "pooling_outputs"]


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
