"""``embed_sparse``: SPLADE, one sparse vector per text, as sentence-transformers' ``SparseEncoder.encode``.

An export of a ``SparseEncoder`` folder (a fill-mask Transformer + ``SpladePooling``) keeps its MLM head as the
small second graph fill-mask uses. Here that head runs on every token of a text (``[tokens, vocab]`` logits,
one text at a time, so memory stays at one text's projection) and :class:`bertonnx.sentence.SpladeStep` pools
``log(1 + relu(logit))`` over the tokens. The vocabulary projection on every token is the cost: on MiniLM-L6's
shape it took 1.2x the encoder's own time (the commit's note). Pruning: weights above ``threshold``, then the
``top_k`` largest (``encode``'s ``max_active_dims``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from ..batching import Batch
from ..errors import HeadMissingError
from ..sentence import SentencePipeline, SpladeStep, sparse_pairs
from .base import Encoder, ModelFacts, PerInput, Prepared, check_bool, check_positive_int, encoder_for

__all__ = ["EmbedSparse", "SparseVector"]

HIDDEN_STATES = "last_hidden_state"


class SparseVector(TypedDict):
    """One text's sparse embedding: vocabulary ids (ascending) and their weights (TEI's ``/embed_sparse``
    gives the same pairs as ``[{"index", "value"}]``)."""

    indices: np.ndarray
    values: np.ndarray


@dataclass(frozen=True)
class EmbedSparse(PerInput):
    """SPLADE weights per input.

    Attributes:
        head: runs the MLM head: ``[n, hidden]`` float32 hidden states -> ``[n, vocab]`` float32 logits.
        splade: the export's SPLADE pooling.
        encoder: how texts are tokenized (``None``: the task only runs units).
        prompt: text prepended to every input, or ``None``.
        top_k: keep the ``top_k`` largest weights (``None``: all).
        threshold: keep weights above this only.
    """

    head: Callable[[np.ndarray], np.ndarray]
    splade: SpladeStep
    encoder: Encoder | None = None
    prompt: str | None = None
    top_k: int | None = None
    threshold: float = 0.0
    name = "embed_sparse"
    outputs = (HIDDEN_STATES,)

    @classmethod
    def build(
        cls,
        model: ModelFacts,
        *,
        truncation: bool | None = None,
        max_length: int | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        top_k: int | None = None,
        threshold: float = 0.0,
    ) -> EmbedSparse:
        """The task on an export of a ``SparseEncoder`` folder: inputs cut to its ``max_seq_length`` by default
        (as ``encode``), its default prompt applied.

        Raises:
            HeadMissingError: the export is no SparseEncoder (no SPLADE pooling or no MLM head).
            ValueError, TypeError: a bad option (``top_k`` below 1, a negative ``threshold``, an unknown
                ``prompt_name``).
        """
        pipeline: SentencePipeline | None = getattr(model, "sentence", None)
        splade = pipeline.splade if pipeline is not None else None
        if pipeline is None or splade is None or model.mask_token_id is None:
            raise HeadMissingError.for_task("embed_sparse", model.manifest.architecture, model.manifest.tasks)
        if top_k is not None:
            check_positive_int(top_k, "top_k")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not threshold >= 0:
            raise ValueError(f"threshold must be a number >= 0, got {threshold!r}")
        cut = check_bool(truncation, "truncation") if truncation is not None else True
        encoder = encoder_for(model, cut, max_length if max_length is not None else pipeline.max_seq_length)
        text = pipeline.resolve_prompt(prompt, prompt_name)
        return cls(model.run_mlm_head, splade, encoder, text or None, top_k, float(threshold))

    def prepare(
        self, first: Sequence[str], second: Sequence[str] | None = None, first_index: int = 0, *, strict: bool = True
    ) -> Prepared:
        """Tokenize a chunk of texts, the prompt prepended to each (see :meth:`Encoder.prepare`)."""
        if self.prompt:
            first = [self.prompt + text for text in first]
        return super().prepare(first, second, first_index, strict=strict)

    def postprocess(
        self, outputs: Mapping[str, np.ndarray], batch: Batch, rows: np.ndarray | None = None
    ) -> list[SparseVector]:
        """Per row of ``rows`` (every row when ``None``): its non-zero vocabulary ids and weights."""
        picked = np.arange(len(batch)) if rows is None else np.asarray(rows)
        states = outputs[HIDDEN_STATES]
        answers: list[SparseVector] = []
        for row in picked.tolist():
            tokens = np.ascontiguousarray(states[row, : int(batch.lengths[row])], dtype=np.float32)
            weights = self.splade(self.head(tokens))
            indices, values = sparse_pairs(weights, top_k=self.top_k, threshold=self.threshold)
            answers.append({"indices": indices, "values": values})
        return answers
