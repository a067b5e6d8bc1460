"""``zero_shot``: zero-shot classification on any NLI sequence classifier, as ``pipeline("zero-shot-classification")``.

Each text is the premise of one ``(text, hypothesis)`` pair per candidate label, the hypothesis being the label
put into ``hypothesis_template`` (``"This example is {}."``). The pairs of every text are units like any others:
all of them, of all texts, are sorted and batched by the token budget, and a text's answer is merged from its
pairs' logits in ``finish``. As transformers' ``ZeroShotClassificationPipeline``:

- the entailment logit is the first label of ``id2label`` starting with ``entail`` (any case); the contradiction
  logit is label 0, or the last label when entailment is 0. An export with no such label is refused (the
  pipeline would take the last logit and say so only in a log line) unless ``entailment_label`` names it;
- one label at a time (``multi_label``, or a single candidate label): each label's probability is the softmax
  of its pair's ``[contradiction, entailment]`` logits; else the softmax of the entailment logits over all labels;
- the premise alone is cut when a pair is too long (``only_first``), the hypothesis never; the limit is the
  model's positions, which the export writes as the tokenizer's ``model_max_length`` (the pipeline's limit);
- candidate labels are a list, or one string split at commas (each label stripped, empty ones dropped);
- the answer is ``{"sequence", "labels", "scores"}``, labels sorted by score as the pipeline sorts them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np

from ..batching import Batch, TokenSequence
from ..errors import InputTooLongError, OptionError
from .base import Encoder, ModelFacts, PerInput, Prepared, check_bool, encoder_for
from .nsp import softmax

__all__ = [
    "DEFAULT_HYPOTHESIS_TEMPLATE",
    "ZeroShot",
    "ZeroShotAnswer",
    "entailment_index",
    "parse_labels",
]

#: The pipeline's default hypothesis.
DEFAULT_HYPOTHESIS_TEMPLATE = "This example is {}."
#: How the pipeline recognises the entailment label (``label.lower().startswith(...)``).
ENTAILMENT_PREFIX = "entail"
LOGITS = "logits"


class ZeroShotAnswer(TypedDict):
    """One text's answer, as ``pipeline("zero-shot-classification")`` gives it."""

    sequence: str
    labels: list[str]
    scores: list[float]


def parse_labels(value: object) -> tuple[str, ...]:
    """Candidate labels as the pipeline reads them: a list of strings, or one string split at commas (stripped,
    empty pieces dropped).

    Raises:
        TypeError: not a string or a list of strings.
        OptionError: no label, or a blank one (a ``ValueError``).
    """
    if isinstance(value, str):
        labels = [label.strip() for label in value.split(",") if label.strip()]
    elif isinstance(value, Sequence) and not isinstance(value, bytes):
        labels = list(value)
        for label in labels:
            if not isinstance(label, str):
                raise TypeError(f"candidate_labels must be strings, got {type(label).__name__}")
    else:
        raise TypeError(
            f"candidate_labels must be a list of strings or a comma-separated string, got {type(value).__name__}"
        )
    if not labels:
        raise OptionError(
            "candidate_labels",
            value,
            "at least one label",
            "give a list, or a comma-separated string: 'sports, politics'",
        )
    for index, label in enumerate(labels):
        if not label.strip():
            raise OptionError("candidate_labels", value, "labels of some text", f"label {index} is blank")
    return tuple(labels)


def hypotheses(template: object, labels: Sequence[str]) -> tuple[str, ...]:
    """Each label put into ``template``.

    Raises:
        TypeError: ``template`` is not a string.
        OptionError: it has no ``{}`` for the label, or braces ``str.format`` cannot fill (a ``ValueError``).
    """
    if not isinstance(template, str):
        raise TypeError(f"hypothesis_template must be a str, got {type(template).__name__}")
    expected = "a template with {} where the label goes"
    fix = 'e.g. "This example is {}."'
    try:
        filled = tuple(template.format(label) for label in labels)
    except (IndexError, KeyError, ValueError) as exc:
        raise OptionError("hypothesis_template", template, expected, f"str.format refused it ({exc}); {fix}") from None
    if filled[0] == template:
        raise OptionError("hypothesis_template", template, expected, fix)
    return filled


def entailment_index(labels: Sequence[str], entailment_label: str | None = None) -> int:
    """The logit of entailment: ``entailment_label``'s, else the first label starting with ``entail`` (any case).

    Raises:
        TypeError: ``entailment_label`` is not a string.
        OptionError: ``entailment_label`` is not a label of the export, or none is given and no label starts
            with ``entail`` (a ``ValueError``).
    """
    shown = ", ".join(repr(label) for label in labels)
    if entailment_label is not None:
        if not isinstance(entailment_label, str):
            raise TypeError(f"entailment_label must be a str, got {type(entailment_label).__name__}")
        if entailment_label not in labels:
            raise OptionError("entailment_label", entailment_label, f"one of this export's labels: {shown}")
        return list(labels).index(entailment_label)
    for index, label in enumerate(labels):
        if label.lower().startswith(ENTAILMENT_PREFIX):
            return index
    raise OptionError(
        "entailment_label",
        None,
        f"given for this export: zero-shot needs an NLI classifier's entailment logit, and none of its labels "
        f"({shown}) starts with 'entail'",
        "name the one meaning entailment, or export a checkpoint trained on NLI whose id2label names it",
    )


@dataclass(frozen=True)
class ZeroShot(PerInput):
    """Zero-shot classification's steps (module docstring).

    Attributes:
        labels: the candidate labels, in the caller's order.
        hypotheses: each label put into the template.
        entailment: the index of the entailment logit.
        contradiction: the index of the contradiction logit (0, or the last when entailment is 0).
        multi_label: score each label on its own (softmax of contradiction vs entailment).
        encoder: how pairs are tokenized; with ``truncation`` the premise alone is cut.
    """

    labels: tuple[str, ...] = ()
    hypotheses: tuple[str, ...] = ()
    entailment: int = 0
    contradiction: int = 0
    multi_label: bool = False
    encoder: Encoder | None = None
    name = "zero_shot"
    outputs = (LOGITS,)

    @classmethod
    def build(
        cls,
        model: ModelFacts,
        *,
        candidate_labels: object = None,
        hypothesis_template: object = DEFAULT_HYPOTHESIS_TEMPLATE,
        multi_label: object = False,
        entailment_label: str | None = None,
        truncation: bool | None = None,
    ) -> ZeroShot:
        """The task on ``model``'s NLI classifier.

        Args:
            candidate_labels: a list of labels, or one comma-separated string.
            hypothesis_template: the hypothesis, with ``{}`` where the label goes.
            multi_label: score each label on its own instead of sharing the probability among them.
            entailment_label: the label of the entailment logit (default: the first starting with ``entail``).
            truncation: cut a text too long for the model (only the text, never the hypothesis); default on,
                as the pipeline; ``False`` refuses such a text.

        Raises:
            TypeError, ValueError: a bad option (the message names it and the fix); an export whose classifier
                has fewer than 2 labels or no entailment label; a hypothesis that leaves no room for a text.
        """
        labels = tuple(model.labels)
        if len(labels) < 2:
            raise ValueError(
                f"zero-shot classification needs an NLI classifier (contradiction, neutral, entailment); this "
                f"export's classifier has {len(labels)} label(s). Export a checkpoint trained on NLI"
            )
        entailment = entailment_index(labels, entailment_label)
        candidates = parse_labels(candidate_labels)
        filled = hypotheses(hypothesis_template, candidates)
        cut = check_bool(truncation, "truncation") if truncation is not None else True
        encoder = encoder_for(model, cut)
        room = encoder.max_length - model.tokenizer.special_tokens_pair
        counted = model.tokenizer.encode(list(filled), None, truncation=False, max_length=None)
        for label, hypothesis, encoding in zip(candidates, filled, counted, strict=True):
            tokens = len(encoding.ids) - model.tokenizer.special_tokens_single
            if tokens >= room:
                raise ValueError(
                    f"the hypothesis {hypothesis!r} (label {label!r}) has {tokens} tokens, which leave no room for "
                    f"the text within the model's {encoder.max_length}; use a shorter label or hypothesis_template"
                )
        contradiction = len(labels) - 1 if entailment == 0 else 0
        return cls(candidates, filled, entailment, contradiction, check_bool(multi_label, "multi_label"), encoder)

    def prepare(
        self, first: Sequence[str], second: Sequence[Any] | None = None, first_index: int = 0, *, strict: bool = True
    ) -> Prepared:
        """Each text paired with every hypothesis (``second`` is not taken: the labels are the task's).

        With truncation a text is cut to fit beside each hypothesis; without it, a text too long beside one is
        refused (``strict``: raised; else recorded in ``rejected`` and the text dropped).

        Raises:
            ValueError: ``second`` given; InputTooLongError: a text too long without truncation (``strict``).
        """
        if second is not None:
            raise ValueError("zero_shot takes texts only; the candidate labels are the task's")
        texts = list(first)
        if self.encoder is None:
            raise ValueError("ZeroShot was built without a tokenizer; build it with bertonnx.tasks.make_task")
        size = len(self.hypotheses)
        premises = [text for text in texts for _ in range(size)]
        pairs = list(self.hypotheses) * len(texts)
        prepared = Prepared([], state=[])
        if self.encoder.truncation:
            units: list[TokenSequence] = list(
                self.encoder.tokenizer.encode_first_cut(premises, pairs, self.encoder.max_length, first_index)
            )
            kept = list(range(len(texts)))
        else:
            units, kept = [], []
            for offset, text in enumerate(texts):
                index = first_index + offset
                try:
                    units += self.encoder.tokenizer.encode(
                        [text] * size, list(self.hypotheses), truncation=False, max_length=self.encoder.max_length
                    )
                except InputTooLongError as exc:  # named by the text, not by its pair with one hypothesis
                    error = InputTooLongError(index, exc.length, exc.max_length)
                    if strict:
                        raise error from None
                    prepared.rejected[index] = error
                    continue
                kept.append(offset)
        prepared.units = units
        prepared.kept = [first_index + offset for offset in kept]
        prepared.counts = [size] * len(kept)
        prepared.state = [texts[offset] for offset in kept]
        prepared.lengths = [sum(len(unit.ids) for unit in units[k * size : (k + 1) * size]) for k in range(len(kept))]
        return prepared

    def postprocess(
        self, outputs: Mapping[str, np.ndarray], batch: Batch, rows: np.ndarray | None = None
    ) -> np.ndarray:
        """``[r, num_labels]`` float32: each pair's logits."""
        logits = outputs[LOGITS]
        return logits if rows is None else logits[rows]

    def finish(self, prepared: Prepared, answers: Sequence[Any]) -> list[Any]:
        """Per text: its labels sorted by score, as the pipeline scores and sorts them."""
        found: list[ZeroShotAnswer] = []
        for text, rows in zip(prepared.state, prepared.grouped(answers), strict=True):
            logits = np.asarray(rows, dtype=np.float32).reshape(len(self.labels), -1)
            if self.multi_label or len(self.labels) == 1:
                scores = softmax(logits[:, [self.contradiction, self.entailment]])[:, 1]
            else:
                scores = softmax(logits[:, self.entailment])
            order = scores.argsort()[::-1]  # the pipeline's list(reversed(scores.argsort()))
            found.append(
                {
                    "sequence": text,
                    "labels": [self.labels[i] for i in order],
                    "scores": [float(scores[i]) for i in order],
                }
            )
        return found
