"""A request's steps, the same for every route: parse -> admit -> the task's prepare -> queue -> finish -> answer.

Routes (:mod:`.routes`) only translate their protocol's body into a task (:func:`bertonnx.tasks.make_task`, built
by :func:`task`) and its inputs, call :func:`run`, and format the answers. Here:

1. the inputs are counted (``--max-client-batch-size``) and, for queued work, the scheduler checks there is room
   before anything is tokenized (a 429 costs nothing);
2. the task's ``prepare`` (tokenize or window) runs on the event loop for small requests and in a worker thread
   for large ones, within the request's deadline;
3. the answer's size is estimated and checked (``--max-response-bytes``) before anything is computed;
4. every unit goes to the scheduler as one :class:`~.engine.Work`, batched with other requests' units; the
   client leaving or the deadline passing drops them;
5. the task's ``finish`` merges the units' answers (in a thread when there are many windows).

Every error a step raises is a core error (:mod:`bertonnx.errors`) or a :class:`~.errors.ServeError`; a bad
option or input (``ValueError``/``TypeError`` from a task) becomes its 422 in :func:`.errors.from_core`, never
route by route. This module imports no route and no private name of another module.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from ..model import BertOnnx
from ..tasks import Prepared, make_task
from .answers import JSONAnswer, check_answer_size
from .engine import Work
from .errors import ServeError, from_core
from .middleware import ARRIVAL_KEY
from .scheduler import Scheduler
from .state import ServerState, answer_estimate

__all__ = [
    "ClientGone",
    "as_list",
    "check_count",
    "compute",
    "deadline",
    "json_answer",
    "prepare",
    "run",
    "task",
]

#: Requests of at most this many characters are prepared (tokenized, windowed) on the event loop (tens of
#: microseconds); larger ones in a worker thread, so a 2 MB request never stalls the loop.
PREPARE_INLINE_CHARS = 2048
#: Answers of at most this many units are finished (windows merged) on the event loop; more in a thread.
FINISH_INLINE_UNITS = 16
#: Tokens every input has at least ([CLS] and [SEP]).
SPECIAL_TOKENS = 2


class ClientGone(Exception):
    """The client closed its connection while its inputs were queued (they were dropped)."""


def as_list(value: Any) -> list[Any]:
    """A body's inputs as a list: one string or one pair is one input."""
    return [value] if isinstance(value, (str, tuple)) else list(value)


def check_count(count: int, state: ServerState, field: str = "inputs") -> None:
    """Refuse an empty request (422) or one with more inputs than ``--max-client-batch-size`` (413)."""
    if count == 0:
        raise ServeError(f"{field} is empty; send at least one input", "validation")
    if count > state.options.max_client_batch_size:
        from ..errors import RequestTooLargeError

        raise RequestTooLargeError(count, state.options.max_client_batch_size)


def deadline(state: ServerState, request: Request) -> float:
    """``time.monotonic()`` by which the request must be answered (``--request-timeout`` from its arrival)."""
    arrival: float = request.scope.get("state", {}).get(ARRIVAL_KEY, time.monotonic())
    return arrival + state.options.request_timeout


def task(model: BertOnnx, name: str, **options: Any) -> Any:
    """The route's task on ``model`` (:func:`bertonnx.tasks.make_task`); a missing head or a bad option is
    mapped to its answer by :func:`.errors.from_core`."""
    try:
        return make_task(model, name, **options)
    except (ValueError, TypeError) as exc:
        raise from_core(exc) from None


def _chars(item: Any) -> int:
    if isinstance(item, str):
        return len(item)
    if isinstance(item, (tuple, list)):
        return sum(_chars(part) for part in item)
    return 0


def _prepare_items(work: Any, first: Sequence[Any], second: Sequence[Any] | None) -> Prepared:
    """``work.prepare`` on ``first`` (and ``second``); a per-input task's ``first`` may mix texts and pairs
    (``(a, b)`` tuples): runs of each are prepared apart and joined in order."""
    if second is not None or not any(isinstance(item, tuple) for item in first):
        whole: Prepared = work.prepare(list(first), None if second is None else list(second), 0)
        return whole
    joined = Prepared([])
    start = 0
    while start < len(first):
        is_pair = isinstance(first[start], tuple)
        stop = start
        while stop < len(first) and isinstance(first[stop], tuple) == is_pair:
            stop += 1
        run_items = first[start:stop]
        texts = [item[0] if is_pair else item for item in run_items]
        part = work.prepare(texts, [item[1] for item in run_items] if is_pair else None, start)
        joined.units += part.units
        joined.kept += part.kept
        start = stop
    return joined


async def _off_loop(inline: bool, limit: float, what: str, state: ServerState, call: Callable[[], Any]) -> Any:
    """``call()`` on the event loop when ``inline``, else in a worker thread, within ``limit`` (monotonic)."""
    if inline:
        return call()
    future = asyncio.ensure_future(asyncio.to_thread(call))
    done, _ = await asyncio.wait({future}, timeout=max(0.0, limit - time.monotonic()))
    if future not in done:
        future.add_done_callback(lambda f: f.exception())  # its result is not wanted
        raise ServeError(
            f"{what} the request took more than --request-timeout {state.options.request_timeout:g} s; send fewer "
            "or shorter inputs, or raise --request-timeout",
            "timeout",
        )
    return future.result()


async def prepare(
    state: ServerState, request: Request, work: Any, first: Sequence[Any], second: Sequence[Any] | None = None
) -> Prepared:
    """The task's ``prepare`` step on the request's inputs (see the module docstring); errors mapped by
    :func:`.errors.from_core`."""
    started = time.monotonic()
    inline = _chars(first) + _chars(second) <= PREPARE_INLINE_CHARS
    try:
        prepared: Prepared = await _off_loop(
            inline, deadline(state, request), "tokenizing", state, lambda: _prepare_items(work, first, second)
        )
    except (ValueError, TypeError) as exc:
        raise from_core(exc) from None
    state.metrics.tokenization_duration.observe(time.monotonic() - started)
    return prepared


async def _wait_disconnect(request: Request) -> None:
    """Return when the client disconnects. The body has been read, so ``receive`` blocks until then; a
    server that answers it otherwise (no disconnect events) is not watched rather than polled."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
        if not message.get("more_body", False):
            await asyncio.Event().wait()  # never set: cancelled once the answer is ready


async def compute(state: ServerState, scheduler: Scheduler, request: Request, works: list[Work]) -> list[Any]:
    """Queue ``works`` and wait for their answers, the client leaving, or the request's deadline."""
    limit = deadline(state, request)
    ticket = scheduler.submit(works, limit)  # QueueFullError: 429 (from_core)
    watcher: asyncio.Future[Any] = asyncio.ensure_future(_wait_disconnect(request))
    waiting: set[asyncio.Future[Any]] = {ticket.future, watcher}
    try:
        done, _ = await asyncio.wait(
            waiting, timeout=max(0.0, limit - time.monotonic()), return_when=asyncio.FIRST_COMPLETED
        )
        if ticket.future in done:
            answers: list[Any] = ticket.future.result()
            return answers
        if watcher in done:
            scheduler.cancel(ticket, "disconnected")
            raise ClientGone
        scheduler.cancel(ticket, "timeout")
        raise ServeError(
            f"the request took more than --request-timeout {state.options.request_timeout:g} s; its queued inputs "
            "were dropped, not computed. Retry later, send fewer inputs, or raise --request-timeout",
            "timeout",
        )
    finally:
        watcher.cancel()


async def run(
    state: ServerState,
    request: Request,
    work: Any,
    first: Sequence[Any],
    second: Sequence[Any] | None = None,
    *,
    field: str = "inputs",
    states: bool = False,
    size_check: bool = True,
    admit: bool = True,
) -> tuple[Prepared, list[Any]]:
    """A request's whole path for ``work`` (a task) on its inputs: every step of the module docstring.

    Args:
        first, second: the task's inputs (``second``: pairs' second parts, contexts ...).
        field: the inputs' name in the body, for errors.
        states: the answer holds every token's hidden state (``/encode``), for the size check.
        size_check: estimate and check the answer's size first.
        admit: check the queue has room before preparing (2 tokens an input at least).

    Returns:
        The prepared inputs (their units' tokens ...) and one answer per input.
    """
    model, scheduler = state.require_model()
    check_count(len(first), state, field)
    if admit:  # nothing is computed for a request the queue would refuse (QueueFullError: 429, from_core)
        scheduler.check_room(len(first), SPECIAL_TOKENS * len(first), lower_bound=True)
    prepared = await prepare(state, request, work, first, second)
    if size_check:
        advice = "send fewer inputs per request"
        if states:
            advice = "send fewer or shorter inputs per request, or use /embed for one pooled vector per input"
        estimate = answer_estimate([len(unit.ids) for unit in prepared.units], model, states=states)
        check_answer_size(estimate, state.response_limit(model), advice)
    found = await compute(state, scheduler, request, [Work(u.ids, u.type_ids, work) for u in prepared.units])
    inline = len(prepared.units) <= FINISH_INLINE_UNITS
    answers: list[Any] = await _off_loop(
        inline, deadline(state, request), "answering", state, lambda: work.finish(prepared, found)
    )
    return prepared, answers


def json_answer(content: Any, request: Request) -> Response:
    """A model route's JSON answer (numpy arrays allowed anywhere), serialised off the event loop within the
    request's deadline (see :class:`.answers.JSONAnswer`)."""
    state: ServerState = request.app.state.bertonnx
    return JSONAnswer(content, deadline=deadline(state, request))
