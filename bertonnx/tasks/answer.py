"""``answer``: extractive question answering (SQuAD-style) from the graph's ``start_logits``/``end_logits``.

The answers are those of transformers' ``QuestionAnsweringPipeline`` (4.57, fast tokenizer,
``align_to_words=True``) for the same checkpoint, computed with numpy. Per window of
``[CLS] question [SEP] context slice [SEP]`` (see :mod:`bertonnx.windows`):

1. only context tokens (and ``[CLS]``, which some models use for "no answer") are candidates: the others'
   logits become -10000 before a softmax over the window's tokens, for starts and ends apart;
2. with ``handle_impossible_answer`` the "no answer" score is the smallest ``P(start=[CLS]) × P(end=[CLS])``
   over the windows; ``[CLS]`` is then removed from the candidates;
3. a span ``(s, e)`` scores ``P(start=s) × P(end=e)`` for ``s <= e < s + max_answer_len``; the
   ``2 × top_k + 10`` best spans of the window are kept (some fall away below) and those made of
   candidate tokens become answers;
4. a span's characters are those of the words its first and last tokens belong to (offsets from the fast
   tokenizer, into the caller's own context string); an answer whose text (case-insensitive) was already found,
   in this window or an earlier one, adds its score to that answer instead of repeating it.

Over all windows the answers are sorted by score (the "no answer", ``{"score", "start": 0, "end": 0,
"answer": ""}``, among them when allowed) and the first ``top_k`` kept. Scores are probabilities of one
window's softmax, summed for repeated answers as the pipeline sums them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from tokenizers import Encoding

from ..batching import Batch, TokenSequence
from ..errors import OptionError
from ..tokenizer import SPECIAL_TOKENS_PAIR
from .base import ModelFacts, Prepared

if TYPE_CHECKING:
    from ..windows import Windowing

__all__ = [
    "CANDIDATES_PER_ANSWER",
    "CONTEXT_SEQUENCE",
    "DEFAULT_DOC_STRIDE",
    "DEFAULT_MAX_ANSWER_LEN",
    "DEFAULT_MAX_SEQ_LEN",
    "END_LOGITS",
    "MASKED_LOGIT",
    "NO_ANSWER_SCORE_START",
    "START_LOGITS",
    "Answer",
    "answers",
    "check_answer_options",
    "check_impossible",
    "default_doc_stride",
    "merge_answers",
    "qa_windows",
]

#: The graph outputs of a question-answering export: ``[b, t]`` float32 each.
START_LOGITS = "start_logits"
END_LOGITS = "end_logits"
#: The pipeline's window: ``min(model positions, 384)`` tokens, consecutive context slices sharing
#: ``min(max_seq_len // 2, 128)`` (:func:`default_doc_stride`).
DEFAULT_MAX_SEQ_LEN = 384
DEFAULT_DOC_STRIDE = 128

#: Logit given to tokens that cannot be part of an answer (the question, ``[SEP]``, padding).
MASKED_LOGIT = -10000.0
#: Segment of the context in a ``[CLS] question [SEP] context [SEP]`` window.
CONTEXT_SEQUENCE = 1
#: The pipeline keeps ``2 × top_k + 10`` spans per window before dropping non-context ones.
CANDIDATES_PER_ANSWER = 2
CANDIDATES_EXTRA = 10
#: The "no answer" score starts here and falls to the smallest [CLS] score seen (the pipeline's 1e6).
NO_ANSWER_SCORE_START = 1000000.0
DEFAULT_MAX_ANSWER_LEN = 15
#: The token kept as a candidate for "no answer".
CLS_TOKEN = "[CLS]"


def default_doc_stride(max_seq_len: int) -> int:
    """The pipeline's ``doc_stride`` when none is given: ``min(max_seq_len // 2, 128)`` (128 from 256 tokens up)."""
    return min(max_seq_len // 2, DEFAULT_DOC_STRIDE)


def check_answer_options(top_k: object, max_answer_len: object) -> None:
    """Raise unless ``top_k`` and ``max_answer_len`` are ints >= 1.

    Raises:
        TypeError: not an int.
        ValueError: below 1.
    """
    for name, value, fix in (
        ("top_k", top_k, "ask for at least one answer"),
        ("max_answer_len", max_answer_len, "an answer holds at least one token; the pipeline's default is 15"),
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}: {fix}")


def _candidates(window: Encoding, cls_id: int | None) -> np.ndarray:
    """``[t]`` bool: the tokens an answer may start or end at (the context's, and ``[CLS]``)."""
    candidate = np.fromiter(
        (sequence == CONTEXT_SEQUENCE for sequence in window.sequence_ids), dtype=bool, count=len(window)
    )
    if cls_id is not None:
        candidate |= np.asarray(window.ids) == cls_id
    return candidate


def _probabilities(logits: np.ndarray, blocked: np.ndarray) -> np.ndarray:
    """``[1, t]`` softmax of ``logits`` with ``blocked`` tokens at ``MASKED_LOGIT`` (float32, as the pipeline)."""
    masked = np.where(blocked, np.float32(MASKED_LOGIT), np.asarray(logits, dtype=np.float32))[None]
    shifted = np.exp(masked - masked.max(axis=-1, keepdims=True))
    probabilities: np.ndarray = shifted / shifted.sum()
    return probabilities


def _best_spans(
    start: np.ndarray, end: np.ndarray, count: int, max_answer_len: int, candidate: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``count`` best ``(s, e)`` by ``start[s] × end[e]`` with ``s <= e < s + max_answer_len``, best first,
    then only those whose both ends are candidates (the pipeline's ``decode_spans``)."""
    outer = np.matmul(start[:, :, None], end[:, None, :])
    # a span is at most the window long: a larger max_answer_len (any int) changes nothing, and numpy takes no
    # diagonal offset beyond a C long
    spans = np.tril(np.triu(outer), min(max_answer_len, outer.shape[-1]) - 1)
    flat = spans.flatten()
    if count == 1:
        order = np.array([np.argmax(flat)])
    elif len(flat) < count:
        order = np.argsort(-flat)
    else:
        best = np.argpartition(-flat, count)[0:count]
        order = best[np.argsort(-flat[best])]
    starts, ends = np.unravel_index(order, spans.shape)[1:]
    allowed = np.flatnonzero(candidate)
    keep = np.isin(starts, allowed) & np.isin(ends, allowed)
    starts, ends = starts[keep], ends[keep]
    return starts, ends, spans[0, starts, ends]


def _characters(window: Encoding, s: int, e: int) -> tuple[int, int]:
    """Characters of the words holding tokens ``s`` and ``e`` (the tokens' own offsets when either has no
    word, e.g. ``[CLS]``), as the pipeline's ``get_indices`` with ``align_to_words=True``."""
    start_word = window.token_to_word(s)
    end_word = window.token_to_word(e)
    if start_word is not None and end_word is not None:
        first = window.word_to_chars(start_word, CONTEXT_SEQUENCE)
        last = window.word_to_chars(end_word, CONTEXT_SEQUENCE)
        if first is not None and last is not None:
            return int(first[0]), int(last[1])
    return int(window.offsets[s][0]), int(window.offsets[e][1])


def answers(
    context: str,
    windows: Sequence[Encoding],
    start_logits: Sequence[np.ndarray],
    end_logits: Sequence[np.ndarray],
    *,
    cls_id: int | None,
    top_k: int = 1,
    max_answer_len: int = DEFAULT_MAX_ANSWER_LEN,
    handle_impossible_answer: bool = False,
) -> list[dict[str, Any]]:
    """The best answers to one question in ``context``, as ``pipeline("question-answering")`` finds them.

    Args:
        context: the caller's context (offsets index it).
        windows: the question's windows from :meth:`bertonnx.windows.Windowing.question_windows`.
        start_logits: per window, ``[tokens]`` float32 start logits (no padding).
        end_logits: per window, ``[tokens]`` float32 end logits.
        cls_id: the ``[CLS]`` token id (kept as a candidate for "no answer"), or ``None``.
        top_k: answers wanted, >= 1 (fewer when the context holds fewer).
        max_answer_len: longest answer in tokens, >= 1.
        handle_impossible_answer: also offer the empty answer, scored as the model scores ``[CLS]``.

    Returns:
        Up to ``top_k`` answers ``{"score": float, "start": int, "end": int, "answer": str}``, best first;
        ``answer == context[start:end]``.

    Raises:
        TypeError, ValueError: bad ``top_k`` / ``max_answer_len``, or windows and logits differ in number.
    """
    check_answer_options(top_k, max_answer_len)
    if not len(windows) == len(start_logits) == len(end_logits):
        raise ValueError(
            f"got {len(windows)} windows, {len(start_logits)} start and {len(end_logits)} end logit arrays; "
            "pass one of each per window"
        )
    count = CANDIDATES_PER_ANSWER * top_k + CANDIDATES_EXTRA
    no_answer = NO_ANSWER_SCORE_START
    found: list[dict[str, Any]] = []
    by_text: dict[str, dict[str, Any]] = {}
    for window, start_raw, end_raw in zip(windows, start_logits, end_logits, strict=True):
        candidate = _candidates(window, cls_id)
        start = _probabilities(start_raw, ~candidate)
        end = _probabilities(end_raw, ~candidate)
        if handle_impossible_answer:
            no_answer = min(no_answer, float(start[0, 0] * end[0, 0]))
        start[0, 0] = end[0, 0] = 0.0
        starts, ends, scores = _best_spans(start, end, count, max_answer_len, candidate)
        for s, e, score in zip(starts.tolist(), ends.tolist(), scores.tolist(), strict=True):
            first, last = _characters(window, s, e)
            text = context[first:last]
            seen = by_text.get(text.lower())
            if seen is not None:
                seen["score"] += score
            else:
                answer = {"score": score, "start": first, "end": last, "answer": text}
                found.append(answer)
                by_text[text.lower()] = answer
    if handle_impossible_answer:
        found.append({"score": no_answer, "start": 0, "end": 0, "answer": ""})
    return sorted(found, key=lambda answer: answer["score"], reverse=True)[:top_k]


@dataclass(frozen=True)
class Answer:
    """Question answering's steps: a question's windows are its units (:func:`qa_windows`); per unit, its
    ``(start_logits, end_logits)``, each ``[tokens]`` float32 without padding; per question, the best spans over
    all its windows (:func:`merge_answers`): the answer dict when ``top_k`` is 1, else a list.

    Attributes:
        windowing: cuts each question and context into windows (``None``: the task only runs units).
        cls_id: the id of the first special token (kept as a candidate for "no answer").
        max_seq_len: tokens per window.
        doc_stride: context tokens shared by consecutive windows.
        top_k, max_answer_len, handle_impossible_answer: as :func:`answers`.
    """

    windowing: Windowing | None = None
    cls_id: int | None = None
    max_seq_len: int = DEFAULT_MAX_SEQ_LEN
    doc_stride: int = DEFAULT_DOC_STRIDE
    top_k: int = 1
    max_answer_len: int = DEFAULT_MAX_ANSWER_LEN
    handle_impossible_answer: bool = False
    name = "answer"
    outputs = (START_LOGITS, END_LOGITS)
    #: A question's windows are batched with the windows of its chunk only.
    window_tokens = 0

    @classmethod
    def build(
        cls,
        model: ModelFacts,
        *,
        top_k: int = 1,
        max_answer_len: int = DEFAULT_MAX_ANSWER_LEN,
        doc_stride: int | None = None,
        handle_impossible_answer: bool = False,
        max_seq_len: int | None = None,
    ) -> Answer:
        """The task on ``model``'s question-answering head; ``doc_stride=None`` is the pipeline's
        :func:`default_doc_stride` of the window, ``max_seq_len=None`` its ``min(384, model positions)``.

        Raises:
            TypeError: an option has the wrong type.
            ValueError: ``top_k`` or ``max_answer_len`` below 1; ``max_seq_len`` out of range.
        """
        window = min(DEFAULT_MAX_SEQ_LEN, model.max_length) if max_seq_len is None else max_seq_len
        if isinstance(window, bool) or not isinstance(window, int):
            raise TypeError(f"max_seq_len must be an int, got {type(window).__name__}")
        if not SPECIAL_TOKENS_PAIR + 2 <= window <= model.max_length:
            raise OptionError(
                "max_seq_len", window, f"between {SPECIAL_TOKENS_PAIR + 2} and the model's {model.max_length} positions"
            )
        if doc_stride is None:
            doc_stride = default_doc_stride(window)
        if isinstance(doc_stride, bool) or not isinstance(doc_stride, int):
            raise TypeError(f"doc_stride must be an int, got {type(doc_stride).__name__}")
        check_answer_options(top_k, max_answer_len)
        check_impossible(handle_impossible_answer)
        cls_id = model.tokenizer.cls_token_id  # the family's first special token (BERT's [CLS], RoBERTa's <s>)
        if cls_id is None:
            cls_id = model.tokenizer.token_to_id(CLS_TOKEN)
        return cls(model.windowing, cls_id, window, doc_stride, top_k, max_answer_len, handle_impossible_answer)

    def prepare(
        self, first: Sequence[str], second: Sequence[str] | None = None, first_index: int = 0, *, strict: bool = True
    ) -> Prepared:
        """Each question's windows with its context (``second``: one context per question).

        Raises:
            ValueError: as :func:`qa_windows`; no contexts.
        """
        if self.windowing is None:
            raise ValueError("Answer was built without a tokenizer; build it with bertonnx.tasks.make_task")
        if second is None:
            raise ValueError("answer needs a context per question")
        questions, contexts = list(first), list(second)
        windows = qa_windows(
            self.windowing,
            questions,
            contexts,
            max_length=self.max_seq_len,
            doc_stride=self.doc_stride,
            first_index=first_index,
        )
        units: list[TokenSequence] = [window for question in windows for window in question]
        kept = list(range(first_index, first_index + len(questions)))
        return Prepared(units, [len(question) for question in windows], (contexts, windows), kept)

    def postprocess(
        self, outputs: Mapping[str, np.ndarray], batch: Batch, rows: np.ndarray | None = None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per row of ``rows`` (every row when ``None``), its start and end logits cut to its tokens (copied)."""
        starts, ends = outputs[START_LOGITS], outputs[END_LOGITS]
        picked = range(len(batch)) if rows is None else rows.tolist()
        return [(starts[row, : batch.lengths[row]].copy(), ends[row, : batch.lengths[row]].copy()) for row in picked]

    def finish(self, prepared: Prepared, answers: Sequence[Any]) -> list[Any]:
        """Per question, its best answer (``top_k`` 1) or its list of answers, best first."""
        contexts, windows = prepared.state
        found = merge_answers(
            contexts,
            windows,
            list(answers),
            cls_id=self.cls_id,
            top_k=self.top_k,
            max_answer_len=self.max_answer_len,
            handle_impossible_answer=self.handle_impossible_answer,
        )
        return [spans[0] if self.top_k == 1 and spans else spans for spans in found]


def _check_texts(questions: Sequence[str], contexts: Sequence[str], first_index: int) -> None:
    for name, items in (("question", questions), ("context", contexts)):
        for offset, text in enumerate(items):
            if not text:
                raise ValueError(f"{name} {first_index + offset} is empty; pass a non-empty {name}")


def _check_tokens(windows: list[list[Encoding]], first_index: int) -> None:
    for offset, question_windows in enumerate(windows):
        sequences = question_windows[0].sequence_ids
        for sequence, name in ((0, "question"), (CONTEXT_SEQUENCE, "context")):
            if sequence not in sequences:
                raise ValueError(
                    f"{name} {first_index + offset} has no tokens (it holds only whitespace or control "
                    f"characters, which BERT's tokenizer drops); pass a {name} with words in it"
                )


def qa_windows(
    windowing: Windowing,
    questions: Sequence[str],
    contexts: Sequence[str],
    *,
    max_length: int,
    doc_stride: int = DEFAULT_DOC_STRIDE,
    first_index: int = 0,
) -> list[list[Encoding]]:
    """Each question's windows (:meth:`~bertonnx.windows.Windowing.question_windows`), after checking that
    no question or context is empty or without tokens.

    Raises:
        ValueError: an empty question or context, one without tokens, a question leaving no room for its
            context, or a ``doc_stride`` leaving no room to advance.
    """
    _check_texts(questions, contexts, first_index)
    windows = windowing.question_windows(
        questions, contexts, max_length=max_length, stride=doc_stride, first_index=first_index
    )
    _check_tokens(windows, first_index)
    return windows


def merge_answers(
    contexts: Sequence[str],
    windows: Sequence[Sequence[Encoding]],
    logits: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    cls_id: int | None,
    top_k: int = 1,
    max_answer_len: int = DEFAULT_MAX_ANSWER_LEN,
    handle_impossible_answer: bool = False,
) -> list[list[dict[str, Any]]]:
    """:func:`answers` of each question, from the ``(start, end)`` logits of every window in order (flat)."""
    found = []
    start = 0
    for context, question_windows in zip(contexts, windows, strict=True):
        stop = start + len(question_windows)
        found.append(
            answers(
                context,
                question_windows,
                [pair[0] for pair in logits[start:stop]],
                [pair[1] for pair in logits[start:stop]],
                cls_id=cls_id,
                top_k=top_k,
                max_answer_len=max_answer_len,
                handle_impossible_answer=handle_impossible_answer,
            )
        )
        start = stop
    return found


def check_impossible(handle_impossible_answer: object) -> None:
    """Raise ``TypeError`` unless ``handle_impossible_answer`` is a bool."""
    if not isinstance(handle_impossible_answer, bool):
        raise TypeError(f"handle_impossible_answer must be a bool, got {type(handle_impossible_answer).__name__}")
