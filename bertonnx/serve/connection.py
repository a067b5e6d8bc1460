"""HTTP/1.1 connections that slow or careless clients cannot hold: uvicorn's httptools protocol, bounded.

uvicorn (0.54, its httptools and h11 protocols) bounds none of what a client controls before the app runs:
no limit on the size or number of headers (httptools buffers a header until it ends: a 64 MB header was
taken), no timeout for receiving them (a connection that sends half a header, or nothing, stays open for
good; ``timeout_keep_alive`` only starts after a first answer), and no write timeout (an answer a client
never reads stays in the transport's buffer until the client leaves). h11's
``h11_max_incomplete_event_size`` bounds the header size only, with a plain-text 400. Its errors are
plain text, where every error of this server is JSON. Hypercorn and granian are not dependencies, and the
drain (:mod:`.server`) is built on uvicorn's server loop; so this module subclasses uvicorn's
``HttpToolsProtocol`` (its ``http=`` setting takes a protocol class) and adds, per connection:

- the request line and headers: at most ``max_header_bytes`` bytes (counted as they arrive, before
  httptools buffers them) and ``max_headers`` headers (431), a target of at most ``max_url_bytes`` (414);
- ``header_timeout``: from the connection (or a kept-alive request's first byte) to the end of the
  headers; past it 408 when part of a request came, else the connection is just closed;
- ``write_timeout``: once the transport's buffer is over its high-water mark (the client is not reading),
  the buffer must shrink within this many seconds, else the connection is aborted, which frees the answer;
- JSON ``{"error", "error_type"}`` for what uvicorn answered in plain text (a malformed request: 400).

The body's size and time are bounded by :class:`bertonnx.serve.middleware.BodyLimit`, the idle time
between requests by uvicorn's ``timeout_keep_alive``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from .errors import ERROR_STATUS, error_body
from .options import ServeOptions

__all__ = ["BoundedHttpToolsProtocol", "ConnectionLimits", "bounded_protocol"]

log = logging.getLogger("bertonnx.serve")

#: Seconds a refused connection is kept half-open, reading and dropping what the client still sends, so that
#: the client reads the error instead of a reset (nginx's lingering close); its bytes are never kept.
LINGER_S = 2.0


@dataclass(frozen=True)
class ConnectionLimits:
    """What one connection may send, and how long it may take to send and to read (see the module doc)."""

    max_header_bytes: int
    max_headers: int
    max_url_bytes: int
    header_timeout: float
    write_timeout: float

    @classmethod
    def from_options(cls, options: ServeOptions) -> ConnectionLimits:
        return cls(
            max_header_bytes=options.max_header_bytes,
            max_headers=options.max_headers,
            max_url_bytes=options.max_url_bytes,
            header_timeout=options.header_timeout,
            write_timeout=options.write_timeout,
        )


class _Refused(Exception):
    """Raised from a parser callback to stop parsing; the answer is in ``BoundedHttpToolsProtocol._refusal``."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header limits, header and write timeouts and JSON errors."""

    limits: ClassVar[ConnectionLimits]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reading_head = True
        self._head_bytes = 0
        self._url_bytes = 0
        self._header_count = 0
        self._refusal: tuple[str, str] | None = None
        self._head_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._write_buffered = 0
        self._discarding = False
        self._linger: asyncio.TimerHandle | None = None

    # -- the connection ---------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return  # refused: what follows is dropped unread
        self._unset_keepalive_if_required()
        if self._reading_head:
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError as exc:
            if self._refusal is not None:
                self._refuse(*self._refusal)
            else:
                reason = str(exc).strip() or "malformed request"
                self._refuse("bad_request", f"the request is not valid HTTP/1.1 ({reason}); fix the client")
            return
        if self._reading_head and self._head_bytes > self.limits.max_header_bytes:
            self._refuse(
                "headers_too_large",
                f"the request line and headers are larger than --max-header-bytes {self.limits.max_header_bytes}; "
                "send smaller headers",
            )

    # -- the request head -------------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading_head = True
        self._url_bytes = 0
        self._header_count = 0
        if self._head_timer is None:
            self._arm_head_timer()

    def on_url(self, url: bytes) -> None:
        self._url_bytes += len(url)
        if self._url_bytes > self.limits.max_url_bytes:
            self._stop(
                "uri_too_long",
                f"the request target is longer than --max-url-bytes {self.limits.max_url_bytes}; send the inputs "
                "in a POST body",
            )
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            self._stop(
                "headers_too_large",
                f"the request has more headers than --max-headers {self.limits.max_headers}; send fewer",
            )
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._reading_head = False
        self._head_bytes = 0
        self._cancel_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._reading_head = True  # a pipelined request's head may follow in the same bytes

    def _stop(self, kind: str, message: str) -> None:
        self._refusal = (kind, message)
        raise _Refused(message)

    def _refuse(self, kind: str, message: str) -> None:
        """Answer ``kind`` as JSON and close the connection (the request never reaches the app)."""
        self._cancel_timers()
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.close()  # an answer is under way on this connection: it cannot be interleaved
            return
        body = error_body(message, kind)
        status = ERROR_STATUS[kind]
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self._discarding = True
        if self.transport.can_write_eof():  # the answer, then FIN; the client's remaining bytes are dropped
            self.transport.write_eof()
            self._linger = self.loop.call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()

    def send_400_response(self, msg: str) -> None:  # uvicorn's own 400, in our shape
        self._refuse("bad_request", f"the request is not valid HTTP/1.1 ({msg.rstrip('.')}); fix the client")

    # -- timers -----------------------------------------------------------------------------------------

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.limits.header_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._reading_head or self.transport.is_closing():
            return
        if self._head_bytes == 0 and (self.cycle is None or self.cycle.response_complete):
            self.transport.close()  # nothing was asked: nobody to answer
            return
        self._refuse(
            "request_timeout",
            f"the request line and headers did not arrive within {self.limits.header_timeout:g} s "
            "(--header-timeout); send them at once",
        )

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_buffered = self.transport.get_write_buffer_size()
            self._write_timer = self.loop.call_later(self.limits.write_timeout, self._check_writing)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _check_writing(self) -> None:
        """``write_timeout`` after the buffer filled: abort unless the client read some of it since."""
        self._write_timer = None
        if self.transport.is_closing():
            return
        buffered = self.transport.get_write_buffer_size()
        if buffered < self._write_buffered:
            self._write_buffered = buffered
            self._write_timer = self.loop.call_later(self.limits.write_timeout, self._check_writing)
            return
        client = f"{self.client[0]}:{self.client[1]} " if self.client else ""
        log.warning(
            "%sread nothing of its answer for %g s (--write-timeout): connection closed, %d bytes dropped",
            client,
            self.limits.write_timeout,
            buffered,
        )
        self.transport.abort()

    def _cancel_timers(self) -> None:
        self._cancel_head_timer()
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None


def bounded_protocol(limits: ConnectionLimits) -> type[BoundedHttpToolsProtocol]:
    """A protocol class for ``uvicorn.Config(http=...)`` that enforces ``limits`` on every connection."""
    return type("BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,), {"limits": limits})
