"""Answers whose size is known before the work and whose serialisation never stalls the server.

A request's answer can be far larger than the request: 32 texts of 510 words are a 17 kB body and, from
``/encode`` on bert-base, 32 × 512 × 768 hidden-state floats, about 250 MB of JSON. So:

- :func:`answer_bytes` estimates the answer from what is known before the model runs (inputs, tokens,
  outputs asked for, JSON or binary), and :func:`check_answer_size` refuses a request over
  ``--max-response-bytes`` with 413, naming the limit and how to ask for less;
- :class:`JSONAnswer` serialises in a worker thread, within the request's deadline (504 past it), row by
  row so no Python list of every float is ever built (the JSON is the same bytes as ``json.dumps``'s).
  An answer of more than one chunk (``CHUNK_BYTES``) is streamed: each chunk is serialised once the client
  has taken the one before (chunked transfer encoding), so the server holds the answer's float32 arrays
  and two chunks, never the whole JSON (bert-base's largest ``/encode``: 50 MB of arrays, not 300 MB of
  JSON), and a client that stops reading costs no serialisation; the connection's write timeout then
  closes it and frees the arrays. A deadline passed mid-stream closes the connection (the status was
  sent). Answers with binary tensors (KServe) are serialised whole first, as their JSON part's length
  goes in a header.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .errors import ServeError

log = logging.getLogger("bertonnx.serve")

__all__ = [
    "CHUNK_BYTES",
    "JSON_FLOAT_BYTES",
    "TOKEN_JSON_BYTES",
    "FlatArray",
    "JSONAnswer",
    "answer_bytes",
    "check_answer_size",
    "encode_json",
]

#: The most bytes one float32 takes in a JSON answer (Python writes it as the double nearest to it):
#: ``-1.2345678901234567e-05,`` is 24; typical hidden states take 20.
JSON_FLOAT_BYTES = 24
#: Bytes a token takes in ``/encode``'s ``tokens``, ``ids`` and ``type_ids`` (an estimate: WordPiece tokens
#: are short; a word over 100 characters is one ``[UNK]``).
TOKEN_JSON_BYTES = 32
#: Bytes of JSON produced (and sent) at a time.
CHUNK_BYTES = 1 << 20
#: Answers with fewer floats than this are serialised on the event loop (a thread hop costs more).
INLINE_FLOATS = 16_384

_dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


def answer_bytes(floats: int, *, tokens: int = 0, binary: bool = False) -> int:
    """An estimate (from above, for float values) of an answer's bytes.

    Args:
        floats: float32 values in the answer.
        tokens: tokens listed with their ids (``/encode``).
        binary: the floats go as raw little-endian bytes (KServe's binary tensors), not JSON numbers.
    """
    return floats * (4 if binary else JSON_FLOAT_BYTES) + tokens * TOKEN_JSON_BYTES


def check_answer_size(estimate: int, limit: int, advice: str) -> None:
    """Raise 413 when an answer's estimated size is over ``limit`` bytes.

    Raises:
        ServeError: ``payload_too_large``, naming the estimate, the limit and ``advice`` (how to ask for less).
    """
    if estimate > limit:
        raise ServeError(
            f"the answer would take about {estimate:,} bytes, more than --max-response-bytes {limit:,}; {advice}",
            "payload_too_large",
        )


class FlatArray:
    """A numpy array written as one flat JSON list (row-major), as KServe's ``data`` is."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array


def _pieces(value: Any) -> Iterator[str]:
    """``json.dumps(value)`` (starlette's settings) in pieces; numpy arrays a row at a time."""
    if isinstance(value, FlatArray):
        array = value.array
        rows = array.reshape(-1, array.shape[-1]) if array.ndim > 1 and array.size else array.reshape(1, -1)
        yield "["
        for index, row in enumerate(rows):
            yield ("," if index and row.size else "") + _dumps(row.tolist())[1:-1]
        yield "]"
    elif isinstance(value, np.ndarray):
        if value.ndim <= 1:
            yield _dumps(value.tolist())
        else:
            yield "["
            for index, row in enumerate(value):
                if index:
                    yield ","
                yield from _pieces(row)
            yield "]"
    elif isinstance(value, Mapping):
        yield "{"
        for index, (key, item) in enumerate(value.items()):
            yield ("," if index else "") + _dumps(str(key)) + ":"
            yield from _pieces(item)
        yield "}"
    elif isinstance(value, (list, tuple)) and any(isinstance(item, (np.ndarray, Mapping)) for item in value):
        yield "["
        for index, item in enumerate(value):
            if index:
                yield ","
            yield from _pieces(item)
        yield "]"
    else:
        yield _dumps(value)


class _Stopped(Exception):
    """Serialisation was abandoned (the request's deadline passed)."""


class _Late:
    """The request's deadline passed before a chunk was serialised."""


_LATE = _Late()


def iter_json(value: Any, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """``value`` as UTF-8 JSON in chunks of about ``chunk_bytes``, each serialised when it is asked for."""
    pending: list[str] = []
    size = 0
    for piece in _pieces(value):
        pending.append(piece)
        size += len(piece)
        if size >= chunk_bytes:
            yield "".join(pending).encode("utf-8")
            pending, size = [], 0
    if pending:
        yield "".join(pending).encode("utf-8")


def encode_json(value: Any, stop: Callable[[], bool] = lambda: False, chunk_bytes: int = CHUNK_BYTES) -> list[bytes]:
    """``value`` as UTF-8 JSON in chunks of about ``chunk_bytes``; numpy arrays are written as nested lists.

    Raises:
        ValueError: a float is NaN or infinite (not JSON).
    """
    chunks: list[bytes] = []
    pending: list[str] = []
    size = 0
    for piece in _pieces(value):
        pending.append(piece)
        size += len(piece)
        if size >= chunk_bytes:
            if stop():
                raise _Stopped
            chunks.append("".join(pending).encode("utf-8"))
            pending, size = [], 0
    if pending or not chunks:
        chunks.append("".join(pending).encode("utf-8"))
    return chunks


def _floats(value: Any) -> int:
    if isinstance(value, FlatArray):
        return int(value.array.size)
    if isinstance(value, np.ndarray):
        return int(value.size)
    if isinstance(value, Mapping):
        return sum(_floats(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_floats(item) for item in value if isinstance(item, (np.ndarray, Mapping, list, tuple)))
    return 0


class JSONAnswer(Response):
    """A JSON answer serialised off the event loop within ``deadline`` and sent as the client reads it.

    Args:
        content: JSON-able values, numpy arrays anywhere in it.
        deadline: ``time.monotonic()`` by which serialisation must be done (504 past it); ``None``: none.
        headers: extra headers.
        tail: raw bytes sent after the JSON (KServe's binary tensors).
        json_length_header: a header that gets the JSON part's length (KServe's
            ``Inference-Header-Content-Length``), for answers with a ``tail``.
        media_type: the content type.
    """

    def __init__(
        self,
        content: Any,
        *,
        deadline: float | None = None,
        headers: Mapping[str, str] | None = None,
        tail: list[bytes] | None = None,
        json_length_header: str | None = None,
        media_type: str = "application/json",
    ) -> None:
        self.status_code = 200
        self.background = None
        self.media_type: str = media_type
        self.content = content
        self.deadline = deadline
        self.tail = list(tail or [])
        self.json_length_header = json_length_header
        self.body = b""
        self._extra = dict(headers or {})
        self.raw_headers = []

    async def _serialise(self, scope: Scope, send: Send) -> list[bytes] | None:
        """The JSON chunks, or ``None`` after answering 504 (the deadline passed)."""
        content, self.content = self.content, None  # freed once written
        if _floats(content) <= INLINE_FLOATS:
            return encode_json(content)
        stopped = threading.Event()
        work = asyncio.ensure_future(asyncio.to_thread(encode_json, content, stopped.is_set))
        del content
        timeout = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        done, _ = await asyncio.wait({work}, timeout=timeout)
        if work in done:
            return work.result()
        stopped.set()
        work.add_done_callback(lambda future: future.exception())  # retrieve the _Stopped it ends with
        await self._timeout(scope, send)
        return None

    async def _timeout(self, scope: Scope, send: Send) -> None:
        error = ServeError(
            "the answer was not serialised within --request-timeout; send fewer inputs per request, ask for "
            "fewer outputs, or raise --request-timeout",
            "timeout",
        )
        body = error.body(scope.get("path", ""))
        start = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": error.status, "headers": start})
        await send({"type": "http.response.body", "body": body})

    async def _next_chunk(self, chunks: Iterator[bytes]) -> bytes | _Late | None:
        """The next chunk, serialised in a worker thread (``None`` at the end; ``_LATE`` past the deadline)."""
        work = asyncio.ensure_future(asyncio.to_thread(next, chunks, None))
        timeout = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        done, _ = await asyncio.wait({work}, timeout=timeout)
        if work not in done:
            work.add_done_callback(lambda future: future.exception())  # its chunk is not wanted
            return _LATE
        return work.result()

    def _start_headers(self, **extra: str) -> list[tuple[bytes, bytes]]:
        headers = {**self._extra, "content-type": str(self.media_type), **extra}
        return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]

    async def _stream(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serialise and send a chunk at a time (see the module docstring)."""
        chunks = iter_json(self.content)
        self.content = None
        chunk = await self._next_chunk(chunks)
        following = await self._next_chunk(chunks) if isinstance(chunk, bytes) else None
        if isinstance(chunk, _Late) or isinstance(following, _Late):
            await self._timeout(scope, send)
            return
        if chunk is None or following is None:  # one chunk: sent with its length
            body = chunk or b""
            headers = self._start_headers(**{"content-length": str(len(body))})
            await send({"type": "http.response.start", "status": self.status_code, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await send({"type": "http.response.start", "status": self.status_code, "headers": self._start_headers()})
        left = asyncio.ensure_future(receive())  # resolves with http.disconnect when the client leaves
        try:
            while following is not None:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                if left.done():
                    if left.result().get("type") == "http.disconnect":
                        return  # the client left (or was cut off): serialise no more
                    left = asyncio.ensure_future(receive())  # not a disconnect: keep watching
                chunk, following = following, await self._next_chunk(chunks)
                if isinstance(following, _Late):
                    log.warning("%s: the answer was not serialised within --request-timeout; cut off", scope["path"])
                    return  # the answer is incomplete: the server closes the connection
            await send({"type": "http.response.body", "body": chunk, "more_body": False})
        finally:
            left.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.tail and _floats(self.content) > INLINE_FLOATS:
            await self._stream(scope, receive, send)
            return
        chunks = await self._serialise(scope, send)
        if chunks is None:
            return
        json_length = sum(len(chunk) for chunk in chunks)
        queue: deque[bytes | memoryview] = deque(chunks)
        del chunks
        for blob in self.tail:  # binary tensors, in chunks too (copied one chunk at a time as it is sent)
            view = memoryview(blob)
            queue.extend(view[start : start + CHUNK_BYTES] for start in range(0, len(blob), CHUNK_BYTES))
        self.tail = []
        headers = {**self._extra, "content-type": str(self.media_type)}
        if self.json_length_header is not None:
            headers[self.json_length_header] = str(json_length)
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        raw.append((b"content-length", str(sum(len(chunk) for chunk in queue)).encode()))
        await send({"type": "http.response.start", "status": self.status_code, "headers": raw})
        while queue:
            chunk = queue.popleft()
            await send({"type": "http.response.body", "body": bytes(chunk), "more_body": bool(queue)})
