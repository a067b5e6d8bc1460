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

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tokenizers import Encoding, Tokenizer

__all__ = [
    "AGGREGATION_STRATEGIES",
    "DEFAULT_IGNORE_LABELS",
    "TokenStrings",
    "check_aggregation_strategy",
    "entities",
    "label_probabilities",
]

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


class TokenStrings:
    """What the post-processing reads from the tokenizer: token strings, their decoding, ``[UNK]``."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        model = tokenizer.model
        unk = getattr(model, "unk_token", None)
        self.unk_id: int | None = tokenizer.token_to_id(unk) if isinstance(unk, str) else None
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
