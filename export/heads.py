"""The one table of exportable BERT architectures: class, graph outputs, runtime tasks and gate measures.

A checkpoint's ``config.architectures`` picks the row; ``--task`` picks another (e.g. ``feature-extraction``
exports only the encoder of a classifier). Each row names the heads it carries, by the parameter prefixes
they have in the transformers class, so the export can say which are trained and which would have to be
seeded; its graph outputs are those of :data:`bertonnx.manifest.GRAPH_OUTPUT_NAMES`; the MLM head, when a
row has one, is a second graph (:data:`bertonnx.manifest.MLM_HEAD_FILE`). Adding a head is one row here,
one task in the runtime and its routes.

This module imports neither torch nor transformers (the command line reads it for ``--task``'s choices).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ExportError

__all__ = ["ARCHITECTURES", "HEAD_PREFIXES", "ROWS", "TASK_ALIASES", "HeadRow", "row_for", "row_for_config"]

#: Parameter-name prefixes of each head, per class layout: the base model is ``bert.`` in every class but
#: ``BertModel``, where it is the model itself.
HEAD_PREFIXES: dict[str, tuple[str, ...]] = {
    "pooler": ("bert.pooler.", "pooler."),
    "nsp": ("cls.seq_relationship.",),
    "mlm": ("cls.predictions.",),
    "classifier": ("classifier.",),
    "token_classifier": ("classifier.",),
    "qa": ("qa_outputs.",),
}


@dataclass(frozen=True)
class HeadRow:
    """One exportable architecture.

    Attributes:
        architecture: the transformers class name (``config.architectures[0]``).
        task_name: the ``--task`` name (pipeline task names where transformers has one).
        heads: heads beside the encoder, as keys of :data:`HEAD_PREFIXES` (``mlm`` is a second graph).
        outputs: the main graph's outputs, in order (names from ``bertonnx.manifest``).
        tasks: runtime tasks the export offers (``rerank`` only when the classifier has one label).
        labelled: the row carries ``num_labels`` / ``id2label`` (a classification head).
        gate: the parity gate's measures in task terms, as text for the manifest and the log.
    """

    architecture: str
    task_name: str
    heads: tuple[str, ...]
    outputs: tuple[str, ...]
    tasks: tuple[str, ...]
    labelled: bool
    gate: tuple[str, ...]

    @property
    def has_mlm(self) -> bool:
        """True when the export writes the MLM head graph."""
        return "mlm" in self.heads

    def runtime_tasks(self, num_labels: int | None) -> list[str]:
        """The tasks of an export of this row; a one-label classifier is also a reranker."""
        tasks = list(self.tasks)
        if "classify" in tasks and num_labels == 1:
            tasks.append("rerank")
        return tasks


_HIDDEN = ("last_hidden_state max abs / cosine on valid tokens",)
_POOLER = ("pooler_output max abs / cosine",)
_NSP = ("nsp_logits max abs; P(is next) error and argmax agreement",)
_MLM = ("mlm_logits at [MASK] positions max abs; top-1 and top-5 token agreement",)
ROWS: tuple[HeadRow, ...] = (
    HeadRow(
        "BertModel",
        "feature-extraction",
        ("pooler",),
        ("last_hidden_state", "pooler_output"),
        ("embed",),
        False,
        _HIDDEN + _POOLER,
    ),
    HeadRow(
        "BertForPreTraining",
        "pretraining",
        ("pooler", "nsp", "mlm"),
        ("last_hidden_state", "pooler_output", "nsp_logits"),
        ("embed", "nsp", "fill_mask"),
        False,
        _HIDDEN + _POOLER + _NSP + _MLM,
    ),
    HeadRow(
        "BertForMaskedLM",
        "fill-mask",
        ("mlm",),
        ("last_hidden_state",),
        ("embed", "fill_mask"),
        False,
        _HIDDEN + _MLM,
    ),
    HeadRow(
        "BertForNextSentencePrediction",
        "next-sentence-prediction",
        ("pooler", "nsp"),
        ("last_hidden_state", "pooler_output", "nsp_logits"),
        ("embed", "nsp"),
        False,
        _HIDDEN + _POOLER + _NSP,
    ),
    HeadRow(
        "BertForSequenceClassification",
        "text-classification",
        ("pooler", "classifier"),
        ("last_hidden_state", "pooler_output", "logits"),
        ("embed", "classify"),
        True,
        _HIDDEN
        + _POOLER
        + ("logits max abs; scores (softmax, sigmoid or identity by problem type) error and label agreement",),
    ),
    HeadRow(
        "BertForTokenClassification",
        "token-classification",
        ("token_classifier",),
        ("last_hidden_state", "token_logits"),
        ("embed", "tag"),
        True,
        (*_HIDDEN, "token_logits max abs on valid tokens; tag (argmax) agreement per token"),
    ),
    HeadRow(
        "BertForQuestionAnswering",
        "question-answering",
        ("qa",),
        ("last_hidden_state", "start_logits", "end_logits"),
        ("embed", "answer"),
        False,
        (*_HIDDEN, "start_logits, end_logits max abs on valid tokens; start and end argmax agreement"),
    ),
)
ARCHITECTURES: dict[str, HeadRow] = {row.architecture: row for row in ROWS}
#: ``--task`` names: each row's task name, and the architecture names themselves.
TASK_ALIASES: dict[str, HeadRow] = {
    **{row.task_name: row for row in ROWS},
    **{row.architecture: row for row in ROWS},
}


def row_for(task: str) -> HeadRow:
    """The row a ``--task`` value names (a task name such as ``text-classification`` or a class name).

    Raises:
        ExportError: unknown name; the message lists the choices.
    """
    try:
        return TASK_ALIASES[task]
    except KeyError:
        choices = ", ".join(row.task_name for row in ROWS)
        raise ExportError(
            f"--task must be one of {choices} (or a class name such as BertForSequenceClassification), got {task!r}"
        ) from None


def row_for_config(architectures: list[str] | None, where: str) -> HeadRow:
    """The row for a checkpoint's ``config.architectures``.

    A config without ``architectures`` (older or hand-written ones) reads as ``BertModel``: the encoder,
    with its pooler if the weights have one, and no head invented.

    Raises:
        ExportError: the config names no BERT class bertonnx exports; the message says how to pick one.
    """
    if not architectures:
        return ARCHITECTURES["BertModel"]
    for name in architectures:
        if name in ARCHITECTURES:
            return ARCHITECTURES[name]
    known = ", ".join(ARCHITECTURES)
    raise ExportError(
        f"{where} names architectures {architectures}; bertonnx exports {known}. Pass --task to export the "
        "checkpoint as one of them (e.g. --task feature-extraction for the encoder alone)."
    )
