"""The latency grid: shapes, the timing loop, statistics and the FLOP count of one BERT call.

The timing loop warms up, then runs until both a minimum count and a minimum time are reached (capped by a
maximum count), so short calls get many samples and long ones still finish.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_BATCHES = (1, 8, 32)
DEFAULT_SEQUENCES = (16, 128, 512)
QUICK_BATCHES = (1, 8)
QUICK_SEQUENCES = (16, 128)
PERCENTILES = (50, 90, 99)
MS_PER_S = 1000.0
#: Seed of the synthetic token ids timed on the grid (their values do not change the cost).
GRID_SEED = 0
#: First id drawn for synthetic tokens: skips [PAD], [unused*], [CLS], [SEP] and [MASK] in BERT vocabularies.
FIRST_ORDINARY_ID = 1000


@dataclass(frozen=True)
class TimingPlan:
    """How long to time one call.

    Attributes:
        warmup: untimed calls first (allocations, arena growth, kernel selection).
        min_runs: timed calls at least.
        min_time_s: keep timing until this much time has been spent, too.
        max_runs: never more timed calls than this.
    """

    warmup: int = 2
    min_runs: int = 5
    min_time_s: float = 2.0
    max_runs: int = 200

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")
        if not 1 <= self.min_runs <= self.max_runs:
            raise ValueError(
                f"expected 1 <= min_runs <= max_runs, got min_runs={self.min_runs}, max_runs={self.max_runs}"
            )
        if self.min_time_s < 0:
            raise ValueError(f"min_time_s must be >= 0, got {self.min_time_s}")


DEFAULT_PLAN = TimingPlan()
QUICK_PLAN = TimingPlan(warmup=1, min_runs=3, min_time_s=0.2, max_runs=20)


def measure(call: Callable[[], object], plan: TimingPlan) -> list[float]:
    """Time ``call``: ``plan.warmup`` untimed calls, then timed calls; returns seconds per call."""
    for _ in range(plan.warmup):
        call()
    samples: list[float] = []
    started = time.perf_counter()
    while len(samples) < plan.max_runs and (
        len(samples) < plan.min_runs or time.perf_counter() - started < plan.min_time_s
    ):
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    return samples


def measure_paired(
    first: Callable[[], object], second: Callable[[], object], plan: TimingPlan
) -> tuple[list[float], list[float]]:
    """Time two calls in alternation, swapping their order each round, so both see the same machine.

    A difference of two separately timed medians moves with whatever the machine does between the two loops
    (on a shared VM, several milliseconds); paired rounds cancel it. ``plan`` counts rounds.

    Returns:
        Seconds per call of ``first`` and of ``second``, one of each per round, in round order.
    """
    for _ in range(plan.warmup):
        first()
        second()
    a: list[float] = []
    b: list[float] = []
    started = time.perf_counter()
    while len(a) < plan.max_runs and (len(a) < plan.min_runs or time.perf_counter() - started < plan.min_time_s):
        for call, samples in ((first, a), (second, b)) if len(a) % 2 == 0 else ((second, b), (first, a)):
            t0 = time.perf_counter()
            call()
            samples.append(time.perf_counter() - t0)
    return a, b


def summarize(samples: Sequence[float]) -> dict[str, float | int]:
    """min, p50, p90, p99 and mean in milliseconds, and the number of timed runs."""
    ms = np.asarray(samples, dtype=np.float64) * MS_PER_S
    stats: dict[str, float | int] = {"runs": int(ms.size), "min_ms": float(ms.min())}
    for p in PERCENTILES:
        stats[f"p{p}_ms"] = float(np.percentile(ms, p))
    stats["mean_ms"] = float(ms.mean())
    return stats


def parse_sizes(text: str, name: str, limit: int | None = None) -> tuple[int, ...]:
    """Parse ``"1,8,32"`` into positive ints.

    Raises:
        ValueError: an item is not a positive integer or exceeds ``limit``.
    """
    values = []
    for item in text.split(","):
        item = item.strip()
        if not item.isdigit() or int(item) < 1:
            raise ValueError(f"--{name} expects comma-separated positive integers such as 1,8,32; got {text!r}")
        if limit is not None and int(item) > limit:
            raise ValueError(f"--{name} value {item} exceeds the model's {limit} positions; expected <= {limit}")
        values.append(int(item))
    return tuple(dict.fromkeys(values))


def synthetic_feeds(batch: int, seq: int, vocab_size: int, seed: int = GRID_SEED) -> dict[str, np.ndarray]:
    """Int64 model inputs of shape ``[batch, seq]``: random ordinary ids, no padding, two segments."""
    rng = np.random.default_rng(seed + 7919 * batch + seq)
    ids = rng.integers(min(FIRST_ORDINARY_ID, vocab_size - 1), vocab_size, size=(batch, seq), dtype=np.int64)
    types = np.zeros((batch, seq), dtype=np.int64)
    types[:, seq // 2 :] = 1
    return {"input_ids": ids, "attention_mask": np.ones((batch, seq), dtype=np.int64), "token_type_ids": types}


def bert_flops(config: dict[str, Any], batch: int, seq: int) -> float:
    """Multiply-add FLOPs (2 per MAC) of one encoder + pooler + NSP call on ``[batch, seq]`` unpadded inputs.

    Per layer (Devlin et al. 2019 architecture; count as in Kaplan et al. 2020, "Scaling Laws", Table 1):
    the Q, K, V and output projections ``2·B·T·4·H²``, the feed-forward pair ``2·B·T·2·H·F``, attention
    scores ``Q·Kᵀ`` and context ``softmax·V`` ``2·2·B·T²·H``. Plus pooler ``2·B·H²`` and NSP ``2·B·H·2``.
    Embedding lookups, layer norms, softmax and GELU are ignored (under 1% at these sizes).
    """
    hidden = int(config["hidden_size"])
    ffn = int(config["intermediate_size"])
    layers = int(config["num_hidden_layers"])
    tokens = batch * seq
    per_layer = 2 * tokens * (4 * hidden * hidden + 2 * hidden * ffn) + 2 * 2 * batch * seq * seq * hidden
    return float(layers * per_layer + 2 * batch * hidden * hidden + 2 * batch * hidden * 2)
