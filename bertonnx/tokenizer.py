"""The export's fast tokenizer, with padding and truncation set by the runtime, never by the file.

Everything family-specific is read from the export's files, never assumed: the special tokens (``[CLS]`` or
``<s>``, ``[MASK]`` or ``<mask>`` ...) from ``tokenizer_config.json``, how many special tokens a text and a pair
get from ``tokenizer.json``'s post-processor (BERT's ``[CLS] A [SEP] B [SEP]`` adds 3, RoBERTa's
``<s> A </s></s> B </s>`` 4), and whether the graph takes ``token_type_ids`` from the manifest.

A ``tokenizer.json`` may carry padding and truncation settings (the MiniLM one pads and truncates to 128);
the ``tokenizers`` library applies them silently. We clear both on load, pad in :mod:`bertonnx.batching`,
and truncate only when the caller asks.

Pairs are truncated here, not by ``tokenizers`` (whose truncation keeps every cut-off window, below), but by
its own ``longest_first`` rule, which transformers' fast tokenizers and so its pipelines apply
(:func:`pair_truncation_lengths`): the longer side is cut first, and when both must be cut the shorter keeps
half the budget and the longer the rest (the odd token of an odd budget goes to the longer side, to the
second on a tie; BERT's original ``_truncate_seq_pair`` gives it to the first, see benchmarks/DEFAULTS.md,
"Pair truncation by the fast tokenizer's rule"). We encode both sequences without special tokens, cut them
and add the special tokens with the file's own post-processor (``[CLS]``/``[SEP]`` for BERT, ``<s>``/``</s></s>``
for RoBERTa). An exactly empty second text is no pair:
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
replace each by NUL first: NUL is no part of any special token and BERT's normalizer deletes it too. Other
normalizers keep NUL (byte-level BPE would give it a token), and their Python tokenizers cannot encode a lone
surrogate at all; for them it becomes U+FFFD, the replacement character, as ``str.encode(errors="replace")``
would write it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
    "read_special_tokens",
    "special_token_counts",
    "surrogate_stand_in",
]

#: BERT's ``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]`` (a tokenizer's own counts:
#: :attr:`TextTokenizer.special_tokens_single` and :attr:`TextTokenizer.special_tokens_pair`).
SPECIAL_TOKENS_SINGLE = 2
SPECIAL_TOKENS_PAIR = 3
#: The special tokens a tokenizer names in ``tokenizer_config.json`` (transformers' attribute names).
SPECIAL_TOKEN_NAMES = ("cls_token", "sep_token", "mask_token", "pad_token", "unk_token", "bos_token", "eos_token")
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
#: The manifest beside ``tokenizer.json`` in an export (its graph inputs say whether segments are fed).
MANIFEST_FILE = "bertonnx.json"
#: Pair truncation rules: BERT's ``_truncate_seq_pair`` and the fast tokenizer's ``longest_first``.
PAIR_RULE_FAST = "longest_first"
#: Stands in for a lone surrogate where the normalizer keeps NUL (every normalizer but BERT's).
REPLACEMENT_CHARACTER = "\ufffd"
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


def clean_text(text: str, stand_in: str = SURROGATE_STAND_IN) -> str:
    """``text`` with each lone surrogate replaced by ``stand_in`` (NUL by default, which BERT's normalizer
    deletes, as the reference deletes the surrogate; :func:`surrogate_stand_in` picks it per tokenizer);
    ``text`` itself when it holds none (an ASCII string is not even scanned)."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub(stand_in, text)


def surrogate_stand_in(spec: dict[str, Any]) -> str:
    """What stands in for a lone surrogate for the tokenizer of ``spec`` (a parsed ``tokenizer.json``): NUL
    where BERT's normalizer deletes it, else U+FFFD."""
    normalizer = spec.get("normalizer") or {}
    bert = normalizer.get("type") == "BertNormalizer" and normalizer.get("clean_text", True)
    return SURROGATE_STAND_IN if bert else REPLACEMENT_CHARACTER


def special_token_counts(tokenizer: Tokenizer) -> tuple[int, int]:
    """Special tokens the tokenizer's post-processor adds to a text and to a pair (BERT's 2 and 3, RoBERTa's
    2 and 4; 0 and 0 without a post-processor)."""
    processor = tokenizer.post_processor
    if processor is None:
        return 0, 0
    return int(processor.num_special_tokens_to_add(False)), int(processor.num_special_tokens_to_add(True))


def _token_text(value: object) -> str | None:
    if isinstance(value, dict):  # an AddedToken as transformers saves it
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def read_special_tokens(directory: Path) -> dict[str, str]:
    """The special tokens transformers' tokenizer of ``directory`` has, by attribute name (``cls_token`` ...),
    from ``tokenizer_config.json`` and ``special_tokens_map.json`` (the first wins); only those named."""
    found: dict[str, str] = {}
    for name in (TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE):
        try:
            data = json.loads((directory / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        for key in SPECIAL_TOKEN_NAMES:
            token = _token_text(data.get(key))
            if token is not None:
                found.setdefault(key, token)
    return found


def _graph_takes_segments(directory: Path) -> bool | None:
    """Whether the export's graph takes ``token_type_ids`` (its manifest's graph inputs), ``None`` unknown."""
    try:
        manifest = json.loads((directory / MANIFEST_FILE).read_text(encoding="utf-8"))
        inputs = manifest["graph"]["inputs"]
        return any(entry["name"] == "token_type_ids" for entry in inputs)
    except (OSError, ValueError, KeyError, TypeError):
        return None


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
    """Encodes texts and pairs with the tokenizer's own template (BERT's ``[CLS] A [SEP] (B [SEP])`` with segment
    ids 0/1, RoBERTa's ``<s> A </s>(</s> B </s>)`` ...).

    Attributes read from the export's files (``None`` where the tokenizer has no such token):
        cls_token, sep_token, mask_token, pad_token, unk_token: the special tokens' strings (``[CLS]``, ``<s>``
            ...), and ``cls_token_id`` ... their ids.
        special_tokens_single, special_tokens_pair: special tokens added to a text and to a pair.
        takes_token_type_ids: the graph takes ``token_type_ids`` (False for RoBERTa, XLM-R, DistilBERT, MPNet).
        pair_rule: how a pair is truncated: ``longest_first``, the fast tokenizer's (every family).
        surrogate_stand_in: what a lone surrogate becomes before tokenizing.
    """

    def __init__(self, path: Path, max_positions: int, *, clean_up_spaces: bool = True) -> None:
        """Load ``tokenizer.json`` and clear any padding or truncation baked into it; read the special tokens
        from ``tokenizer_config.json`` beside it and the graph's inputs from the manifest beside it.

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
        bert_pipeline = all((spec.get(part) or {}).get("type") == kind for part, kind in PREFIX_SAFE_PIPELINE.items())
        #: Whether a text may be tokenized by prefixes when truncating (else it is tokenized whole): BERT's
        #: pipeline, with special tokens matched in the raw text (not after normalizing).
        self.prefix_safe = bert_pipeline and not any(t.normalized for t in added)
        self.pair_rule = PAIR_RULE_FAST  # every family: what transformers' fast tokenizers (the pipelines) do
        self.surrogate_stand_in = surrogate_stand_in(spec)
        self.special_tokens_single, self.special_tokens_pair = special_token_counts(base)
        directory = Path(path).parent
        specials = read_special_tokens(directory)
        self.cls_token: str | None = specials.get("cls_token") or specials.get("bos_token")
        self.sep_token: str | None = specials.get("sep_token") or specials.get("eos_token")
        self.mask_token: str | None = specials.get("mask_token")
        self.pad_token: str | None = specials.get("pad_token")
        self.unk_token: str | None = specials.get("unk_token")
        self.cls_token_id = self._id_of(self.cls_token)
        self.sep_token_id = self._id_of(self.sep_token)
        self.mask_token_id = self._id_of(self.mask_token)
        self.pad_token_id = self._id_of(self.pad_token)
        self.unk_token_id = self._id_of(self.unk_token)
        segments = _graph_takes_segments(directory)
        self.takes_token_type_ids: bool = segments if segments is not None else True
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

    def _id_of(self, token: str | None) -> int | None:
        return None if token is None else self.token_to_id(token)

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
        texts = [clean_text(text, self.surrogate_stand_in) for text in texts]
        cleaned_pairs = None if pairs is None else [clean_text(pair, self.surrogate_stand_in) for pair in pairs]
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

    def encode_first_cut(
        self, texts: Sequence[str], pairs: Sequence[str], max_length: int, first_index: int = 0
    ) -> list[Encoding]:
        """Encode pairs cut as transformers' ``only_first`` truncation cuts them (the zero-shot pipeline's): the
        second text is kept whole and the first cut to the tokens left for it within ``max_length``. As in
        :meth:`encode`, only a prefix of a long first text is tokenized.

        Args:
            texts: first sequences (the ones cut).
            pairs: second sequences, one per text, none empty (kept whole).
            max_length: token limit including special tokens.
            first_index: index of ``texts[0]`` in the caller's whole input, for error messages.

        Raises:
            ValueError: texts and pairs differ in length, or a pair over ``max_length`` whose second text leaves
                its first no token (transformers then gives up cutting; the caller checks its second texts first).
        """
        texts = [clean_text(text, self.surrogate_stand_in) for text in texts]
        seconds = [clean_text(pair, self.surrogate_stand_in) for pair in pairs]
        if len(texts) != len(seconds):
            raise ValueError(
                f"texts and pairs differ in length ({len(texts)} vs {len(seconds)}); pass one pair per text"
            )
        found: list[Encoding | None] = [None] * len(texts)
        limit = PREFIX_CHARS_PER_TOKEN * max_length
        short = [i for i in range(len(texts)) if len(texts[i]) + len(seconds[i]) <= limit]
        batch = [_input(texts[i], seconds[i]) for i in short]
        for i, encoding in zip(short, self._base.encode_batch(batch, add_special_tokens=True), strict=True):
            if len(encoding) <= max_length:
                found[i] = encoding
        cut = [i for i, encoding in enumerate(found) if encoding is None]
        others: list[Encoding] = self._base.encode_batch([seconds[i] for i in cut], add_special_tokens=False)
        rooms = [max_length - self.special_tokens_pair - len(other) for other in others]
        for i, room, other in zip(cut, rooms, others, strict=True):
            if room < 1:
                raise ValueError(
                    f"input {first_index + i}: its second text has {len(other)} tokens, which with the "
                    f"{self.special_tokens_pair} special tokens of a pair leave its first text no room within "
                    f"max_length={max_length}; shorten the second text"
                )
        for room in sorted(set(rooms)):
            group = [k for k, r in enumerate(rooms) if r == room]
            leading = self._leading_tokens([texts[cut[k]] for k in group], room)
            for k, (first, known) in zip(group, leading, strict=True):
                _cut(first, known)
                found[cut[k]] = self._base.post_process(first, others[k], add_special_tokens=True)
        return [encoding for encoding in found if encoding is not None]

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
        budget = max_length - self.special_tokens_single
        if budget < 0:
            raise ValueError(
                f"max_length={max_length} leaves no room for the {self.special_tokens_single} special tokens; "
                f"use max_length >= {self.special_tokens_single}"
            )
        pair_budget = max_length - self.special_tokens_pair
        if paired and pair_budget <= 0:
            raise ValueError(
                f"max_length={max_length} leaves no room for a pair; use max_length > {self.special_tokens_pair}"
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
