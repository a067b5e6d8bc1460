"""Names and defaults of the export step that its command line shows, importable without torch."""

from __future__ import annotations

__all__ = ["DEFAULT_MODEL", "DEFAULT_OPSET", "WEIGHT_CHOICES"]

DEFAULT_MODEL = "bert-base-uncased"
WEIGHT_CHOICES = ("pretrained", "random", "auto")
DEFAULT_OPSET = 17
