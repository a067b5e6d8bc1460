"""The processes of one benchmark run: ``bertonnx serve`` on a free loopback port, its CPU and RSS sampled with
psutil, its ``/metrics`` read between points, and the load generator and offline runner as subprocesses.

Every wait is bounded; the server binds 127.0.0.1 and is stopped with SIGTERM (its drain) when a section ends.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
READY_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 60.0
IDLE_TIMEOUT_S = 120.0
#: Seconds between psutil samples of the server's RSS and CPU time.
SAMPLE_INTERVAL_S = 0.5


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text as ``{"name{label=value,...}": value}`` (labels sorted; ``name`` alone without labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}" if labels else sample.name] = float(sample.value)
    return values


class Sampler(threading.Thread):
    """Samples a process's RSS and CPU time every ``interval`` seconds until stopped: ``(t, rss_bytes, cpu_s)``."""

    def __init__(self, pid: int, interval: float = SAMPLE_INTERVAL_S) -> None:
        import psutil

        super().__init__(name="bertonnx-bench-sampler", daemon=True)
        self.process = psutil.Process(pid)
        self.interval = interval
        self.samples: list[tuple[float, int, float]] = []
        self._stop_event = threading.Event()

    def read(self) -> tuple[float, int, float]:
        with self.process.oneshot():
            cpu = self.process.cpu_times()
            return time.monotonic(), self.process.memory_info().rss, cpu.user + cpu.system

    def main_thread_cpu(self) -> float:
        """CPU seconds of the process's main thread: the server's event loop (HTTP, JSON, admission, the
        scheduler's cuts; tokenization runs in worker threads, inference on the engine and onnxruntime's
        threads)."""
        pid = self.process.pid
        for thread in self.process.threads():
            if thread.id == pid:
                return float(thread.user_time + thread.system_time)
        return 0.0

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                self.samples.append(self.read())
            except Exception:  # noqa: BLE001 - the process ended: stop sampling
                return
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)


class ServerProcess:
    """``bertonnx serve DIR`` in its own process on a free loopback port, ready when constructed."""

    def __init__(self, model_dir: Path, variant: str, threads: int, args: Sequence[str], log: Path) -> None:
        import httpx

        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.log = log
        self.command = [
            sys.executable,
            "-m",
            "bertonnx.cli",
            "serve",
            str(model_dir),
            "--variant",
            variant,
            "--host",
            HOST,
            "--port",
            str(self.port),
            "--threads",
            str(threads),
            "--log-level",
            "warning",
            *args,
        ]
        with open(log, "wb") as out:
            self.process = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT)
        self.http = httpx.Client(base_url=self.url, timeout=30)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if self.http.get("/ready").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        else:
            self.stop()
            raise RuntimeError(f"the server was not ready within {READY_TIMEOUT_S:g} s:\n{self.log_tail()}")
        self.sampler = Sampler(self.process.pid)
        self.sampler.start()

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-chars:]

    def metrics(self) -> dict[str, float]:
        return parse_metrics(self.http.get("/metrics").text)

    def info(self) -> dict[str, Any]:
        info: dict[str, Any] = self.http.get("/info").json()
        return info

    def wait_idle(self, timeout: float = IDLE_TIMEOUT_S) -> float:
        """Wait until nothing is queued and no request but this one is in flight; returns the seconds waited."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            values = self.metrics()
            if values.get("bertonnx_queue_depth", 0) == 0 and values.get("bertonnx_requests_in_flight", 0) <= 1:
                return time.monotonic() - started
            time.sleep(0.1)
        raise RuntimeError(f"the server did not go idle within {timeout:g} s:\n{self.log_tail()}")

    def stop(self) -> int:
        """SIGTERM (the server drains), bounded; the exit code (``-9`` if it had to be killed)."""
        if getattr(self, "sampler", None) is not None:
            self.sampler.stop()
        self.http.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return int(self.process.returncode)


def run_module(module: str, spec: dict[str, Any], work: Path, name: str, timeout: float) -> dict[str, Any]:
    """Run ``python -m MODULE SPEC OUT`` (a generator or the offline runner) and return OUT's JSON.

    Raises:
        RuntimeError: the process failed or took longer than ``timeout`` seconds.
    """
    spec_path, out_path = work / f"{name}.spec.json", work / f"{name}.out.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    try:
        result = subprocess.run(
            [sys.executable, "-m", module, str(spec_path), str(out_path)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{module} ({name}) took more than {timeout:g} s") from None
    if result.returncode != 0:
        raise RuntimeError(f"{module} ({name}) exited with {result.returncode}:\n{result.stderr[-3000:]}")
    data: dict[str, Any] = json.loads(out_path.read_text(encoding="utf-8"))
    return data
