"""Errors of a corpus job: a bad input file (the whole job cannot run), a bad row (one input cannot), and a
Ray cluster that failed the job."""

from __future__ import annotations

__all__ = ["BadRowError", "CorpusFileError", "RayJobError"]


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
