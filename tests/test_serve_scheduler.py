"""The server's batching policy and scheduler without HTTP, and one engine run of mixed requests.

The policy: anchor each batch on the queued input of least priority key (its arrival time plus a handicap per
token: shortest first within an age bound), fill it with the queued inputs closest to it in length within the
token budget; after a run, wait a few milliseconds for the clients it answered. These tests show it keeps the
budget, pads less than taking the queue in arrival order, lets short work overtake queued long work, and never
starves long or short inputs (every input is answered within its deadline or refused with 429/504), where a
pure shortest-first policy starves a long input indefinitely.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from pathlib import Path

import numpy as np
import pytest

from bertonnx import BertOnnx
from bertonnx.batching import BatchLimits
from bertonnx.errors import EngineError, ShuttingDownError
from bertonnx.serve.engine import Engine, Work
from bertonnx.serve.errors import from_core
from bertonnx.serve.metrics import ServeMetrics
from bertonnx.serve.options import ServeOptions
from bertonnx.serve.protocol import Pooling
from bertonnx.serve.scheduler import (
    PRIORITY_SECONDS_PER_TOKEN,
    PROTECTED_SHARE,
    REFILL_WAIT_S,
    QueueFull,
    Scheduler,
    batch_is_full,
    oldest_requests,
    priority_key,
    select_batch,
)
from bertonnx.tasks import Embed, Graph, Nsp

ATOL = 1e-5


def padded(lengths: list[int], picks: list[int]) -> int:
    return max(lengths[i] for i in picks) * len(picks)


# -- the policy -------------------------------------------------------------------------------------------


def test_select_batch_anchors_on_the_oldest_and_takes_the_closest_lengths() -> None:
    lengths = [100, 10, 95, 300, 105, 500, 98]
    picks = select_batch(lengths, BatchLimits(max_batch_tokens=10_000, max_batch_size=4))
    assert 0 in picks
    assert sorted(lengths[i] for i in picks) == [95, 98, 100, 105]


def test_select_batch_keeps_the_token_budget_and_the_size_cap() -> None:
    rng = random.Random(0)
    for _ in range(300):
        lengths = [rng.randint(2, 512) for _ in range(rng.randint(1, 60))]
        limits = BatchLimits(max_batch_tokens=rng.choice([512, 2048, 16384]), max_batch_size=rng.choice([1, 8, 256]))
        picks = select_batch(lengths, limits)
        assert picks[0] == 0 or 0 in picks
        assert len(set(picks)) == len(picks)
        longest = max(lengths[i] for i in picks)
        assert limits.fits(longest, len(picks)) or len(picks) == 1
        # the picks are a contiguous run of the queue sorted by length (nothing skipped in between)
        ranked = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
        positions = sorted(ranked.index(i) for i in picks)
        assert positions == list(range(positions[0], positions[0] + len(picks)))


def test_a_large_batch_stops_growing_where_padding_would_pass_a_quarter() -> None:
    lengths = [60, *range(6, 66, 2)]  # the oldest is 60 tokens, the others 6 to 64
    picks = select_batch(lengths, BatchLimits())
    chosen = sorted(lengths[i] for i in picks)
    padded = max(chosen) * len(chosen)
    assert padded >= 256  # grown past the efficient size ...
    assert (padded - sum(chosen)) / padded <= 0.25  # ... but no further than a quarter of padding
    assert len(picks) < len(lengths)  # the short inputs are left for their own batch
    short_batch = select_batch([lengths[i] for i in range(len(lengths)) if i not in picks], BatchLimits())
    assert len(short_batch) > 1
    tiny = [40, 6, 8, 10]  # below the efficient size a batch takes everything that fits
    assert sorted(select_batch(tiny, BatchLimits())) == [0, 1, 2, 3]


def test_an_input_longer_than_the_budget_runs_alone() -> None:
    assert select_batch([600, 5, 5], BatchLimits(max_batch_tokens=512)) == [0]
    assert select_batch([], BatchLimits()) == []


def test_batch_is_full_only_when_waiting_cannot_grow_it() -> None:
    limits = BatchLimits(max_batch_tokens=100, max_batch_size=8)
    assert not batch_is_full([10, 10], select_batch([10, 10], limits), limits)
    assert batch_is_full([50, 50], select_batch([50, 50], limits), limits)  # a third 50 would pass 100
    assert batch_is_full([10, 90], select_batch([10, 90], limits), limits)  # the 90 was left out


def simulate(policy, arrivals: list[list[int]], limits: BatchLimits, cuts: int) -> dict[int, int]:  # type: ignore[no-untyped-def]
    """Run ``cuts`` cuts; before cut ``k`` the inputs of ``arrivals[k]`` join. Returns input -> cut served."""
    queue: list[tuple[int, int]] = []  # (input id, length), oldest first
    served: dict[int, int] = {}
    next_id = 0
    for cut in range(cuts):
        for length in arrivals[cut] if cut < len(arrivals) else []:
            queue.append((next_id, length))
            next_id += 1
        if not queue:
            continue
        picks = set(policy([length for _, length in queue], limits))
        for i in picks:
            served[queue[i][0]] = cut
        queue = [entry for i, entry in enumerate(queue) if i not in picks]
    return served


def shortest_first(lengths: list[int], limits: BatchLimits) -> list[int]:
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    count = limits.capacity(lengths[order[0]])
    while count > 1 and not limits.fits(max(lengths[i] for i in order[:count]), count):
        count -= 1
    return order[:count]


def test_no_input_starves_under_steady_load() -> None:
    """A long input queued behind a steady stream of short ones (and the reverse) is served within one cut
    per input queued before it; shortest-first never serves the long one while short ones keep coming."""
    limits = BatchLimits(max_batch_tokens=512, max_batch_size=8)
    stream = [[500, *[8] * 8], *[[8] * 8 for _ in range(49)]]  # 500 tokens first, then 8 shorts every cut
    ours = simulate(select_batch, stream, limits, cuts=50)
    assert ours[0] == 0  # the long input is the oldest: it anchors the first cut
    greedy = simulate(shortest_first, stream, limits, cuts=50)
    assert 0 not in greedy  # starved for all 50 cuts
    shorts_first = [[8] * 64, *[[500] for _ in range(49)]]  # 64 short inputs, then a long one every cut
    ours = simulate(select_batch, shorts_first, limits, cuts=50)
    assert max(ours[i] for i in range(64)) <= 64 // limits.max_batch_size  # all shorts within 8 cuts
    rng = random.Random(1)
    arrivals = [[rng.choice([4, 16, 64, 128, 300, 512]) for _ in range(rng.randint(0, 6))] for _ in range(200)]
    served = simulate(select_batch, arrivals, limits, cuts=400)
    arrived_at = [cut for cut, batch in enumerate(arrivals) for _ in batch]
    next_id = len(arrived_at)
    assert set(served) == set(range(next_id))
    for i in range(next_id):
        older_unserved = sum(1 for j in range(i) if served[j] >= arrived_at[i])
        assert served[i] - arrived_at[i] <= older_unserved


def test_anchored_batches_pad_less_than_arrival_order() -> None:
    rng = random.Random(2)
    lengths = [rng.choice([6, 12, 40, 128, 256, 500]) for _ in range(400)]
    limits = BatchLimits(max_batch_tokens=4096, max_batch_size=64)

    def total_padding(policy) -> int:  # type: ignore[no-untyped-def]
        queue = list(range(len(lengths)))
        total = 0
        while queue:
            picks = policy([lengths[i] for i in queue], limits)
            total += padded([lengths[i] for i in queue], picks)
            queue = [q for k, q in enumerate(queue) if k not in set(picks)]
        return total

    def arrival_order(queue_lengths: list[int], limits: BatchLimits) -> list[int]:  # TEI's way
        count = 1
        while count < len(queue_lengths) and limits.fits(max(queue_lengths[: count + 1]), count + 1):
            count += 1
        return list(range(count))

    ours, fifo = total_padding(select_batch), total_padding(arrival_order)
    assert ours < 0.6 * fifo, (ours, fifo)


# -- the scheduler ----------------------------------------------------------------------------------------


class Recorder:
    """A batch runner that records each batch and answers every work with its own length."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def __call__(self, works: list[Work]) -> list[object]:
        self.batches.append([len(w) for w in works])
        return [len(w) for w in works]


def work(length: int) -> Work:
    return Work([101] * length, [0] * length, Nsp("logits"))


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, timeout=30))


def test_concurrent_requests_share_a_batch_and_get_their_own_answers() -> None:
    async def scenario() -> None:
        recorder, metrics = Recorder(), ServeMetrics()
        scheduler = Scheduler(recorder, BatchLimits(), max_queue=100, batch_wait_s=0.2, metrics=metrics)
        scheduler.start()
        tickets = [scheduler.submit([work(n), work(n + 1)], deadline=1e12) for n in (3, 7, 11)]
        answers = await asyncio.gather(*(t.future for t in tickets))
        await scheduler.stop()
        assert answers == [[3, 4], [7, 8], [11, 12]]
        assert len(recorder.batches) == 1
        assert sorted(recorder.batches[0]) == [3, 4, 7, 8, 11, 12]
        assert metrics.registry.get_sample_value("bertonnx_batch_requests_sum") == 3
        assert metrics.registry.get_sample_value("bertonnx_batch_size_sum") == 6

    run(scenario())


def test_oldest_requests_keeps_the_inputs_of_the_first_requests_in_queue_order() -> None:
    a, b, c = object(), object(), object()
    tickets = [a, b, a, c, b, c]
    assert oldest_requests(tickets, None) == [0, 1, 2, 3, 4, 5]
    assert oldest_requests(tickets, 1) == [0, 2]
    assert oldest_requests(tickets, 2) == [0, 1, 2, 4]
    assert oldest_requests(tickets, 3) == [0, 1, 2, 3, 4, 5]
    assert oldest_requests([], 1) == []


@pytest.mark.parametrize(
    ("max_batch_requests", "expected"), [(1, [[3, 4], [7, 8], [11, 12]]), (2, [[3, 4, 7, 8], [11, 12]])]
)
def test_max_batch_requests_caps_the_requests_one_batch_serves(
    max_batch_requests: int, expected: list[list[int]]
) -> None:
    async def scenario() -> None:
        recorder, metrics = Recorder(), ServeMetrics()
        scheduler = Scheduler(
            recorder,
            BatchLimits(),
            max_queue=100,
            batch_wait_s=0.2,
            max_batch_requests=max_batch_requests,
            metrics=metrics,
        )
        scheduler.start()
        tickets = [scheduler.submit([work(n), work(n + 1)], deadline=1e12) for n in (3, 7, 11)]
        answers = await asyncio.gather(*(t.future for t in tickets))
        await scheduler.stop()
        assert answers == [[3, 4], [7, 8], [11, 12]]
        assert [sorted(batch) for batch in recorder.batches] == expected
        runs = metrics.registry.get_sample_value("bertonnx_batch_requests_count")
        assert runs == len(expected)
        assert metrics.registry.get_sample_value("bertonnx_batch_requests_sum") == 3

    run(scenario())


def test_cancelled_and_expired_inputs_are_dropped_not_computed() -> None:
    async def scenario() -> None:
        recorder, metrics = Recorder(), ServeMetrics()
        scheduler = Scheduler(recorder, BatchLimits(), max_queue=100, batch_wait_s=0.3, metrics=metrics)
        scheduler.start()
        gone = scheduler.submit([work(5), work(6)], deadline=1e12)
        late = scheduler.submit([work(9)], deadline=0.0)  # already past its deadline
        kept = scheduler.submit([work(7)], deadline=1e12)
        assert scheduler.cancel(gone, "disconnected") == 2
        assert await kept.future == [7]
        await scheduler.stop()
        assert recorder.batches == [[7]]
        assert not late.future.done()  # its handler answers 504 at its own deadline

        def dropped(reason: str) -> float | None:
            return metrics.registry.get_sample_value("bertonnx_dropped_inputs_total", {"reason": reason})

        assert dropped("disconnected") == 2
        assert dropped("timeout") == 1
        with pytest.raises(ValueError, match="reason must be one of"):
            scheduler.cancel(kept, "bored")

    run(scenario())


def test_a_full_queue_refuses_with_retry_after_from_recent_throughput() -> None:
    async def scenario() -> None:
        scheduler = Scheduler(Recorder(), BatchLimits(), max_queue=4, batch_wait_s=5.0)
        scheduler.start()
        scheduler.submit([work(3)] * 3, deadline=1e12)
        with pytest.raises(QueueFull, match=r"3 inputs waiting and 2 in this request, max_queue 4") as full:
            scheduler.submit([work(3)] * 2, deadline=1e12)
        assert full.value.retry_after == 1  # nothing has run yet
        scheduler._recent.extend([(10, 2.0), (10, 2.0)])  # 5 inputs/s measured
        assert scheduler.retry_after(extra=2) == 1  # (3 + 2) / 5 = 1 s
        scheduler._recent.extend([(1, 10.0)])  # 21 inputs in 14 s: 1.5/s
        assert scheduler.retry_after(extra=2) == 4  # ceil(5 / 1.5)
        await scheduler.stop()

    run(scenario())


def test_a_request_past_max_queue_wait_is_refused_by_the_work_queued() -> None:
    async def scenario() -> None:
        # oldest first, so every queued request is ahead of the next one (the queue order is tested below)
        scheduler = Scheduler(
            Recorder(), BatchLimits(), max_queue=1000, batch_wait_s=5.0, max_queue_wait=2.0, priority_per_token=0.0
        )
        scheduler.start()
        scheduler.submit([work(100)] * 3, deadline=1e12)  # nothing has run: no throughput, no estimate
        assert scheduler.queued_seconds() is None
        scheduler.cost.observe(500, 1.0)  # 1000 tokens/s measured over both
        scheduler.cost.observe(1500, 1.0)
        assert scheduler.queued_seconds(200) == pytest.approx(0.5)  # 300 queued + 200
        scheduler.submit([work(100)] * 10, deadline=1e12)  # 1300 tokens: 1.3 s, within 2 s
        with pytest.raises(QueueFull, match=r"about 2\.1 s of work queued with this request, max_queue_wait 2 s"):
            scheduler.submit([work(400), work(400)], deadline=1e12)  # 2.1 s
        with pytest.raises(QueueFull) as full:
            scheduler.submit([work(500)] * 8, deadline=1e12)  # 5.3 s: retry once 3.3 s have drained
        assert full.value.retry_after == 4
        scheduler.submit([work(100)] * 7, deadline=1e12)  # 2.0 s: still within
        await scheduler.stop()

    async def empty_queue() -> None:
        scheduler = Scheduler(Recorder(), BatchLimits(), max_queue=1000, batch_wait_s=5.0, max_queue_wait=0.1)
        scheduler.start()
        scheduler.cost.observe(10, 1.0)  # counted as 256 tokens/s: one 512-token input is 2 s of work
        scheduler.submit([work(512)], deadline=1e12)  # taken all the same: nothing is queued
        with pytest.raises(QueueFull, match=r"max_queue_wait 0\.1 s"):
            scheduler.submit([work(512)], deadline=1e12)  # behind the first 512 tokens
        with pytest.raises(QueueFull, match=r"max_queue_wait 0\.1 s"):
            scheduler.submit([work(2)], deadline=1e12)  # ahead of them by the order, but the whole queue counts
        await scheduler.stop()

    async def own_deadline() -> None:
        oldest_first = Scheduler(
            Recorder(), BatchLimits(), max_queue=1000, batch_wait_s=5.0, max_queue_wait=None, priority_per_token=0.0
        )
        by_size = Scheduler(Recorder(), BatchLimits(), max_queue=1000, batch_wait_s=5.0, max_queue_wait=None)
        for scheduler in (oldest_first, by_size):
            scheduler.start()
            scheduler.cost.observe(1000, 1.0)  # 1000 tokens/s
            for _ in range(4):
                scheduler.submit([work(500)], deadline=1e12)  # 2 s of work queued, four requests of 500 tokens
        soon = time.monotonic() + 1.0
        with pytest.raises(QueueFull, match=r"more than the 1 s left before its timeout"):
            oldest_first.submit([work(500)], deadline=soon)  # 2.5 s of work to finish: refused now, not a 504 later
        # by size, its place is at most its protected time (0.75 s away), ahead of the four queued 20 s after
        # their arrival: 0.5 s of work, done in time (and they lose 0.5 s of their 1e12)
        by_size.submit([work(500)], deadline=soon)
        for scheduler in (oldest_first, by_size):
            await scheduler.stop()

    run(scenario())
    run(empty_queue())
    run(own_deadline())


def test_a_request_that_would_make_an_accepted_one_miss_its_timeout_is_refused() -> None:
    """Small requests overtake a large one (the queue's order) only while the large one still ends within its
    protected time: the request that would make it late gets the 429, so the accepted one is answered instead of
    a 504 later."""

    async def scenario() -> None:
        scheduler = Scheduler(
            Recorder(), BatchLimits(), max_queue=1000, batch_wait_s=5.0, max_queue_wait=4.0, priority_per_token=0.004
        )
        scheduler.start()
        assert PROTECTED_SHARE == 0.75
        scheduler.cost.observe(1000, 1.0)  # 1000 tokens/s
        # 2 s of work, 4 s left: overtakers may use 3 s of them (PROTECTED_SHARE), the rest absorbs estimate errors
        large = scheduler.submit([work(500)] * 4, deadline=time.monotonic() + 4.0)
        (large_key,) = {entry.key for entry in scheduler._queue}
        for _ in range(3):  # 0.3 s each, ahead of the large request: it ends after 2.9 s
            assert scheduler.check_room(1, 300) < large_key
            scheduler.submit([work(300)], deadline=1e12)
        with pytest.raises(QueueFull, match="would make one of them miss its timeout") as full:
            scheduler.submit([work(300)], deadline=1e12)  # the large one would end after 3.2 s
        assert full.value.retry_after == 4  # once the large request has been answered (3.2 s of work)
        assert scheduler.check_room(1, 50) < large_key  # small enough to pass: 2.95 s
        with pytest.raises(QueueFull, match="max_queue_wait 4 s"):
            scheduler.check_room(2, 1500)  # 2.9 + 1.5 s of work in the whole queue
        assert not large.future.done()
        await scheduler.stop()

    run(scenario())


def test_stop_answers_queued_requests_with_503() -> None:
    async def scenario() -> None:
        scheduler = Scheduler(Recorder(), BatchLimits(), max_queue=10, batch_wait_s=10.0)
        scheduler.start()
        ticket = scheduler.submit([work(3)], deadline=1e12)
        await asyncio.sleep(0.05)
        await scheduler.stop()
        with pytest.raises(ShuttingDownError, match="shutting down") as error:
            ticket.future.result()
        assert from_core(error.value).status == 503

    run(scenario())


def test_a_failing_batch_fails_its_requests_and_the_scheduler_goes_on() -> None:
    calls = []

    def flaky(works: list[Work]) -> list[object]:
        calls.append(len(works))
        if len(calls) == 1:
            raise RuntimeError("engine exploded")
        return [0] * len(works)

    async def scenario() -> None:
        scheduler = Scheduler(flaky, BatchLimits(), max_queue=10)
        scheduler.start()
        first = scheduler.submit([work(3)], deadline=1e12)
        with pytest.raises(EngineError, match="engine exploded") as error:
            await first.future
        assert from_core(error.value).status == 500
        assert await scheduler.submit([work(4)], deadline=1e12).future == [0]
        await scheduler.stop()

    run(scenario())


# -- options ----------------------------------------------------------------------------------------------


def test_serve_options_are_validated() -> None:
    """pydantic checks every field (strict types, finite numbers, ranges); each problem names its field."""
    assert ServeOptions().limits == BatchLimits(512, 256)
    assert dataclasses.replace(ServeOptions(), model_name="m").model_name == "m"  # revalidated, still frozen
    with pytest.raises(ValueError, match=r"max_queue \(8\) must be >= max_client_batch_size \(32\)"):
        ServeOptions(max_queue=8)
    with pytest.raises(ValueError, match="pooling must be one of pooler, cls, mean"):
        ServeOptions(pooling="max")
    with pytest.raises(ValueError, match=r"request_timeout\n  Input should be greater than 0"):
        ServeOptions(request_timeout=0)
    with pytest.raises(ValueError, match=r"max_queue\n  Input should be a valid integer"):
        ServeOptions(max_queue=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_batch_tokens must be >= 1"):
        ServeOptions(max_batch_tokens=0)
    with pytest.raises(ValueError, match=r"api_key\n  String should have at least 1 character"):
        ServeOptions(api_key="")
    assert ServeOptions().max_queue_wait == 15.0
    assert ServeOptions(max_queue_wait=None).max_queue_wait is None
    # the queue-order and refill flags default to the scheduler's own constants (declared apart: the flags'
    # module stays free of the serve extra)
    assert ServeOptions().priority_s_per_token == PRIORITY_SECONDS_PER_TOKEN
    assert ServeOptions().refill_wait_s == REFILL_WAIT_S
    assert ServeOptions(priority_ms_per_token=0, refill_wait_ms=0).priority_s_per_token == 0.0
    with pytest.raises(ValueError, match=r"refill_wait_ms\n  Input should be greater than or equal to 0"):
        ServeOptions(refill_wait_ms=-1)
    with pytest.raises(ValueError, match=r"refill_wait_ms\n  Input should be less than or equal to 1000"):
        ServeOptions(refill_wait_ms=5000)  # queued work would wait that long after every run
    with pytest.raises(ValueError, match=r"max_queue_wait\n  Input should be greater than 0"):
        ServeOptions(max_queue_wait=0)
    for bad in (float("inf"), float("nan")):
        with pytest.raises(ValueError, match=r"max_queue_wait\n  Input should be a finite number"):
            ServeOptions(max_queue_wait=bad)
    with pytest.raises(ValueError, match=r"max_queue_wait\n  Input should be a valid number"):
        ServeOptions(max_queue_wait="5")  # type: ignore[arg-type]
    assert ServeOptions().max_batch_requests is None
    assert ServeOptions(max_batch_requests=1).max_batch_requests == 1
    with pytest.raises(ValueError, match=r"max_batch_requests\n  Input should be greater than or equal to 1"):
        ServeOptions(max_batch_requests=0)
    with pytest.raises(ValueError, match=r"max_batch_requests\n  Input should be a valid integer"):
        ServeOptions(max_batch_requests=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"truncation\n  Input should be a valid boolean"):
        ServeOptions(truncation=1)  # type: ignore[arg-type]


def test_protocol_pooling_lists_the_runtime_modes() -> None:
    from bertonnx.outputs import POOLING_MODES
    from bertonnx.tasks.embed import PIPELINE_POOLING

    assert set(Pooling.__args__) == {*POOLING_MODES, PIPELINE_POOLING}


# -- the engine: one run of mixed requests ----------------------------------------------------------------


class SlowEngine:
    """A batch runner that sleeps ``per_token`` seconds per padded token and records each batch's lengths."""

    def __init__(self, per_token: float) -> None:
        self.per_token = per_token
        self.batches: list[list[int]] = []

    def __call__(self, works: list[Work]) -> list[object]:
        lengths = [len(w) for w in works]
        time.sleep(self.per_token * max(lengths) * len(lengths))
        self.batches.append(lengths)
        return lengths


def test_priority_key_is_shortest_first_within_an_age_bound() -> None:
    assert priority_key(10.0, 6) < priority_key(10.0, 500)
    long_then_short = (priority_key(0.0, 512), priority_key(1.9, 6))  # queued 1.9 s later, served first
    assert long_then_short[1] < long_then_short[0]
    bound = PRIORITY_SECONDS_PER_TOKEN * (512 - 6)
    assert priority_key(0.0, 512) < priority_key(bound + 0.01, 6)  # ... but not once the long one is older
    assert priority_key(1.0, 500, per_token=0.0) == 1.0  # 0: oldest first
    lengths = [500, 6, 8, 480]
    assert sorted(select_batch(lengths, BatchLimits(max_batch_tokens=512), anchor=1)) == [1, 2]


def test_a_short_request_overtakes_queued_long_work_and_nothing_starves() -> None:
    """Under load: long requests queued first, short ones arriving behind them are answered first; every
    request is answered within its deadline or refused at once (429); none is left waiting past it."""

    async def scenario() -> None:
        engine = SlowEngine(per_token=2e-5)  # a 256 x 8 batch: 41 ms
        scheduler = Scheduler(engine, BatchLimits(max_batch_tokens=2048), max_queue=10_000, max_queue_wait=1.0)
        scheduler.cost.observe(2048, 2048 * 2e-5)  # the engine's true cost, as if measured
        scheduler.start()
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = time.monotonic() + 5.0
        done_at: dict[str, list[float]] = {"long": [], "short": []}
        refused = {"long": 0, "short": 0}

        async def one(kind: str, length: int) -> None:
            try:
                ticket = scheduler.submit([work(length)], deadline)
            except QueueFull:
                refused[kind] += 1
                return
            await ticket.future
            done_at[kind].append(loop.time() - started)

        longs = [asyncio.ensure_future(one("long", 256)) for _ in range(120)]  # ~0.6 s of work: all taken
        await asyncio.sleep(0.05)
        shorts = [asyncio.ensure_future(one("short", 8)) for _ in range(40)]
        late = [asyncio.ensure_future(one("long", 256)) for _ in range(200)]  # 1 s more: past max_queue_wait
        await asyncio.wait_for(asyncio.gather(*longs, *shorts, *late), timeout=10)
        await scheduler.stop()
        assert refused["short"] == 0  # room in the queue: taken, and placed ahead of the long ones
        assert refused["long"] > 0  # the whole queue counts: the long ones past 1 s of queued work were refused
        assert len(done_at["long"]) + refused["long"] == 320  # every long one answered or refused
        assert max(done_at["short"]) < 0.5 < max(done_at["long"])  # the shorts did not wait for the long queue
        assert max(done_at["long"]) < 5.0  # within the deadline

    run(scenario())


def test_refill_waits_for_answered_clients_and_batches_more() -> None:
    """A closed loop of single-input clients: with the refill wait the engine cuts from a fuller queue."""

    async def closed_loop(refill: float) -> float:
        engine = SlowEngine(per_token=2e-5)
        scheduler = Scheduler(engine, BatchLimits(), max_queue=100, refill_wait_s=refill)
        scheduler.start()
        rng = random.Random(5)

        async def client() -> None:
            for _ in range(12):
                await asyncio.sleep(0.001)  # the answer goes back and the next request comes in
                await scheduler.submit([work(rng.randint(6, 180))], deadline=1e12).future

        await asyncio.gather(*(client() for _ in range(16)))
        await scheduler.stop()
        return sum(len(b) for b in engine.batches) / len(engine.batches)

    without, with_refill = run(closed_loop(0.0)), run(closed_loop(0.005))
    assert with_refill > without


def test_the_refill_wait_follows_answered_requests_not_the_rest_of_a_large_one() -> None:
    """A request split over several runs is not held between them (no client was answered), and after a run that
    answered one the wait ends as soon as a new request arrives."""

    async def scenario() -> tuple[float, float]:
        engine = SlowEngine(per_token=1e-5)
        scheduler = Scheduler(engine, BatchLimits(max_batch_tokens=64), max_queue=100, refill_wait_s=0.5)
        scheduler.start()
        started = time.monotonic()
        await scheduler.submit([work(32)] * 8, deadline=1e12).future  # four runs of 2 x 32
        split = time.monotonic() - started
        await scheduler.submit([work(8), work(8)], deadline=1e12).future  # one run, one request answered ...
        started = time.monotonic()
        await scheduler.submit([work(8)], deadline=1e12).future  # ... whose client sends its next one at once
        following = time.monotonic() - started
        await scheduler.stop()
        assert len(engine.batches) == 6
        return split, following

    split, following = run(scenario())
    assert split < 0.25  # four runs without a 0.5 s wait between them
    assert following < 0.25  # the wait ended with the arrival


def test_answers_through_the_scheduler_equal_offline_whatever_they_are_batched_with(tiny_export: Path) -> None:
    model = BertOnnx(tiny_export)
    engine = Engine(model)
    rng = random.Random(3)
    texts = [" ".join(["word"] * rng.randint(1, 60)) + f" {i}" for i in range(24)]
    expected = model.embed(texts, "mean", normalize=True)

    async def scenario() -> list[list[object]]:
        scheduler = Scheduler(engine.run, BatchLimits(max_batch_tokens=256), max_queue=100)
        scheduler.start()
        encodings = model.encode(texts)
        task = Embed("mean", normalize=True)
        tickets = [scheduler.submit([Work(e.ids, e.type_ids, task)], deadline=1e12) for e in encodings]
        answers = await asyncio.gather(*(t.future for t in tickets))
        await scheduler.stop()
        return answers

    answers = run(scenario())
    np.testing.assert_allclose(np.stack([a[0] for a in answers]), expected, atol=ATOL)


TEXTS = ["hello world", "the weather is nice today", "a", "Ünïcödé text, with digits 12345 and CJK 汉字"]
PAIRS = [("the weather is nice", "i agree with you"), ("short", "a much longer second sentence here")]


def test_one_engine_run_of_mixed_tasks_equals_offline(tiny_export: Path) -> None:
    model = BertOnnx(tiny_export)
    engine = Engine(model)
    singles = model.encode(TEXTS)
    pairs = model.encode([a for a, _ in PAIRS], [b for _, b in PAIRS])
    tasks = [
        Embed("pooler"),
        Embed("mean", normalize=True),
        Embed("cls"),
        Graph(("last_hidden_state", "nsp_logits")),
    ]
    works = [Work(e.ids, e.type_ids, task) for e, task in zip(singles, tasks, strict=True)]
    works += [Work(e.ids, e.type_ids, Nsp("logits")) for e in pairs]
    answers = engine.run(works)
    np.testing.assert_allclose(answers[0], model.embed(TEXTS[0], "pooler")[0], atol=ATOL)
    np.testing.assert_allclose(answers[1], model.embed(TEXTS[1], "mean", normalize=True)[0], atol=ATOL)
    np.testing.assert_allclose(answers[2], model.embed(TEXTS[2], "cls")[0], atol=ATOL)
    offline = model(TEXTS[3])
    graph = answers[3]
    assert isinstance(graph, dict)
    assert set(graph) == {"last_hidden_state", "nsp_logits"}
    np.testing.assert_allclose(graph["last_hidden_state"], offline.token_states(0), atol=ATOL)
    np.testing.assert_allclose(graph["nsp_logits"], offline.nsp_logits[0], atol=ATOL)
    nsp = model([a for a, _ in PAIRS], [b for _, b in PAIRS]).nsp_logits
    np.testing.assert_allclose(np.stack(answers[4:]), nsp, atol=ATOL)
    with pytest.raises(ValueError, match="unknown pooling 'max'"):
        Embed("max")


def test_the_queue_order_and_refill_flags_reach_the_scheduler(tiny_export: Path) -> None:
    """``--priority-ms-per-token`` and ``--refill-wait-ms`` (``ServeOptions``) set the scheduler the app runs."""
    from fastapi.testclient import TestClient

    from bertonnx.serve import create_app

    for options, expected in (
        (ServeOptions(), (PRIORITY_SECONDS_PER_TOKEN, REFILL_WAIT_S)),
        (ServeOptions(priority_ms_per_token=0, refill_wait_ms=12.5), (0.0, 0.0125)),
    ):
        app = create_app(tiny_export, options, threads=1)
        with TestClient(app) as client:
            deadline = time.monotonic() + 60
            while client.get("/ready").status_code != 200:
                assert time.monotonic() < deadline, "the server was not ready in time"
                time.sleep(0.05)
            scheduler = app.state.bertonnx.scheduler
            assert (scheduler.priority_per_token, scheduler.refill_wait_s) == expected
            limits = client.get("/info").json()["limits"]
            assert (limits["priority_ms_per_token"], limits["refill_wait_ms"]) == (
                options.priority_ms_per_token,
                options.refill_wait_ms,
            )
