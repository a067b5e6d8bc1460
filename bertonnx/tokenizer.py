"""The fast WordPiece tokenizer, with padding and truncation set by the runtime, never by the file.

A ``tokenizer.json`` may carry padding and truncation settings (the MiniLM one pads and truncates to 128);
the ``tokenizers`` library applies them silently. We clear both on load, pad in :mod:`bertonnx.batching`,
and truncate only when the caller asks.

Pairs are truncated here, not by ``tokenizers`` (whose truncation keeps every cut-off window, below), but by
its own ``longest_first`` rule, which transformers' fast tokenizers and so its pipelines apply
(:func:`pair_truncation_lengths`): the longer side is cut first, and when both must be cut the shorter keeps
half the budget and the longer the rest (the odd token of an odd budget goes to the longer side, to the
second on a tie; BERT's original ``_truncate_seq_pair`` gives it to the first, see benchmarks/DEFAULTS.md,
"Pair truncation by the fast tokenizer's rule"). We encode both sequences without special tokens, cut them
and add ``[CLS]``/``[SEP]`` with the file's own post-processor. An exactly empty second text is no pair:
the input is encoded as its first text alone, as the fast tokenizer does for ``text_pair=""`` (and so the
pipelines): ``[CLS] a [SEP]``, not ``[CLS] a [SEP] [SEP]``.

Truncation costs time and memory in proportion to the tokens kept, not to the text. ``tokenizers`` keeps
every cut-off window of a truncated encoding as an "overflowing" encoding, and its post-processor pairs
every window of the first sequence with every window of the second, so memory grows with the product of
the two lengths (benchmarks/DEFAULTS.md, "Truncation by prefixes"). So when the caller truncates we
tokenize only a prefix of each text, long enough to hold the tokens that can be kept (see
:meth:`TextTokenizer.encode`), and cut in halving steps so that at most one small window overflows. The
result is exactly that of tokenizing the whole text: BERT's normalizer works character by character and
its pre-tokenizer splits words at whitespace and punctuation, so every word of a prefix except the last is
a word of the whole text, tokenized the same way.

Every ``str`` Python can hold is tokenized, as the reference does. ``tokenizers`` refuses strings holding
a lone surrogate (a code point U+D800-U+DFFF, which the Python ``BertTokenizer`` deletes with the other
category-C characters; ``surrogateescape`` puts them in command-line arguments that are not UTF-8), so we
replace each by NUL first: NUL is no part of any special token and BERT's normalizer deletes it too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Encoding, Tokenizer

from .errors import InputTooLongError, ModelDirectoryError

__all__ = [
    "EXACT_COUNT_CHARS",
    "PREFIX_CHARS_PER_TOKEN",
    "SURROGATE_STAND_IN",
    "TextTokenizer",
    "clean_text",
    "clean_up_tokenization",
    "pair_truncation_lengths",
]

#: ``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]``.
SPECIAL_TOKENS_SINGLE = 2
SPECIAL_TOKENS_PAIR = 3
#: When truncating, the first prefix tokenized holds this many characters per token that may be kept;
#: it doubles until it holds enough complete tokens (English averages 4-5 characters per token).
PREFIX_CHARS_PER_TOKEN = 8
#: An input over the limit (without truncation) has its exact token count named when it has at most this many
#: characters (a few milliseconds to count); a longer one is refused once its first ``max_length + 1`` tokens are
#: found, without tokenizing the rest.
EXACT_COUNT_CHARS = 16_384
#: Stands in for a lone surrogate: deleted by BERT's normalizer, part of no special token.
SURROGATE_STAND_IN = "\x00"
_SURROGATE = re.compile("[\ud800-\udfff]")
#: The pipeline for which a prefix's complete words tokenize as in the whole text (a BERT tokenizer.json).
PREFIX_SAFE_PIPELINE = {"normalizer": "BertNormalizer", "pre_tokenizer": "BertPreTokenizer", "model": "WordPiece"}


#: What transformers' ``clean_up_tokenization`` undoes in decoded text, in its order.
CLEAN_UP_REPLACEMENTS = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
)


def clean_up_tokenization(text: str) -> str:
    """Remove the spaces WordPiece decoding leaves before punctuation and contractions (as transformers)."""
    for before, after in CLEAN_UP_REPLACEMENTS:
        text = text.replace(before, after)
    return text


def clean_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by NUL (which BERT's normalizer deletes, as the reference
    deletes the surrogate); ``text`` itself when it holds none (an ASCII string is not even scanned)."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub(SURROGATE_STAND_IN, text)


def pair_truncation_lengths(first: int, second: int, budget: int) -> tuple[int, int]:
    """Tokens kept of each sequence of a pair, as the fast tokenizer's ``longest_first`` keeps them.

    ``tokenizers`` (``TruncationStrategy::LongestFirst``) keeps a pair that fits ``budget`` (``max_length``
    minus the three special tokens) whole; else, when the shorter sequence fits half the budget, it keeps the
    shorter whole and cuts the longer to the rest; else it gives the shorter ``budget // 2`` tokens and the
    longer ``budget - budget // 2`` (the second is the longer on a tie). Capping both lengths at
    ``budget + 1`` changes the result only when both reach the cap and the first is the longer (the odd
    token changes sides), so a caller that tokenizes no further than that must compare the two lengths
    whenever both reach it.

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
    if first > second:
        return budget - budget // 2, budget // 2
    return budget // 2, budget - budget // 2


def _input(text: str, pair: str | None) -> str | tuple[str, str]:
    """What ``tokenizers`` encodes for one input: the pair, or the text alone when the pair is absent or exactly
    empty (the fast tokenizer drops ``text_pair=""``)."""
    return text if not pair else (text, pair)


def _cut(encoding: Encoding, keep: int) -> None:
    """Keep the first ``keep`` tokens of ``encoding``.

    ``Encoding.truncate`` keeps the cut-off tokens as windows of ``keep`` tokens each (and replaces the
    windows of an earlier cut), so halving first leaves at most one window however long the encoding is.
    """
    length = len(encoding)
    while length > 2 * keep and length > 1:
        length = (length + 1) // 2
        encoding.truncate(length)
    if length > keep:
        encoding.truncate(keep)


class TextTokenizer:
    """Encodes texts and pairs with ``[CLS] A [SEP] (B [SEP])`` and segment ids 0/1."""

    def __init__(self, path: Path, max_positions: int, *, clean_up_spaces: bool = True) -> None:
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
        self.max_positions = max_positions
        spec = json.loads(base.to_str())
        added = list(base.get_added_tokens_decoder().values())
        #: Whether a text may be tokenized by prefixes when truncating (else it is tokenized whole): BERT's
        #: pipeline, with special tokens matched in the raw text (not after normalizing).
        self.prefix_safe = not any(t.normalized for t in added) and all(
            (spec.get(part) or {}).get("type") == kind for part, kind in PREFIX_SAFE_PIPELINE.items()
        )
        # A special token ([MASK] ...) straddling the end of a prefix would be cut in two: tokens ending
        # within its length of the end are not taken as final.
        self._added_chars = max((len(t.content) for t in added), default=0)
        #: transformers' ``clean_up_tokenization_spaces`` (True for BERT's tokenizers), used by :meth:`decode`.
        self.clean_up_spaces = clean_up_spaces

    def decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        """Text of ``ids`` as transformers' fast BERT tokenizer decodes it (WordPiece merged, and with
        ``clean_up_spaces`` the spaces before punctuation and English contractions removed)."""
        text: str = self._base.decode(ids, skip_special_tokens=skip_special_tokens)
        return clean_up_tokenization(text) if self.clean_up_spaces else text

    def token_to_id(self, token: str) -> int | None:
        found: int | None = self._base.token_to_id(token)
        return found

    def encode(
        self,
        texts: Sequence[str],
        pairs: Sequence[str] | None,
        *,
        truncation: bool,
        max_length: int | None,
        first_index: int = 0,
    ) -> list[Encoding]:
        """Encode ``texts`` (with ``pairs`` when given) without padding.

        Without truncation each text is tokenized whole. With it, only a prefix of each text is tokenized:
        ``PREFIX_CHARS_PER_TOKEN`` (8) characters per token that can be kept (``max_length - 2`` for a
        text, ``max_length - 2`` for each side of a pair, since ``longest_first`` needs to know whether a
        side is longer than the whole budget), doubled until the prefix holds that many complete tokens or
        is the whole text. The ids are exactly those of tokenizing the whole text and cutting it; the work
        is proportional to the tokens kept, and about twice the text at most for texts that give few tokens
        per character (whitespace, control characters); when both sides of a pair are longer than the budget,
        the shorter side is tokenized to its end to learn which side keeps the odd token. Unlike a cut at a
        fixed number of characters (TEI cuts at 250 per token), this never changes the result.

        Args:
            texts: first sequences.
            pairs: second sequences, one per text, or ``None``; an empty one makes its input a single text.
            truncation: cut inputs longer than ``max_length`` (longest first for pairs) instead of raising.
            max_length: token limit including special tokens; ``None``: no limit (only without truncation;
                the caller judges each input's length, as a corpus job does per row).
            first_index: index of ``texts[0]`` in the caller's whole input, for error messages.

        Returns:
            One encoding per input, with ``[CLS]``/``[SEP]``, in input order.

        Raises:
            InputTooLongError: an input is longer than ``max_length`` and ``truncation`` is off (a
                ``ValueError``).
            ValueError: texts and pairs differ in length, ``max_length`` leaves no room for any token, or
                ``truncation`` is asked for without a ``max_length``.
        """
        texts = [clean_text(text) for text in texts]
        cleaned_pairs = None if pairs is None else [clean_text(pair) for pair in pairs]
        if cleaned_pairs is not None and len(texts) != len(cleaned_pairs):
            raise ValueError(
                f"texts and pairs differ in length ({len(texts)} vs {len(cleaned_pairs)}); pass one pair per text"
            )
        if truncation:
            if max_length is None:
                raise ValueError("truncation needs a max_length to cut to; pass max_length")
            return self._encode_truncated(texts, cleaned_pairs, max_length)
        if max_length is not None:
            return self._encode_within(texts, cleaned_pairs, max_length, first_index)
        batch = texts if cleaned_pairs is None else [_input(*item) for item in zip(texts, cleaned_pairs, strict=True)]
        encodings: list[Encoding] = self._base.encode_batch(batch, add_special_tokens=True)
        return encodings

    def _encode_within(
        self, texts: list[str], pairs: list[str] | None, max_length: int, first_index: int
    ) -> list[Encoding]:
        """Encode inputs that must fit ``max_length`` at a cost bounded by it, however long the texts are.

        Every input is tokenized only as far as ``max_length + 1`` tokens (the prefix truncation of
        :meth:`_encode_truncated`, whose result is exactly that of tokenizing the whole input and cutting it):
        one that reaches them is over the limit, one that does not was tokenized whole. So a 2 MB text is
        refused in milliseconds; its exact token count is given when it has at most ``EXACT_COUNT_CHARS``
        characters.

        Raises:
            InputTooLongError: the first input over ``max_length``.
        """
        encodings = self._encode_truncated(texts, pairs, max_length + 1, exact=False)
        for offset, encoding in enumerate(encodings):
            if len(encoding) <= max_length:
                continue
            chars = len(texts[offset]) + (len(pairs[offset]) if pairs is not None else 0)
            length = None
            if chars <= EXACT_COUNT_CHARS:
                whole = self._base.encode_batch(
                    [_input(texts[offset], None if pairs is None else pairs[offset])], add_special_tokens=True
                )
                length = len(whole[0])
            raise InputTooLongError(first_index + offset, length, max_length)
        return encodings

    def _encode_truncated(
        self, texts: list[str], pairs: list[str] | None, max_length: int, *, exact: bool = True
    ) -> list[Encoding]:
        """Encode inputs cut to ``max_length`` tokens: texts from the right, pairs longest first
        (:func:`pair_truncation_lengths`); a pair whose second text is empty is its first text alone.

        Inputs short enough in characters are first encoded whole in one batch (most inputs fit and are
        done); the others are cut from the leading tokens of each side. ``exact=False`` skips comparing the
        lengths of two sides that both exceed the budget (which side keeps the odd token), for a caller that
        only asks whether an input fits.
        """
        paired = [i for i in range(len(texts)) if pairs is not None and pairs[i]]
        budget = max_length - SPECIAL_TOKENS_SINGLE
        if budget < 0:
            raise ValueError(f"max_length={max_length} leaves no room for [CLS] and [SEP]; use max_length >= 2")
        pair_budget = max_length - SPECIAL_TOKENS_PAIR
        if paired and pair_budget <= 0:
            raise ValueError(
                f"max_length={max_length} leaves no room for a pair; use max_length > {SPECIAL_TOKENS_PAIR}"
            )
        second = [pairs[i] if pairs is not None else "" for i in range(len(texts))]
        found: list[Encoding | None] = [None] * len(texts)
        limit = PREFIX_CHARS_PER_TOKEN * max_length
        short = [i for i in range(len(texts)) if len(texts[i]) + len(second[i]) <= limit]
        batch = [_input(texts[i], second[i]) for i in short]
        for i, encoding in zip(short, self._base.encode_batch(batch, add_special_tokens=True), strict=True):
            if len(encoding) <= max_length:
                found[i] = encoding
        cut = [i for i, encoding in enumerate(found) if encoding is None and not second[i]]
        for i, (encoding, known) in zip(cut, self._leading_tokens([texts[i] for i in cut], budget), strict=True):
            _cut(encoding, known)
            found[i] = self._base.post_process(encoding, None, add_special_tokens=True)
        cut = [i for i, encoding in enumerate(found) if encoding is None]
        firsts = self._leading_tokens([texts[i] for i in cut], pair_budget + 1)
        seconds = self._leading_tokens([second[i] for i in cut], pair_budget + 1)
        for i, (first, first_known), (other, second_known) in zip(cut, firsts, seconds, strict=True):
            if exact and first_known == second_known == pair_budget + 1:
                # Both reach the cap: the odd token goes to the longer side, so find which one is.
                first_known += self._first_is_longer(texts[i], second[i], pair_budget + 1)
            keep_first, keep_second = pair_truncation_lengths(first_known, second_known, pair_budget)
            _cut(first, keep_first)
            _cut(other, keep_second)
            found[i] = self._base.post_process(first, other, add_special_tokens=True)
        return [encoding for encoding in found if encoding is not None]

    def _first_is_longer(self, first: str, second: str, need: int) -> bool:
        """Whether ``first`` has more tokens than ``second``, both known to have at least ``need``.

        Both are tokenized by prefixes for twice as many tokens at a time until one of them ends, so the cost
        follows the shorter text, not the longer.
        """
        while True:
            need *= 2
            (_, first_known), (_, second_known) = self._leading_tokens([first, second], need)
            if first_known < need or second_known < need:
                return first_known > second_known

    def _leading_tokens(self, texts: list[str], need: int) -> list[tuple[Encoding, int]]:
        """For each text, an encoding without special tokens whose first ``known`` tokens are those of the
        whole text, where ``known = min(need, tokens in the whole text)``.

        Prefixes of ``PREFIX_CHARS_PER_TOKEN * need`` characters are tokenized first (in one batch), and
        those of texts without enough complete tokens are doubled and tokenized again: geometric growth
        keeps the total work within twice the last prefix, and a text that gives no tokens at all ends
        when the prefix reaches its end.
        """
        found: list[tuple[Encoding, int] | None] = [None] * len(texts)
        pending = list(range(len(texts)))
        length = max(need, 1) * PREFIX_CHARS_PER_TOKEN
        while pending:
            whole = [not self.prefix_safe or len(texts[i]) <= length for i in pending]
            encodings = self._base.encode_batch(
                [texts[i] if w else texts[i][:length] for i, w in zip(pending, whole, strict=True)],
                add_special_tokens=False,
            )
            later = []
            for i, is_whole, encoding in zip(pending, whole, encodings, strict=True):
                if is_whole:
                    found[i] = (encoding, min(need, len(encoding)))
                elif self._holds_complete(encoding, need, length):
                    found[i] = (encoding, need)
                else:
                    later.append(i)
            pending = later
            length *= 2
        return [item for item in found if item is not None]

    def _holds_complete(self, encoding: Encoding, need: int, length: int) -> bool:
        """Whether the first ``need`` tokens of a ``length``-character prefix's encoding are final.

        A token is final when its word is not the prefix's last word (which the cut may have split) and
        it ends before any special token that the cut could have split begins.
        """
        if need == 0:
            return True
        if len(encoding) < need:
            return False
        words: list[int | None] = encoding.word_ids
        end: int = encoding.offsets[need - 1][1]
        return words[need - 1] != words[-1] and end <= length - self._added_chars
