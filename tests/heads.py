"""Tiny seeded checkpoints of every BERT architecture bertonnx exports, for the heads tests (issues 19, 20).

``build_tiny_checkpoint`` writes what a user's ``save_pretrained`` would: ``config.json`` (its
``architectures`` names the class), ``model.safetensors`` and the tokenizer files with bert-base-uncased's
shipped vocabulary. Weights are drawn from one seed so every test run, and the export's own reference, see
the same model. torch and transformers are imported only when a checkpoint is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .conftest import TINY_CONFIG, VOCAB

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_LABELS",
    "TINY_HEADS_SEED",
    "WEIGHT_STD",
    "build_tiny_checkpoint",
]

#: Every architecture ``build_tiny_checkpoint`` builds (transformers class names).
ARCHITECTURES = (
    "BertModel",
    "BertForPreTraining",
    "BertForMaskedLM",
    "BertForNextSentencePrediction",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertForQuestionAnswering",
    "BertForMultipleChoice",
)
#: Labels used when the caller gives neither ``num_labels`` nor ``id2label``.
DEFAULT_LABELS: dict[str, dict[int, str]] = {
    "BertForSequenceClassification": {0: "negative", 1: "neutral", 2: "positive"},
    "BertForTokenClassification": {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"},
}
TINY_HEADS_SEED = 1234
#: Every weight ~ N(0, WEIGHT_STD), LayerNorm gains included (as ``conftest.save_tiny_checkpoint``): no two
#: tensors alike, so a dropped or swapped tensor shows in the outputs.
WEIGHT_STD = 0.05
PROBLEM_TYPES = ("single_label_classification", "multi_label_classification", "regression")


def build_tiny_checkpoint(
    architecture: str,
    directory: str | Path,
    *,
    num_labels: int | None = None,
    id2label: dict[int, str] | None = None,
    problem_type: str | None = None,
    seed: int = TINY_HEADS_SEED,
) -> Path:
    """Write a tiny seeded ``architecture`` checkpoint (2 layers, hidden 32, bert-base vocab) to ``directory``.

    Args:
        architecture: a transformers class name from :data:`ARCHITECTURES`.
        directory: where to save (created; files in it are overwritten).
        num_labels: labels of a classification head (sequence or token); 1 makes a cross-encoder. Default:
            ``len(id2label)`` when given, else :data:`DEFAULT_LABELS`' count (2 outputs for QA, ignored
            elsewhere).
        id2label: label names by index. Default: :data:`DEFAULT_LABELS` when ``num_labels`` is not given
            either, else transformers' ``LABEL_i``.
        problem_type: ``single_label_classification``, ``multi_label_classification``, ``regression`` or
            ``None`` (sequence classification only).
        seed: seed of every weight.

    Returns:
        ``directory`` as a Path.

    Raises:
        ValueError: unknown architecture or problem type, or ``num_labels`` and ``id2label`` disagree.
    """
    import torch
    import transformers
    from transformers import BertConfig, BertTokenizerFast

    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture must be one of {', '.join(ARCHITECTURES)}, got {architecture!r}")
    if problem_type is not None and problem_type not in PROBLEM_TYPES:
        raise ValueError(f"problem_type must be one of {', '.join(PROBLEM_TYPES)} or None, got {problem_type!r}")
    labels: dict[int, str] | None = dict(id2label) if id2label is not None else None
    if labels is None and num_labels is None:
        labels = DEFAULT_LABELS.get(architecture)
    if labels is not None and num_labels is not None and len(labels) != num_labels:
        raise ValueError(f"num_labels={num_labels} but id2label has {len(labels)} labels")
    extra: dict[str, Any] = {}
    if labels is not None:
        extra["id2label"] = {int(k): v for k, v in labels.items()}
        extra["label2id"] = {v: int(k) for k, v in labels.items()}
    elif num_labels is not None:
        extra["num_labels"] = num_labels
    if problem_type is not None:
        extra["problem_type"] = problem_type
    config = BertConfig(**TINY_CONFIG, **extra)
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():  # tied MLM decoder = word embeddings: drawn once
            param.copy_(torch.randn(param.shape, generator=generator) * WEIGHT_STD)
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    BertTokenizerFast(vocab_file=str(VOCAB), do_lower_case=True).save_pretrained(path)
    return path
