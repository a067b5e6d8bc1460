"""Prometheus metrics of one server, on a registry of its own (never the process-global one), so two apps
in one process (tests, embedding the app elsewhere) do not share or clash.

Names (TEI's are ``te_*``; ours ``bertonnx_*``):

- ``bertonnx_requests_total{route,status}``; ``bertonnx_request_duration_seconds{route}``;
  ``bertonnx_requests_in_flight``;
- time split by stage: ``bertonnx_tokenization_duration_seconds`` (per request),
  ``bertonnx_queue_duration_seconds`` (per input, queued until its batch starts),
  ``bertonnx_inference_duration_seconds`` (per batch: padding, ``session.run``, pooling);
- batches: ``bertonnx_batch_size`` (inputs), ``bertonnx_batch_requests`` (requests with inputs in it),
  ``bertonnx_batch_padded_tokens`` (longest × inputs), ``bertonnx_batch_tokens`` (real tokens);
- ``bertonnx_queue_depth`` (inputs waiting); ``bertonnx_dropped_inputs_total{reason}`` (inputs taken off
  the queue without being computed: ``disconnected`` or ``timeout``).
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["CONTENT_TYPE", "DROP_REASONS", "ServeMetrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
#: Why queued inputs were dropped: the client closed its connection, or the request passed its deadline.
DROP_REASONS = ("disconnected", "timeout")
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
TOKEN_BUCKETS = (16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


class ServeMetrics:
    """The server's collectors on their own ``CollectorRegistry``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "bertonnx_requests", "HTTP requests answered, by route and status code", ["route", "status"], registry=r
        )
        self.request_duration = Histogram(
            "bertonnx_request_duration_seconds",
            "Seconds from request start to the end of its answer, by route",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge("bertonnx_requests_in_flight", "HTTP requests being handled", registry=r)
        self.tokenization_duration = Histogram(
            "bertonnx_tokenization_duration_seconds",
            "Seconds tokenizing one request",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_duration = Histogram(
            "bertonnx_queue_duration_seconds",
            "Seconds one input waited in the queue before its batch started",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.inference_duration = Histogram(
            "bertonnx_inference_duration_seconds",
            "Seconds of one engine run (padding, session.run, pooling)",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram("bertonnx_batch_size", "Inputs per engine run", buckets=SIZE_BUCKETS, registry=r)
        self.batch_requests = Histogram(
            "bertonnx_batch_requests", "Requests with inputs in one engine run", buckets=SIZE_BUCKETS, registry=r
        )
        self.batch_padded_tokens = Histogram(
            "bertonnx_batch_padded_tokens",
            "Padded tokens (longest input x inputs) per engine run",
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.batch_tokens = Histogram(
            "bertonnx_batch_tokens", "Real tokens (no padding) per engine run", buckets=TOKEN_BUCKETS, registry=r
        )
        self.queue_depth = Gauge("bertonnx_queue_depth", "Inputs waiting for the engine", registry=r)
        self.dropped_inputs = Counter(
            "bertonnx_dropped_inputs",
            "Queued inputs dropped without being computed, by reason (disconnected, timeout)",
            ["reason"],
            registry=r,
        )
        for reason in DROP_REASONS:
            self.dropped_inputs.labels(reason=reason)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
