"""Zero-shot classification on a tiny NLI classifier of every family beyond BERT and RoBERTa
(``tests/test_zero_shot.py`` covers those two on every surface): the answers equal
``pipeline("zero-shot-classification")`` on the same checkpoint, with and without ``multi_label``.

Each checkpoint is the family's seeded ``ForSequenceClassification`` (``tests/families.py``, a locally trained
tokenizer of the family's kind), its three logits named ``contradiction, neutral, entailment`` and its norms and
classifier sharpened so that labels rank apart; exported fp32 without flags.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from bertonnx import BertOnnx
from bertonnx.table import FAMILIES

from .families import CLASSES, build_family_checkpoint
from .test_zero_shot import LABELS, NLI_LABELS, TEXTS, _assert_equal, _relabel

pytest.importorskip("torch")
pytest.importorskip("transformers")

#: Families whose zero-shot answers are checked here (BERT and RoBERTa: tests/test_zero_shot.py).
OTHERS = [
    family
    for family in FAMILIES
    if family not in ("bert", "roberta")
    and f"{FAMILIES[family].prefix}ForSequenceClassification" in CLASSES.get(family, ())
]


def _sharpen_any(checkpoint: Path, architecture: str) -> None:
    """Unit norms and an N(0, 1) classifier, by parameter name, whatever the family calls them."""
    import torch
    import transformers

    model = getattr(transformers, architecture).from_pretrained(checkpoint)
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name.lower() and name.endswith(".weight"):
                param.fill_(1.0)
            elif "norm" in name.lower() and name.endswith(".bias"):
                param.zero_()
            elif "classifier" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * (1.0 if name.endswith("weight") else 0.1))
    model.save_pretrained(checkpoint)


@pytest.mark.parametrize("family", OTHERS)
def test_zero_shot_equals_the_pipeline_in_every_family(family: str, tmp_path: Path) -> None:
    from transformers import pipeline

    from bertonnx_export.pipeline import ExportOptions, run_export

    architecture = f"{FAMILIES[family].prefix}ForSequenceClassification"
    checkpoint = tmp_path / "checkpoint"
    build_family_checkpoint(architecture, checkpoint)
    _relabel(checkpoint, NLI_LABELS)
    _sharpen_any(checkpoint, architecture)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_export(
            ExportOptions(outdir=tmp_path / "model", model=str(checkpoint), variants=("fp32",)), log=lambda m: None
        )
        reference: Any = pipeline("zero-shot-classification", model=str(checkpoint), device="cpu")
    model = BertOnnx(tmp_path / "model")
    texts = TEXTS[:3]
    for options in ({}, {"multi_label": True}):
        expected = reference(texts, candidate_labels=LABELS, **options)
        _assert_equal(model.zero_shot(texts, LABELS, **options), expected)
