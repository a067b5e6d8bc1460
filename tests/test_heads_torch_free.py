"""The heads' runtime on the session's tiny pre-training export, in a venv without torch too: fill-mask
through the MLM head graph, and the typed error for a head the export lacks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bertonnx import BertOnnx, HeadMissingError

pytestmark = pytest.mark.torch_free


def test_fill_mask_and_missing_heads_without_torch(tiny_export: Path) -> None:
    model = BertOnnx(tiny_export)
    assert "fill_mask" in model.tasks
    texts = ["the capital of france is [MASK].", "[MASK] and [MASK]"]
    answers = model.fill_mask(texts, top_k=3)
    assert [len(masks) for masks in answers] == [1, 2]
    for masks in answers:
        for candidates in masks:
            scores = [c["score"] for c in candidates]
            assert scores == sorted(scores, reverse=True)
            assert len({c["token"] for c in candidates}) == 3
    alone = model.fill_mask(texts[1], top_k=3)  # alone and batched with a shorter text: the same answer
    assert [[c["token"] for c in m] for m in alone] == [[c["token"] for c in m] for m in answers[1]]
    np.testing.assert_allclose([c["score"] for c in alone[0]], [c["score"] for c in answers[1][0]], rtol=1e-5)
    first = answers[0][0][0]
    assert first["sequence"].startswith("the capital of france is")  # one mask: decoded without [CLS]/[SEP]
    assert first["sequence"].replace(" ", "").endswith(first["token_str"].removeprefix("##") + ".")
    with pytest.raises(HeadMissingError, match=r"no classification head; it was exported from BertForPreTraining"):
        model.classify("a")
    with pytest.raises(HeadMissingError, match=r"no one-logit cross-encoder head"):
        model.rerank("q", ["a"])
