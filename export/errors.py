"""The export step's one error type, carrying the exit code the CLI returns."""

from __future__ import annotations


class ExportError(Exception):
    """The export cannot proceed; the message names the problem and the fix."""

    EXIT_REFUSED = 2
    EXIT_GATE_FAILED = 3
    EXIT_HUB_UNREACHABLE = 4

    def __init__(self, message: str, exit_code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.exit_code = exit_code
