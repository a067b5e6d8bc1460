"""The export's view of the model table: each exportable class, its graph outputs, runtime tasks and gate measures.

The rows come from :mod:`bertonnx.table` (one row per family and architecture kind); this module adds what only
the export needs: the parameter-name prefixes of each head (so the export can say which heads are trained and
which would have to be seeded) and the parity gate's measures in task terms. A checkpoint's
``config.architectures`` picks the row; ``--task`` picks another (e.g. ``feature-extraction`` exports only the
encoder of a classifier). The MLM head, when a row has one, is a second graph (:data:`bertonnx.manifest.MLM_HEAD_FILE`).

This module imports neither torch nor transformers (the command line reads it for ``--task``'s choices).
"""

from __future__ import annotations

from dataclasses import dataclass

from bertonnx.manifest import Manifest
from bertonnx.table import ARCHITECTURES as KINDS
from bertonnx.table import FAMILIES, HEADS, Architecture, Family

from .errors import ExportError

__all__ = [
    "ARCHITECTURES",
    "HEAD_PREFIXES",
    "ROWS",
    "TASK_ALIASES",
    "HeadRow",
    "head_prefixes",
    "label_names",
    "row_for",
    "row_for_config",
    "seeded_labels",
]

#: Parameter-name prefixes of each head in BERT's classes: the base model is ``bert.`` in every class but
#: ``BertModel``, where it is the model itself (see :func:`head_prefixes` for other families).
HEAD_PREFIXES: dict[str, tuple[str, ...]] = {
    "pooler": ("bert.pooler.", "pooler."),
    "nsp": ("cls.seq_relationship.",),
    "mlm": ("cls.predictions.",),
    "classifier": ("classifier.",),
    "token_classifier": ("classifier.",),
    "qa": ("qa_outputs.",),
    "choice": ("classifier.",),
}


def head_prefixes(family: Family) -> dict[str, tuple[str, ...]]:
    """Parameter-name prefixes of each head in ``family``'s classes (from :meth:`Family.modules`); the pooler's
    is ``<base>.pooler.`` (``pooler.`` in the base model class)."""
    if family.model_type == "bert":
        return HEAD_PREFIXES
    found = {"pooler": (f"{family.base}.pooler.", "pooler.")}
    for head in HEADS:
        paths = family.modules(head)
        if head != "pooler" and paths:
            found[head] = tuple(f"{path}." for path in paths)
    return found


#: The parity gate's measures per output, in task terms (recorded in the manifest and the log).
GATE_MEASURES: dict[str, str] = {
    "last_hidden_state": "last_hidden_state max abs / cosine on valid tokens",
    "pooler_output": "pooler_output max abs / cosine",
    "nsp_logits": "nsp_logits max abs; P(is next) error and argmax agreement",
    "logits": "logits max abs; scores (softmax, sigmoid or identity by problem type) error and label agreement",
    "token_logits": "token_logits max abs on valid tokens; tag (argmax) agreement per token",
    "start_logits": "start_logits, end_logits max abs on valid tokens; start and end argmax agreement",
    "choice_logits": "choice_logits max abs; choice probabilities error and argmax agreement",
    "mlm_logits": "mlm_logits at [MASK] positions max abs; top-1 and top-5 token agreement",
    "rtd_logits": "rtd_logits max abs on valid tokens; P(replaced) error and agreement per token",
}


@dataclass(frozen=True)
class HeadRow:
    """One exportable class: a family's architecture kind.

    Attributes:
        architecture: the transformers class name (``config.architectures[0]``).
        task_name: the ``--task`` name (pipeline task names where transformers has one).
        heads: heads beside the encoder, as keys of :data:`bertonnx.table.HEADS` (``mlm`` is a second graph).
        outputs: the main graph's outputs, in order (names from :data:`bertonnx.table.OUTPUTS`).
        tasks: runtime tasks the export offers (``rerank`` only when the classifier has one label).
        labelled: the row carries ``num_labels`` / ``id2label`` (a classification head).
        gate: the parity gate's measures in task terms, as text for the manifest and the log.
        family: the family row.
        kind: the architecture kind.
    """

    architecture: str
    task_name: str
    heads: tuple[str, ...]
    outputs: tuple[str, ...]
    tasks: tuple[str, ...]
    labelled: bool
    gate: tuple[str, ...]
    family: Family
    kind: Architecture

    @property
    def has_mlm(self) -> bool:
        """True when the export writes the MLM head graph."""
        return "mlm" in self.heads

    def runtime_tasks(self, num_labels: int | None) -> list[str]:
        """The tasks of an export of this row; a one-label classifier is also a reranker."""
        return self.kind.runtime_tasks(num_labels)


def _row(family: Family, kind: Architecture) -> HeadRow:
    pooler = family.has_pooler(kind.name)
    heads = tuple(h for h in kind.heads if h != "pooler" or pooler)
    outputs = kind.outputs(pooler=pooler)
    measures = [GATE_MEASURES[name] for name in outputs if name in GATE_MEASURES]
    if "mlm" in heads:
        measures.append(GATE_MEASURES["mlm_logits"])
    return HeadRow(
        family.class_name(kind.name),
        kind.task_name,
        heads,
        outputs,
        kind.tasks,
        kind.labelled,
        tuple(measures),
        family,
        kind,
    )


ROWS: tuple[HeadRow, ...] = tuple(
    _row(family, KINDS[suffix]) for family in FAMILIES.values() for suffix in family.architectures
)
ARCHITECTURES: dict[str, HeadRow] = {row.architecture: row for row in ROWS}
#: ``--task`` names: each task name (BERT's row where BERT has one; the export maps it to the checkpoint's own
#: family), and every class name.
TASK_ALIASES: dict[str, HeadRow] = {
    **{row.task_name: row for row in reversed(ROWS)},
    **{row.architecture: row for row in ROWS},
}


def rows_of(family: Family) -> dict[str, HeadRow]:
    """``--task`` names of one family: task names and class names."""
    rows = [row for row in ROWS if row.family is family]
    return {**{row.task_name: row for row in rows}, **{row.architecture: row for row in rows}}


def row_for(task: str, family: Family | None = None) -> HeadRow:
    """The row a ``--task`` value names (a task name such as ``text-classification`` or a class name), in
    ``family`` (default BERT) for a task name.

    Raises:
        ExportError: unknown name; the message lists the choices.
    """
    aliases = rows_of(family) if family is not None else TASK_ALIASES
    try:
        return aliases[task]
    except KeyError:
        choices = ", ".join(dict.fromkeys(row.task_name for row in ROWS))
        raise ExportError(
            f"--task must be one of {choices} (or a class name such as BertForSequenceClassification), got {task!r}"
        ) from None


def row_for_config(architectures: list[str] | None, where: str, family: Family | None = None) -> HeadRow:
    """The row for a checkpoint's ``config.architectures``.

    A config without ``architectures`` (older or hand-written ones) reads as the family's base model: the
    encoder, with its pooler if the weights have one, and no head invented.

    Raises:
        ExportError: the config names no class bertonnx exports; the message says how to pick one.
    """
    family = family or FAMILIES["bert"]
    if not architectures:
        return ARCHITECTURES[family.class_name("Model")]
    for name in architectures:
        if name in ARCHITECTURES:
            return ARCHITECTURES[name]
    known = ", ".join(row.architecture for row in ROWS if row.family is family)
    raise ExportError(
        f"{where} names architectures {architectures}; bertonnx exports {known}. Pass --task to export the "
        "checkpoint as one of them (e.g. --task feature-extraction for the encoder alone)."
    )


def label_names(labels: tuple[str, ...] | None, num_labels: int | None) -> tuple[str, ...] | None:
    """The label names ``--labels`` and ``--num-labels`` give a seeded classification head, in index order.

    ``--num-labels N`` alone names them ``LABEL_0`` ... ``LABEL_{N-1}`` (transformers' names); with ``--labels``
    it must equal their count. ``None`` when neither is given (the checkpoint's own labels are kept).

    Raises:
        ExportError: an empty or repeated name, a count below 1, or the two options disagree.
    """
    if num_labels is not None and num_labels < 1:
        raise ExportError(f"--num-labels must be a whole number >= 1 (1 makes a reranker), got {num_labels}")
    if labels is None:
        return None if num_labels is None else tuple(f"LABEL_{i}" for i in range(num_labels))
    names = tuple(name.strip() for name in labels)
    if not names or "" in names:
        position = names.index("") + 1 if "" in names else 1
        raise ExportError(
            f"--labels has an empty name (label {position} of {len(names) or 1}); name every label, comma-separated, "
            "e.g. --labels negative,neutral,positive"
        )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ExportError(
            f"--labels names {', '.join(repr(n) for n in repeated)} more than once; every label needs its own name "
            "(id2label and label2id map one to one)"
        )
    if num_labels is not None and num_labels != len(names):
        raise ExportError(
            f"--labels gives {len(names)} names but --num-labels says {num_labels}; drop --num-labels (--labels sets "
            "the count) or make them agree"
        )
    return names


def seeded_labels(manifest: Manifest) -> tuple[str, ...] | None:
    """The labels an export gave its seeded classification head (``--labels``, ``--num-labels``, or the config's
    own), for rebuilding its PyTorch reference with the same width; ``None`` for a trained head or none."""
    labels = manifest.id2label
    seeded = any(manifest.heads.get(head) == "seeded" for head in ("classifier", "token_classifier"))
    return tuple(labels[i] for i in range(len(labels))) if labels is not None and seeded else None
