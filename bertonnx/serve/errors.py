"""Every error the server answers: one exception type, one JSON shape, one status per kind.

The core's typed errors (:mod:`bertonnx.errors`: an input too long, a queue full, shutting down ...) know
nothing of HTTP; :func:`from_core` is the one place that turns them into a :class:`ServeError` (status,
headers, a message in the API's terms), and the app registers it for each of :data:`CORE_ERRORS`.

The body is ``{"error": "<what is wrong and how to fix it>", "error_type": "<kind>"}`` (TEI's shape;
KServe clients read ``error`` too), and on the OpenAI routes (``/v1/``) OpenAI's
``{"error": {"message", "type", "param", "code"}}``, whose message the ``openai`` client shows. The kinds
and their status codes are fixed here so the README table, the handlers and the tests agree.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from ..errors import (
    EngineError,
    HeadMissingError,
    InputTooLongError,
    OptionError,
    QueueFullError,
    RequestTooLargeError,
    ShuttingDownError,
    VariantMissingError,
    over_limit,
)
from ..vocabulary import FIELD_NAMES, field_name, flag

__all__ = [
    "CORE_ERRORS",
    "ERROR_STATUS",
    "FIELD_NAMES",
    "OPENAI_PREFIX",
    "ServeError",
    "error_body",
    "from_core",
    "validation_message",
]

#: error_type -> HTTP status.
ERROR_STATUS: Mapping[str, int] = {
    "bad_request": 400,
    "unauthorized": 401,
    "not_found": 404,
    "method_not_allowed": 405,
    "request_timeout": 408,
    "payload_too_large": 413,
    "uri_too_long": 414,
    "unsupported_media_type": 415,
    "validation": 422,
    "overloaded": 429,
    "headers_too_large": 431,
    "backend": 500,
    "unavailable": 503,
    "timeout": 504,
}


#: Routes under this prefix answer errors in OpenAI's shape, which the ``openai`` client reads.
OPENAI_PREFIX = "/v1/"


def error_body(message: str, error_type: str, path: str = "") -> bytes:
    """The JSON body of an error answer: TEI's ``{"error", "error_type"}``, or OpenAI's
    ``{"error": {"message", "type", "param", "code"}}`` on ``/v1/`` routes (``path``)."""
    if path.startswith(OPENAI_PREFIX):
        return json.dumps({"error": {"message": message, "type": error_type, "param": None, "code": None}}).encode()
    return json.dumps({"error": message, "error_type": error_type}).encode()


class ServeError(Exception):
    """An answer other than 2xx: its ``error_type`` decides the status (see ``ERROR_STATUS``).

    Attributes:
        message: what is wrong and how to fix it.
        error_type: one of ``ERROR_STATUS``.
        headers: extra response headers (``Retry-After`` for 429, ``WWW-Authenticate`` for 401 ...).
    """

    def __init__(self, message: str, error_type: str, headers: Mapping[str, str] | None = None) -> None:
        if error_type not in ERROR_STATUS:
            raise ValueError(f"unknown error_type {error_type!r}; expected one of {', '.join(ERROR_STATUS)}")
        super().__init__(message)
        self.message = message
        self.error_type = error_type
        self.headers = dict(headers or {})

    @property
    def status(self) -> int:
        return ERROR_STATUS[self.error_type]

    def body(self, path: str = "") -> bytes:
        """The JSON body for a request to ``path`` (see :func:`error_body`)."""
        return error_body(self.message, self.error_type, path)


#: The core errors the server answers as themselves (anything else unexpected is a 500 ``backend``).
CORE_ERRORS: tuple[type[Exception], ...] = (
    HeadMissingError,
    OptionError,
    InputTooLongError,
    RequestTooLargeError,
    QueueFullError,
    ShuttingDownError,
    EngineError,
    VariantMissingError,
)


def from_core(error: Exception) -> ServeError:
    """The answer to a core error (one of :data:`CORE_ERRORS`, or a plain ``ValueError``/``TypeError`` from a
    task's steps: a bad option or input, 422): its status, headers and a message in HTTP terms.

    Raises:
        TypeError: ``error`` is none of those.
    """
    if isinstance(error, InputTooLongError):
        if error.option == "stride":
            model_limit = f"the model's {error.max_length}"
            return ServeError(
                f"text {error.index} has {over_limit(error.length, model_limit)}; "
                f'pass {field_name("stride")} (e.g. "{field_name("stride")}": 128) to tag it in overlapping windows, '
                "merged as transformers' pipeline merges them",
                "validation",
            )
        if error.length is None:
            return ServeError(
                f"input {error.index} has more than {error.max_length} tokens, the model's limit (it was refused "
                f'after its first {error.max_length + 1}). Send "{field_name(error.option)}": true to cut it, or split '
                "the text.",
                "validation",
            )
        return ServeError(
            f"input {error.index} has {error.length} tokens, more than the model's limit of {error.max_length}. "
            f'Send "{field_name(error.option)}": true to cut it, or split the text.',
            "validation",
        )
    if isinstance(error, OptionError):  # the option's JSON field: the runtime's name, TEI's where it differs
        return ServeError(
            f"{field_name(error.option)} must be {error.expected}, got {error.value!r}"
            + (f"; {error.fix}" if error.fix else ""),
            "validation",
        )
    if isinstance(error, RequestTooLargeError):
        return ServeError(
            f"{error.count} {error.what} in one request, more than {flag(error.option)} {error.limit}; split the "
            "request",
            "payload_too_large",
        )
    if isinstance(error, QueueFullError):
        return ServeError(str(error), "overloaded", {"Retry-After": str(error.retry_after)})
    if isinstance(error, ShuttingDownError):
        return ServeError(str(error), "unavailable", {"Connection": "close"})
    if isinstance(error, EngineError):
        return ServeError(str(error), "backend")
    if isinstance(error, VariantMissingError):
        why = f" ({error.reason})" if error.reason else ""
        return ServeError(
            f"{error.variant!r} is not served here{why}; the export holds {', '.join(error.available)}", "not_found"
        )
    if isinstance(error, HeadMissingError):  # the route's task needs a head the export lacks
        return ServeError(str(error), "validation")
    if isinstance(error, (ValueError, TypeError)):  # a bad option or input, found by the task's steps
        return ServeError(str(error), "validation")
    raise TypeError(f"{type(error).__name__} is not a core error the server maps; expected one of CORE_ERRORS")


def validation_message(
    error: ValidationError | Sequence[Mapping[str, Any]], example: str | None, fields: Sequence[str] = ()
) -> str:
    """One line naming each invalid field (at most five), and a valid body for the route; an unknown field is
    named with the closest of the route's ``fields``."""
    errors = error.errors() if isinstance(error, ValidationError) else list(error)
    parts = []
    for item in errors:
        kind, loc = item.get("type"), [p for p in item.get("loc", ()) if p != "body"]
        if kind == "json_invalid":
            reason = (item.get("ctx") or {}).get("error", item.get("msg"))
            where = f" at character {loc[-1]}" if loc and isinstance(loc[-1], int) else ""
            parts = [f"malformed JSON ({reason}{where})"]
            break
        name = ".".join(str(p) for p in loc) or "body"
        if kind == "extra_forbidden":
            close = difflib.get_close_matches(str(loc[-1]), list(fields), n=1) if loc else []
            parts.append(f"unknown field {name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            continue
        message = str(item.get("msg", "")).removeprefix("Value error, ")
        got = item.get("input")
        shown = f" (got {json.dumps(got)[:60]})" if kind not in ("missing", "value_error") and _jsonable(got) else ""
        parts.append(f"{name}: {message}{shown}")
    text = "; ".join(dict.fromkeys(parts[:5]))
    return f"{text}. Expected a JSON body like {example}" if example else text


def _jsonable(value: object) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
