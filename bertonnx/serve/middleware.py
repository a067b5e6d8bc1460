"""Pure ASGI middleware (no ``BaseHTTPMiddleware``, which buffers answers and breaks disconnect detection).

From the outside in:

1. :class:`RequestAccounting` counts and times every request by route and status, tracks the requests in
   flight (draining waits for them) and stamps each request's arrival time (its deadline counts from it).
   When the server cuts a drain short it cancels the requests in flight; each then answers JSON 503.
2. :class:`BearerAuth` answers 401 unless ``Authorization: Bearer <api_key>`` is right; the routes in
   ``app.OPEN_PATHS`` (health, readiness, metrics, the API description) stay open.
3. :class:`BodyLimit` reads the body, answering 413 as soon as it passes the payload limit (by
   ``Content-Length`` before reading anything, else while reading), 408 when it has not arrived by the
   request timeout and 503 when a drain starts while it is on its way, then replays it to the app. After the
   body, ``receive`` goes straight to the server, so handlers see ``http.disconnect`` when a client leaves.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

from starlette.datastructures import Headers
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import ServeError

if TYPE_CHECKING:
    from .metrics import ServeMetrics

__all__ = ["ARRIVAL_KEY", "BearerAuth", "BodyLimit", "InFlight", "RequestAccounting", "send_error"]

#: ``scope["state"]`` key of a request's arrival time (``time.monotonic()``).
ARRIVAL_KEY = "bertonnx_arrival"
UNMATCHED_ROUTE = "unmatched"
#: Seconds between checks of the body deadline and of draining while a body is on its way.
BODY_POLL_S = 0.25


async def send_error(send: Send, error: ServeError, *, path: str = "", close: bool = False) -> None:
    """Answer ``error`` as JSON from middleware, in the shape of ``path``'s API (``close``: ask the client to
    drop the connection)."""
    body = error.body(path)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in error.headers.items()]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class InFlight:
    """A count of requests being handled (draining waits until it is zero); ``cut_off`` once the server
    cancels the requests still in flight (a second signal or the drain timeout)."""

    def __init__(self) -> None:
        self.count = 0
        self.cut_off = False


#: The answer of a request cut off by the end of a drain.
CUT_OFF = ServeError(
    "the server stopped before this request was answered (its drain was cut short); retry on another instance "
    "or after the restart",
    "unavailable",
)


class RequestAccounting:
    """Counts, times and tracks every HTTP request; labels it with its route template, not its path."""

    def __init__(
        self, app: ASGIApp, *, metrics: ServeMetrics, in_flight: InFlight, routes: Callable[[], Sequence[BaseRoute]]
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.in_flight = in_flight
        self.routes = routes

    def _route(self, scope: Scope) -> str:
        routed = scope.get("route")  # set by the router when the request reached it
        if routed is not None:
            return str(getattr(routed, "path", UNMATCHED_ROUTE))
        partial = None  # answered before routing (401, 413): match the path here
        for route in self.routes():
            match, _ = route.matches(scope)
            if match == Match.FULL:
                return str(getattr(route, "path", UNMATCHED_ROUTE))
            if match == Match.PARTIAL and partial is None:
                partial = str(getattr(route, "path", UNMATCHED_ROUTE))
        return partial or UNMATCHED_ROUTE

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        scope.setdefault("state", {})[ARRIVAL_KEY] = started
        status = 500
        started_answer = False

        async def send_status(message: Message) -> None:
            nonlocal status, started_answer
            if message["type"] == "http.response.start":
                status = int(message["status"])
                started_answer = True
            await send(message)

        self.in_flight.count += 1
        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_status)
        except asyncio.CancelledError:
            if not self.in_flight.cut_off:
                raise
            uncancel = getattr(asyncio.current_task(), "uncancel", None)  # Python >= 3.11
            if uncancel is not None:
                uncancel()  # the cancellation is handled here: the request ends with its 503
            if not started_answer:
                status = CUT_OFF.status
                await send_error(send, CUT_OFF, path=scope["path"], close=True)
        finally:
            self.in_flight.count -= 1
            self.metrics.in_flight.dec()
            route = self._route(scope)
            self.metrics.requests.labels(route=route, status=str(status)).inc()
            self.metrics.request_duration.labels(route=route).observe(time.monotonic() - started)


class BearerAuth:
    """401 unless the request carries ``Authorization: Bearer <api_key>`` (compared in constant time)."""

    def __init__(self, app: ASGIApp, *, api_key: str, open_paths: Collection[str]) -> None:
        self.app = app
        self.api_key = api_key.encode()
        self.open_paths = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        scheme, _, token = Headers(scope=scope).get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.api_key):
            await self.app(scope, receive, send)
            return
        problem = "has a wrong bearer token" if scheme.lower() == "bearer" else "has no bearer token"
        error = ServeError(
            f"this request {problem}; send the header 'Authorization: Bearer <key>' with the server's --api-key",
            "unauthorized",
            {"WWW-Authenticate": "Bearer"},
        )
        await send_error(send, error, path=scope["path"])


class BodyLimit:
    """413 for a body over ``limit`` bytes, decided while reading it; the app gets the whole body at once.

    A body must also arrive within ``timeout`` seconds of the request's arrival (408 past it), and a server
    that starts draining stops waiting for bodies still on their way (503), so a client that stalls mid-body
    holds neither a connection nor a drain.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        limit: int,
        timeout: float,
        draining: Callable[[], bool],
        encoding_refusal: Callable[[str, str], ServeError | None] | None = None,
    ) -> None:
        """``encoding_refusal(path, content_encoding)``: the 415 for a body the route cannot decode (any
        Content-Encoding but identity off KServe's infer route), refused before the body is read."""
        self.app = app
        self.limit = limit
        self.timeout = timeout
        self.draining = draining
        self.encoding_refusal = encoding_refusal

    def _too_large(self, declared: str | None) -> ServeError:
        size = f"has {declared} bytes, more than" if declared else "is larger than"
        return ServeError(
            f"the body {size} the payload limit of {self.limit} bytes; send fewer or shorter inputs per "
            "request, or start the server with a larger --payload-limit",
            "payload_too_large",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        headers = Headers(scope=scope)
        refused = self.encoding_refusal(path, headers.get("content-encoding", "")) if self.encoding_refusal else None
        if refused is not None:  # a header the route would not honour: never read the body as if it were plain
            await send_error(send, refused, path=path, close=True)
            return
        declared = headers.get("content-length")
        if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > self.limit:
            await send_error(send, self._too_large(declared), path=path, close=True)
            return
        deadline = scope.get("state", {}).get(ARRIVAL_KEY, time.monotonic()) + self.timeout
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self._next(receive, deadline)
            if isinstance(message, ServeError):
                await send_error(send, message, path=path, close=True)
                return
            if message["type"] == "http.disconnect":
                return  # the client left before sending its whole body: nobody to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await send_error(send, self._too_large(None), path=path, close=True)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _next(self, receive: Receive, deadline: float) -> Message | ServeError:
        """The next body message, or the error to answer when the deadline passes or a drain starts first."""
        pending = asyncio.ensure_future(receive())
        try:
            while True:
                wait = min(BODY_POLL_S, deadline - time.monotonic())
                if wait > 0:
                    done, _ = await asyncio.wait({pending}, timeout=wait)
                    if done:
                        return pending.result()
                if self.draining():
                    return ServeError("the server is shutting down; retry on another replica", "unavailable")
                if time.monotonic() >= deadline:
                    return ServeError(
                        f"the request body did not arrive within {self.timeout:g} s (--request-timeout); send the "
                        "whole body at once",
                        "request_timeout",
                    )
        finally:
            if not pending.done():
                pending.cancel()
