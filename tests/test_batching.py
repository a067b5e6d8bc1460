"""The token-budget batching rule shared by offline calls and the server, and the step-by-step API."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bertonnx import BertOnnx
from bertonnx.batching import BatchLimits, make_batch, plan_batches

pytestmark = pytest.mark.torch_free


@pytest.mark.parametrize("seed", range(5))
def test_plan_covers_every_input_once_within_the_budget(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 513, size=int(rng.integers(1, 400)))
    limits = BatchLimits(max_batch_tokens=int(rng.choice([512, 1000, 16384])), max_batch_size=int(rng.integers(1, 64)))
    batches = plan_batches(lengths, limits)
    seen = np.concatenate(batches)
    assert sorted(seen.tolist()) == list(range(len(lengths)))
    longest_first = [int(lengths[b].max()) for b in batches]
    assert longest_first == sorted(longest_first, reverse=True)
    for rows in batches:
        padded = int(lengths[rows].max()) * len(rows)
        assert len(rows) <= limits.max_batch_size
        assert padded <= limits.max_batch_tokens or len(rows) == 1


def test_short_inputs_share_a_run_and_long_ones_run_few_at_a_time() -> None:
    limits = BatchLimits(max_batch_tokens=16384, max_batch_size=256)
    assert [len(b) for b in plan_batches([10] * 600, limits)] == [256, 256, 88]
    assert [len(b) for b in plan_batches([512] * 70, limits)] == [32, 32, 6]
    assert [len(b) for b in plan_batches([600, 3], BatchLimits(max_batch_tokens=512))] == [1, 1]
    assert limits.capacity(100) == 163
    assert limits.fits(100, 163)
    assert not limits.fits(100, 164)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"max_batch_tokens": 0}, ValueError, "max_batch_tokens must be >= 1, got 0"),
        ({"max_batch_size": -3}, ValueError, "max_batch_size must be >= 1, got -3"),
        ({"max_batch_tokens": 1.5}, TypeError, "max_batch_tokens must be an int, got float"),
        ({"max_batch_size": True}, TypeError, "max_batch_size must be an int, got bool"),
    ],
)
def test_limits_are_checked(kwargs: dict[str, object], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        BatchLimits(**kwargs)  # type: ignore[arg-type]


def test_step_by_step_equals_a_call(tiny_export: Path) -> None:
    model = BertOnnx(tiny_export, threads=1)
    texts = ["the weather is nice", "a", "a longer text about many other things entirely"]
    pairs = ["i agree with you", "b", "c"]
    encodings = model.encode(texts, pairs)
    assert [len(e.ids) for e in encodings] == model(texts, pairs).lengths.tolist()
    batch = make_batch(encodings[::-1], [2, 1, 0])
    assert batch.padded_tokens == 3 * max(len(e.ids) for e in encodings)
    result = model.run_batch(batch)
    want = model(texts, pairs)
    np.testing.assert_allclose(result["pooler_output"][::-1], want.pooler_output, atol=1e-5, rtol=0)
    np.testing.assert_allclose(result["nsp_logits"][::-1], want.nsp_logits, atol=1e-5, rtol=0)
    only = model.run_batch(batch, ["nsp_logits"])
    assert list(only) == ["nsp_logits"]
    np.testing.assert_array_equal(only["nsp_logits"], result["nsp_logits"])
    with pytest.raises(ValueError, match=r"unknown outputs \['logits'\]; expected names among last_hidden_state"):
        model.run_batch(batch, ["logits"])
    with pytest.raises(ValueError, match="input 1 has 602 tokens, more than max_length=512"):
        model.encode(["a", "word " * 600])
