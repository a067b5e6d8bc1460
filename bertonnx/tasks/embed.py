"""``embed``: one vector per text: the pooler output, the ``[CLS]`` state or the mean of the tokens,
optionally scaled to unit length."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..batching import Batch
from ..errors import HeadMissingError
from .base import Encoder, ModelFacts, PerInput, check_bool, encoder_for

__all__ = ["DEFAULT_POOLING", "POOLING_MODES", "Embed", "normalize_rows", "pool", "pooling_outputs"]

#: ``pooler``: the trained pooler (tanh dense on [CLS]); ``cls``: the raw [CLS] state; ``mean``: mean of
#: all attended tokens including [CLS] and [SEP] (the sentence-transformers convention).
POOLING_MODES = ("pooler", "cls", "mean")
#: The pooling of an export without a sentence-transformers pipeline: BERT's trained pooler.
DEFAULT_POOLING = "pooler"


def pooling_outputs(pooling: str) -> tuple[str, ...]:
    """The graph outputs :func:`pool` needs for ``pooling``: ask the session for these and nothing more.

    Raises:
        ValueError: ``pooling`` is not one of ``POOLING_MODES``.
    """
    if pooling not in POOLING_MODES:
        raise ValueError(f"unknown pooling {pooling!r}; expected one of {', '.join(POOLING_MODES)}")
    return ("pooler_output",) if pooling == "pooler" else ("last_hidden_state",)


def pool(outputs: Mapping[str, np.ndarray], attention_mask: np.ndarray, pooling: str) -> np.ndarray:
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


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """``[n, d]`` rows scaled to unit L2 norm (a zero row stays zero), float32."""
    scaled: np.ndarray = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), np.finfo(np.float32).tiny)
    return scaled


@dataclass(frozen=True)
class Embed(PerInput):
    """A pooled vector per input, ``[hidden]`` float32.

    Attributes:
        pooling: one of ``POOLING_MODES``.
        normalize: scale each vector to unit L2 norm.
        encoder: how inputs are tokenized (``None``: the task only runs units, e.g. in the server's engine).

    Raises:
        ValueError: unknown ``pooling``.
    """

    pooling: str = DEFAULT_POOLING
    normalize: bool = False
    encoder: Encoder | None = None
    name = "embed"

    def __post_init__(self) -> None:
        pooling_outputs(self.pooling)

    @classmethod
    def build(
        cls,
        model: ModelFacts,
        *,
        pooling: str = DEFAULT_POOLING,
        normalize: bool = False,
        truncation: bool = False,
        max_length: int | None = None,
    ) -> Embed:
        """The task for ``model``.

        Raises:
            ValueError: unknown ``pooling``; ``max_length`` out of range.
            TypeError: an option has the wrong type.
            HeadMissingError: ``pooler`` asked of an export without a pooler.
        """
        task = cls(pooling, check_bool(normalize, "normalize"), encoder_for(model, truncation, max_length))
        if pooling == "pooler" and "pooler_output" not in model.output_names:
            manifest = model.manifest
            raise HeadMissingError.for_task("embed", manifest.architecture, manifest.tasks, manifest.num_labels)
        return task

    @property
    def outputs(self) -> tuple[str, ...]:
        return pooling_outputs(self.pooling)

    def postprocess(
        self, outputs: Mapping[str, np.ndarray], batch: Batch, rows: np.ndarray | None = None
    ) -> np.ndarray:
        """``[r, hidden]`` float32 vectors of ``rows`` (every row when ``None``)."""
        vectors = pool(outputs, batch.attention_mask, self.pooling)
        if rows is not None:
            vectors = vectors[rows]
        return normalize_rows(vectors) if self.normalize and len(vectors) else vectors
