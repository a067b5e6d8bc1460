"""Errors raised by bertonnx.

Bad values raise ``ValueError`` and wrong types ``TypeError``, each naming what was expected. A model
directory that is missing, incomplete or corrupt raises :class:`ModelDirectoryError`, a ``ValueError``
subclass so callers that already catch ``ValueError`` keep working.
"""

from __future__ import annotations

__all__ = ["ModelDirectoryError"]


class ModelDirectoryError(ValueError):
    """The model directory is missing, is not a bertonnx export, or a file in it is missing or corrupt."""
