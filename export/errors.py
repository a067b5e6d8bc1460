"""The export step's one error type, carrying the exit code the CLI returns."""

from __future__ import annotations

from bertonnx.exit_codes import EXIT_GATE_FAILED, EXIT_HUB_UNREACHABLE, EXIT_USAGE


class ExportError(Exception):
    """The export cannot proceed; the message names the problem and the fix."""

    EXIT_REFUSED = EXIT_USAGE
    EXIT_GATE_FAILED = EXIT_GATE_FAILED
    EXIT_HUB_UNREACHABLE = EXIT_HUB_UNREACHABLE

    def __init__(self, message: str, exit_code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.exit_code = exit_code
