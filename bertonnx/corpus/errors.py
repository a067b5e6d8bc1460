"""Errors of a corpus job: a bad input file (the whole job cannot run), a bad row (one input cannot), and a
Ray cluster that failed the job."""

from __future__ import annotations

from ..errors import InputTooLongError, over_limit

__all__ = ["BadRowError", "CorpusFileError", "RayJobError", "row_reason"]


def row_reason(error: Exception, task: str = "embed") -> str:
    """Why a row was rejected, for :class:`BadRowError` and the rejects file, from the runtime's typed error.

    A corpus job is run from Python and from ``bertonnx batch`` alike, so the fix names the option both ways
    (``truncation=True``, ``--truncation``); this is the one place such a reason is worded.
    """
    if isinstance(error, InputTooLongError):
        windows = ", tag it in windows with stride=N (--stride N)" if task == "tag" else ""
        model_limit = f"the model's {error.max_length}"
        return (
            f"has {over_limit(error.length, model_limit)}; cut it with truncation=True (--truncation){windows}, or "
            "split the text"
        )
    return str(error)


class CorpusFileError(ValueError):
    """The input or output file cannot be used: missing, a directory, not UTF-8, unknown column or
    extension, or not writable. The message names the problem and the fix."""


class BadRowError(ValueError):
    """A row cannot be computed (null, not a string, too long without truncation) and the job stops.

    Attributes:
        row_id: the row's ``id`` (its input row number, from 0).
        reason: why, e.g. ``"'text' is null"``.
    """

    def __init__(self, row_id: int, reason: str) -> None:
        super().__init__(
            f"row {row_id}: {reason}. Fix the row, or pass --on-error skip (on_error='skip') to write bad rows "
            "to the rejects file and go on"
        )
        self.row_id = row_id
        self.reason = reason

    def __reduce__(self) -> tuple[type[BadRowError], tuple[int, str]]:  # survives pickling across Ray workers
        return (BadRowError, (self.row_id, self.reason))


class RayJobError(RuntimeError):
    """Ray could not finish a job: a node, worker or object was lost beyond what Ray retries, or the cluster
    went away. Nothing was written; an older output is unchanged. The message names Ray's error."""
