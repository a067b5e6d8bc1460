"""The scheduler: one queue of inputs from all requests, cut into batches by the token budget.

Policy (:func:`select_batch`). Each batch is anchored on the queued input of least :func:`priority_key`
(its request's arrival, with a handicap of ``PRIORITY_SECONDS_PER_TOKEN`` per token of the whole request:
shortest request first within an age bound) and filled with the queued inputs *closest to it in length*, as
many as the budget allows (:class:`bertonnx.batching.BatchLimits`: padded tokens = longest × count <=
``max_batch_tokens``, count <= ``max_batch_size``; the same rule as offline). Why:

- Length-sorting pads little, but a scheduler that always takes the shortest (or always the longest)
  inputs starves the other end under steady load. Anchoring on the least key makes waiting bounded: a
  request of ``n`` tokens queued at ``t`` is served before anything queued after
  ``t + PRIORITY_SECONDS_PER_TOKEN × (n - 1)``, whatever arrives later. Within that bound small requests
  overtake large ones, so a one-text request does not wait behind seconds of queued 32-input requests.
  Admission (:meth:`Scheduler.check_room`): a request is refused (429) when the whole queue would hold more than
  ``max_queue_wait`` seconds of work with it, when the work ahead of it would pass its timeout, or when
  overtaking the requests queued behind it would make one of them end after its protected time
  (``PROTECTED_SHARE`` of the way to its deadline; a request's place is never later than its own), so an
  accepted request is answered, not dropped with a 504 because later small ones kept overtaking it. Inputs near
  the anchor's length ride along.
- Closest-in-length keeps padding low: the batch is a contiguous run of the queue sorted by length
  around the anchor, grown one neighbour at a time towards the nearer length (a shorter neighbour never
  raises the padded width, a longer one only while the budget holds).
- Once a batch has ``EFFICIENT_BATCH_TOKENS`` padded tokens it grows only while padding stays under
  ``MAX_PADDING_FRACTION``: on CPU a run costs about its padded tokens, so past a few hundred tokens
  padding costs more than a larger batch gains, and the inputs left out (other lengths) make their own
  batch next. Offline, sorting a window of thousands of inputs does this implicitly; a server sees only
  what is queued (about the concurrency), so a batch of everything queued would pad a 6-token input to
  64 (the padding this rule saved: benchmarks/DEFAULTS.md, "A large batch stops growing at 25 % padding").
- TEI takes its queue in arrival order (no sorting, so a short input batched with a 512-token one pads
  to 512); Triton batches only equal shapes; Ray Serve's ``@serve.batch`` takes up to ``max_batch_size``
  requests in arrival order after ``batch_wait_timeout_s``.

``max_batch_requests`` caps how many requests one batch may serve: the batch is then cut from the inputs
of the oldest ``max_batch_requests`` queued requests only (1: one request per run, batching across
requests off; the serving benchmark's baseline).

Refill: when a run answers requests (and at most ``REFILL_MAX_INPUTS`` inputs are queued), the engine waits up
to ``REFILL_WAIT_S`` until as many new requests have arrived: the clients it just answered sending their next
ones (a closed loop of single-text requests), so the next cut sorts a fuller queue. A run that answers no
request (the rest of a large one still queued) waits for nothing.
benchmarks/SCHEDULER.md has the replay that chose these rules (padding share and inputs per run of each
candidate policy).

Continuous batching: a batch starts as soon as the engine is free; ``batch_wait_s`` > 0 holds it open
until the oldest input has waited that long or the batch is full. The engine runs on one thread off the
event loop (one run at a time: onnxruntime already uses every core through its intra-op threads), so the
server keeps accepting while it computes. Inputs whose request was cancelled (client gone, deadline
passed) leave the queue at once and are never computed; they are counted by reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..batching import BatchLimits
from ..errors import EngineError, QueueFullError, RequestTooLargeError, ShuttingDownError
from .admission import TokenCost
from .engine import Work
from .metrics import DROP_REASONS, ServeMetrics

__all__ = [
    "PROTECTED_SHARE",
    "RECENT_BATCHES",
    "Entry",
    "QueueFull",
    "Scheduler",
    "Ticket",
    "batch_is_full",
    "oldest_requests",
    "priority_key",
    "select_batch",
]

log = logging.getLogger("bertonnx.serve")

#: Batches remembered to estimate throughput for ``Retry-After``.
RECENT_BATCHES = 32
#: On CPU an engine run costs about its padded tokens once it has a few hundred of them, so past this size a
#: batch gains little from growing and splitting off inputs of other lengths saves their padding
#: (benchmarks/DEFAULTS.md, "A large batch stops growing at 25 % padding").
EFFICIENT_BATCH_TOKENS = 256
#: Largest share of padding a batch past ``EFFICIENT_BATCH_TOKENS`` may grow to.
MAX_PADDING_FRACTION = 0.25
#: Seconds of age each token of a request costs it in the queue's order: a one-text request of 12 tokens is
#: served before a 32-input request of 1,000 tokens queued up to 39.5 s before it, unless that one would then miss
#: its protected time. Chosen from the overload replay (benchmarks/SCHEDULER.md): at 4 ms a short request arriving
#: after an overload waits behind the whole backlog.
PRIORITY_SECONDS_PER_TOKEN = 0.04
#: Seconds the engine waits after a run for the clients it answered to send their next inputs (see Refill).
REFILL_WAIT_S = 0.005
#: The refill wait applies only to a queue of at most this many inputs (a few dozen clients in a closed loop); a
#: longer queue (an overload draining) has enough to sort and is never held.
REFILL_MAX_INPUTS = 64
#: Share of an accepted request's time to its deadline that requests overtaking it may use up: the rest absorbs
#: the cost estimate's error (long inputs cost more per token than the recent average), so it is answered, not
#: dropped with a 504.
PROTECTED_SHARE = 0.75
#: ``Retry-After`` when nothing has run yet (no throughput to go by).
DEFAULT_RETRY_AFTER_S = 1


def select_batch(
    lengths: Sequence[int],
    limits: BatchLimits,
    *,
    efficient_tokens: int = EFFICIENT_BATCH_TOKENS,
    max_padding: float = MAX_PADDING_FRACTION,
    anchor: int = 0,
) -> list[int]:
    """The next batch from a queue in arrival order.

    Args:
        lengths: tokens of each queued input, oldest first.
        limits: the token budget and batch-size cap.
        anchor: the index of the input the batch must serve (the scheduler's: the least
            :func:`priority_key`; 0: the oldest).
        efficient_tokens: below this many padded tokens the batch takes the next-closest input whatever
            it pads; above it only while padding stays within ``max_padding``.
        max_padding: the share of a large batch's padded tokens that may be padding.

    Returns:
        Indices into ``lengths``: the anchor and the queued inputs closest to it in length that fit ``limits``
        (ties go to the shorter input, then to the older). Empty for an empty queue.
    """
    n = len(lengths)
    if n == 0:
        return []
    order = sorted(range(n), key=lambda i: (lengths[i], i))
    lo = hi = order.index(anchor)
    anchor = lengths[anchor]
    longest, real = anchor, anchor
    while hi - lo + 1 < limits.capacity(longest):
        count = hi - lo + 1
        down = order[lo - 1] if lo > 0 else None
        up = order[hi + 1] if hi + 1 < n and limits.fits(lengths[order[hi + 1]], count + 1) else None
        if down is not None and (up is None or anchor - lengths[down] <= lengths[up] - anchor):
            pick, take_down = down, True
        elif up is not None:
            pick, take_down = up, False
        else:
            break
        padded = max(longest, lengths[pick]) * (count + 1)
        if longest * count >= efficient_tokens and padded - real - lengths[pick] > max_padding * padded:
            break  # already large enough to run efficiently: padding would cost more than batching gains
        real += lengths[pick]
        if take_down:
            lo -= 1
        else:
            hi += 1
            longest = lengths[pick]
    return order[lo : hi + 1]


def _seconds(value: float) -> str:
    """Seconds for a message: whole above 10, else two significant digits (0.05 s is not "0 s")."""
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.2g}"


def priority_key(enqueued: float, length: int, per_token: float = PRIORITY_SECONDS_PER_TOKEN) -> float:
    """A request's place in the queue's order (least first; all its inputs share it): ``enqueued + per_token ×
    length`` seconds.

    Args:
        enqueued: ``time.monotonic()`` when the request was queued.
        length: its tokens (all its inputs').
        per_token: seconds of handicap per token (0: oldest first).
    """
    return enqueued + per_token * length


def batch_is_full(lengths: Sequence[int], picks: Sequence[int], limits: BatchLimits) -> bool:
    """Whether waiting could not grow the batch ``picks``: inputs were left out, or one more would not fit."""
    longest = max(lengths[i] for i in picks)
    return len(picks) < len(lengths) or not limits.fits(longest, len(picks) + 1)


def oldest_requests(tickets: Sequence[object], max_requests: int | None) -> list[int]:
    """Indices of the queued inputs that belong to the oldest ``max_requests`` requests.

    Args:
        tickets: the request of each queued input, oldest input first (any hashable identity).
        max_requests: how many requests a batch may serve; ``None``: no limit (every index).

    Returns:
        Indices into ``tickets`` in queue order.
    """
    if max_requests is None:
        return list(range(len(tickets)))
    chosen: set[int] = set()
    picks: list[int] = []
    for index, ticket in enumerate(tickets):
        key = id(ticket)
        if key not in chosen:
            if len(chosen) == max_requests:
                continue
            chosen.add(key)
        picks.append(index)
    return picks


#: What the queue counts, named in a refusal: a zero-shot text is one per candidate label, a choose input one per
#: choice, a long text one per window.
MODEL_INPUTS = "model inputs (rows the model runs: a zero-shot text per candidate label, a choice, a window)"
#: The scheduler's refusal (:class:`bertonnx.errors.QueueFullError`; the server answers it 429).
QueueFull = QueueFullError


@dataclass(eq=False)
class Ticket:
    """One request's inputs in the scheduler; ``future`` resolves to their answers in request order."""

    future: asyncio.Future[list[object]]
    count: int
    deadline: float
    #: ``time.monotonic()`` by which the requests overtaking it must let it end (``PROTECTED_SHARE`` of the way
    #: from its arrival to ``deadline``)
    protected: float = math.inf
    results: list[object] = field(default_factory=list)
    remaining: int = 0
    cancelled: str | None = None

    def __post_init__(self) -> None:
        self.results = [None] * self.count
        self.remaining = self.count


@dataclass(eq=False)
class Entry:
    """A queued input: its work, its request and its position there, and when it was queued."""

    work: Work
    ticket: Ticket
    position: int
    enqueued: float
    key: float = 0.0

    @property
    def length(self) -> int:
        return len(self.work.ids)


class Scheduler:
    """Collects inputs of concurrent requests and runs them in batches on one engine thread.

    Args:
        run_batch: computes one batch (``Engine.run``): a list of works to one answer each, in order.
        limits: the token budget and batch-size cap of one run.
        max_queue: inputs waiting at most; ``submit`` raises :class:`QueueFull` past it.
        batch_wait_s: seconds to hold a batch open for more inputs once the engine is free.
        max_batch_requests: requests one batch may serve, the oldest first (``None``: no limit).
        max_queue_wait: seconds of work the queue may hold with a new request, estimated from the tokens queued,
            its own and those computing, and the engine's cost per token
            (:class:`bertonnx.serve.admission.TokenCost`: recent batches, between the best cost seen and 4 times
            it); a request that would pass it gets :class:`QueueFull` (``None``: no limit; a request is always
            taken when nothing is queued).
        priority_per_token: seconds of age each token of a request costs it in the queue's order
            (:func:`priority_key`; 0: oldest first).
        refill_wait_s: seconds the engine may wait after a run for the clients it answered (0: never).
        metrics: where to record queue, batch and drop figures (``None``: nowhere).
    """

    def __init__(
        self,
        run_batch: Callable[[list[Work]], list[object]],
        limits: BatchLimits,
        *,
        max_queue: int,
        batch_wait_s: float = 0.0,
        max_batch_requests: int | None = None,
        max_queue_wait: float | None = None,
        priority_per_token: float = PRIORITY_SECONDS_PER_TOKEN,
        refill_wait_s: float = REFILL_WAIT_S,
        metrics: ServeMetrics | None = None,
    ) -> None:
        self._run_batch = run_batch
        self.limits = limits
        self.max_queue = max_queue
        self.batch_wait_s = batch_wait_s
        self.max_batch_requests = max_batch_requests
        self.max_queue_wait = max_queue_wait
        self.priority_per_token = priority_per_token
        self.refill_wait_s = refill_wait_s
        self._refill: tuple[float, int] = (0.0, 0)  # (until, arrivals to wait for) after the last run
        self._arrivals = 0  # requests submitted so far
        self.metrics = metrics
        self._queue: list[Entry] = []
        self._wakeup = asyncio.Event()
        self._recent: deque[tuple[int, float]] = deque(maxlen=RECENT_BATCHES)
        self.cost = TokenCost()
        self._executor: ThreadPoolExecutor | None = None
        self._task: asyncio.Task[None] | None = None
        self._running: list[Entry] = []

    @property
    def queued(self) -> int:
        """Inputs waiting for the engine."""
        return len(self._queue)

    @property
    def busy(self) -> bool:
        """Whether anything is queued or computing."""
        return bool(self._queue or self._running)

    def start(self) -> None:
        """Start the batching loop and the engine thread (call from the event loop)."""
        if self._task is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bertonnx-engine")
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="bertonnx-scheduler")

    async def stop(self) -> None:
        """Stop batching; requests still queued fail with :class:`~bertonnx.errors.ShuttingDownError`. Waits for
        the batch being computed."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for ticket in {entry.ticket for entry in self._queue + self._running}:
            if not ticket.future.done():
                ticket.future.set_exception(ShuttingDownError())
        self._queue.clear()
        self._set_depth()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def submit(self, works: Sequence[Work], deadline: float) -> Ticket:
        """Queue one request's inputs.

        Args:
            works: the request's inputs, in its order.
            deadline: ``time.monotonic()`` after which its inputs are dropped instead of computed.

        Raises:
            QueueFull: the queue cannot take ``len(works)`` more inputs, or the work queued ahead of them and
                they would take longer than ``max_queue_wait`` seconds or pass ``deadline`` (an early 429
                instead of a 504 at the deadline); :meth:`check_room` says where a request goes.
        """
        key = self.check_room(len(works), sum(len(work.ids) for work in works), deadline=deadline)
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        protected = now + PROTECTED_SHARE * max(0.0, deadline - now)
        ticket = Ticket(future=loop.create_future(), count=len(works), deadline=deadline, protected=protected)
        # one place for all of a request's inputs
        self._queue.extend(Entry(work, ticket, position, now, key) for position, work in enumerate(works))
        self._arrivals += 1
        self._set_depth()
        self._wakeup.set()
        return ticket

    def check_room(
        self, inputs: int, tokens: int, deadline: float | None = None, *, lower_bound: bool = False
    ) -> float:
        """Whether a request of ``inputs`` inputs and ``tokens`` tokens would be queued now, and where (``submit``'s
        check; with ``lower_bound``, ``tokens`` is a lower bound and a request can be refused before it is
        tokenized).

        The request's place in the queue is :func:`priority_key` of its tokens, at most its protected time
        (``PROTECTED_SHARE`` of the way to ``deadline``). It is refused (429) when the whole queue with it would
        hold more than ``max_queue_wait`` seconds of work, when the work ahead of its place and its own would pass
        ``deadline``, or when overtaking the requests queued behind it would make one of them end after its
        protected time: an accepted request is answered, not dropped with a 504 because later small requests
        kept overtaking it.

        Args:
            inputs: the request's inputs.
            tokens: their tokens.
            deadline: ``time.monotonic()`` by which the request must be answered (``None``: not checked).
            lower_bound: ``tokens`` is at most the request's (before tokenization): the requests it would overtake
                are not checked (a larger request overtakes fewer of them).

        Returns:
            The request's key in the queue's order (least first).

        Raises:
            RequestTooLargeError: ``inputs`` is more than ``max_queue`` (even an empty queue cannot take it).
            QueueFull: any of the refusals above, or the queue cannot take ``inputs`` more inputs (``max_queue``).
        """
        now = time.monotonic()
        key = priority_key(now, tokens, self.priority_per_token)
        if deadline is not None:  # never placed later than its own protected time
            key = min(key, now + PROTECTED_SHARE * max(0.0, deadline - now))
        if inputs > self.max_queue:  # not even an empty queue takes it: a retry cannot succeed (413, not 429)
            raise RequestTooLargeError(inputs, self.max_queue, "max_queue", MODEL_INPUTS)
        if self.queued + inputs > self.max_queue:
            raise QueueFull(
                self.queued,
                self.max_queue,
                self.retry_after(inputs),
                f"{self.queued} inputs waiting and {inputs} in this request, max_queue {self.max_queue}",
            )
        per_token = self.cost.seconds_per_token()
        if not self._queue or per_token is None:
            return key
        queue = self._queue
        computing = sum(entry.length for entry in self._running)
        if not lower_bound:
            done = computing + tokens  # tokens computed before each queued input ends, with this request ahead of it
            for entry in sorted(queue, key=lambda e: e.key):
                done += entry.length
                # only a request this one makes late: one already late without it is first in the order anyway
                # (its key is at most its protected time), and refusing everything while it ends helps nobody
                finish = now + done * per_token
                if entry.key > key and finish > entry.ticket.protected >= finish - tokens * per_token:
                    raise QueueFull(
                        self.queued,
                        self.max_queue,
                        max(1, math.ceil(done * per_token)),  # once that request has been answered
                        "taking this request ahead of the queued ones would make one of them miss its timeout "
                        f"(about {_seconds(done * per_token)} s of work before it ends, "
                        f"{_seconds(entry.ticket.protected - now)} s left)",
                    )
        wait = (computing + sum(entry.length for entry in queue if entry.key <= key) + tokens) * per_token
        backlog = (computing + sum(entry.length for entry in queue) + tokens) * per_token
        if self.max_queue_wait is not None and backlog > self.max_queue_wait:
            raise QueueFull(
                self.queued,
                self.max_queue,
                max(1, math.ceil(backlog - self.max_queue_wait)),  # until that much of the queue has drained
                f"about {_seconds(backlog)} s of work queued with this request, "
                f"max_queue_wait {self.max_queue_wait:g} s",
            )
        if deadline is not None and now + wait > deadline:
            raise QueueFull(
                self.queued,
                self.max_queue,
                max(1, math.ceil(now + wait - deadline)),
                f"about {_seconds(wait)} s of work queued with this request, more than the "
                f"{_seconds(max(0.0, deadline - now))} s "
                "left before its timeout",
            )
        return key

    def cancel(self, ticket: Ticket, reason: str) -> int:
        """Drop a request's queued inputs (never computed) and count them under ``reason``.

        Returns:
            The inputs dropped (those already computing finish, and their answers are discarded).
        """
        if reason not in DROP_REASONS:
            raise ValueError(f"reason must be one of {', '.join(DROP_REASONS)}, got {reason!r}")
        ticket.cancelled = ticket.cancelled or reason
        kept = [entry for entry in self._queue if entry.ticket is not ticket]
        dropped = len(self._queue) - len(kept)
        if dropped:
            self._queue = kept
            self._set_depth()
            if self.metrics is not None:
                self.metrics.dropped_inputs.labels(reason=reason).inc(dropped)
            self._wakeup.set()  # the anchor may have changed
        return dropped

    def retry_after(self, extra: int = 0) -> int:
        """Seconds until the queue (plus ``extra`` inputs) should have drained, from recent throughput."""
        inputs = sum(count for count, _ in self._recent)
        seconds = sum(elapsed for _, elapsed in self._recent)
        if not inputs or seconds <= 0:
            return DEFAULT_RETRY_AFTER_S
        return max(1, math.ceil((self.queued + extra) * seconds / inputs))

    def queued_seconds(self, extra_tokens: int = 0, before: float | None = None) -> float | None:
        """Seconds the engine should take for what is queued (only inputs of :func:`priority_key` at most
        ``before``, when given) and computing, plus ``extra_tokens`` tokens, at the estimated cost per token
        (``None`` before the first batch)."""
        per_token = self.cost.seconds_per_token()
        if per_token is None:
            return None
        queued = self._queue if before is None else [entry for entry in self._queue if entry.key <= before]
        pending = sum(entry.length for entry in queued) + sum(entry.length for entry in self._running)
        return (pending + extra_tokens) * per_token

    # -- the loop -------------------------------------------------------------------------------------

    def _set_depth(self) -> None:
        if self.metrics is not None:
            self.metrics.queue_depth.set(len(self._queue))

    async def _wait_for_work(self) -> None:
        while not self._queue:
            self._wakeup.clear()
            await self._wakeup.wait()

    def _candidates(self) -> list[int]:
        """Indices of the queued inputs the next batch may take (those of the oldest requests it may serve)."""
        return oldest_requests([entry.ticket for entry in self._queue], self.max_batch_requests)

    async def _await_refill(self) -> None:
        """After a run that answered requests: wait up to ``refill_wait_s`` until as many new requests have arrived
        (the clients it answered sending their next ones), for a queue of at most ``REFILL_MAX_INPUTS`` inputs. A
        run that finished no request (the rest of a request still queued) waits for nothing."""
        until, target = self._refill
        if len(self._queue) > REFILL_MAX_INPUTS:
            return
        while self._queue and self._arrivals < target:
            remaining = until - time.monotonic()
            if remaining <= 0:
                return
            self._wakeup.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), remaining)

    async def _hold(self) -> None:
        """With ``batch_wait_s``: wait until the oldest input has waited that long or the batch is full."""
        while self._queue:
            candidates = self._candidates()
            if len(candidates) < len(self._queue):
                return  # the batch already serves as many requests as it may
            lengths = [self._queue[i].length for i in candidates]
            if batch_is_full(lengths, select_batch(lengths, self.limits), self.limits):
                return
            remaining = self._queue[0].enqueued + self.batch_wait_s - time.monotonic()
            if remaining <= 0:
                return
            self._wakeup.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), remaining)

    def _cut(self) -> list[Entry]:
        """Take the next batch off the queue, dropping inputs whose deadline has passed."""
        now = time.monotonic()
        for ticket in {entry.ticket for entry in self._queue if entry.ticket.deadline <= now}:
            self.cancel(ticket, "timeout")
        if not self._queue:
            return []
        candidates = self._candidates()
        keys = [self._queue[i].key for i in candidates]
        anchor = keys.index(min(keys))
        lengths = [self._queue[i].length for i in candidates]
        picks = [candidates[i] for i in select_batch(lengths, self.limits, anchor=anchor)]
        chosen = set(picks)
        batch = [self._queue[i] for i in sorted(picks)]
        self._queue = [entry for i, entry in enumerate(self._queue) if i not in chosen]
        self._set_depth()
        return batch

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wait_for_work()
            if self.refill_wait_s > 0:
                await self._await_refill()
            if self.batch_wait_s > 0:
                await self._hold()
            batch = self._cut()
            if not batch:
                continue
            started = time.monotonic()
            self._running = batch
            try:
                answers = await loop.run_in_executor(self._executor, self._run_batch, [e.work for e in batch])
            except Exception as exc:
                log.exception("engine run failed")
                error = EngineError(f"{type(exc).__name__}: {exc}")
                for ticket in {entry.ticket for entry in batch}:
                    if not ticket.future.done():
                        ticket.future.set_exception(error)
                continue
            finally:
                self._running = []
            ended = time.monotonic()
            elapsed = ended - started
            self._recent.append((len(batch), elapsed))
            self.cost.observe(sum(entry.length for entry in batch), elapsed)
            self._record(batch, started, elapsed)
            answered = 0
            for entry, answer in zip(batch, answers, strict=True):
                ticket = entry.ticket
                if ticket.future.done():
                    continue
                ticket.results[entry.position] = answer
                ticket.remaining -= 1
                if ticket.remaining == 0:
                    ticket.future.set_result(ticket.results)
                    answered += 1
            self._refill = (ended + self.refill_wait_s, self._arrivals + answered)

    def _record(self, batch: list[Entry], started: float, elapsed: float) -> None:
        if self.metrics is None:
            return
        m = self.metrics
        for entry in batch:
            m.queue_duration.observe(started - entry.enqueued)
        lengths = [entry.length for entry in batch]
        m.inference_duration.observe(elapsed)
        m.batch_size.observe(len(batch))
        m.batch_requests.observe(len({id(entry.ticket) for entry in batch}))
        m.batch_padded_tokens.observe(max(lengths) * len(lengths))
        m.batch_tokens.observe(sum(lengths))
