"""Errors raised by bertonnx.

Bad values raise ``ValueError`` and wrong types ``TypeError``, each naming what was expected. A model
directory that is missing, incomplete or corrupt raises :class:`ModelDirectoryError`, a ``ValueError``
subclass so callers that already catch ``ValueError`` keep working. Asking a task of an export that lacks
its head (NSP of a ``BertModel`` export ...) raises :class:`HeadMissingError`, also a ``ValueError``.
Loading an export whose weights are (partly) random warns with :class:`RandomWeightsWarning`.

The typed errors below carry their facts as attributes (an input's index and length, the seconds to wait
...) and know nothing of HTTP or the command line: their message says the fix in Python terms, and the edges
turn the attributes into their own wording in one place each (the server: status, headers and JSON in
:func:`bertonnx.serve.errors.from_core`; the command line: one line and an exit code in
:mod:`bertonnx.command`). Each keeps the builtin base a caller would already catch (``ValueError`` for a bad
input), and each survives pickling (Ray workers send them back to the driver).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .table import FAMILIES, TASKS

__all__ = [
    "EngineError",
    "HeadMissingError",
    "InputTooLongError",
    "ModelDirectoryError",
    "OptionError",
    "QueueFullError",
    "RandomWeightsWarning",
    "RequestTooLargeError",
    "ShuttingDownError",
    "VariantMissingError",
    "over_limit",
]


class ModelDirectoryError(ValueError):
    """The model directory is missing, is not a bertonnx export, or a file in it is missing or corrupt."""


class HeadMissingError(ValueError):
    """The export has no head for the asked task; the message names the architecture it was exported from,
    the tasks it offers, and which checkpoint to export for the task.

    Attributes:
        task: the task asked for (``nsp``, ``classify``, ``rerank``, ``fill_mask``, ``embed`` ...).
        architecture: the transformers class the export came from.
        tasks: the tasks the export offers.
    """

    def __init__(self, message: str, *, task: str, architecture: str, tasks: tuple[str, ...]) -> None:
        super().__init__(message)
        self.task = task
        self.architecture = architecture
        self.tasks = tasks

    def __reduce__(self) -> tuple[object, ...]:  # keyword-only fields: survive pickling (Ray workers)
        return (_rebuild_head_missing, (str(self), self.task, self.architecture, self.tasks))

    @classmethod
    def for_task(
        cls, task: str, architecture: str, tasks: tuple[str, ...], num_labels: int | None = None
    ) -> HeadMissingError:
        """The error for ``task`` asked of an export of ``architecture`` offering ``tasks``."""
        row = TASKS.get(task)
        prefix = next((f.prefix for f in FAMILIES.values() if architecture.startswith(f.prefix)), "Bert")
        head = row.what if row is not None else f"head for {task}"
        fix = row.fix(prefix) if row is not None else "a checkpoint with that head"
        what = f"{architecture} with {num_labels} labels" if num_labels is not None else architecture
        return cls(
            f"this export has no {head}; it was exported from {what} and offers {', '.join(tasks) or 'no task'}. "
            f"Export {fix} for {task}.",
            task=task,
            architecture=architecture,
            tasks=tasks,
        )


def _rebuild_head_missing(message: str, task: str, architecture: str, tasks: tuple[str, ...]) -> HeadMissingError:
    return HeadMissingError(message, task=task, architecture=architecture, tasks=tasks)


class RandomWeightsWarning(UserWarning):
    """The loaded export holds seeded random weights (or random heads): its outputs are not a trained model's.

    Shapes, tokens and speed are real; the numbers are not. Filter it where that is intended::

        warnings.simplefilter("ignore", bertonnx.RandomWeightsWarning)
    """


# -- inputs and models (raised by the runtime) ------------------------------------------------------------


def over_limit(length: int | None, limit: str) -> str:
    """``"608 tokens, more than {limit}"``, or ``"more than {limit} tokens"`` when only that is known (a very
    long text is refused without tokenizing all of it); ``limit`` is e.g. ``"max_length=512"``."""
    return f"more than {limit} tokens" if length is None else f"{length} tokens, more than {limit}"


class InputTooLongError(ValueError):
    """An input has more tokens than the limit and nothing may cut it.

    Attributes:
        index: the input's position in the caller's inputs (from 0).
        length: its tokens, ``[CLS]`` and ``[SEP]`` included; ``None`` when only "more than ``max_length``" is
            known (a very long text is refused without tokenizing all of it).
        max_length: the limit it passed.
        option: the option that would take it: ``truncation`` (cut it) or ``stride`` (``tag``: windows).
    """

    def __init__(self, index: int, length: int | None, max_length: int, option: str = "truncation") -> None:
        if option == "stride":
            model_limit = f"the model's {max_length}"
            message = (
                f"text {index} has {over_limit(length, model_limit)}; pass stride "
                "(e.g. stride=128) to tag it in overlapping windows, merged as transformers' pipeline merges them"
            )
        else:
            message = (
                f"input {index} has {over_limit(length, f'max_length={max_length}')}. Pass truncation=True to cut "
                "it (longest sequence first for pairs), or split the text."
            )
        super().__init__(message)
        self.index = index
        self.length = length
        self.max_length = max_length
        self.option = option

    def __reduce__(self) -> tuple[type[InputTooLongError], tuple[int, int | None, int, str]]:
        return (InputTooLongError, (self.index, self.length, self.max_length, self.option))


class OptionError(ValueError):
    """An option's value is out of range. The message is in Python terms; each edge words it in its own
    (the command line's flag, the HTTP field) from the attributes.

    Attributes:
        option: the option's Python name (``stride``, ``max_seq_len`` ...), as :mod:`bertonnx.vocabulary` names it.
        value: the value given.
        expected: what it must be (``">= 0 and smaller than 510"``).
        fix: what to do instead, without naming the option's spelling (``"e.g. 128"``).
    """

    def __init__(self, option: str, value: object, expected: str, fix: str = "") -> None:
        super().__init__(f"{option} must be {expected}, got {value!r}" + (f"; {fix}" if fix else ""))
        self.option = option
        self.value = value
        self.expected = expected
        self.fix = fix

    def __reduce__(self) -> tuple[type[OptionError], tuple[str, object, str, str]]:
        return (OptionError, (self.option, self.value, self.expected, self.fix))


class VariantMissingError(ValueError):
    """The export does not hold the variant asked for.

    Attributes:
        directory: the model directory.
        variant: the variant asked for.
        available: the variants the directory holds.
        reason: why the export did not write it, when its manifest says (a lossy variant refused by its
            parity gate: ``"it failed its parity gate at export: logits_score_max_abs = 0.036 > 0.01"``), else
            ``None``.
    """

    def __init__(
        self, directory: str | Path, variant: str, available: Sequence[str], reason: str | None = None
    ) -> None:
        if reason is None:
            message = (
                f"{directory} has no {variant!r} variant; it holds {', '.join(available)}. Pick one of those, or "
                f"re-export with `bertonnx export ... --variants {variant}`."
            )
        else:  # re-exporting the same checkpoint would fail the same gate
            message = (
                f"{directory} has no {variant!r} variant ({reason}); it holds {', '.join(available)}. Pick one of "
                f"those, e.g. variant={preferred_variant(available)!r}."
            )
        super().__init__(message)
        self.directory = str(directory)
        self.variant = variant
        self.available = tuple(available)
        self.reason = reason

    def __reduce__(self) -> tuple[type[VariantMissingError], tuple[str, str, tuple[str, ...], str | None]]:
        return (VariantMissingError, (self.directory, self.variant, self.available, self.reason))


#: The variant to suggest instead of a missing one, best first: the fused exact graph, then the others.
PREFERRED_VARIANTS = ("optimized", "fp32", "int8", "bf16")


def preferred_variant(available: Sequence[str]) -> str:
    """The variant of ``available`` to suggest instead of a missing one (see :data:`PREFERRED_VARIANTS`)."""
    return next((v for v in PREFERRED_VARIANTS if v in available), available[0] if available else "fp32")


# -- serving (raised by the scheduler and the request steps; the server maps them) -----------------------


class RequestTooLargeError(ValueError):
    """One request carries more inputs than one request may, or more model inputs than the queue ever holds
    (no retry can succeed).

    Attributes:
        count: the inputs it carries (``what``).
        limit: the most one request may carry.
        option: the limit's name (``max_client_batch_size``, or ``max_queue`` for model inputs).
        what: what ``count`` counts (``inputs``; ``model inputs`` where each text expands into several rows:
            zero-shot's texts × labels, choose's choices).
    """

    def __init__(self, count: int, limit: int, option: str = "max_client_batch_size", what: str = "inputs") -> None:
        super().__init__(f"{count} {what} in one request, more than {option} {limit}; split the request")
        self.count = count
        self.limit = limit
        self.option = option
        self.what = what

    def __reduce__(self) -> tuple[type[RequestTooLargeError], tuple[int, int, str, str]]:
        return (RequestTooLargeError, (self.count, self.limit, self.option, self.what))


class QueueFullError(Exception):
    """The queue cannot take a request's inputs now; retry later.

    Attributes:
        reason: which limit it would pass, e.g. ``"3 inputs waiting, max_queue 4"``.
        retry_after: whole seconds after which a retry should find room (at least 1).
        queued: inputs waiting when it was refused.
        max_queue: the queue's limit in inputs.
    """

    def __init__(self, queued: int, max_queue: int, retry_after: int, reason: str | None = None) -> None:
        self.reason = reason or f"{queued} inputs waiting, max_queue {max_queue}"
        super().__init__(f"the queue is full ({self.reason}); retry after {retry_after} s or send fewer inputs")
        self.queued = queued
        self.max_queue = max_queue
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[type[QueueFullError], tuple[int, int, int, str]]:
        return (QueueFullError, (self.queued, self.max_queue, self.retry_after, self.reason))


class ShuttingDownError(Exception):
    """The scheduler is stopping: a queued request was not computed and a new one is not taken."""

    def __init__(self, message: str = "the server is shutting down; retry later") -> None:
        super().__init__(message)


class EngineError(RuntimeError):
    """An engine run failed; every request with an input in that batch fails with it.

    Attributes:
        cause: ``"ExceptionType: message"`` of what the engine raised.
    """

    def __init__(self, cause: str) -> None:
        super().__init__(f"the engine failed on this batch ({cause})")
        self.cause = cause

    def __reduce__(self) -> tuple[type[EngineError], tuple[str]]:
        return (EngineError, (self.cause,))
