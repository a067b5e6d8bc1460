"""A sentence-transformers model's own pipeline, run in numpy: pooling, dense layers, normalisation, prompts,
Matryoshka dimensions, and a cross-encoder's activation.

A sentence-transformers folder says how to embed (``modules.json``: Transformer -> Pooling -> Dense ->
Normalize; ``config_sentence_transformers.json``: prompts, ``truncate_dim``). The export reads it, checks the
whole pipeline against ``SentenceTransformer.encode`` and records it in the manifest's
``sentence_transformers`` block; this module reads that block back and computes what sentence-transformers
computes, in the same order, so an export's default embedding *is* ``encode``'s. No torch here: every step is
a few numpy lines on ``last_hidden_state`` (measured: the steps cost well under 1% of a batch's graph run).

The order, as ``SentenceTransformer.encode`` runs it: the prompt is prepended to every text; the modules run in
the folder's order (pooling, which may leave the prompt's tokens out, then each dense layer and normalisation);
then the embedding is cut to ``dimensions`` (``truncate_dim``); then, only when asked (``normalize=True``,
``encode``'s ``normalize_embeddings``), scaled to unit length. A model whose pipeline ends in ``Normalize`` and
is cut to fewer dimensions therefore gives vectors shorter than 1, exactly as ``encode`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ACTIVATIONS",
    "BLOCK",
    "MODEL_TYPES",
    "POOLING_MODES",
    "DenseStep",
    "NormalizeStep",
    "PoolingStep",
    "SentencePipeline",
    "SpladeStep",
    "activate",
    "check_dimensions",
    "classifier_activation",
    "normalize",
    "pool",
    "prompt_length",
    "read_pipeline",
    "sparse_pairs",
]

#: The manifest block this module reads.
BLOCK = "sentence_transformers"
#: ``config_sentence_transformers.json``'s ``model_type`` values an export may record.
MODEL_TYPES = ("SentenceTransformer", "CrossEncoder", "SparseEncoder")
#: SPLADE pooling strategies and activations (sentence-transformers' ``SpladePooling``).
SPLADE_POOLING = ("max", "sum")
SPLADE_ACTIVATIONS = ("relu", "log1p_relu")
#: Every pooling mode of sentence-transformers' ``Pooling``, in the order it concatenates them.
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
#: ``torch.nn.functional.normalize``'s floor on the norm.
NORMALIZE_EPS = 1e-12
#: sentence-transformers clamps token counts (and weight sums) to this before dividing.
COUNT_EPS = 1e-9

_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _erf(x: np.ndarray) -> np.ndarray:
    """The error function (Abramowitz and Stegun 7.1.26, |error| < 1.5e-7), computed in float64."""
    x64 = x.astype(np.float64)
    sign = np.sign(x64)
    a = np.abs(x64)
    t = 1.0 / (1.0 + _ERF_P * a)
    poly = t * (_ERF_A[0] + t * (_ERF_A[1] + t * (_ERF_A[2] + t * (_ERF_A[3] + t * _ERF_A[4]))))
    result: np.ndarray = sign * (1.0 - poly * np.exp(-a * a))
    return result


def _sigmoid(x: np.ndarray) -> np.ndarray:
    result: np.ndarray = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    return result


#: Activation name -> numpy function (float64 inside, the caller casts back). The names are what the manifest
#: records for a dense layer's ``activation_function`` and a cross-encoder's ``activation_fn``.
ACTIVATIONS: Mapping[str, Callable[[np.ndarray], np.ndarray]] = {
    "identity": lambda x: x.astype(np.float64),
    "tanh": lambda x: np.tanh(x.astype(np.float64)),
    "sigmoid": _sigmoid,
    "relu": lambda x: np.maximum(x.astype(np.float64), 0.0),
    "gelu": lambda x: 0.5 * x.astype(np.float64) * (1.0 + _erf(x / np.sqrt(2.0))),
    "silu": lambda x: x.astype(np.float64) * _sigmoid(x),
    "leaky_relu": lambda x: np.where(x > 0, x.astype(np.float64), 0.01 * x.astype(np.float64)),
}


def activate(name: str, values: np.ndarray) -> np.ndarray:
    """``values`` through activation ``name``, float32.

    Raises:
        ValueError: an unknown activation; the message lists the known ones.
    """
    try:
        function = ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; expected one of {', '.join(ACTIVATIONS)}") from None
    result: np.ndarray = function(values).astype(np.float32)
    return result


@dataclass(frozen=True)
class PoolingStep:
    """sentence-transformers' ``Pooling``: ``modes`` concatenated in this order; ``include_prompt=False`` leaves
    the prompt's tokens out."""

    modes: tuple[str, ...]
    include_prompt: bool = True


@dataclass(frozen=True, eq=False)
class DenseStep:
    """sentence-transformers' ``Dense``: ``activation(vectors @ weight.T + bias)``; weights from the export's
    ``.npy`` files (listed in the manifest's ``files``)."""

    in_features: int
    out_features: int
    activation: str
    weight: np.ndarray = field(repr=False)
    bias: np.ndarray | None = field(repr=False)

    def __call__(self, vectors: np.ndarray) -> np.ndarray:
        out = vectors.astype(np.float32) @ self.weight.T
        if self.bias is not None:
            out = out + self.bias
        return activate(self.activation, out)


@dataclass(frozen=True)
class NormalizeStep:
    """sentence-transformers' ``Normalize``: each vector to unit L2 norm."""


@dataclass(frozen=True)
class SpladeStep:
    """sentence-transformers' ``SpladePooling`` on the MLM logits of one text's tokens: ``log(1 + relu(logit))``
    (applied twice for ``log1p_relu``), then the max or the sum over the tokens, one weight per vocabulary id."""

    pooling_strategy: str = "max"
    activation: str = "relu"

    def __call__(self, token_logits: np.ndarray) -> np.ndarray:
        """``[tokens, vocab]`` logits of one text's tokens (padding left out) -> ``[vocab]`` float32 weights."""
        if self.pooling_strategy not in SPLADE_POOLING or self.activation not in SPLADE_ACTIVATIONS:
            raise ValueError(
                f"SPLADE pooling {self.pooling_strategy!r} with {self.activation!r}: expected one of "
                f"{', '.join(SPLADE_POOLING)} with one of {', '.join(SPLADE_ACTIVATIONS)}"
            )
        logits = np.asarray(token_logits, dtype=np.float32)
        if not len(logits):
            return np.zeros(logits.shape[-1], dtype=np.float32)
        if self.pooling_strategy == "max":  # log1p is increasing: the max first, log1p on one row only
            values = np.log1p(np.maximum(logits.max(axis=0), 0.0))
            values = np.log1p(values) if self.activation == "log1p_relu" else values
        else:
            values = np.log1p(np.maximum(logits, 0.0))
            values = (np.log1p(values) if self.activation == "log1p_relu" else values).sum(axis=0)
        result: np.ndarray = values.astype(np.float32)
        return result


def sparse_pairs(
    weights: np.ndarray, *, top_k: int | None = None, threshold: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """The non-zero vocabulary ids and weights of one sparse embedding, ids ascending: weights above
    ``threshold`` only, then the ``top_k`` largest (``SparseEncoder.encode``'s ``max_active_dims``).

    Raises:
        ValueError: ``top_k`` below 1 or ``threshold`` negative.
    """
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1):
        raise ValueError(f"top_k must be a positive int or None, got {top_k!r}")
    if not threshold >= 0:
        raise ValueError(f"threshold must be 0 or more, got {threshold!r}")
    ids = np.flatnonzero(weights > threshold)
    if top_k is not None and len(ids) > top_k:
        order = np.argsort(-weights[ids], kind="stable")[:top_k]
        ids = np.sort(ids[order])
    return ids.astype(np.int64), weights[ids].astype(np.float32)


Step = PoolingStep | DenseStep | NormalizeStep | SpladeStep


@dataclass(frozen=True, eq=False)
class SentencePipeline:
    """The ``sentence_transformers`` block of an export's manifest, ready to run.

    Attributes:
        model_type: ``SentenceTransformer`` or ``CrossEncoder``.
        max_seq_length: tokens per input (special tokens included) sentence-transformers cuts every input to.
        do_lower_case: the folder asked for lower-casing (already applied in the exported ``tokenizer.json``).
        steps: the modules after the Transformer, in the folder's order (empty for a cross-encoder).
        prompts: prompt name -> text prepended to every input.
        default_prompt_name: the prompt used when a call names none, or ``None``.
        similarity_fn_name: ``cosine``, ``dot``, ``euclidean`` or ``manhattan``.
        truncate_dim: the default ``dimensions``, or ``None`` (the full width).
        dimension: the width of the pipeline's output.
    """

    model_type: str
    max_seq_length: int
    do_lower_case: bool
    steps: tuple[Step, ...]
    prompts: Mapping[str, str]
    default_prompt_name: str | None
    similarity_fn_name: str
    truncate_dim: int | None
    dimension: int

    @property
    def pooling(self) -> PoolingStep | None:
        """The pipeline's pooling step (``None`` for a cross-encoder)."""
        return next((s for s in self.steps if isinstance(s, PoolingStep)), None)

    def describe(self) -> list[str]:
        """One short name per step, e.g. ``['pooling(mean)', 'dense(384->128, tanh)', 'normalize']``."""
        names = []
        for step in self.steps:
            if isinstance(step, PoolingStep):
                names.append(f"pooling({'+'.join(step.modes)}{'' if step.include_prompt else ', without prompt'})")
            elif isinstance(step, DenseStep):
                names.append(f"dense({step.in_features}->{step.out_features}, {step.activation})")
            elif isinstance(step, SpladeStep):
                names.append(f"splade({step.pooling_strategy}, {step.activation})")
            else:
                names.append("normalize")
        return names

    @property
    def splade(self) -> SpladeStep | None:
        """The SPLADE step of a SparseEncoder export (``None`` otherwise)."""
        return next((s for s in self.steps if isinstance(s, SpladeStep)), None)

    def resolve_prompt(self, prompt: str | None = None, prompt_name: str | None = None) -> str | None:
        """The prompt text a call uses, as ``SentenceTransformer.encode`` resolves it: ``prompt`` itself; else
        ``prompts[prompt_name]``; else the default prompt's text; else ``None``.

        Raises:
            ValueError: both ``prompt`` and ``prompt_name`` (sentence-transformers warns and uses ``prompt``;
                here it is an error, so nothing is ignored), or an unknown ``prompt_name``.
            TypeError: a prompt or name that is not a string.
        """
        for what, value in (("prompt", prompt), ("prompt_name", prompt_name)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{what} must be a string or None, got {type(value).__name__}")
        if prompt is not None and prompt_name is not None:
            raise ValueError("pass either prompt or prompt_name, not both")
        if prompt is not None:
            return prompt
        if prompt_name is not None:
            if prompt_name not in self.prompts:
                known = ", ".join(repr(p) for p in self.prompts) or "none"
                raise ValueError(f"unknown prompt_name {prompt_name!r}; this model's prompts are {known}")
            return self.prompts[prompt_name]
        if self.default_prompt_name is not None:
            return self.prompts.get(self.default_prompt_name)
        return None

    def run(
        self,
        states: np.ndarray,
        attention_mask: np.ndarray,
        *,
        prompt_tokens: int | None = None,
        dimensions: int | None = None,
        normalize_result: bool = False,
    ) -> np.ndarray:
        """The embeddings of one batch, ``[b, dimensions]`` float32, as ``encode`` gives them.

        Args:
            states: ``last_hidden_state`` ``[b, t, hidden]`` (right-padded).
            attention_mask: ``[b, t]``, 1 on each row's tokens.
            prompt_tokens: the prompt's length in tokens (:func:`prompt_length`) when a prompt was prepended;
                pooling leaves them out when the model says ``include_prompt=False``.
            dimensions: cut each vector to its first ``dimensions`` values (after the modules); ``None``:
                the model's ``truncate_dim``, else the full width.
            normalize_result: scale to unit length after the cut (``encode``'s ``normalize_embeddings``).

        Raises:
            ValueError: ``dimensions`` is not between 1 and the width.
        """
        if self.splade is not None:
            raise ValueError("a SparseEncoder export gives sparse embeddings: use its MLM logits and `splade`")
        width = check_dimensions(dimensions, self.dimension) if dimensions is not None else self.truncate_dim
        vectors = states
        for step in self.steps:
            if isinstance(step, PoolingStep):
                excluded = None if step.include_prompt else prompt_tokens
                vectors = pool(states, attention_mask, step.modes, prompt_tokens=excluded)
            elif isinstance(step, DenseStep):
                vectors = step(vectors)
            else:
                vectors = normalize(vectors)
        if width is not None:
            vectors = vectors[:, :width]
        return normalize(vectors) if normalize_result else np.ascontiguousarray(vectors, dtype=np.float32)


def check_dimensions(dimensions: object, width: int) -> int:
    """``dimensions`` as an int between 1 and ``width``.

    Raises:
        TypeError: not an int.
        ValueError: 0, negative or above ``width``.
    """
    if isinstance(dimensions, bool) or not isinstance(dimensions, (int, np.integer)):
        raise TypeError(f"dimensions must be an int, got {type(dimensions).__name__}")
    if not 1 <= int(dimensions) <= width:
        raise ValueError(f"dimensions must be between 1 and {width} (this model's width), got {dimensions}")
    return int(dimensions)


def normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm as ``torch.nn.functional.normalize`` does (norm floored at 1e-12), float32."""
    v = vectors.astype(np.float32)
    norms = np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), NORMALIZE_EPS)
    result: np.ndarray = (v / norms).astype(np.float32)
    return result


def prompt_length(ids: Sequence[int], special_ids: set[int] | frozenset[int]) -> int:
    """How many leading tokens of a prompted input are the prompt's, as sentence-transformers counts them: the
    prompt alone is tokenized (special tokens added, cut to ``max_seq_length``) and its trailing special token
    (``[SEP]``) is not counted; the leading ``[CLS]`` is, so pooling without the prompt leaves it out too.

    Args:
        ids: the ids of the prompt tokenized alone.
        special_ids: the tokenizer's special token ids.
    """
    n = len(ids)
    return n - 1 if n and ids[-1] in special_ids else n


def _pool_mask(attention_mask: np.ndarray, prompt_tokens: int | None) -> np.ndarray:
    mask: np.ndarray = np.array(attention_mask, dtype=np.int64)
    if prompt_tokens is not None:
        mask[:, :prompt_tokens] = 0  # right padding: the prompt is the first tokens of every row
    return mask


def pool(
    states: np.ndarray, attention_mask: np.ndarray, modes: Sequence[str], *, prompt_tokens: int | None = None
) -> np.ndarray:
    """sentence-transformers' ``Pooling`` on a right-padded batch, ``[b, hidden * len(modes)]`` float32.

    ``cls`` takes the first token the mask keeps (the first after the prompt when it is left out);
    ``max`` the largest value over kept tokens (``-inf`` when none is kept, as sentence-transformers);
    ``mean`` the average, ``mean_sqrt_len_tokens`` the sum over the square root of the count;
    ``weightedmean`` weights token ``i`` by ``i + 1``; ``lasttoken`` the last kept token.

    Raises:
        ValueError: an unknown mode.
    """
    unknown = [m for m in modes if m not in POOLING_MODES]
    if unknown or not modes:
        raise ValueError(f"unknown pooling mode {unknown or modes!r}; expected some of {', '.join(POOLING_MODES)}")
    h = states.astype(np.float32)
    mask = _pool_mask(attention_mask[:, : h.shape[1]], prompt_tokens)
    m = mask[:, :, None].astype(np.float32)
    rows = np.arange(h.shape[0])
    out = []
    for mode in modes:
        if mode == "cls":
            out.append(h[rows, np.argmax(mask, axis=1)])
        elif mode == "max":
            out.append(np.where(m > 0, h, -np.inf).max(axis=1))
        elif mode in ("mean", "mean_sqrt_len_tokens"):
            total = np.einsum("bth,bt->bh", h, m[:, :, 0])
            count = np.maximum(m.sum(axis=1), COUNT_EPS)
            out.append(total / (count if mode == "mean" else np.sqrt(count)))
        elif mode == "weightedmean":
            weights = m * np.arange(1, h.shape[1] + 1, dtype=np.float32)[None, :, None]
            total = np.einsum("bth,bt->bh", h, weights[:, :, 0])
            out.append(total / np.maximum(weights.sum(axis=1), COUNT_EPS))
        else:  # lasttoken
            seq = h.shape[1]
            flipped = mask[:, ::-1]
            last = seq - 1 - np.argmax(flipped, axis=1)
            last = np.where(flipped.max(axis=1) == 0, 0, last)
            out.append(h[rows, last] * m[rows, last])
    result: np.ndarray = np.concatenate(out, axis=-1).astype(np.float32)
    return result


def _step(record: Mapping[str, Any], directory: Path, load: Callable[[str], np.ndarray]) -> Step:
    kind = record.get("type")
    if kind == "pooling":
        return PoolingStep(tuple(str(m) for m in record["modes"]), bool(record.get("include_prompt", True)))
    if kind == "normalize":
        return NormalizeStep()
    if kind == "splade":
        return SpladeStep(str(record.get("pooling_strategy", "max")), str(record.get("activation", "relu")))
    if kind == "dense":
        bias = record.get("bias_file")
        return DenseStep(
            int(record["in_features"]),
            int(record["out_features"]),
            str(record["activation"]),
            load(str(record["weight_file"])),
            load(str(bias)) if bias else None,
        )
    raise ValueError(f"{directory}: unknown sentence-transformers step {kind!r} in the manifest; re-export")


def read_pipeline(
    data: Mapping[str, Any], directory: Path, load: Callable[[str], np.ndarray] | None = None
) -> SentencePipeline | None:
    """The manifest's ``sentence_transformers`` block as a :class:`SentencePipeline`; ``None`` when the export
    has none (a plain transformers checkpoint, or an export written before the block existed).

    Args:
        data: the parsed manifest (``Manifest.data``).
        directory: the model directory (dense weights are read from it).
        load: reads one listed ``.npy`` file by name (the runtime passes one that checks the file against the
            manifest first); default: ``numpy.load`` from ``directory``.
    """
    block = data.get(BLOCK)
    if not isinstance(block, Mapping):
        return None

    def plain_load(name: str) -> np.ndarray:
        array: np.ndarray = np.load(directory / name, allow_pickle=False)
        return array

    steps = tuple(_step(s, directory, load or plain_load) for s in block.get("steps", ()))
    truncate_dim = block.get("truncate_dim")
    return SentencePipeline(
        model_type=str(block.get("model_type", "SentenceTransformer")),
        max_seq_length=int(block["max_seq_length"]),
        do_lower_case=bool(block.get("do_lower_case", False)),
        steps=steps,
        prompts={str(k): str(v) for k, v in (block.get("prompts") or {}).items()},
        default_prompt_name=block.get("default_prompt_name"),
        similarity_fn_name=str(block.get("similarity_fn_name") or "cosine"),
        truncate_dim=None if truncate_dim is None else int(truncate_dim),
        dimension=int(block.get("dimension") or data["config"]["hidden_size"]),
    )


def classifier_activation(data: Mapping[str, Any]) -> str | None:
    """A cross-encoder export's activation (``sigmoid``, ``identity`` ...) as ``CrossEncoder.predict`` applies
    it by default, from the manifest's ``task`` block; ``None`` for any other export (keep the task's own
    default)."""
    task = data.get("task")
    if not isinstance(task, Mapping) or task.get("activation") is None:
        return None
    return str(task["activation"])
