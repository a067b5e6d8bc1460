"""The one loop every task runs through: sort → batch → run → postprocess → reorder.

:class:`bertonnx.BertOnnx`'s methods, the server's engine and the corpus job all call these functions
with a task from :mod:`bertonnx.tasks`:

1. :func:`stream` (texts read and tokenized window by window, for any number of inputs) or :func:`plan`
   (encodings already in hand: a corpus chunk) sort inputs by length and cut them into
   :class:`~bertonnx.batching.Batch` es by the token budget (:class:`~bertonnx.batching.BatchLimits`);
2. :func:`run` asks the session for only ``task.outputs`` and turns each batch's raw outputs into answers
   with ``task.postprocess``;
3. :func:`in_order` / :func:`list_in_order` put the answers back in the caller's order.

:func:`run_mixed` is the server's form: one padded batch whose rows belong to different requests and
tasks; the session is asked once for the union of their outputs and each task answers its own rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .batching import (
    SORT_WINDOW_TOKENS,
    TOKENIZE_CHUNK_TEXTS,
    Batch,
    BatchLimits,
    TokenSequence,
    iter_chunks,
    make_batch,
    plan_batches,
)

if TYPE_CHECKING:
    from tokenizers import Encoding

    from .tasks import Prepared, Task

__all__ = ["Encode", "RunBatch", "answers", "in_order", "list_in_order", "plan", "run", "run_mixed", "stream"]

#: Runs one padded batch for the named graph outputs (``BertOnnx.run_batch``).
RunBatch = Callable[[Batch, Sequence[str]], Mapping[str, np.ndarray]]
#: Tokenizes ``(texts, pairs, first_index)`` into encodings (errors name ``first_index + i``).
Encode = Callable[[list[str], "list[str] | None", int], "list[Encoding]"]


def plan(encodings: Sequence[TokenSequence], limits: BatchLimits, first_index: int = 0) -> Iterator[Batch]:
    """Sort ``encodings`` by length and cut them into padded batches within ``limits``.

    Each batch's ``indices`` are positions in ``encodings`` plus ``first_index``; longest batch first.
    """
    lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
    for rows in plan_batches(lengths, limits):
        yield make_batch([encodings[i] for i in rows], rows + first_index)


def stream(encode: Encode, texts: Iterable[str], pairs: Iterable[str] | None, limits: BatchLimits) -> Iterator[Batch]:
    """Tokenize ``texts`` (and ``pairs``) chunk by chunk and :func:`plan` them in sorting windows of about
    ``SORT_WINDOW_TOKENS`` tokens, so memory stays bounded for any number of inputs (a generator too).

    Raises:
        ValueError: ``texts`` and ``pairs`` differ in length, or ``encode`` refuses an input.
    """
    window: list[Encoding] = []
    window_start = window_tokens = 0
    for start, chunk, chunk_pairs in iter_chunks(texts, pairs, TOKENIZE_CHUNK_TEXTS):
        encodings = encode(chunk, chunk_pairs, start)
        window.extend(encodings)
        window_tokens += sum(len(e.ids) for e in encodings)
        if window_tokens >= SORT_WINDOW_TOKENS:
            yield from plan(window, limits, window_start)
            window_start, window, window_tokens = start + len(chunk), [], 0
    yield from plan(window, limits, window_start)


def run(run_batch: RunBatch, task: Task, batches: Iterable[Batch]) -> Iterator[tuple[Batch, Any]]:
    """Run every batch for ``task.outputs`` only; yield each batch with ``task.postprocess``'s answers."""
    names = task.outputs
    for batch in batches:
        yield batch, task.postprocess(run_batch(batch, names), batch)


def in_order(parts: Iterable[tuple[Batch, np.ndarray]], empty: np.ndarray) -> np.ndarray:
    """Per-batch answer arrays (first axis = the batch's rows) as one array in the caller's order.

    Args:
        parts: from :func:`run`, for a task whose answers are arrays.
        empty: the answer for no input (its shape past the first axis and its dtype are used).
    """
    indices: list[np.ndarray] = []
    rows: list[np.ndarray] = []
    for batch, answers in parts:
        indices.append(batch.indices)
        rows.append(answers)
    out = np.zeros((sum(len(i) for i in indices), *empty.shape[1:]), dtype=empty.dtype)
    if indices:
        out[np.concatenate(indices)] = np.concatenate(rows)
    return out


def list_in_order(parts: Iterable[tuple[Batch, Sequence[Any]]]) -> list[Any]:
    """Per-batch answer lists as one list in the caller's order."""
    placed: dict[int, Any] = {}
    for batch, answers in parts:
        placed.update(zip(batch.indices.tolist(), answers, strict=True))
    return [placed[i] for i in range(len(placed))]


def run_mixed(run_batch: RunBatch, batch: Batch, tasks: Sequence[Task]) -> list[Any]:
    """One batch whose row ``i`` wants ``tasks[i]``: one session run for the union of their outputs.

    Returns:
        One answer per row, in the batch's order (an array row, or a list item, of its task's answers).
    """
    rows_of: dict[Task, list[int]] = {}
    for row, task in enumerate(tasks):
        rows_of.setdefault(task, []).append(row)
    names = list(dict.fromkeys(name for task in rows_of for name in task.outputs))
    outputs = run_batch(batch, names)
    answers: list[Any] = [None] * len(tasks)
    for task, rows in rows_of.items():
        selected = None if len(rows) == len(tasks) else np.asarray(rows, dtype=np.int64)
        for row, answer in zip(rows, task.postprocess(outputs, batch, selected), strict=True):
            answers[row] = answer
    return answers


def answers(
    run_batch: RunBatch,
    task: Task,
    chunks: Iterable[tuple[int, list[Any], list[Any] | None]],
    limits: BatchLimits,
) -> Iterator[Any]:
    """Every input's answer, in order: the whole of a task's steps for any number of inputs.

    Each chunk (``(first_index, first, second)``, as :func:`bertonnx.batching.iter_chunks` gives) is prepared
    by the task; the units of prepared chunks are gathered until they hold ``task.window_tokens`` tokens, then
    sorted by length, cut into batches by ``limits``, run for ``task.outputs`` and post-processed; each chunk
    is then finished and its answers yielded. Memory stays bounded by the sorting window.

    Raises:
        whatever the task's ``prepare`` raises (an input too long, a bad option ...).
    """
    window: list[Prepared] = []
    tokens = 0
    for start, first, second in chunks:
        prepared = task.prepare(first, second, start)
        window.append(prepared)
        tokens += prepared.tokens
        if tokens >= task.window_tokens:
            yield from _finish_window(run_batch, task, window, limits)
            window, tokens = [], 0
    yield from _finish_window(run_batch, task, window, limits)


def _finish_window(run_batch: RunBatch, task: Task, window: list[Prepared], limits: BatchLimits) -> Iterator[Any]:
    units = [unit for prepared in window for unit in prepared.units]
    found = list_in_order(run(run_batch, task, plan(units, limits))) if units else []
    start = 0
    for prepared in window:
        stop = start + len(prepared.units)
        yield from task.finish(prepared, found[start:stop])
        start = stop
