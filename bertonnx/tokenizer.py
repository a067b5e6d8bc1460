"""The fast WordPiece tokenizer, with padding and truncation set by the runtime, never by the file.

A ``tokenizer.json`` may carry padding and truncation settings (the MiniLM one pads and truncates to 128);
the ``tokenizers`` library applies them silently. We clear both on load, pad in :mod:`bertonnx.batching`,
and truncate only when the caller asks, with a per-``max_length`` copy so calls never mutate shared
state (one model may be called from many threads).

Pairs are truncated here, not by ``tokenizers``: its ``longest_first`` gives the odd token of an odd budget
to the second sequence when both must be cut, while BERT's original ``_truncate_seq_pair`` and
transformers' Python ``BertTokenizer`` give it to the first (measured: 244 of 1,083 short pairs differed at
max_length 8, 16 and 33). We encode both sequences without special tokens, cut them with BERT's rule and
add ``[CLS]``/``[SEP]`` with the file's own post-processor.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Encoding, Tokenizer

from .errors import ModelDirectoryError

__all__ = ["TRUNCATION_STRATEGY", "TextTokenizer", "pair_truncation_lengths"]

#: As transformers' default for pairs: drop tokens from the longer sequence first.
TRUNCATION_STRATEGY = "longest_first"
#: ``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]``.
SPECIAL_TOKENS_SINGLE = 2
SPECIAL_TOKENS_PAIR = 3


def pair_truncation_lengths(first: int, second: int, budget: int) -> tuple[int, int]:
    """Tokens kept of each sequence of a pair, as BERT's ``_truncate_seq_pair`` keeps them.

    That loop drops one token at a time from the longer sequence, from the second one on a tie, until the
    pair fits ``budget`` (``max_length`` minus the three special tokens).

    Args:
        first: tokens of the first sequence (no special tokens).
        second: tokens of the second sequence.
        budget: tokens the two may keep together, >= 0.

    Returns:
        ``(kept_first, kept_second)``.
    """
    if first + second <= budget:
        return first, second
    if 2 * min(first, second) <= budget:  # the shorter one survives whole
        return (first, budget - first) if first <= second else (budget - second, second)
    return (budget + 1) // 2, budget // 2


class TextTokenizer:
    """Encodes texts and pairs with ``[CLS] A [SEP] (B [SEP])`` and segment ids 0/1."""

    def __init__(self, path: Path, max_positions: int) -> None:
        """Load ``tokenizer.json`` and clear any padding or truncation baked into it.

        Raises:
            ModelDirectoryError: the file cannot be parsed as a tokenizers JSON file.
        """
        try:
            base = Tokenizer.from_file(str(path))
        except Exception as exc:  # noqa: BLE001 - tokenizers raises plain Exception subclasses
            raise ModelDirectoryError(f"{path} is not a valid tokenizers file ({exc}); re-run the export") from None
        base.no_padding()
        base.no_truncation()
        self._base = base
        self._json = base.to_str()
        self.max_positions = max_positions
        self._truncating: dict[int, Tokenizer] = {}
        self._lock = threading.Lock()

    def token_to_id(self, token: str) -> int | None:
        found: int | None = self._base.token_to_id(token)
        return found

    def _truncating_tokenizer(self, max_length: int) -> Tokenizer:
        with self._lock:
            tokenizer = self._truncating.get(max_length)
            if tokenizer is None:
                tokenizer = Tokenizer.from_str(self._json)
                tokenizer.enable_truncation(max_length, strategy=TRUNCATION_STRATEGY)
                self._truncating[max_length] = tokenizer
            return tokenizer

    def encode(
        self,
        texts: Sequence[str],
        pairs: Sequence[str] | None,
        *,
        truncation: bool,
        max_length: int,
        first_index: int = 0,
    ) -> list[Encoding]:
        """Encode ``texts`` (with ``pairs`` when given) without padding.

        Args:
            texts: first sequences.
            pairs: second sequences, one per text, or ``None``.
            truncation: cut inputs longer than ``max_length`` (longest first for pairs) instead of raising.
            max_length: token limit including special tokens.
            first_index: index of ``texts[0]`` in the caller's whole input, for error messages.

        Raises:
            ValueError: an input is longer than ``max_length`` and ``truncation`` is off, or a pair cannot
                be truncated to ``max_length``.
        """
        if truncation and pairs is not None:
            if max_length <= SPECIAL_TOKENS_PAIR:
                raise ValueError(
                    f"max_length={max_length} leaves no room for a pair; use max_length > {SPECIAL_TOKENS_PAIR}"
                )
            return self._encode_truncated_pairs(list(texts), list(pairs), max_length - SPECIAL_TOKENS_PAIR)
        # Single texts are cut from the right, the same in tokenizers and in BERT's reference.
        tokenizer = self._truncating_tokenizer(max_length) if truncation else self._base
        batch = list(texts) if pairs is None else list(zip(texts, pairs, strict=True))
        encodings: list[Encoding] = tokenizer.encode_batch(batch, add_special_tokens=True)
        if not truncation:
            for offset, encoding in enumerate(encodings):
                if len(encoding.ids) > max_length:
                    raise ValueError(
                        f"input {first_index + offset} has {len(encoding.ids)} tokens, more than max_length="
                        f"{max_length}. Pass truncation=True to cut it (longest sequence first for pairs), "
                        "or split the text."
                    )
        return encodings

    def _encode_truncated_pairs(self, texts: list[str], pairs: list[str], budget: int) -> list[Encoding]:
        """Encode pairs cut to ``budget`` tokens with BERT's longest-first rule, then add special tokens."""
        if len(texts) != len(pairs):
            raise ValueError(f"texts and pairs differ in length ({len(texts)} vs {len(pairs)}); pass one pair per text")
        firsts = self._base.encode_batch(texts, add_special_tokens=False)
        seconds = self._base.encode_batch(pairs, add_special_tokens=False)
        encodings = []
        for first, second in zip(firsts, seconds, strict=True):
            keep_first, keep_second = pair_truncation_lengths(len(first.ids), len(second.ids), budget)
            if keep_first < len(first.ids):
                first.truncate(keep_first)
            if keep_second < len(second.ids):
                second.truncate(keep_second)
            encodings.append(self._base.post_process(first, second, add_special_tokens=True))
        return encodings
