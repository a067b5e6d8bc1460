"""Length-sorted batching cut by a token budget, with bounded memory.

One rule decides how many inputs share a ``session.run``, offline and in the server's scheduler alike: a
batch pads every input to its longest one, so it costs ``longest × count`` padded tokens, and that may not
exceed ``max_batch_tokens`` (nor may ``count`` exceed ``max_batch_size``). Many short texts then share one
run and long ones run few at a time, so each run is a matrix product of about the same size. Text
Embeddings Inference uses the same kind of budget (``--max-batch-tokens``, padded tokens = longest × count
on CPU), with a default of 16384 sized for GPUs; on CPU a smaller budget is faster (see
``DEFAULT_MAX_BATCH_TOKENS``).

Offline, inputs are read and tokenized in chunks and gathered into sorting windows of about
``SORT_WINDOW_TOKENS`` tokens (memory, not a count of texts, bounds the window: a 100,000-text list or an
endless generator never materialises at once); each window is sorted by length and cut by the budget.
Callers scatter the results back to input order with the indices each batch carries.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Protocol

import numpy as np

__all__ = [
    "DEFAULT_MAX_BATCH_SIZE",
    "DEFAULT_MAX_BATCH_TOKENS",
    "DEFAULT_SERVE_MAX_BATCH_TOKENS",
    "SORT_WINDOW_TOKENS",
    "TOKENIZE_CHUNK_TEXTS",
    "Batch",
    "BatchLimits",
    "TokenSequence",
    "iter_chunks",
    "make_batch",
    "pad",
    "plan_batches",
]

#: Padded tokens (longest input × count) per ``session.run``: small enough that a run's activations stay
#: near the caches, which on CPU beats TEI's GPU-sized 16,384 (benchmarks/DEFAULTS.md, "Token budget").
DEFAULT_MAX_BATCH_TOKENS = 2048
#: The same budget in the server: on a 2-core CPU a run costs its padded tokens and almost nothing besides
#: (bert-base fp32: 0.4 ms + 0.48 ms per padded token, from 8 to 2,048 tokens; benchmarks/SCHEDULER.md,
#: ``benchmarks.serve.runcost``), so larger runs gain nothing, while a short request arriving behind a run waits
#: for all of it: 512 (one full-length input) keeps that wait near 0.25 s instead of 1 s. Raise it where a run
#: has a fixed cost to spread (many cores, a GPU); ``runcost`` measures it. Declared here, beside the offline
#: budget, so the option vocabulary (:mod:`bertonnx.vocabulary`) names both without importing the server.
DEFAULT_SERVE_MAX_BATCH_TOKENS = 512
#: Inputs per ``session.run`` at most, however short they are.
DEFAULT_MAX_BATCH_SIZE = 256
#: Tokens gathered into one sorting window before it is sorted and cut. An encoding costs about 100 bytes
#: a token in ``tokenizers`` and ours, so a window holds some tens of MB; a wider window pads less.
SORT_WINDOW_TOKENS = 1 << 18
#: Texts tokenized per ``encode_batch`` call while a window fills.
TOKENIZE_CHUNK_TEXTS = 512


class TokenSequence(Protocol):
    """What padding reads from one input: a ``tokenizers.Encoding``, or ids a caller already has (the
    server's KServe route takes token ids, not texts)."""

    @property
    def ids(self) -> Sequence[int]: ...

    @property
    def type_ids(self) -> Sequence[int]: ...


@dataclass(frozen=True)
class BatchLimits:
    """How large one ``session.run`` may be.

    Attributes:
        max_batch_tokens: padded tokens per run, counted as ``longest input × inputs``. An input longer
            than this runs in a batch of its own.
        max_batch_size: inputs per run.

    Raises:
        TypeError: a limit is not an int.
        ValueError: a limit is below 1.
    """

    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE

    def __post_init__(self) -> None:
        for name in ("max_batch_tokens", "max_batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")

    def capacity(self, longest: int) -> int:
        """Inputs a batch whose longest input has ``longest`` tokens may hold (at least 1)."""
        return max(1, min(self.max_batch_size, self.max_batch_tokens // max(1, longest)))

    def fits(self, longest: int, count: int) -> bool:
        """Whether ``count`` inputs padded to ``longest`` tokens stay within both limits."""
        return count <= self.capacity(longest)


@dataclass(frozen=True)
class Batch:
    """Padded model inputs for some inputs, and their positions in the caller's order."""

    indices: np.ndarray  # [b] int64, positions in the caller's input
    lengths: np.ndarray  # [b] int64, tokens per input
    input_ids: np.ndarray  # [b, t] int64
    attention_mask: np.ndarray  # [b, t] int64
    token_type_ids: np.ndarray  # [b, t] int64

    def __len__(self) -> int:
        return int(self.indices.shape[0])

    @property
    def padded_tokens(self) -> int:
        """``b × t``: the tokens the engine computes, padding included."""
        return int(self.input_ids.size)


def iter_chunks(
    texts: Iterable[str], pairs: Iterable[str] | None, size: int
) -> Iterator[tuple[int, list[str], list[str] | None]]:
    """Yield ``(first_index, texts, pairs)`` chunks of at most ``size`` inputs.

    Raises:
        ValueError: ``texts`` and ``pairs`` have different lengths.
    """
    text_iter = iter(texts)
    pair_iter = None if pairs is None else iter(pairs)
    start = 0
    while True:
        chunk = list(islice(text_iter, size))
        chunk_pairs = None if pair_iter is None else list(islice(pair_iter, len(chunk) if chunk else 1))
        if chunk_pairs is not None and len(chunk_pairs) != len(chunk):
            more = "text_pairs" if len(chunk_pairs) > len(chunk) else "texts"
            raise ValueError(
                f"texts and text_pairs differ in length: {more} has more items (the other ends at index "
                f"{start + min(len(chunk), len(chunk_pairs))}). Pass one pair per text."
            )
        if not chunk:
            return
        yield start, chunk, chunk_pairs
        start += len(chunk)


def pad(encodings: Sequence[TokenSequence]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Right-pad encodings to the longest: ``(input_ids, attention_mask, token_type_ids)``, int64 ``[b, t]``."""
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    for row, encoding in enumerate(encodings):
        n = len(encoding.ids)
        ids[row, :n] = encoding.ids
        mask[row, :n] = 1
        types[row, :n] = encoding.type_ids
    return ids, mask, types


def make_batch(encodings: Sequence[TokenSequence], indices: Sequence[int] | np.ndarray) -> Batch:
    """Pad ``encodings`` into one :class:`Batch` whose rows carry ``indices``."""
    ids, mask, types = pad(encodings)
    lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
    return Batch(np.asarray(indices, dtype=np.int64), lengths, ids, mask, types)


def plan_batches(lengths: Sequence[int] | np.ndarray, limits: BatchLimits) -> list[np.ndarray]:
    """Sort inputs by length (longest first) and cut them into batches within ``limits``.

    Args:
        lengths: ``[n]`` tokens per input.
        limits: the token budget and batch-size cap.

    Returns:
        Row indices into ``lengths``, one int64 array per batch, longest batch first (so a memory error
        comes early). Every index appears exactly once.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")
    batches = []
    start = 0
    while start < len(order):
        stop = start + limits.capacity(int(lengths[order[start]]))
        batches.append(order[start:stop])
        start = stop
    return batches
