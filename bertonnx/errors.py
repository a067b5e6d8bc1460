"""Errors raised by bertonnx.

Bad values raise ``ValueError`` and wrong types ``TypeError``, each naming what was expected. A model
directory that is missing, incomplete or corrupt raises :class:`ModelDirectoryError`, a ``ValueError``
subclass so callers that already catch ``ValueError`` keep working. Asking a task of an export that lacks
its head (NSP of a ``BertModel`` export ...) raises :class:`HeadMissingError`, also a ``ValueError``.
Loading an export whose weights are (partly) random warns with :class:`RandomWeightsWarning`.
"""

from __future__ import annotations

__all__ = ["HeadMissingError", "ModelDirectoryError", "RandomWeightsWarning"]


class ModelDirectoryError(ValueError):
    """The model directory is missing, is not a bertonnx export, or a file in it is missing or corrupt."""


#: Per task: the head it needs, and which checkpoints have one (the fix :class:`HeadMissingError` names).
TASK_HEADS = {
    "nsp": ("NSP head", "a BertForPreTraining or BertForNextSentencePrediction checkpoint"),
    "classify": ("classification head", "a BertForSequenceClassification checkpoint"),
    "rerank": (
        "one-logit cross-encoder head",
        "a BertForSequenceClassification checkpoint with num_labels=1 (a cross-encoder)",
    ),
    "fill_mask": ("MLM head", "a BertForPreTraining or BertForMaskedLM checkpoint"),
    "tag": ("token-classification head", "a BertForTokenClassification checkpoint"),
    "answer": ("question-answering head", "a BertForQuestionAnswering checkpoint"),
    "embed": (
        "pooler",
        "a checkpoint with a pooler (BertModel, BertForPreTraining ...), or pass pooling 'cls' or 'mean',",
    ),
}


class HeadMissingError(ValueError):
    """The export has no head for the asked task; the message names the architecture it was exported from,
    the tasks it offers, and which checkpoint to export for the task.

    Attributes:
        task: the task asked for (``nsp``, ``classify``, ``rerank``, ``fill_mask``, ``embed`` ...).
        architecture: the transformers class the export came from.
        tasks: the tasks the export offers.
    """

    def __init__(self, message: str, *, task: str, architecture: str, tasks: tuple[str, ...]) -> None:
        super().__init__(message)
        self.task = task
        self.architecture = architecture
        self.tasks = tasks

    @classmethod
    def for_task(
        cls, task: str, architecture: str, tasks: tuple[str, ...], num_labels: int | None = None
    ) -> HeadMissingError:
        """The error for ``task`` asked of an export of ``architecture`` offering ``tasks``."""
        head, fix = TASK_HEADS.get(task, (f"head for {task}", "a checkpoint with that head"))
        what = f"{architecture} with {num_labels} labels" if num_labels is not None else architecture
        return cls(
            f"this export has no {head}; it was exported from {what} and offers {', '.join(tasks) or 'no task'}. "
            f"Export {fix} for {task}.",
            task=task,
            architecture=architecture,
            tasks=tasks,
        )


class RandomWeightsWarning(UserWarning):
    """The loaded export holds seeded random weights (or random heads): its outputs are not a trained model's.

    Shapes, tokens and speed are real; the numbers are not. Filter it where that is intended::

        warnings.simplefilter("ignore", bertonnx.RandomWeightsWarning)
    """
