"""``embed``: one vector per text: the pooler output, the ``[CLS]`` state or the mean of the tokens,
optionally scaled to unit length; for an export of a sentence-transformers folder, by default the folder's own
pipeline (:mod:`bertonnx.sentence`: its pooling, dense layers, Normalize, prompts, ``truncate_dim`` and
``max_seq_length``), so ``embed(texts)`` equals ``SentenceTransformer(folder).encode(texts)``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..batching import Batch
from ..errors import HeadMissingError
from ..sentence import SentencePipeline, check_dimensions, prompt_length
from .base import Encoder, ModelFacts, PerInput, Prepared, check_bool, encoder_for

__all__ = ["DEFAULT_POOLING", "PIPELINE_POOLING", "POOLING_MODES", "Embed", "normalize_rows", "pool", "pooling_outputs"]

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


#: ``pooling`` of the export's own sentence-transformers pipeline (the default when the export has one).
PIPELINE_POOLING = "pipeline"


def _own_pipeline(model: ModelFacts) -> SentencePipeline | None:
    """The export's sentence-transformers embedding pipeline (``BertOnnx.sentence``), or ``None``."""
    pipeline = getattr(model, "sentence", None)
    return pipeline if pipeline is not None and pipeline.model_type == "SentenceTransformer" else None


@dataclass(frozen=True)
class Embed(PerInput):
    """A pooled vector per input, ``[width]`` float32.

    Attributes:
        pooling: one of ``POOLING_MODES``, or ``pipeline``: the export's sentence-transformers pipeline.
        normalize: scale each vector to unit L2 norm (after the cut to ``dimensions``).
        encoder: how inputs are tokenized (``None``: the task only runs units, e.g. in the server's engine).
        pipeline: the export's sentence-transformers pipeline (with ``pooling="pipeline"``).
        prompt: text prepended to every input, or ``None``.
        prompt_tokens: the prompt's tokens as sentence-transformers counts them (pooling may leave them out).
        dimensions: cut each vector to its first ``dimensions`` values (``None``: the pipeline's
            ``truncate_dim``, else the full width).

    Raises:
        ValueError: unknown ``pooling``, or ``pipeline`` without a pipeline.
    """

    pooling: str = DEFAULT_POOLING
    normalize: bool = False
    encoder: Encoder | None = None
    pipeline: SentencePipeline | None = None
    prompt: str | None = None
    prompt_tokens: int | None = None
    dimensions: int | None = None
    name = "embed"

    def __post_init__(self) -> None:
        if self.pooling == PIPELINE_POOLING:
            if self.pipeline is None:
                raise ValueError("pooling 'pipeline' needs an export of a sentence-transformers folder")
        else:
            pooling_outputs(self.pooling)

    @classmethod
    def build(
        cls,
        model: ModelFacts,
        *,
        pooling: str | None = None,
        normalize: bool | None = None,
        truncation: bool | None = None,
        max_length: int | None = None,
        prompt_name: str | None = None,
        prompt: str | None = None,
        dimensions: int | None = None,
    ) -> Embed:
        """The task for ``model``. With no ``pooling``, an export of a sentence-transformers folder runs its own
        pipeline, cut to its ``max_seq_length`` (``truncation`` on, as ``encode``), its default prompt applied;
        any other export pools with ``pooler`` and refuses long inputs, as before. An explicit ``pooling``
        (``pooler``, ``cls``, ``mean``) always runs that pooling with those plain defaults.

        Args:
            pooling: ``pipeline`` (the export's own), ``pooler``, ``cls`` or ``mean``; ``None``: the export's own.
            normalize: unit length after the cut (``encode``'s ``normalize_embeddings``); ``None``: no.
            truncation: cut long inputs; ``None``: on for the export's pipeline, else off.
            max_length: tokens per input; ``None``: the pipeline's ``max_seq_length``, else the positions.
            prompt_name: one of the export's prompts; ``None``: its ``default_prompt_name`` (pipeline only).
            prompt: a prompt text to prepend (instead of ``prompt_name``).
            dimensions: Matryoshka: keep the first ``dimensions`` values (1 to the width).

        Raises:
            ValueError: unknown ``pooling``; ``max_length`` or ``dimensions`` out of range; an unknown
                ``prompt_name`` (or one given to an export without prompts); both prompt and prompt_name.
            TypeError: an option has the wrong type.
            HeadMissingError: ``pooler`` asked of an export without a pooler.
        """
        own = _own_pipeline(model)
        chosen = pooling if pooling is not None else (PIPELINE_POOLING if own is not None else DEFAULT_POOLING)
        if chosen == PIPELINE_POOLING and own is None:
            raise ValueError("pooling 'pipeline' needs an export of a sentence-transformers folder; this has none")
        if chosen != PIPELINE_POOLING:
            pooling_outputs(chosen)
        uses_pipeline = chosen == PIPELINE_POOLING and own is not None
        check_bool(normalize if normalize is not None else False, "normalize")
        cut = check_bool(truncation, "truncation") if truncation is not None else uses_pipeline
        limit = max_length if max_length is not None else (own.max_seq_length if uses_pipeline and own else None)
        encoder = encoder_for(model, cut, limit)
        width = own.dimension if uses_pipeline and own else model.hidden_size
        dims = check_dimensions(dimensions, width) if dimensions is not None else None
        text = _prompt_text(own if uses_pipeline else None, prompt, prompt_name)
        tokens = None
        if text:
            (encoding,) = model.tokenizer.encode([text], None, truncation=True, max_length=encoder.max_length)
            special = {i for i, m in zip(encoding.ids, encoding.special_tokens_mask, strict=True) if m}
            tokens = prompt_length(encoding.ids, special)
        if chosen == "pooler" and "pooler_output" not in model.output_names:
            manifest = model.manifest
            raise HeadMissingError.for_task("embed", manifest.architecture, manifest.tasks, manifest.num_labels)
        return cls(chosen, bool(normalize), encoder, own if uses_pipeline else None, text or None, tokens, dims)

    @property
    def outputs(self) -> tuple[str, ...]:
        if self.pooling == PIPELINE_POOLING:
            return ("last_hidden_state",)
        return pooling_outputs(self.pooling)

    def width(self, hidden_size: int) -> int:
        """Values per vector this task gives."""
        if self.dimensions is not None:
            return self.dimensions
        if self.pipeline is not None:
            return self.pipeline.truncate_dim or self.pipeline.dimension
        return hidden_size

    def prepare(
        self, first: Sequence[str], second: Sequence[str] | None = None, first_index: int = 0, *, strict: bool = True
    ) -> Prepared:
        """Tokenize a chunk of texts, the prompt prepended to each (see :meth:`Encoder.prepare`)."""
        if self.prompt:
            first = [self.prompt + text for text in first]
        return super().prepare(first, second, first_index, strict=strict)

    def postprocess(
        self, outputs: Mapping[str, np.ndarray], batch: Batch, rows: np.ndarray | None = None
    ) -> np.ndarray:
        """``[r, width]`` float32 vectors of ``rows`` (every row when ``None``)."""
        if self.pipeline is not None:
            vectors = self.pipeline.run(
                outputs["last_hidden_state"],
                batch.attention_mask,
                prompt_tokens=self.prompt_tokens,
                dimensions=self.dimensions,
                normalize_result=self.normalize,
            )
            return vectors if rows is None else vectors[rows]
        vectors = pool(outputs, batch.attention_mask, self.pooling)
        if rows is not None:
            vectors = vectors[rows]
        if self.dimensions is not None:
            vectors = np.ascontiguousarray(vectors[:, : self.dimensions])
        return normalize_rows(vectors) if self.normalize and len(vectors) else vectors


def _prompt_text(pipeline: SentencePipeline | None, prompt: str | None, prompt_name: str | None) -> str | None:
    if pipeline is not None:
        return pipeline.resolve_prompt(prompt, prompt_name)
    if prompt_name is not None:
        raise ValueError(
            f"prompt_name {prompt_name!r} needs an export of a sentence-transformers folder with prompts; "
            "this export has none (pass prompt= with the text instead)"
        )
    if prompt is not None and not isinstance(prompt, str):
        raise TypeError(f"prompt must be a string or None, got {type(prompt).__name__}")
    return prompt
