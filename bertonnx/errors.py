"""Errors raised by bertonnx.

Bad values raise ``ValueError`` and wrong types ``TypeError``, each naming what was expected. A model
directory that is missing, incomplete or corrupt raises :class:`ModelDirectoryError`, a ``ValueError``
subclass so callers that already catch ``ValueError`` keep working. Loading an export whose weights are
(partly) random warns with :class:`RandomWeightsWarning`.
"""

from __future__ import annotations

__all__ = ["ModelDirectoryError", "RandomWeightsWarning"]


class ModelDirectoryError(ValueError):
    """The model directory is missing, is not a bertonnx export, or a file in it is missing or corrupt."""


class RandomWeightsWarning(UserWarning):
    """The loaded export holds seeded random weights (or random heads): its outputs are not a trained model's.

    Shapes, tokens and speed are real; the numbers are not. Filter it where that is intended::

        warnings.simplefilter("ignore", bertonnx.RandomWeightsWarning)
    """
