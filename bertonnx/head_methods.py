"""``BertOnnx``'s methods for its checkpoint's heads: classify, rerank, fill-mask, tag, answer, choose, zero-shot
and replaced token detection.

They live in their own module so each file reads in one sitting; like every method of :class:`bertonnx.BertOnnx`
they only build their task (:func:`bertonnx.tasks.make_task`: the options checked, the defaults chosen) and run its
steps (:meth:`bertonnx.BertOnnx.run_task`); the windows and their merging are the tasks' own
(:mod:`bertonnx.tasks.tag`, :mod:`bertonnx.tasks.answer`, :mod:`bertonnx.tasks.choose`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from . import driver
from .batching import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS, TOKENIZE_CHUNK_TEXTS, BatchLimits
from .inputs import text_list
from .manifest import TOKENIZER_FILE
from .tasks.answer import DEFAULT_MAX_ANSWER_LEN, DEFAULT_MAX_SEQ_LEN
from .tasks.base import check_positive_int
from .tasks.choose import Choice
from .tasks.classify import LabelScore, RankedIndex
from .tasks.detect_replaced import ReplacedToken
from .tasks.fill_mask import DEFAULT_TOP_K, MaskFill, Targets
from .tasks.tag import DEFAULT_IGNORE_LABELS, TokenStrings
from .tasks.zero_shot import DEFAULT_HYPOTHESIS_TEMPLATE, ZeroShotAnswer
from .windows import Windowing

if TYPE_CHECKING:
    from .batching import Batch
    from .manifest import Manifest
    from .tokenizer import TextTokenizer

__all__ = ["HeadMethods"]

DEFAULT_BATCH_SIZE = DEFAULT_MAX_BATCH_SIZE


class HeadMethods:
    """The methods of :class:`bertonnx.BertOnnx` for its checkpoint's heads (see the module docstring)."""

    if TYPE_CHECKING:
        manifest: Manifest
        max_length: int
        tokenizer: TextTokenizer

        def task(self, name: str, **options: Any) -> Any: ...

        def run_task(
            self,
            task: Any,
            first: object,
            second: object = None,
            *,
            batch_size: int = ...,
            max_batch_tokens: int = ...,
            name: str = ...,
        ) -> list[Any]: ...

        def run_batch(self, batch: Batch, outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]: ...

    # -- sequence classification, reranking, fill-mask ---------------------------------------------------

    @overload
    def classify(  # type: ignore[overload-overlap]  # str is also Iterable[str]; this first overload wins
        self, texts: str, pairs: str | None = ..., *, top_k: int | None = ..., truncation: bool | None = ...
    ) -> list[LabelScore]: ...

    @overload
    def classify(
        self,
        texts: Iterable[str],
        pairs: Iterable[str] | None = ...,
        *,
        top_k: int | None = ...,
        truncation: bool | None = ...,
    ) -> list[list[LabelScore]]: ...

    def classify(
        self,
        texts: str | Iterable[str],
        pairs: str | Iterable[str] | None = None,
        *,
        top_k: int | None = 1,
        truncation: bool | None = None,
    ) -> list[LabelScore] | list[list[LabelScore]]:
        """Labels of each text (or pair) by the checkpoint's classification head, as
        ``pipeline("text-classification")`` scores them: softmax for single-label heads, sigmoid for
        multi-label and one-logit heads, the raw value for regression.

        Args:
            texts: a string or an iterable of strings.
            pairs: second sentences, one per text (segment id 1), or ``None``.
            top_k: labels per input, highest score first; ``None`` for every label.
            truncation: cut inputs longer than the model's positions instead of raising (default: off; for an
                export of a sentence-transformers CrossEncoder on, at its ``max_seq_length``, with its own
                activation as the default function, as ``CrossEncoder.predict``).

        Returns:
            For one string: a list of ``{"label", "score"}`` (``score`` a float); for an iterable: one such
            list per input, in order. Labels are the checkpoint's ``id2label``.

        Raises:
            HeadMissingError: the export has no classification head.
            TypeError: an input is not a string, ``texts`` and ``pairs`` mix a string and a list, or an option
                has the wrong type.
            ValueError: texts and pairs differ in length, an input is too long without truncation, or
                ``top_k`` is below 1.
        """
        task = self.task("classify", top_k=top_k, truncation=truncation)
        single = isinstance(texts, str)
        if pairs is not None and single != isinstance(pairs, str):
            raise TypeError("texts and pairs must both be strings or both be lists of strings")
        ranked = self.run_task(task, texts, pairs)
        return ranked[0] if single else ranked

    def classify_scores(
        self,
        texts: str | Iterable[str],
        pairs: str | Iterable[str] | None = None,
        *,
        function: str | None = None,
        truncation: bool | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> np.ndarray:
        """Every label's score per input, ``[n, num_labels]`` float32, columns in ``id2label`` order.

        Args:
            function: ``softmax``, ``sigmoid`` or ``none`` (the logits); default: as
                ``pipeline("text-classification")`` for this head (see :meth:`classify`).

        Raises:
            HeadMissingError: the export has no classification head.
            ValueError, TypeError: as :meth:`classify`.
        """
        task = self.task("classify", function=function, rank=False, top_k=None, truncation=truncation)
        found = self.run_task(task, texts, pairs, batch_size=batch_size)
        return np.stack(found) if found else np.zeros((0, len(self.labels)), dtype=np.float32)

    @property
    def labels(self) -> list[str]:
        """The classifier's label names in logit order (``id2label``; ``LABEL_i`` where it names none), or
        ``[]`` for an export without a classifier."""
        id2label = self.manifest.id2label or {}
        return [id2label.get(i, f"LABEL_{i}") for i in range(self.manifest.num_labels or 0)]

    def rerank(
        self,
        query: str,
        texts: Iterable[str],
        *,
        truncation: bool | None = None,
        raw_scores: bool = False,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> list[RankedIndex]:
        """Texts ranked by a one-logit cross-encoder's relevance to ``query`` (TEI's ``/rerank`` shape).

        Each ``(query, text)`` pair is one input (query as segment 0); its score is the sigmoid of the logit.

        Args:
            query: the query.
            texts: the texts to rank.
            truncation: cut pairs longer than the model's positions (longest side first) instead of raising
                (default: off; for an export of a sentence-transformers CrossEncoder on, at its
                ``max_seq_length``, scored with its own activation, as ``CrossEncoder.rank``).
            raw_scores: give the logit instead of its sigmoid.
            batch_size: pairs per ``session.run`` at most.

        Returns:
            ``[{"index", "score"}]`` for every text, highest score first; ``index`` is the text's position.

        Raises:
            HeadMissingError: the export is not a one-logit cross-encoder.
            TypeError: ``query`` is not a string, ``texts`` is a string, set or mapping, or an item is not a string.
            ValueError: a pair is too long without truncation.
        """
        task = self.task("rerank", raw_scores=raw_scores, truncation=truncation)
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        if isinstance(texts, str):
            raise TypeError("texts must be a list of strings (one string is one text: pass [text])")
        items = text_list(texts, "texts")
        result: list[RankedIndex] = task.rank(self.run_task(task, [query] * len(items), items, batch_size=batch_size))
        return result

    @overload
    def fill_mask(  # type: ignore[overload-overlap]  # str is also Iterable[str]; this first overload wins
        self, texts: str, *, top_k: int = ..., truncation: bool = ..., targets: Targets = ...
    ) -> list[list[MaskFill]]: ...

    @overload
    def fill_mask(
        self, texts: Iterable[str], *, top_k: int = ..., truncation: bool = ..., targets: Targets = ...
    ) -> list[list[list[MaskFill]]]: ...

    def fill_mask(
        self,
        texts: str | Iterable[str],
        *,
        top_k: int = DEFAULT_TOP_K,
        truncation: bool = False,
        targets: Targets = None,
    ) -> list[list[MaskFill]] | list[list[list[MaskFill]]]:
        """The MLM head's ``top_k`` tokens for every ``[MASK]`` of each text (``pipeline("fill-mask")``'s
        scores and fields).

        Only the hidden states at ``[MASK]`` positions go through the vocabulary projection, so the cost
        grows with the number of masks, not with every token.

        Args:
            texts: a string or an iterable of strings, each with at least one ``[MASK]``.
            top_k: candidates per mask.
            truncation: cut texts longer than the model's positions instead of raising.
            targets: the only candidate tokens, as the pipeline's (:func:`~bertonnx.tasks.fill_mask.target_ids`).

        Returns:
            For one string: per ``[MASK]`` (in text order) a list of ``top_k`` dicts ``{"score", "token",
            "token_str", "sequence"}``, highest score first; for an iterable, one such list per text.

        Raises:
            HeadMissingError: the export has no MLM head.
            TypeError: an input is not a string, or an option has the wrong type.
            ValueError: a text has no ``[MASK]`` (or truncation cut it off), a text is too long without
                truncation, or ``top_k`` is below 1.
        """
        answers = self.run_task(self.task("fill_mask", top_k=top_k, truncation=truncation, targets=targets), texts)
        return answers[0] if isinstance(texts, str) else answers

    # -- token classification, question answering, multiple choice (bertonnx.tasks) ---------------------

    @cached_property
    def windowing(self) -> Windowing:
        """Cuts long inputs into the windows transformers' pipelines cut them into (:mod:`bertonnx.windows`)."""
        return Windowing.from_file(self.tokenizer_path)

    @cached_property
    def token_strings(self) -> TokenStrings:
        """The tokenizer's token strings and decoding, for entity words."""
        return TokenStrings(self.windowing.tokenizer, self.tokenizer.unk_token_id)

    @property
    def qa_window(self) -> int:
        """Tokens per question-answering window by default: ``min(384, model positions)``, as the pipeline."""
        return min(DEFAULT_MAX_SEQ_LEN, self.max_length)

    @property
    def tokenizer_path(self) -> Path:
        """The export's ``tokenizer.json``."""
        return self.manifest.directory / TOKENIZER_FILE

    @overload
    def tag(  # type: ignore[overload-overlap]  # str is also Iterable[str]; this first overload wins
        self,
        texts: str,
        aggregation_strategy: str = ...,
        ignore_labels: Collection[str] = ...,
        stride: int | None = ...,
        *,
        batch_size: int = ...,
        max_batch_tokens: int = ...,
    ) -> list[dict[str, Any]]: ...

    @overload
    def tag(
        self,
        texts: Iterable[str],
        aggregation_strategy: str = ...,
        ignore_labels: Collection[str] = ...,
        stride: int | None = ...,
        *,
        batch_size: int = ...,
        max_batch_tokens: int = ...,
    ) -> list[list[dict[str, Any]]]: ...

    def tag(
        self,
        texts: str | Iterable[str],
        aggregation_strategy: str = "simple",
        ignore_labels: Collection[str] = DEFAULT_IGNORE_LABELS,
        stride: int | None = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
    ) -> list[dict[str, Any]] | list[list[dict[str, Any]]]:
        """Named entities (or any token labels) of each text, as ``pipeline("token-classification")`` gives them.

        The windows of every text are batched together by the token budget; a text longer than the model's
        positions (512) is cut into windows sharing ``stride`` tokens and their entities merged as the
        pipeline merges them. See :mod:`bertonnx.tasks.tag` for the steps.

        Args:
            texts: a string, or an iterable of strings (read 512 at a time).
            aggregation_strategy: ``none`` (one answer per token), ``simple`` (B-/I- tags grouped),
                ``first``, ``average`` or ``max`` (one label per word, then grouped).
            ignore_labels: labels left out (default ``("O",)``; ``()`` keeps every token).
            stride: tokens shared by consecutive windows of a long text (``0 <= stride < 510``); ``None``
                refuses texts longer than the model's positions.
            batch_size: windows per ``session.run`` at most.
            max_batch_tokens: padded tokens per ``session.run`` at most.

        Returns:
            For one string, its list of entities; for an iterable, one list per text. With ``none`` each
            entity is ``{"entity", "score", "index", "word", "start", "end"}``, else ``{"entity_group",
            "score", "word", "start", "end"}``; ``start``/``end`` are character offsets into the text
            (``text[start:end]`` is the entity as written), ``score`` a float probability.

        Raises:
            HeadMissingError: the export has no token-classification head.
            TypeError: a text is not a string, ``ignore_labels`` is a single string, or an option has the
                wrong type.
            ValueError: unknown ``aggregation_strategy``; ``stride`` with ``none`` or out of range; a text
                longer than the model's positions without ``stride``.
        """
        task = self.task("tag", aggregation_strategy=aggregation_strategy, ignore_labels=ignore_labels, stride=stride)
        found = self.run_task(task, texts, batch_size=batch_size, max_batch_tokens=max_batch_tokens)
        return found[0] if isinstance(texts, str) else found

    def answer(
        self,
        question: str | Iterable[str],
        context: str | Iterable[str],
        top_k: int = 1,
        max_answer_len: int = DEFAULT_MAX_ANSWER_LEN,
        doc_stride: int | None = None,
        handle_impossible_answer: bool = False,
        *,
        max_seq_len: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
    ) -> Any:
        """Extractive answers, as ``pipeline("question-answering")`` finds them.

        Each question is paired with its context in windows of ``max_seq_len`` tokens (the whole question
        and a slice of the context, consecutive slices sharing ``doc_stride`` tokens); the windows of every
        question are batched together by the token budget, and the best spans over a question's windows
        win. See :mod:`bertonnx.tasks.answer` for the steps.

        Args:
            question: a question, or an iterable of questions.
            context: the context of every question (a string), or one context per question.
            top_k: answers per question (fewer when the context holds fewer).
            max_answer_len: longest answer in tokens.
            doc_stride: context tokens shared by consecutive windows of a long context; default
                ``min(max_seq_len // 2, 128)`` as the pipeline (128 for windows of 256 tokens or more).
            handle_impossible_answer: also offer the empty answer ``{"start": 0, "end": 0, "answer": ""}``,
                scored as the model scores ``[CLS]``.
            max_seq_len: tokens per window; default ``min(384, model positions)`` as the pipeline.
            batch_size: windows per ``session.run`` at most.
            max_batch_tokens: padded tokens per ``session.run`` at most.

        Returns:
            Per question ``{"score": float, "start": int, "end": int, "answer": str}`` when ``top_k == 1``,
            else a list of up to ``top_k`` of them, best first; ``answer == context[start:end]``. For one
            question string that answer itself, for an iterable of questions a list of answers.

        Raises:
            HeadMissingError: the export has no question-answering head.
            TypeError: a question or context is not a string, a list of contexts comes with one question
                string, or an option has the wrong type.
            ValueError: questions and contexts differ in number; an empty question or context, or one made
                only of whitespace or control characters; a question leaving no room for context in a
                window; ``doc_stride`` leaving a window no new context token; ``top_k`` or
                ``max_answer_len`` < 1; ``max_seq_len`` out of range.
        """
        task = self.task(
            "answer",
            top_k=top_k,
            max_answer_len=max_answer_len,
            doc_stride=doc_stride,
            handle_impossible_answer=handle_impossible_answer,
            max_seq_len=max_seq_len,
        )
        single = isinstance(question, str)
        questions = text_list(question, "question")
        if isinstance(context, str):
            contexts = [context] * len(questions)
        elif single:
            raise TypeError("a list of contexts needs a list of questions, one per context; pass question=[...]")
        else:
            contexts = text_list(context, "context")
        if len(questions) != len(contexts):
            raise ValueError(
                f"questions and contexts differ in length ({len(questions)} vs {len(contexts)}); pass one "
                "context per question, or one context for all"
            )
        found = self.run_task(
            task, questions, contexts, batch_size=batch_size, max_batch_tokens=max_batch_tokens, name="question"
        )
        return found[0] if single else found

    @overload
    def choose(  # type: ignore[overload-overlap]  # str is also Iterable[str]; this first overload wins
        self, context: str, choices: Sequence[str], *, truncation: bool = ..., batch_size: int = ...
    ) -> Choice: ...

    @overload
    def choose(
        self,
        context: Iterable[str],
        choices: Iterable[Sequence[str]],
        *,
        truncation: bool = ...,
        batch_size: int = ...,
    ) -> list[Choice]: ...

    def choose(
        self,
        context: str | Iterable[str],
        choices: Sequence[str] | Iterable[Sequence[str]],
        *,
        truncation: bool = False,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Choice | list[Choice]:
        """The choice that best completes ``context``, by the checkpoint's multiple-choice head (the softmax
        over the choices' logits, as ``torch.softmax(BertForMultipleChoice(...).logits, -1)``).

        Args:
            context: a context (question, sentence start), or an iterable of them.
            choices: its choices (at least 2), or per context its list of choices.
            truncation: cut ``(context, choice)`` pairs longer than the model's positions instead of raising.
            batch_size: pairs per ``session.run`` at most.

        Returns:
            For one context ``{"index", "choice", "score", "scores"}``: the best choice's position, text and
            probability, and every choice's probability in order; for an iterable, one per context.

        Raises:
            HeadMissingError: the export has no multiple-choice head.
            TypeError: a context is not a string, or its choices not a list of strings.
            ValueError: fewer than 2 choices; contexts and choice lists differ in number; a pair too long.
        """
        task = self.task("choose", truncation=truncation)
        single = isinstance(context, str)
        contexts = text_list(context, "context")
        groups = [choices] if single else list(choices)
        if len(groups) != len(contexts):
            raise ValueError(
                f"{len(contexts)} contexts but {len(groups)} lists of choices; give one list of choices per context"
            )
        found: list[Choice] = list(
            driver.answers(
                self.run_batch,
                task,
                [
                    (
                        start,
                        contexts[start : start + TOKENIZE_CHUNK_TEXTS],
                        groups[start : start + TOKENIZE_CHUNK_TEXTS],
                    )
                    for start in range(0, len(contexts), TOKENIZE_CHUNK_TEXTS)
                ],
                BatchLimits(max_batch_size=check_positive_int(batch_size, "batch_size")),
            )
        )
        return found[0] if single else found

    @overload
    def zero_shot(  # type: ignore[overload-overlap]  # str is also Iterable[str]; this first overload wins
        self,
        texts: str,
        candidate_labels: str | Sequence[str],
        *,
        hypothesis_template: str = ...,
        multi_label: bool = ...,
        entailment_label: str | None = ...,
        truncation: bool = ...,
        batch_size: int = ...,
        max_batch_tokens: int = ...,
    ) -> ZeroShotAnswer: ...

    @overload
    def zero_shot(
        self,
        texts: Iterable[str],
        candidate_labels: str | Sequence[str],
        *,
        hypothesis_template: str = ...,
        multi_label: bool = ...,
        entailment_label: str | None = ...,
        truncation: bool = ...,
        batch_size: int = ...,
        max_batch_tokens: int = ...,
    ) -> list[ZeroShotAnswer]: ...

    def zero_shot(
        self,
        texts: str | Iterable[str],
        candidate_labels: str | Sequence[str],
        *,
        hypothesis_template: str = DEFAULT_HYPOTHESIS_TEMPLATE,
        multi_label: bool = False,
        entailment_label: str | None = None,
        truncation: bool = True,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
    ) -> ZeroShotAnswer | list[ZeroShotAnswer]:
        """Zero-shot classification by the checkpoint's NLI classifier, as ``pipeline("zero-shot-classification")``:
        each text is the premise of one pair per label (the label put into ``hypothesis_template``), and every pair
        of every text is batched by the token budget.

        Args:
            texts: a text, or an iterable of texts.
            candidate_labels: the labels (a list, or one comma-separated string).
            hypothesis_template: the hypothesis, with ``{}`` where the label goes.
            multi_label: score each label on its own (softmax of its contradiction and entailment logits) instead
                of sharing the probability among the labels (softmax of their entailment logits).
            entailment_label: the classifier's label meaning entailment (default: the first label of its
                ``id2label`` starting with ``entail``, as the pipeline).
            truncation: cut a text too long for the model beside a hypothesis (the text only), as the pipeline;
                ``False`` refuses it.
            batch_size: pairs per ``session.run`` at most.
            max_batch_tokens: padded tokens per ``session.run`` at most.

        Returns:
            For one text ``{"sequence", "labels", "scores"}``: the labels sorted by score, highest first; for an
            iterable, one per text.

        Raises:
            HeadMissingError: the export has no classifier of 2 labels or more.
            TypeError, ValueError: no label, a template without ``{}``, a classifier without an entailment label
                (pass ``entailment_label``), a text too long without truncation.
        """
        task = self.task(
            "zero_shot",
            candidate_labels=candidate_labels,
            hypothesis_template=hypothesis_template,
            multi_label=multi_label,
            entailment_label=entailment_label,
            truncation=truncation,
        )
        found = self.run_task(task, texts, batch_size=batch_size, max_batch_tokens=max_batch_tokens)
        return found[0] if isinstance(texts, str) else found

    @overload
    def detect_replaced(  # type: ignore[overload-overlap]  # str is also Iterable[str]; this first overload wins
        self, texts: str, *, truncation: bool = ..., batch_size: int = ..., max_batch_tokens: int = ...
    ) -> list[ReplacedToken]: ...

    @overload
    def detect_replaced(
        self, texts: Iterable[str], *, truncation: bool = ..., batch_size: int = ..., max_batch_tokens: int = ...
    ) -> list[list[ReplacedToken]]: ...

    def detect_replaced(
        self,
        texts: str | Iterable[str],
        *,
        truncation: bool = False,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
    ) -> list[ReplacedToken] | list[list[ReplacedToken]]:
        """Replaced token detection by ELECTRA's discriminator: per token, the probability that it was replaced
        (``torch.sigmoid(ElectraForPreTraining(...).logits)``), special tokens dropped.

        Args:
            texts: a string, or an iterable of strings.
            truncation: cut texts longer than the model's positions instead of raising.
            batch_size: texts per ``session.run`` at most.
            max_batch_tokens: padded tokens per ``session.run`` at most.

        Returns:
            For one string, its tokens in order, each ``{"index", "token", "start", "end", "score"}``:
            its position among the input's tokens (the first special token is 0), its vocabulary string, its
            character offsets into the text (``text[start:end]`` is the token as written) and ``P(replaced)``
            as a float; for an iterable, one such list per text.

        Raises:
            HeadMissingError: the export has no replaced-token-detection head (it is not ElectraForPreTraining).
            TypeError: a text is not a string, or an option has the wrong type.
            ValueError: a text is longer than the model's positions without truncation.
        """
        task = self.task("detect_replaced", truncation=truncation)
        found = self.run_task(task, texts, batch_size=batch_size, max_batch_tokens=max_batch_tokens)
        return found[0] if isinstance(texts, str) else found
