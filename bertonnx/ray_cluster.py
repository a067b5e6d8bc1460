"""Joining a Ray cluster for the corpus job (``bertonnx batch --ray``) and the server (``bertonnx serve --ray``):
which address, where it came from, and one message when it cannot be joined. Imports no Ray itself (the
caller passes the ``ray`` module), so it loads without the ``ray`` extra."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["LOCAL_CLUSTER", "connect", "ray_address"]

#: ``ray.init``'s address that starts a new local cluster (never joining one a stale file names).
LOCAL_CLUSTER = "local"


def ray_address(address: str | None) -> tuple[str, str]:
    """The address ``ray.init`` is given and where it came from: ``address`` (``--ray ADDRESS``), else the
    ``RAY_ADDRESS`` environment variable, else a new local cluster (``local``), as ``--ray``'s help says: a
    cluster named only by Ray's ``ray_current_cluster`` file (often a dead one left on the machine) is never
    joined by accident."""
    if address:
        return address, "--ray"
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"], "the RAY_ADDRESS environment variable"
    return LOCAL_CLUSTER, "a new local cluster"


def connect(ray: Any, address: str | None, show: bool = False) -> None:
    """``ray.init`` at :func:`ray_address`; a refused connection names the address, where it came from, the
    usual causes (token authentication first) and how to start a local cluster instead.

    Raises:
        ConnectionError: the cluster at the address cannot be joined.
    """
    target, origin = ray_address(address)
    try:
        ray.init(address=target, include_dashboard=False, log_to_driver=show, configure_logging=show)
    except ConnectionError as exc:
        if target == LOCAL_CLUSTER:
            raise
        token = os.environ.get("RAY_AUTH_MODE", "").lower() == "token"
        causes = "the head is not running there or its port is closed" + (
            ""
            if token
            else ", or the cluster uses token authentication (Ray 2.60 turns it on where a token exists): then set "
            "RAY_AUTH_MODE=token here and give this machine the cluster's token (the head's ~/.ray/auth_token, or "
            "RAY_AUTH_TOKEN_PATH=FILE)"
        )
        raise ConnectionError(
            f"cannot join the Ray cluster at {target} (from {origin}): {causes}. To run on a new local cluster "
            "instead, give --ray without an address and unset RAY_ADDRESS"
        ) from exc
