"""A two-node Ray cluster on one machine, each node in its own Linux network namespace, as on two machines.

``ray.cluster_utils.Cluster`` (Ray's own multi-node tests) starts every node on one address, so nothing
crosses a network. Here each node has its own network stack: two namespaces joined by a veth pair with a
private address at each end, the head started with ``ray start --head`` in one and the worker with
``ray start --address HEAD:6379`` in the other, both with token authentication (``RAY_AUTH_MODE=token``
and the cluster's token, as on real machines; see the README's multi-machine set-up). Drivers (``bertonnx
batch --ray``, ``bertonnx serve --ray``) run in the head's namespace, as they would on the head machine. The
namespaces share the filesystem, which stands in for the shared filesystem real machines need.

Traffic stays inside: the namespaces see only their loopback and the veth pair, whose two ends are both in
namespaces made here; the root namespace has no route to them. Every process of a node runs in its
namespace, so ``ip netns pids NAME`` lists exactly the processes this cluster started: a node is killed by
those PIDs, never with ``ray stop`` (which ends every Ray process on the machine, other users' included),
and teardown kills them, deletes the namespaces (and so the veth pair) and removes the temp directory.

Needs Linux, root and iproute2's ``ip``; :func:`why_unavailable` says what is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: Private addresses of the veth pair's two ends, one per namespace; no other interface carries them.
HEAD_IP = "10.213.0.1"
WORKER_IP = "10.213.0.2"
PREFIX_LEN = 24
GCS_PORT = 6379
#: The ports `ray start` would otherwise pick at random, pinned as the README's multi-machine set-up pins
#: them, so that its list of ports to open between machines is the one these nodes use.
NODE_PORTS = {
    "--node-manager-port": 6380,
    "--object-manager-port": 6381,
    "--runtime-env-agent-port": 6382,
    "--dashboard-agent-grpc-port": 6383,
    "--dashboard-agent-listen-port": 6384,
    "--metrics-export-port": 6385,
}
#: Where Ray's worker processes (and drivers) listen: `ray start`'s default --min/--max-worker-port.
WORKER_PORTS = range(10002, 20000)
#: Every port one node may connect to on another: the README's list.
OPEN_PORTS = frozenset({GCS_PORT, *NODE_PORTS.values(), *WORKER_PORTS})
#: Each node's share of the machine: one CPU each (two nodes = the 2 CPUs of the CI machine), a small object store.
NODE_CPUS = 1
OBJECT_STORE_BYTES = 200 * 1024 * 1024
START_TIMEOUT_S = 120.0
KILL_TIMEOUT_S = 30.0
RAY_CLI = [sys.executable, "-m", "ray.scripts.scripts"]
#: Runs ``CODE`` in a driver connected to the cluster and prints its JSON result; see :meth:`NetnsCluster.query`.
QUERY_DRIVER = """
import contextlib, json, logging, sys, ray
with contextlib.redirect_stdout(sys.stderr):  # Ray prints its notices (a node marked dead) on stdout
    ray.init(address=sys.argv[1], log_to_driver=False, logging_level=logging.ERROR)
    namespace = {"ray": ray, "address": sys.argv[1]}
    exec(sys.argv[2], namespace)
    result = json.dumps(namespace["result"])
    ray.shutdown()
print(result)
"""


def why_unavailable() -> str | None:
    """Why network namespaces cannot be made here (a skip reason), or ``None`` when they can.

    Tries: creates and deletes a namespace of its own (a container without CAP_SYS_ADMIN refuses).
    """
    if not sys.platform.startswith("linux"):
        return "a two-node cluster on one machine needs Linux network namespaces"
    if os.geteuid() != 0:
        return "creating network namespaces needs root (CI runs as root)"
    if shutil.which("ip") is None or shutil.which("ss") is None:
        return "iproute2's `ip` and `ss` commands are missing (apt-get install iproute2)"
    probe = f"bertonnx-probe-{os.getpid()}-{secrets.token_hex(2)}"
    try:
        _ip("netns", "add", probe)
    except OSError as exc:
        return f"cannot create a network namespace here: {exc}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return None


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise OSError(f"`ip {' '.join(args)}` failed: {result.stderr.strip()}")


class NetnsCluster:
    """A Ray head in one network namespace and a worker node in another (see the module docstring).

    Use as a context manager: entering creates the namespaces and starts both nodes; leaving kills every
    process in the namespaces and deletes them, even after a failure.

    Attributes:
        head_ns, worker_ns: the namespaces' names (unique per process).
        address: the head's GCS address, ``HEAD_IP:6379``.
        env: the environment for every Ray process and driver (token authentication on).
        root: the temp directory holding the token and the nodes' Ray temp directories.
    """

    def __init__(self, nodes: int = 2, cpus: int = NODE_CPUS, env: Mapping[str, str] = {}) -> None:
        if nodes not in (1, 2):
            raise ValueError(f"nodes must be 1 or 2, got {nodes!r}")
        self.nodes, self.cpus = nodes, cpus
        tag = f"{os.getpid()}-{secrets.token_hex(2)}"
        self.head_ns = f"bertonnx-head-{tag}"
        self.worker_ns = f"bertonnx-worker-{tag}"
        short = secrets.token_hex(3)  # interface names: at most 15 characters
        self._veth = (f"bxh{short}", f"bxw{short}")
        self.address = f"{HEAD_IP}:{GCS_PORT}"
        # Short: Ray's Unix sockets live under the temp dir, and a socket path is limited to 107 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="bxray-", dir="/tmp"))
        self.token_path = self.root / "auth_token"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("RAY_")},
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(self.token_path),  # the cluster's token; ~/.ray/auth_token by default
            "RAY_USAGE_STATS_ENABLED": "0",
            **env,
        }
        self._namespaces: list[str] = []
        self._workers_started = 0

    # -- lifecycle ---------------------------------------------------------------------------------------

    def __enter__(self) -> NetnsCluster:
        try:
            self._make_network()
            fd = os.open(self.token_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            os.write(fd, secrets.token_hex(32).encode())  # what `ray get-auth-token --generate` writes
            os.close(fd)
            self._ray_start(
                self.head_ns, "head", "--head", "--port", str(GCS_PORT), "--node-ip-address", HEAD_IP,
                "--include-dashboard", "true", "--dashboard-host", "127.0.0.1",  # the state API's server
            )  # fmt: skip
            if self.nodes == 2:
                self.start_worker()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _make_network(self) -> None:
        head_end, worker_end = self._veth
        for ns in (self.head_ns, self.worker_ns):  # with one node, the worker's namespace stays empty
            _ip("netns", "add", ns)
            self._namespaces.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("link", "add", head_end, "netns", self.head_ns, "type", "veth", "peer", "name", worker_end,
            "netns", self.worker_ns)  # fmt: skip
        for ns, end, address in ((self.head_ns, head_end, HEAD_IP), (self.worker_ns, worker_end, WORKER_IP)):
            _ip("-n", ns, "addr", "add", f"{address}/{PREFIX_LEN}", "dev", end)
            _ip("-n", ns, "link", "set", end, "up")

    def _ray_start(self, ns: str, label: str, *args: str) -> None:
        log = self.root / f"{label}.log"
        command = [
            *RAY_CLI, "start", *args, "--num-cpus", str(self.cpus), "--object-store-memory",
            str(OBJECT_STORE_BYTES), "--temp-dir", str(self.root / label), "--disable-usage-stats",
            *(str(word) for flag in NODE_PORTS.items() for word in flag),
        ]  # fmt: skip
        with open(log, "w", encoding="utf-8") as out:
            code = subprocess.run(
                self.command(ns, command), stdout=out, stderr=subprocess.STDOUT, env=self.env, timeout=START_TIMEOUT_S
            ).returncode
        if code != 0:
            raise RuntimeError(f"`ray start` for the {label} node exited {code}:\n{log.read_text()[-3000:]}")

    def start_worker(self) -> None:
        """Start a (new) worker node in the worker namespace and wait until the cluster counts it."""
        self._workers_started += 1
        label = f"worker{self._workers_started}"
        self._ray_start(self.worker_ns, label, "--address", self.address, "--node-ip-address", WORKER_IP)
        deadline = time.monotonic() + START_TIMEOUT_S
        while WORKER_IP not in self.alive_node_ips():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the worker node did not join within {START_TIMEOUT_S:g} s")
            time.sleep(0.5)

    def pids(self, ns: str) -> list[int]:
        """The processes in namespace ``ns``: every process this cluster started there."""
        result = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30)
        return [int(word) for word in result.stdout.split()]

    def kill_namespace(self, ns: str) -> None:
        """SIGKILL every process in ``ns`` (a machine losing power) and wait until they are gone."""
        deadline = time.monotonic() + KILL_TIMEOUT_S
        while pids := self.pids(ns):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise TimeoutError(f"processes {pids} in {ns} survived SIGKILL for {KILL_TIMEOUT_S:g} s")
            time.sleep(0.1)

    def ensure_worker(self) -> None:
        """Start a worker node unless one runs (after :meth:`kill_worker`, once the head has marked it dead)."""
        if not self.pids(self.worker_ns):
            self.wait_worker_dead()
            self.start_worker()

    def kill_worker(self) -> None:
        """The worker node goes away: all its processes killed at once, without telling the head."""
        self.kill_namespace(self.worker_ns)

    def wait_worker_dead(self, timeout: float = 60.0) -> float:
        """Wait until the head has marked the worker node dead; return the seconds waited."""
        start = time.monotonic()
        while WORKER_IP in self.alive_node_ips():
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"the head still counts the worker node alive after {timeout:g} s")
            time.sleep(0.5)
        return time.monotonic() - start

    def close(self) -> None:
        """Kill every process in the namespaces, delete them (and the veth pair), remove the temp directory."""
        for ns in reversed(self._namespaces):
            try:
                self.kill_namespace(ns)
            finally:
                subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        self._namespaces.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- running things on the cluster ---------------------------------------------------------------------

    def command(self, ns: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run in namespace ``ns`` (``ip netns exec`` execs it: the process keeps the PID)."""
        return ["ip", "netns", "exec", ns, *argv]

    def run(
        self, ns: str, argv: Sequence[str], *, timeout: float, input: str | None = None, env: Mapping[str, str] = {}
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in ``ns`` with the cluster's environment; capture its output."""
        return subprocess.run(
            self.command(ns, argv), capture_output=True, text=True, input=input, timeout=timeout,
            env={**self.env, **env},
        )  # fmt: skip

    def popen(self, ns: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[str]:
        """Start ``argv`` in ``ns`` with the cluster's environment."""
        return subprocess.Popen(self.command(ns, argv), env=self.env, text=True, **kwargs)

    def query(self, code: str, timeout: float = 60.0) -> Any:
        """Run ``code`` in a driver on the head node; it sets ``result`` (JSON-able), which is returned.

        ``code`` sees ``ray`` and ``address`` (the head's); pass ``address=address`` to the state API, which
        would otherwise look for clusters among the machine's processes and find other users' too.
        """
        result = self.run(self.head_ns, [sys.executable, "-c", QUERY_DRIVER, self.address, code], timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"the query driver failed:\n{result.stderr[-3000:]}")
        return json.loads(result.stdout.splitlines()[-1])

    def node_connections(self) -> list[tuple[int, int]]:
        """TCP connections between the two nodes seen from the worker's side, open or closed in the last
        minute (``TIME-WAIT``), as (worker port, head port)."""
        result = subprocess.run(
            self.command(self.worker_ns, ["ss", "-Htan"]), capture_output=True, text=True, timeout=30, check=True
        )
        pairs = []
        for line in result.stdout.splitlines():
            local, peer = line.split()[3:5]
            (local_ip, local_port), (peer_ip, peer_port) = (end.rsplit(":", 1) for end in (local, peer))
            if local_ip.strip("[]").endswith(WORKER_IP) and peer_ip.strip("[]").endswith(HEAD_IP):
                pairs.append((int(local_port), int(peer_port)))
        return pairs

    def alive_node_ips(self) -> list[str]:
        """The addresses of the nodes the head counts alive (from the GCS)."""
        ips: list[str] = self.query("result = sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive'])")
        return ips

    def actors(self) -> list[dict[str, str]]:
        """Every actor the cluster has had (Ray's state API): class name, state and node address."""
        code = (
            "from ray.util.state import list_actors, list_nodes\n"
            "ips = {n.node_id: n.node_ip for n in list_nodes(address=address, limit=100)}\n"
            "result = [{'actor_id': a.actor_id, 'class_name': a.class_name, 'state': a.state,\n"
            "           'node_ip': ips.get(a.node_id, '')}\n"
            "          for a in list_actors(address=address, limit=10000, detail=True)]"
        )
        actors: list[dict[str, str]] = self.query(code)
        return actors

    def tasks(self, name: str, state: str, *, wait_on: str | None = None, timeout: float = 120.0) -> dict[str, int]:
        """Tasks called ``name`` in ``state`` (e.g. ``RUNNING``, ``FINISHED``; Ray's state API), by node address.

        With ``wait_on`` (a node address), first polls until that node has more such tasks than when called;
        raises ``TimeoutError`` after ``timeout`` seconds. Ray reports task events about once a second.
        """
        code = f"""
import collections, time
from ray.util.state import list_nodes, list_tasks
ips = {{n.node_id: n.node_ip for n in list_nodes(address=address, limit=100)}}
def count():
    tasks = list_tasks(address=address, filters=[("name", "=", {name!r}), ("state", "=", {state!r})], limit=10000)
    return collections.Counter(ips.get(t.node_id, "") for t in tasks)
result, wait_on = count(), {wait_on!r}
if wait_on is not None:
    before, deadline = result[wait_on], time.monotonic() + {timeout!r}
    while result[wait_on] == before:
        if time.monotonic() > deadline:
            raise TimeoutError("no new {state} {name} task on {wait_on} within {timeout:g} s")
        time.sleep(0.1)
        result = count()
"""
        counts: dict[str, int] = self.query(code, timeout=timeout + 60)
        return counts


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.netns_cluster [--nodes 2] [--cpus 1] [-- COMMAND ...]`` (as root): the same cluster by hand.

    Runs COMMAND in the head's namespace with the cluster's environment (``{address}`` in it becomes the
    head's address), then tears the cluster down; without COMMAND, prints how to reach the cluster and
    waits for Ctrl-C. Used for ``benchmarks/SCALING.md``'s one-node against two-node runs.
    """
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.netns_cluster", description=main.__doc__)
    parser.add_argument("--nodes", type=int, choices=(1, 2), default=2)
    parser.add_argument("--cpus", type=int, default=NODE_CPUS, help="CPUs of each node (Ray's --num-cpus)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="run in the head's namespace, then tear down")
    args = parser.parse_args(argv)
    reason = why_unavailable()
    if reason is not None:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    command = [word.replace("{address}", f"{HEAD_IP}:{GCS_PORT}") for word in args.command if word != "--"]
    with NetnsCluster(args.nodes, args.cpus, env={"RAY_worker_niceness": "0"}) as cluster:
        if command:
            return subprocess.run(cluster.command(cluster.head_ns, command), env=cluster.env).returncode
        print(f"cluster up: head {cluster.address} in namespace {cluster.head_ns}; run drivers with", file=sys.stderr)
        print(f"  RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH={cluster.token_path} ip netns exec {cluster.head_ns} ...")
        print("Ctrl-C tears it down", file=sys.stderr)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    raise SystemExit(main())
