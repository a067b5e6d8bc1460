"""``tag``: token classification (named entities, PII, parts of speech) with character offsets.

The answers are those of transformers' ``TokenClassificationPipeline`` (4.57) for the same checkpoint,
strategy and stride, computed with numpy from the graph's ``token_logits``:

1. softmax over the labels of every token (float32, shifted by the row maximum, as the pipeline);
2. every token but ``[CLS]``/``[SEP]`` becomes a pre-entity with its vocabulary string, its scores and its
   character offsets **from the fast tokenizer** (never found by searching the text), so ``start``/``end``
   index the caller's own string whatever it holds: accents, CJK, emoji, repeated spaces, control
   characters. ``[UNK]`` tokens show the text they stand for;
3. ``none`` returns tokens; ``simple`` groups adjacent tokens whose labels share a tag (``B-PER I-PER`` is one
   ``PER``, a second ``B-`` starts a new group, a label without ``B-``/``I-`` continues); ``first``,
   ``average`` and ``max`` first fuse the word pieces of a word (a piece is a continuation when its string
   and its text differ in length, the pipeline's test for WordPiece tokenizers) into one label, then group;
4. labels in ``ignore_labels`` are dropped; with several windows (``stride``) the entities of every window are
   merged: of overlapping entities the longer, then the higher-scoring one stays.

Scores are float32 probabilities; ``word`` is the tokenizer's decoding of the pieces (lower-cased by an
uncased model), while ``text[start:end]`` is the caller's original spelling.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from tokenizers import Encoding, Tokenizer

from ..batching import Batch, TokenSequence
from ..errors import InputTooLongError, OptionError
from ..tokenizer import SPECIAL_TOKENS_SINGLE
from .base import ModelFacts, Prepared, check_bool

if TYPE_CHECKING:
    from ..tokenizer import TextTokenizer
    from ..windows import Windowing

__all__ = [
    "AGGREGATION_STRATEGIES",
    "DEFAULT_IGNORE_LABELS",
    "TOKEN_LOGITS",
    "Tag",
    "TokenStrings",
    "check_aggregation_strategy",
    "check_ignore_labels",
    "entities",
    "label_probabilities",
    "merge_entities",
    "tag_windows",
]

#: The graph output of a token-classification export: ``[b, t, num_labels]`` float32.
TOKEN_LOGITS = "token_logits"

#: ``none``: one answer per token; ``simple``: adjacent tokens grouped by tag; ``first``/``average``/``max``:
#: the word's label from its first piece, its mean scores, or its most confident piece, then grouped.
AGGREGATION_STRATEGIES = ("none", "simple", "first", "average", "max")
#: Labels dropped from the answers unless the caller says otherwise (the pipeline's default).
DEFAULT_IGNORE_LABELS = ("O",)
_WORD_STRATEGIES = ("first", "average", "max")


def check_aggregation_strategy(strategy: object) -> str:
    """``strategy`` when it is one of ``AGGREGATION_STRATEGIES`` (case-insensitive, as the pipeline).

    Raises:
        TypeError: ``strategy`` is not a string.
        ValueError: unknown strategy.
    """
    if not isinstance(strategy, str):
        raise TypeError(f"aggregation_strategy must be a string, got {type(strategy).__name__}")
    if strategy.lower() not in AGGREGATION_STRATEGIES:
        raise ValueError(
            f"unknown aggregation_strategy {strategy!r}; expected one of {', '.join(AGGREGATION_STRATEGIES)}"
        )
    return strategy.lower()


def check_ignore_labels(ignore_labels: object) -> tuple[str, ...]:
    """``ignore_labels`` as a tuple of label names.

    Raises:
        TypeError: a single string (``"O"`` would be read as its characters) or not an iterable of strings.
    """
    if isinstance(ignore_labels, str) or not isinstance(ignore_labels, Collection):
        raise TypeError(
            f"ignore_labels must be a list or tuple of label names, got {type(ignore_labels).__name__}; "
            "e.g. ignore_labels=('O',), or () to keep every label"
        )
    labels = tuple(ignore_labels)
    for label in labels:
        if not isinstance(label, str):
            raise TypeError(f"ignore_labels must hold label names (str), got {type(label).__name__}")
    return labels


class TokenStrings:
    """What the post-processing reads from the tokenizer: token strings, their decoding, ``[UNK]``."""

    def __init__(self, tokenizer: Tokenizer, unk_token_id: int | None = None) -> None:
        """``unk_token_id``: the tokenizer's unknown token as its config names it (what the pipeline compares
        ids with); without it, the model's own ``unk_token`` (WordPiece and BPE have one; a Unigram model
        only keeps an index, so XLM-R's and DeBERTa's must be given)."""
        self._tokenizer = tokenizer
        model = tokenizer.model
        unk = getattr(model, "unk_token", None)
        if unk_token_id is None and isinstance(unk, str):
            unk_token_id = tokenizer.token_to_id(unk)
        self.unk_id: int | None = unk_token_id
        #: WordPiece marks continuations (``##``): a piece is a continuation when its string and its text
        #: differ in length. Other tokenizers fall back to the pipeline's whitespace heuristic.
        self.word_aware = bool(getattr(model, "continuing_subword_prefix", None))
        self._decoder = tokenizer.decoder

    def token(self, token_id: int) -> str:
        found: str | None = self._tokenizer.id_to_token(token_id)
        return "" if found is None else found

    def join(self, tokens: list[str]) -> str:
        """The pieces decoded to text as transformers' ``convert_tokens_to_string`` does (``##`` joined)."""
        if self._decoder is None:
            return " ".join(tokens)
        text: str = self._decoder.decode(tokens)
        return text


@dataclass
class _Piece:
    word: str
    scores: np.ndarray  # [labels] float32
    start: int
    end: int
    index: int
    is_subword: bool


def label_probabilities(token_logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis in float32, as the pipeline computes it: ``[t, labels]`` → same shape."""
    logits = np.asarray(token_logits, dtype=np.float32)
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probabilities: np.ndarray = shifted / shifted.sum(axis=-1, keepdims=True)
    return probabilities


def _pieces(text: str, window: Encoding, scores: np.ndarray, strings: TokenStrings) -> list[_Piece]:
    pieces = []
    special = window.special_tokens_mask
    for index, (token_id, (start, end)) in enumerate(zip(window.ids, window.offsets, strict=True)):
        if special[index]:
            continue
        word = strings.token(token_id)
        word_ref = text[start:end]
        if strings.word_aware:
            is_subword = len(word) != len(word_ref)
        else:
            is_subword = start > 0 and " " not in text[start - 1 : start + 1]
        if token_id == strings.unk_id:
            word = word_ref
            is_subword = False
        pieces.append(_Piece(word, scores[index], start, end, index, is_subword))
    return pieces


def _word(pieces: list[_Piece], strategy: str, labels: Sequence[str], strings: TokenStrings) -> dict[str, Any]:
    if strategy == "first":
        scores = pieces[0].scores
    elif strategy == "max":
        scores = max(pieces, key=lambda piece: piece.scores.max()).scores
    else:
        scores = np.nanmean(np.stack([piece.scores for piece in pieces]), axis=0)
    best = int(scores.argmax())
    return {
        "entity": labels[best],
        "score": scores[best],
        "word": strings.join([piece.word for piece in pieces]),
        "start": pieces[0].start,
        "end": pieces[-1].end,
    }


def _split_tag(label: str) -> tuple[str, str]:
    if label.startswith("B-"):
        return "B", label[2:]
    if label.startswith("I-"):
        return "I", label[2:]
    return "I", label


def _group(members: list[dict[str, Any]], strings: TokenStrings) -> dict[str, Any]:
    return {
        "entity_group": members[0]["entity"].split("-", 1)[-1],
        "score": np.mean(np.nanmean([member["score"] for member in members])),
        "word": strings.join([member["word"] for member in members]),
        "start": members[0]["start"],
        "end": members[-1]["end"],
    }


def _group_entities(tokens: list[dict[str, Any]], strings: TokenStrings) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = []
    members: list[dict[str, Any]] = []
    for token in tokens:
        if members:
            bi, tag = _split_tag(token["entity"])
            _, last_tag = _split_tag(members[-1]["entity"])
            if tag == last_tag and bi != "B":
                members.append(token)
                continue
            groups.append(_group(members, strings))
        members = [token]
    if members:
        groups.append(_group(members, strings))
    return groups


def _window_entities(
    text: str, window: Encoding, logits: np.ndarray, labels: Sequence[str], strings: TokenStrings, strategy: str
) -> list[dict[str, Any]]:
    pieces = _pieces(text, window, label_probabilities(logits), strings)
    if strategy in ("none", "simple"):
        tokens = []
        for piece in pieces:
            best = int(piece.scores.argmax())
            tokens.append(
                {
                    "entity": labels[best],
                    "score": piece.scores[best],
                    "index": piece.index,
                    "word": piece.word,
                    "start": piece.start,
                    "end": piece.end,
                }
            )
        return tokens if strategy == "none" else _group_entities(tokens, strings)
    words: list[dict[str, Any]] = []
    group: list[_Piece] = []
    for piece in pieces:
        if group and not piece.is_subword:
            words.append(_word(group, strategy, labels, strings))
            group = []
        group.append(piece)
    if group:
        words.append(_word(group, strategy, labels, strings))
    return _group_entities(words, strings)


def _merge_overlapping(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entities of overlapping windows: of entities starting inside the previous one the longer (then the
    higher-scoring) stays, as the pipeline's ``aggregate_overlapping_entities``."""
    if not found:
        return found
    ordered = sorted(found, key=lambda entity: entity["start"])
    merged = []
    previous = ordered[0]
    for entity in ordered:
        if previous["start"] <= entity["start"] < previous["end"]:
            length = entity["end"] - entity["start"]
            previous_length = previous["end"] - previous["start"]
            if length > previous_length or (length == previous_length and entity["score"] > previous["score"]):
                previous = entity
        else:
            merged.append(previous)
            previous = entity
    merged.append(previous)
    return merged


def entities(
    text: str,
    windows: Sequence[Encoding],
    token_logits: Sequence[np.ndarray],
    labels: Sequence[str],
    strings: TokenStrings,
    *,
    aggregation_strategy: str = "simple",
    ignore_labels: Collection[str] = DEFAULT_IGNORE_LABELS,
) -> list[dict[str, Any]]:
    """The entities of one text, as ``pipeline("token-classification")`` returns them.

    Args:
        text: the caller's text (offsets index it).
        windows: its encodings from :class:`bertonnx.windows.Windowing` (one unless it was windowed).
        token_logits: per window, ``[tokens, labels]`` float32 logits of that window's tokens (no padding).
        labels: label names by label index (the checkpoint's ``id2label``).
        strings: the tokenizer's strings.
        aggregation_strategy: one of ``AGGREGATION_STRATEGIES``.
        ignore_labels: labels (or entity groups) left out of the answer.

    Returns:
        For ``none``: per token ``{"entity", "score", "index", "word", "start", "end"}`` (``index`` = the
        token's position in the window, ``[CLS]`` = 0). Otherwise per entity ``{"entity_group", "score",
        "word", "start", "end"}``. ``start``/``end`` are character offsets into ``text``; ``score`` a float.

    Raises:
        ValueError: unknown strategy, windows and logits differ in number, or several windows with
            ``none`` (the pipeline refuses ``stride`` without aggregation).
    """
    strategy = check_aggregation_strategy(aggregation_strategy)
    if len(windows) != len(token_logits):
        raise ValueError(f"got {len(windows)} windows but {len(token_logits)} logit arrays; pass one per window")
    if strategy == "none" and len(windows) > 1:
        raise ValueError(
            "a windowed text needs an aggregation_strategy other than 'none' (the tokens of overlapping windows "
            "cannot be merged one by one); use 'simple', 'first', 'average' or 'max'"
        )
    found: list[dict[str, Any]] = []
    for window, logits in zip(windows, token_logits, strict=True):
        found.extend(
            entity
            for entity in _window_entities(text, window, logits, labels, strings, strategy)
            if entity.get("entity") not in ignore_labels and entity.get("entity_group") not in ignore_labels
        )
    if len(windows) > 1:
        found = _merge_overlapping(found)
    for entity in found:
        entity["score"] = float(entity["score"])
    return found


@dataclass(frozen=True)
class Tag:
    """Token classification's steps: a text's windows are its units (:func:`tag_windows`); per unit, its
    ``[tokens, num_labels]`` float32 ``token_logits`` without padding; per text, the entities of all its windows
    merged (:func:`merge_entities`).

    Attributes:
        windowing: cuts long texts into windows (``None``: the task only runs units).
        strings: the tokenizer's token strings, for entity words.
        labels: label names by index (the checkpoint's ``id2label``).
        max_length: tokens per window (the model's positions).
        aggregation_strategy: one of ``AGGREGATION_STRATEGIES``.
        ignore_labels: labels left out.
        stride: tokens shared by consecutive windows of a long text; ``None`` refuses texts over ``max_length``.
        tokenizer: the export's tokenizer (with ``truncation``, or to reject long texts with ``strict=False``).
        truncation: cut a long text to ``max_length`` instead of refusing it (when ``stride`` is ``None``).
    """

    windowing: Windowing | None = None
    strings: TokenStrings | None = None
    labels: tuple[str, ...] = ()
    max_length: int = 512
    aggregation_strategy: str = "simple"
    ignore_labels: tuple[str, ...] = DEFAULT_IGNORE_LABELS
    stride: int | None = None
    tokenizer: TextTokenizer | None = None
    truncation: bool = False
    name = "tag"
    outputs = (TOKEN_LOGITS,)
    #: A text's windows are batched with the windows of its chunk only.
    window_tokens = 0

    @classmethod
    def build(
        cls,
        model: ModelFacts,
        *,
        aggregation_strategy: str = "simple",
        ignore_labels: Collection[str] = DEFAULT_IGNORE_LABELS,
        stride: int | None = None,
        truncation: bool = False,
    ) -> Tag:
        """The task on ``model``'s token-classification head.

        Raises:
            TypeError: ``ignore_labels`` is a single string or not strings; another option has the wrong type.
            ValueError: unknown ``aggregation_strategy``; ``stride`` with ``none``.
        """
        strategy = check_aggregation_strategy(aggregation_strategy)
        if stride is not None and (isinstance(stride, bool) or not isinstance(stride, int)):
            raise TypeError(f"stride must be an int or None, got {type(stride).__name__}")
        return cls(
            model.windowing,
            model.token_strings,
            tuple(model.labels),
            model.max_length,
            strategy,
            check_ignore_labels(ignore_labels),
            stride,
            model.tokenizer,
            check_bool(truncation, "truncation"),
        )

    def prepare(
        self, first: Sequence[str], second: Sequence[str] | None = None, first_index: int = 0, *, strict: bool = True
    ) -> Prepared:
        """Cut each text into its windows (one when it fits).

        With ``strict=False`` a text over ``max_length`` that neither ``stride`` nor ``truncation`` can take is
        rejected (:class:`~bertonnx.errors.InputTooLongError`) instead of refused.

        Raises:
            ValueError: as :func:`tag_windows`.
        """
        if self.windowing is None:
            raise ValueError("Tag was built without a tokenizer; build it with bertonnx.tasks.make_task")
        texts = list(first)
        kept = list(range(first_index, first_index + len(texts)))
        rejected: dict[int, Exception] = {}
        if self.stride is None and (self.truncation or not strict) and self.tokenizer is not None:
            encodings = self.tokenizer.encode(
                texts, None, truncation=self.truncation, max_length=self.max_length if self.truncation else None
            )
            windows = []
            kept, keep_texts = [], []
            for offset, encoding in enumerate(encodings):
                if len(encoding) > self.max_length:
                    index = first_index + offset
                    rejected[index] = InputTooLongError(index, len(encoding), self.max_length)
                    continue
                windows.append([encoding])
                kept.append(first_index + offset)
                keep_texts.append(texts[offset])
            texts = keep_texts
        else:
            windows = tag_windows(
                self.windowing,
                texts,
                max_length=self.max_length,
                aggregation_strategy=self.aggregation_strategy,
                stride=self.stride,
                first_index=first_index,
            )
        units: list[TokenSequence] = [window for text_windows in windows for window in text_windows]
        counts = [len(text_windows) for text_windows in windows]
        lengths = [_text_tokens(text_windows, self.stride or 0) for text_windows in windows]
        return Prepared(units, counts, (texts, windows), kept, rejected, lengths)

    def postprocess(
        self, outputs: Mapping[str, np.ndarray], batch: Batch, rows: np.ndarray | None = None
    ) -> list[np.ndarray]:
        """Per row of ``rows`` (every row when ``None``), its logits cut to its tokens (copied)."""
        logits = outputs[TOKEN_LOGITS]
        picked = range(len(batch)) if rows is None else rows.tolist()
        return [logits[row, : batch.lengths[row]].copy() for row in picked]

    def finish(self, prepared: Prepared, answers: Sequence[Any]) -> list[Any]:
        """Per text, its entities (:func:`entities`), from the logits of every window in order."""
        if self.strings is None:
            raise ValueError("Tag was built without a tokenizer; build it with bertonnx.tasks.make_task")
        texts, windows = prepared.state
        return merge_entities(
            texts,
            windows,
            list(answers),
            self.labels,
            self.strings,
            aggregation_strategy=self.aggregation_strategy,
            ignore_labels=self.ignore_labels,
        )


def _text_tokens(windows: Sequence[Encoding], stride: int) -> int:
    """Tokens of a whole text (``[CLS]`` and ``[SEP]`` included) from its windows: the first window's, then each
    next window's own (it repeats ``stride`` tokens of the one before)."""
    inner = [len(window) - SPECIAL_TOKENS_SINGLE for window in windows]
    return SPECIAL_TOKENS_SINGLE + inner[0] + sum(tokens - stride for tokens in inner[1:])


def tag_windows(
    windowing: Windowing,
    texts: Sequence[str],
    *,
    max_length: int,
    aggregation_strategy: str = "simple",
    stride: int | None = None,
    first_index: int = 0,
) -> list[list[Encoding]]:
    """Each text's windows (:meth:`~bertonnx.windows.Windowing.text_windows`), after checking the options.

    Raises:
        ValueError: unknown strategy, ``stride`` with ``none``, ``stride`` out of range, or a text too long
            without ``stride``.
    """
    strategy = check_aggregation_strategy(aggregation_strategy)
    if stride is not None and strategy == "none":
        raise OptionError(
            "aggregation_strategy",
            "none",
            "'simple', 'first', 'average' or 'max' when stride is set",
            "stride windows long texts, whose overlapping tokens only an aggregation strategy can merge "
            "(transformers' pipeline refuses 'none' with stride too)",
        )
    return windowing.text_windows(texts, max_length=max_length, stride=stride, first_index=first_index)


def merge_entities(
    texts: Sequence[str],
    windows: Sequence[Sequence[Encoding]],
    token_logits: Sequence[np.ndarray],
    labels: Sequence[str],
    strings: TokenStrings,
    *,
    aggregation_strategy: str = "simple",
    ignore_labels: Collection[str] = DEFAULT_IGNORE_LABELS,
) -> list[list[dict[str, Any]]]:
    """:func:`entities` of each text, from the logits of every window of every text in order (flat)."""
    found = []
    start = 0
    for text, text_windows in zip(texts, windows, strict=True):
        stop = start + len(text_windows)
        found.append(
            entities(
                text,
                text_windows,
                token_logits[start:stop],
                labels,
                strings,
                aggregation_strategy=aggregation_strategy,
                ignore_labels=ignore_labels,
            )
        )
        start = stop
    return found
