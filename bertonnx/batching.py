"""Length-sorted batching with bounded memory.

Inputs are read in windows of ``SORT_WINDOW_BATCHES`` batches (so a 100,000-text list or an endless
generator never materialises at once), each window is sorted by token length and cut into batches padded
to their own longest input: far less padding than batching in input order. Callers scatter the results
back to input order with the indices each batch carries.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice

import numpy as np
from tokenizers import Encoding

__all__ = ["SORT_WINDOW_BATCHES", "Batch", "iter_windows", "pad", "sorted_batches"]

#: Batches per sorting window: a wider window pads less, a narrower one keeps less in memory.
SORT_WINDOW_BATCHES = 64


@dataclass(frozen=True)
class Batch:
    """Padded model inputs for some inputs, and their positions in the caller's order."""

    indices: np.ndarray  # [b] int64, positions in the caller's input
    lengths: np.ndarray  # [b] int64, tokens per input
    input_ids: np.ndarray  # [b, t] int64
    attention_mask: np.ndarray  # [b, t] int64
    token_type_ids: np.ndarray  # [b, t] int64


def iter_windows(
    texts: Iterable[str], pairs: Iterable[str] | None, window: int
) -> Iterator[tuple[int, list[str], list[str] | None]]:
    """Yield ``(first_index, texts, pairs)`` windows of at most ``window`` inputs.

    Raises:
        ValueError: ``texts`` and ``pairs`` have different lengths.
    """
    text_iter = iter(texts)
    pair_iter = None if pairs is None else iter(pairs)
    start = 0
    while True:
        chunk = list(islice(text_iter, window))
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


def pad(encodings: Sequence[Encoding]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Right-pad encodings to the longest: ``(input_ids, attention_mask, token_type_ids)``, int64."""
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


def sorted_batches(encodings: Sequence[Encoding], first_index: int, batch_size: int) -> Iterator[Batch]:
    """Cut one window into length-sorted, padded batches (longest first, so a memory error comes early)."""
    lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
    order = np.argsort(-lengths, kind="stable")
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        ids, mask, types = pad([encodings[i] for i in rows])
        yield Batch(rows + first_index, lengths[rows], ids, mask, types)
