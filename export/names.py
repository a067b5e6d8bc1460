"""Names and defaults of the export step that its command line shows, importable without torch."""

from __future__ import annotations

__all__ = ["DEFAULT_MODEL", "DEFAULT_OPSET", "MAX_OPSET", "MIN_OPSET", "WEIGHT_CHOICES"]

DEFAULT_MODEL = "bert-base-uncased"
WEIGHT_CHOICES = ("pretrained", "random", "auto")
DEFAULT_OPSET = 17
#: The lowest opset the graphs export to: torch exports scaled_dot_product_attention from opset 14 on.
MIN_OPSET = 14
#: The highest opset tried here (2026-12-07, a tiny RoBERTa classifier, fp32: 14, 18, 20 and 21 passed the gate).
MAX_OPSET = 21
