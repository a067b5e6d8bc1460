"""The load generator: its own process, sending the workload to the server over loopback, and nothing else.

``python -m benchmarks.serve.loadgen SPEC.json OUT.json``. Two modes:

- **closed loop**: ``concurrency`` workers, each sending its next request as soon as its previous one is
  answered (Triton's perf_analyzer's concurrency mode); latency counts from the send.
- **open loop**: requests sent at fixed times whatever is outstanding (k6's ``constant-arrival-rate``, which
  TEI load-tests with), from one or more streams with their own rate, start and duration (mixed traffic and a
  probe at once). Latency counts from the *scheduled* time, so a slow send or a full connection pool cannot
  hide queueing (coordinated omission); a request that would pass ``max_in_flight`` is not sent and is counted
  as skipped.

Every loop is bounded in count and time and stops by itself: a closed loop sends at most ``count`` requests
and none after ``max_seconds``; an open loop sends what its schedule holds; each request has a client
timeout. Only loopback URLs are accepted.

Why not an existing load tool: locust runs users in a closed loop (its ``constant_throughput`` paces a user,
but a user blocked on a slow answer sends nothing, so it cannot hold a fixed arrival rate past saturation, the
point of the overload test), and wrk sends one fixed request in a closed loop. What is ours here is only the
schedule (a sorted list of send times) and the records; HTTP is aiohttp's (or httpx's, to compare their CPU
cost). The generator reports its own CPU time (user + system) so its share of the 2 cores is known.

Output: one record per request ``[stream, index, scheduled, sent, done, status, bytes, error]``
(``time.monotonic()`` seconds, the same clock as the orchestrator's samples; status 0 = no HTTP answer,
-1 = skipped), the CPU seconds of the load phase and of checking, and the parsed answers of the requests
named in ``check`` (for the orchestrator to compare with offline ``BertOnnx``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..report import write_atomic

CLIENTS = ("aiohttp", "httpx")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
NO_ANSWER = 0
SKIPPED = -1
#: A closed-loop worker stops taking new requests this long after the loop started, at most.
DEFAULT_MAX_SECONDS = 600.0


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def check_loopback(url: str) -> None:
    """Refuse any URL that is not on this machine's loopback (the benchmark only ever targets its own server)."""
    host = urlsplit(url).hostname
    if host not in LOOPBACK_HOSTS and not (host or "").startswith("127."):
        raise ValueError(f"the load generator only targets loopback addresses, got {url!r}")


class Client:
    """One HTTP client (aiohttp or httpx) with a connection pool of ``connections``."""

    def __init__(self, kind: str, base_url: str, connections: int, timeout: float) -> None:
        if kind not in CLIENTS:
            raise ValueError(f"client must be one of {', '.join(CLIENTS)}, got {kind!r}")
        self.kind, self.base_url, self.connections, self.timeout = kind, base_url, connections, timeout
        self._session: Any = None

    async def __aenter__(self) -> Client:
        if self.kind == "aiohttp":
            import aiohttp

            connector = aiohttp.TCPConnector(limit=self.connections, limit_per_host=self.connections)
            timeout = aiohttp.ClientTimeout(total=self.timeout)
            self._session = aiohttp.ClientSession(self.base_url, connector=connector, timeout=timeout)
        else:
            import httpx

            limits = httpx.Limits(max_connections=self.connections, max_keepalive_connections=self.connections)
            self._session = httpx.AsyncClient(base_url=self.base_url, limits=limits, timeout=self.timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.kind == "aiohttp":
            await self._session.close()
        else:
            await self._session.aclose()

    async def post(self, route: str, body: bytes) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"}
        if self.kind == "aiohttp":
            async with self._session.post(route, data=body, headers=headers) as response:
                return response.status, await response.read()
        response = await self._session.post(route, content=body, headers=headers)
        return response.status_code, response.content


class Run:
    """The state of one generator run: requests, records, answers kept for checking."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.files: dict[str, list[tuple[str, bytes]]] = {}
        for name, path in spec["files"].items():
            rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line]
            self.files[name] = [(row["route"], json.dumps(row["body"]).encode()) for row in rows]
        self.check = {name: set(indices) for name, indices in spec.get("check", {}).items()}
        self.records: list[list[Any]] = []
        self.answers: dict[str, dict[str, Any]] = {name: {} for name in self.files}
        self.check_cpu = 0.0
        self.in_flight = 0

    async def send(self, client: Client, stream: str, file: str, index: int, scheduled: float) -> None:
        route, body = self.files[file][index]
        self.in_flight += 1
        sent = time.monotonic()
        error = ""
        try:
            status, content = await client.post(route, body)
        except Exception as exc:  # noqa: BLE001 - any failure to get an answer is a record, not a crash
            status, content, error = NO_ANSWER, b"", f"{type(exc).__name__}: {exc}"[:200]
        done = time.monotonic()
        self.in_flight -= 1
        if status == 200 and index in self.check.get(file, ()) and str(index) not in self.answers[file]:
            started = time.process_time()
            self.answers[file][str(index)] = json.loads(content)
            self.check_cpu += time.process_time() - started
        self.records.append([stream, index, scheduled, sent, done, status, len(content), error])


async def closed_loop(run: Run, client: Client, phase: dict[str, Any]) -> None:
    file, start, count = phase["file"], int(phase.get("start", 0)), int(phase["count"])
    size = len(run.files[file])
    deadline = time.monotonic() + float(phase.get("max_seconds", DEFAULT_MAX_SECONDS))
    taken = 0

    async def worker() -> None:
        nonlocal taken
        while taken < count and time.monotonic() < deadline:
            index = (start + taken) % size
            taken += 1
            await run.send(client, phase.get("name", "closed"), file, index, time.monotonic())

    await asyncio.gather(*(worker() for _ in range(int(phase["concurrency"]))))


def open_schedule(
    streams: list[dict[str, Any]], sizes: dict[str, int], origin: float
) -> list[tuple[float, str, str, int]]:
    """Send times of every stream, merged and sorted: ``(time, stream, file, index)``.

    A stream sends ``rate`` requests a second, evenly spaced, from ``start_s`` for ``seconds``, taking its file's
    requests in order from ``first`` (wrapping around).
    """
    schedule = []
    for stream in streams:
        rate, seconds = float(stream["rate"]), float(stream["seconds"])
        first, file = int(stream.get("first", 0)), stream["file"]
        for k in range(int(rate * seconds)):
            when = origin + float(stream.get("start_s", 0.0)) + k / rate
            schedule.append((when, stream["name"], file, (first + k) % sizes[file]))
    schedule.sort(key=lambda item: item[0])
    return schedule


async def open_loop(run: Run, client: Client, phase: dict[str, Any]) -> None:
    origin = time.monotonic() + 0.2
    sizes = {name: len(rows) for name, rows in run.files.items()}
    max_in_flight = int(phase["max_in_flight"])
    tasks = []
    for when, stream, file, index in open_schedule(phase["streams"], sizes, origin):
        delay = when - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if run.in_flight >= max_in_flight:
            run.records.append([stream, index, when, None, None, SKIPPED, 0, "max_in_flight"])
            continue
        tasks.append(asyncio.ensure_future(run.send(client, stream, file, index, when)))
    await asyncio.gather(*tasks)


async def generate(spec: dict[str, Any]) -> dict[str, Any]:
    check_loopback(spec["url"])
    run = Run(spec)
    phase = spec["phase"]
    connections = int(phase["concurrency"]) if phase["mode"] == "closed" else int(phase["max_in_flight"])
    async with Client(spec.get("client", "aiohttp"), spec["url"], connections, float(spec["timeout"])) as client:
        wall, cpu = time.monotonic(), cpu_seconds()
        if phase["mode"] == "closed":
            await closed_loop(run, client, phase)
        else:
            await open_loop(run, client, phase)
        wall, cpu = time.monotonic() - wall, cpu_seconds() - cpu
    return {
        "client": spec.get("client", "aiohttp"),
        "records": run.records,
        "wall_s": wall,
        "cpu_s": cpu,
        "check_cpu_s": run.check_cpu,
        "answers": run.answers,
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m benchmarks.serve.loadgen SPEC.json OUT.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    result = asyncio.run(generate(spec))
    write_atomic(Path(args[1]), json.dumps(result).encode("utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
