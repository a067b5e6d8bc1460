"""Run the app under uvicorn: bind, then load and warm up, then ready; drain on SIGTERM/SIGINT.

Draining is done inside uvicorn's own signal handling rather than against it: :class:`DrainingServer`
overrides ``handle_exit`` (the first signal starts a drain instead of stopping at once; a second one
forces the exit, as uvicorn does) and ``on_tick`` (uvicorn calls it every 0.1 s on the event loop: it
ends the server once no request is in flight, or when ``drain_timeout`` has passed). While draining the
port stays open and new requests get 503 with ``Connection: close``; accepted ones finish. The process
then exits 0. uvicorn re-raises a signal it caught after shutting down (so the process would die by
SIGTERM); a drain is a normal end, so the signal is not recorded for that.

A second signal during the drain, or the drain timeout, cuts off the requests still in flight: their tasks
are cancelled and each gets a JSON 503 (:class:`bertonnx.serve.middleware.RequestAccounting` answers it)
instead of uvicorn's plain-text 500 and a traceback per request; the process then exits 1. A third signal
stops at once, as uvicorn does on a second Ctrl-C.

Connections are served by :mod:`.connection` (uvicorn's httptools protocol with header limits, header
and write timeouts); uvicorn's ``timeout_keep_alive`` closes idle kept-alive connections.
"""

from __future__ import annotations

import copy
import logging
import signal
import time
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI

from ..exit_codes import EXIT_ABANDONED, EXIT_LOAD_FAILED, EXIT_OK, EXIT_STARTUP_FAILED
from .app import ServerState
from .arguments import DEFAULT_HOST, DEFAULT_PORT
from .connection import ConnectionLimits, bounded_protocol

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "EXIT_ABANDONED",
    "EXIT_LOAD_FAILED",
    "EXIT_STARTUP_FAILED",
    "DrainingServer",
    "run_server",
]

log = logging.getLogger("bertonnx.serve")

#: Seconds uvicorn waits for connections after the drain (requests are done by then; keep-alives close).
SHUTDOWN_GRACE_S = 1.0


class DrainingServer(uvicorn.Server):
    """A uvicorn server that drains on SIGTERM/SIGINT and stops when the model fails to load."""

    def __init__(self, config: uvicorn.Config, state: ServerState, drain_timeout: float) -> None:
        super().__init__(config)
        self.state = state
        self.drain_timeout = drain_timeout
        self.drain_started: float | None = None
        self.cut_requested = False
        self.exit_code = EXIT_OK

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.drain_started is None:
            self.drain_started = time.monotonic()
            self.state.draining = True
            log.info(
                "%s: draining (new requests get 503; waiting up to %g s for %d in flight)",
                signal.Signals(sig).name,
                self.drain_timeout,
                self.state.in_flight.count,
            )
        elif not self.cut_requested:  # a second signal: cut the requests in flight off (on the next tick)
            self.cut_requested = True
        else:  # a third one: stop now, as uvicorn does on a second Ctrl-C
            self.should_exit = True
            self.force_exit = True

    async def on_tick(self, counter: int) -> bool:
        if self.state.load_error is not None:
            self.exit_code = EXIT_LOAD_FAILED
            return True
        if self.drain_started is not None:
            if self.state.in_flight.count == 0:
                log.info("drained in %.2f s", time.monotonic() - self.drain_started)
                return True
            if self.cut_requested or time.monotonic() - self.drain_started >= self.drain_timeout:
                why = "a second signal" if self.cut_requested else "drain timeout"
                log.error("%s: %d requests still in flight are cut off (503)", why, self.state.in_flight.count)
                self.cut_off()
                self.exit_code = EXIT_ABANDONED
                return True
        return await super().on_tick(counter)

    def cut_off(self) -> None:
        """Cancel every request task; each answers 503 if it had not started answering."""
        self.state.in_flight.cut_off = True
        for task in list(self.server_state.tasks):
            task.cancel()


def run_server(
    app: FastAPI,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    log_level: str = "info",
    access_log: bool = False,
) -> int:
    """Serve ``app`` (from :func:`bertonnx.serve.create_app`) until a signal drains it.

    Returns:
        0 after a clean drain; ``EXIT_ABANDONED`` (1) if the drain timeout cut requests off;
        ``EXIT_LOAD_FAILED`` (3) if the model could not be loaded; ``EXIT_STARTUP_FAILED`` (4) if uvicorn
        could not listen (it logs why).
    """
    state: ServerState = app.state.bertonnx
    options = state.options
    log_config: dict[str, Any] = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    log_config["loggers"]["bertonnx"] = {"handlers": ["default"], "level": log_level.upper(), "propagate": False}
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        log_config=log_config,
        access_log=access_log,
        lifespan="on",
        timeout_graceful_shutdown=int(SHUTDOWN_GRACE_S),
        http=bounded_protocol(ConnectionLimits.from_options(options)),
        timeout_keep_alive=options.keep_alive_timeout,  # type: ignore[arg-type]  # a float: it goes to call_later
    )
    server = DrainingServer(config, state, options.drain_timeout)
    try:
        server.run()
    except SystemExit:  # uvicorn exits (with its own code 3) when it cannot bind, after logging why
        return EXIT_STARTUP_FAILED
    return server.exit_code
