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


class RandomWeightsWarning(UserWarning):
    """The loaded export holds seeded random weights (or random heads): its outputs are not a trained model's.

    Shapes, tokens and speed are real; the numbers are not. Filter it where that is intended::

        warnings.simplefilter("ignore", bertonnx.RandomWeightsWarning)
    """
