"""The server's state: its options, metrics, the model and scheduler once loaded, and the lifecycle.

Loading and warm-up happen after the port is bound, in the background: ``/health`` answers at once, ``/ready``
and the model routes say 503 (:meth:`ServerState.unavailable`) until the model is warm, and again while the
server drains.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from ..model import BertOnnx
from ..options import RuntimeOptions
from .answers import answer_bytes
from .engine import Engine
from .errors import ServeError
from .metrics import ServeMetrics
from .middleware import InFlight
from .options import ServeOptions
from .scheduler import Scheduler

__all__ = ["ServerState", "answer_estimate"]

log = logging.getLogger("bertonnx.serve")


def answer_estimate(lengths: list[int], model: BertOnnx, *, states: bool) -> int:
    """Bytes of the JSON answer to inputs of ``lengths`` tokens (see :func:`.answers.answer_bytes`): a vector
    and two logits per input, and with ``states`` (``/encode``) every token's hidden state and ids too."""
    hidden, tokens = model.hidden_size, sum(lengths)
    if states:
        return answer_bytes(tokens * hidden + (hidden + 2) * len(lengths), tokens=tokens)
    return answer_bytes((hidden + 2) * len(lengths))


class ServerState:
    """Everything the routes share: options, metrics, the model and scheduler once loaded, the lifecycle."""

    def __init__(self, options: ServeOptions, model_name: str) -> None:
        self.options = options
        self.model_name = model_name
        self.metrics = ServeMetrics()
        self.in_flight = InFlight()
        self.model: BertOnnx | None = None
        self.scheduler: Scheduler | None = None
        self.ready = False
        self.draining = False
        self.load_error: str | None = None

    async def load(self, source: str | Path | BertOnnx, variant: str, runtime: RuntimeOptions) -> None:
        """Load (in a worker thread), warm up, start the scheduler, then say ready; record any failure."""
        try:
            started = time.monotonic()
            if isinstance(source, BertOnnx):
                model = source
            else:
                model = await asyncio.to_thread(BertOnnx, source, variant, options=runtime)
            engine = Engine(model)
            await asyncio.to_thread(engine.warmup)
            scheduler = Scheduler(
                engine.run,
                self.options.limits,
                max_queue=self.options.max_queue,
                batch_wait_s=self.options.batch_wait_s,
                max_batch_requests=self.options.max_batch_requests,
                max_queue_wait=self.options.max_queue_wait,
                priority_per_token=self.options.priority_s_per_token,
                refill_wait_s=self.options.refill_wait_s,
                metrics=self.metrics,
            )
            scheduler.start()
            self.model, self.scheduler, self.ready = model, scheduler, True
            log.info("ready: %r loaded and warmed up in %.2f s", model, time.monotonic() - started)
        except Exception as exc:  # noqa: BLE001 - reported by /ready and the server's exit code
            self.load_error = f"{type(exc).__name__}: {exc}"
            log.error("the model failed to load: %s", self.load_error)

    def response_limit(self, model: BertOnnx) -> int:
        """``--max-response-bytes``, or by default the answer of the largest request the other limits allow
        (``/encode`` of ``max_client_batch_size`` inputs of the model's positions)."""
        if self.options.max_response_bytes is not None:
            return self.options.max_response_bytes
        return answer_estimate([model.max_length] * self.options.max_client_batch_size, model, states=True)

    def unavailable(self) -> ServeError | None:
        """Why model routes cannot answer now (503), or ``None``."""
        if self.draining:
            return ServeError(
                "the server is shutting down and takes no new requests; send this request to another instance "
                "or retry after the restart",
                "unavailable",
                {"Connection": "close"},
            )
        if self.load_error is not None:
            return ServeError(f"the model failed to load ({self.load_error}); fix it and restart", "unavailable")
        if not self.ready:
            return ServeError(
                "the model is still loading and warming up; retry when GET /ready answers 200",
                "unavailable",
                {"Retry-After": "1"},
            )
        return None

    def require_model(self) -> tuple[BertOnnx, Scheduler]:
        """The model and scheduler, or raise the 503 that says why not."""
        problem = self.unavailable()
        if problem is not None:
            raise problem
        if self.model is None or self.scheduler is None:  # ready implies both; kept for the type checker
            raise ServeError("the model is not loaded; retry when GET /ready answers 200", "unavailable")
        return self.model, self.scheduler
