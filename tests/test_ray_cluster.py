"""``--ray`` without an address starts a new local cluster (never the one Ray's ``ray_current_cluster`` file
names), and an address that cannot be joined is named with where it came from and the way out (issue 33)."""

from __future__ import annotations

from typing import Any

import pytest

from bertonnx.ray_cluster import LOCAL_CLUSTER, connect, ray_address

pytestmark = pytest.mark.torch_free


class FakeRay:
    """Records ``ray.init``'s address; refuses every address but ``local``."""

    def __init__(self) -> None:
        self.addresses: list[str] = []

    def init(self, address: str, **kwargs: Any) -> None:
        self.addresses.append(address)
        if address != LOCAL_CLUSTER:
            raise ConnectionError(f"Failed to connect to Ray cluster at {address}")


def test_no_address_means_a_new_local_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert ray_address(None) == (LOCAL_CLUSTER, "a new local cluster")
    ray = FakeRay()
    connect(ray, None)
    assert ray.addresses == [LOCAL_CLUSTER]


def test_an_unreachable_address_says_where_it_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    with pytest.raises(ConnectionError, match=r"at 10\.0\.0\.9:6379 \(from --ray\).*new local cluster"):
        connect(FakeRay(), "10.0.0.9:6379")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:7777")
    assert ray_address(None) == ("127.0.0.1:7777", "the RAY_ADDRESS environment variable")
    with pytest.raises(ConnectionError, match=r"127\.0\.0\.1:7777 \(from the RAY_ADDRESS environment variable\)"):
        connect(FakeRay(), None)
    assert ray_address("auto") == ("auto", "--ray")
