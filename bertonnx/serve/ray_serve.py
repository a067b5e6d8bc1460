"""``bertonnx serve --ray``: the same ASGI app as ``bertonnx serve``, as replicas of a Ray Serve deployment.

Each replica builds :func:`bertonnx.serve.create_app` around its own :class:`~bertonnx.BertOnnx` (an
onnxruntime session cannot be pickled, so it is loaded in the replica), with ``threads`` onnxruntime threads
and ``num_cpus = threads`` reserved from Ray, so replicas never oversubscribe a node. Routes, errors and
answers are the app's own; Ray Serve only routes requests to replicas.

Batching across requests happens inside a replica, in the app's scheduler. Ray Serve caps the requests in
flight at a replica with ``max_ongoing_requests`` (5 by default, which would cap every batch at 5
requests); the deployment sets it to the app's ``max_queue`` so the app's own scheduler decides the batches
and answers 429 when full. Each replica keeps its own ``/metrics``; a scrape through the proxy reads one
replica.

Needs the ``ray`` extra (Ray Serve) and the ``serve`` extra (the app).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import RandomWeightsWarning
from ..exit_codes import EXIT_OK
from ..extras import require_extra
from ..manifest import read_manifest
from ..model import DEFAULT_VARIANT, BertOnnx
from ..options import RuntimeOptions

if TYPE_CHECKING:
    from . import ServeOptions

__all__ = ["APP_NAME", "deployment", "serve_on_ray", "wait_ready"]

APP_NAME = "bertonnx"
#: Seconds ``bertonnx serve --ray`` waits for ``/ready`` after the replicas started.
READY_TIMEOUT_S = 120.0


def deployment(
    model_dir: str | Path,
    options: ServeOptions | None = None,
    *,
    variant: str = DEFAULT_VARIANT,
    replicas: int = 1,
    threads: int = 1,
    spinning: bool = False,
    max_ongoing_requests: int | None = None,
    name: str = APP_NAME,
) -> Any:
    """A Ray Serve application running ``bertonnx serve``'s app on ``replicas`` replicas.

    Deploy it with ``serve.run(deployment(...), route_prefix="/")`` after ``serve.start(http_options=...)``.

    Args:
        model_dir: directory written by ``bertonnx export``, readable at the same path on every node.
        options: the app's limits and defaults (``bertonnx.serve.ServeOptions``).
        variant: model variant.
        replicas: replicas (each a Ray actor with its own model).
        threads: onnxruntime threads per replica, and the CPUs Ray reserves for each.
        spinning: let idle onnxruntime threads spin (off, as in ``bertonnx serve``).
        max_ongoing_requests: requests in flight per replica (default: ``options.max_queue``, so batches are
            not capped by Serve).
        name: the deployment's name.

    Returns:
        A bound ``ray.serve.Application``.

    Raises:
        ImportError: Ray Serve or the server's dependencies are missing.
        ModelDirectoryError: a bad model directory; ValueError: an unknown variant or a count below 1.
    """
    require_extra("ray", "serving on Ray (`bertonnx serve --ray`)")
    from ray import serve

    from . import ServeOptions, create_app

    options = options or ServeOptions()
    manifest = read_manifest(model_dir)
    manifest.require_variant(variant)
    for label, value in (("replicas", replicas), ("threads", threads)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be an int >= 1, got {value!r}")
    directory = str(manifest.directory.absolute())
    model_name = options.model_name or manifest.directory.name

    def build_app() -> Any:  # runs in each replica: load there, then the server's own app around it
        with warnings.catch_warnings():  # `bertonnx serve` showed the banner once; not once per replica
            warnings.simplefilter("ignore", RandomWeightsWarning)
            model = BertOnnx(directory, variant, options=RuntimeOptions(threads=threads, allow_spinning=spinning))
        return create_app(model, dataclasses.replace(options, model_name=model_name))

    @serve.deployment(
        name=name,
        num_replicas=replicas,
        max_ongoing_requests=max_ongoing_requests or options.max_queue,
        ray_actor_options={"num_cpus": threads},
    )
    @serve.ingress(build_app)
    class BertOnnxServer:
        def check_health(self) -> None:
            """Ray Serve restarts a replica whose model failed to load or warm up."""
            error = self.app.state.bertonnx.load_error  # type: ignore[attr-defined]  # from serve.ingress
            if error:
                raise RuntimeError(f"bertonnx replica is unhealthy: {error}")

    return BertOnnxServer.bind()  # type: ignore[attr-defined]  # from serve.deployment


def wait_ready(url: str, replicas: int, timeout: float = READY_TIMEOUT_S) -> None:
    """Poll ``url/ready`` until it answers 200 ``2 x replicas`` times in a row (requests spread over replicas).

    Raises:
        TimeoutError: not ready within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    streak = 0
    while streak < 2 * replicas:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url}/ready did not answer 200 within {timeout:g} s; see the Ray Serve logs")
        try:
            with urllib.request.urlopen(f"{url}/ready", timeout=5) as response:
                streak = streak + 1 if response.status == 200 else 0
        except (urllib.error.URLError, OSError):
            streak = 0
            time.sleep(0.2)


#: Addresses every node has, so that the proxy Ray Serve runs on each node can bind them.
EVERY_NODE_HOSTS = ("0.0.0.0", "::", "127.0.0.1", "::1", "localhost")


def _check_host(host: str) -> None:
    """Refuse an address of one node on a cluster of several: Serve runs a proxy on every node with a
    replica, each binding ``--host``, and the others would fail to bind and restart in a loop.

    Raises:
        ValueError: ``host`` is a specific address and the cluster has more than one node.
    """
    import ray

    nodes = len([node for node in ray.nodes() if node["Alive"]])  # type: ignore[no-untyped-call]
    if nodes > 1 and host not in EVERY_NODE_HOSTS:
        raise ValueError(
            f"--host {host} is an address of one machine, but Ray Serve runs a proxy on each node of this "
            f"{nodes}-node cluster and every proxy binds --host; use --host 0.0.0.0 (each proxy listens on its "
            "own node's addresses) or 127.0.0.1 (each on its own loopback)"
        )


def _check_proxies(host: str, port: int) -> None:
    """Refuse to wait for proxies that will not be at ``host:port``: Serve keeps the HTTP options it was
    first started with while it runs on a cluster (a later ``serve.start`` only logs a warning).

    Raises:
        ValueError: Serve already runs on the cluster with other HTTP options.
    """
    try:  # Ray Serve has no public accessor for the running HTTP options; skip the check if it moved
        from ray.serve.context import _get_global_client

        running = _get_global_client().http_config  # type: ignore[union-attr]  # raises if Serve is not running
        running_host, running_port = str(running.host), int(running.port)
    except (ImportError, AttributeError):
        return
    if (running_host, running_port) != (host, port):
        raise ValueError(
            f"Ray Serve already runs on this cluster with its proxies at {running_host}:{running_port} and keeps "
            f"them while it runs, so --host {host} --port {port} cannot apply; pass --host {running_host} --port "
            f"{running_port}, or shut Serve down first (`serve.shutdown()` in a driver connected to the cluster)"
        )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def serve_on_ray(args: argparse.Namespace, options: ServeOptions) -> int:
    """``bertonnx serve DIR --ray [ADDRESS] --replicas N``: deploy, wait until ready, serve until Ctrl-C.

    ``args`` are ``bertonnx serve``'s (:func:`bertonnx.serve.arguments.add_serve_arguments`), ``options``
    built from them by :func:`bertonnx.serve.arguments.serve_options`, as for the plain server.

    Raises:
        ValueError: ``--host`` is an address of one node of a multi-node cluster, or Serve already runs on the
            cluster with another ``--host``/``--port``.
    """
    threads = args.threads or 1
    app = deployment(
        args.model_dir,
        options,
        variant=args.variant,
        replicas=args.replicas,
        threads=threads,
        spinning=args.spinning,
        max_ongoing_requests=args.max_ongoing_requests,
    )
    import ray
    from ray import serve

    from ..ray_cluster import connect

    connect(ray, args.ray or None)
    try:
        _check_host(args.host)
        serve.start(http_options={"host": args.host, "port": args.port})
        _check_proxies(args.host, args.port)
    except ValueError:  # the command prints it in one line (exit 2)
        ray.shutdown()
        raise
    signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM stops the deployment as Ctrl-C does
    try:
        serve.run(app, name=APP_NAME, route_prefix="/")
        url = f"http://{args.host}:{args.port}"
        wait_ready(url, args.replicas)
        print(json.dumps({"url": url, "replicas": args.replicas, "threads_per_replica": threads}))
        print(f"serving {args.model_dir} at {url} on {args.replicas} Ray Serve replicas; Ctrl-C stops", file=sys.stderr)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("stopping the deployment", file=sys.stderr)
    finally:  # a joined cluster keeps its other applications; a local one goes away with us
        serve.shutdown() if not args.ray else serve.delete(APP_NAME)  # type: ignore[no-untyped-call]
        ray.shutdown()
    return EXIT_OK
