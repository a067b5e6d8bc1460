"""Overlapping windows over inputs longer than the model takes: token classification and question answering.

BERT sees at most ``max_position_embeddings`` (512) tokens. transformers' pipelines cut a longer input into
windows that overlap by ``stride`` tokens, run each window and merge the answers; the windows come from the
fast tokenizer's own overflow support (``return_overflowing_tokens=True, stride=...``), which is the
``tokenizers`` library's truncation with a stride. We ask the same library for the same windows, so every
window holds the same tokens and offsets as the pipeline's (checked by the tests against
``PreTrainedTokenizerFast``):

- a text to tag (``TokenClassificationPipeline`` with ``stride``): windows of ``max_length`` tokens including
  ``[CLS]``/``[SEP]``, each starting ``max_length - 2 - stride`` text tokens after the previous one;
- a question and its context (``QuestionAnsweringPipeline``, truncation ``only_second``): every window
  holds the whole question and a slice of the context, consecutive slices overlapping by ``doc_stride``.

Offsets stay character offsets into the caller's string (``tokenizers`` keeps them across windows).

An input that fits is encoded once, untruncated; only longer ones are encoded again by a truncating copy of
the tokenizer. The copies are cached per setting and never changed after they are made (``tokenizers``
keeps truncation in the tokenizer object, so a shared one changed per call would race between threads).
``tokenizers`` panics (a ``BaseException``) when the stride leaves no room to advance; the stride is
checked here first and a ``ValueError`` names the fix.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Encoding, Tokenizer

from .errors import InputTooLongError, OptionError
from .tokenizer import clean_text, special_token_counts, surrogate_stand_in

__all__ = ["WINDOW_TOKENIZERS_KEPT", "Windowing"]

#: Truncating copies of the tokenizer kept (one per ``(max_length, stride, strategy)`` in use).
WINDOW_TOKENIZERS_KEPT = 8


class Windowing:
    """Cuts texts, and question/context pairs, into the windows transformers' pipelines cut them into.

    Args:
        tokenizer: the export's ``tokenizers.Tokenizer``, without padding or truncation (it is not changed).

    Thread-safe: the truncating copies are made under a lock and never changed afterwards.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._base = tokenizer
        #: Special tokens of a window of one text, and of a question/context pair (2 and 3 for BERT, 2 and 4
        #: for RoBERTa's ``<s> q </s></s> c </s>``): from the tokenizer's own post-processor.
        self.special_tokens_single, self.special_tokens_pair = special_token_counts(tokenizer)
        self._stand_in = surrogate_stand_in(json.loads(tokenizer.to_str()))
        self._copies: OrderedDict[tuple[int, int, str], Tokenizer] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path) -> Windowing:
        """From a ``tokenizer.json``, with any padding or truncation baked into the file cleared.

        Raises:
            Exception: ``tokenizers`` cannot parse the file (the export's loader has checked it already).
        """
        tokenizer = Tokenizer.from_file(str(path))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        return cls(tokenizer)

    @property
    def tokenizer(self) -> Tokenizer:
        """The untruncated tokenizer (token strings, decoding)."""
        return self._base

    def _truncating(self, max_length: int, stride: int, strategy: str) -> Tokenizer:
        key = (max_length, stride, strategy)
        with self._lock:
            found = self._copies.get(key)
            if found is None:
                found = Tokenizer.from_str(self._base.to_str())
                found.no_padding()
                found.enable_truncation(max_length, stride=stride, strategy=strategy)
                self._copies[key] = found
                while len(self._copies) > WINDOW_TOKENIZERS_KEPT:
                    self._copies.popitem(last=False)
            else:
                self._copies.move_to_end(key)
            return found

    def text_windows(
        self, texts: Sequence[str], *, max_length: int, stride: int | None, first_index: int = 0
    ) -> list[list[Encoding]]:
        """Windows of each text, as ``TokenClassificationPipeline`` cuts them with ``stride``.

        Args:
            texts: the texts (any ``str``; lone surrogates are tokenized as BERT's tokenizer deletes them).
            max_length: tokens per window including ``[CLS]`` and ``[SEP]`` (the model's positions).
            stride: tokens shared by consecutive windows, ``0 <= stride < max_length - 2`` (less the tokenizer's
                special tokens for one text; 2 for BERT and RoBERTa); ``None`` when the
                caller does not window (then a text must fit in one window).
            first_index: index of ``texts[0]`` in the caller's input, for error messages.

        Returns:
            Per text, its windows in order (one window when it fits), each with ``[CLS]``/``[SEP]``.

        Raises:
            ValueError: ``stride`` is out of range, or a text is longer than ``max_length`` and ``stride`` is
                ``None``.
        """
        room = max_length - self.special_tokens_single
        if stride is not None:
            _check_stride("stride", stride, room, f"max_length - {self.special_tokens_single} = {room}")
        cleaned = [clean_text(text, self._stand_in) for text in texts]
        whole: list[Encoding] = self._base.encode_batch(cleaned, add_special_tokens=True)
        windows = [[encoding] for encoding in whole]
        long = [i for i, encoding in enumerate(whole) if len(encoding) > max_length]
        if long and stride is None:
            i = long[0]
            raise InputTooLongError(first_index + i, len(whole[i]), max_length, option="stride")
        if long and stride is not None:
            cutter = self._truncating(max_length, stride, "longest_first")
            for i, encoding in zip(long, cutter.encode_batch([cleaned[i] for i in long]), strict=True):
                windows[i] = [encoding, *encoding.overflowing]
        return windows

    def question_windows(
        self,
        questions: Sequence[str],
        contexts: Sequence[str],
        *,
        max_length: int,
        stride: int,
        first_index: int = 0,
    ) -> list[list[Encoding]]:
        """Windows ``[CLS] question [SEP] context slice [SEP]`` as ``QuestionAnsweringPipeline`` cuts them.

        Args:
            questions: one question per context.
            contexts: the contexts.
            max_length: tokens per window including the special tokens (three for BERT, four for RoBERTa; the
                pipeline's ``max_seq_len``).
            stride: context tokens shared by consecutive windows (the pipeline's ``doc_stride``), ``>= 0``;
                it must be smaller than the context tokens a window holds when a context needs windows.
            first_index: index of ``questions[0]`` in the caller's input, for error messages.

        Returns:
            Per question, its windows in order (one when question and context fit), segment ids 0 for the
            question and 1 for the context.

        Raises:
            ValueError: ``questions`` and ``contexts`` differ in length, ``stride`` is negative, a question
                leaves no room for its context, or ``stride`` leaves a window no new context token.
        """
        if len(questions) != len(contexts):
            raise ValueError(
                f"questions and contexts differ in length ({len(questions)} vs {len(contexts)}); pass one "
                "context per question, or one context for all"
            )
        if stride < 0:
            raise OptionError("doc_stride", stride, ">= 0")
        pairs = [
            (clean_text(q, self._stand_in), clean_text(c, self._stand_in))
            for q, c in zip(questions, contexts, strict=True)
        ]
        whole: list[Encoding] = self._base.encode_batch(pairs, add_special_tokens=True)
        windows = [[encoding] for encoding in whole]
        long = [i for i, encoding in enumerate(whole) if len(encoding) > max_length]
        for i in long:
            question_tokens = sum(1 for sequence in whole[i].sequence_ids if sequence == 0)
            room = max_length - self.special_tokens_pair - question_tokens
            if room < 1:
                raise ValueError(
                    f"question {first_index + i} has {question_tokens} tokens, which leaves no room for its "
                    f"context in a window of {max_length} tokens; shorten the question (at most "
                    f"{max_length - self.special_tokens_pair - 1} tokens) or use a larger max_seq_len (at most the "
                    "model's positions)"
                )
            _check_stride(
                "doc_stride",
                stride,
                room,
                f"the {room} context tokens a window holds next to question {first_index + i} "
                f"({question_tokens} tokens) in a window of {max_length}",
            )
        if long:
            cutter = self._truncating(max_length, stride, "only_second")
            for i, encoding in zip(long, cutter.encode_batch([pairs[i] for i in long]), strict=True):
                windows[i] = [encoding, *encoding.overflowing]
        return windows


def _check_stride(name: str, stride: int, room: int, room_text: str) -> None:
    if isinstance(stride, bool) or not isinstance(stride, int):
        raise TypeError(f"{name} must be an int, got {type(stride).__name__}")
    if stride < 0 or stride >= room:
        raise OptionError(
            name,
            stride,
            f">= 0 and smaller than {room_text}",
            f"consecutive windows share {name} tokens and each must bring a new one; use a smaller one "
            f"(e.g. {max(0, min(128, room // 2))})",
        )
