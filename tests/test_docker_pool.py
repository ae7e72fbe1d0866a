"""The adapter over the Docker SDK's connection pools (sandbox/docker_pool.py), on the real
engine: requests about many containers at once, as parallel runs make them, share one pool.

Without it the SDK keeps a pool per request URL in a 25-entry LRU and closes pools still in
use ("'NoneType' object has no attribute 'qsize'", seen in 1 of 4 runs of sixteen parallel
calls). If a docker SDK upgrade moves what the adapter replaces, this fails naming it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import docker.errors
import pytest

from airlock.sandbox.docker import connect
from airlock.sandbox.docker_pool import MAX_CONNECTIONS

pytestmark = pytest.mark.docker


def test_requests_about_many_containers_at_once_share_one_pool() -> None:
    client = connect()
    adapter = client.api.get_adapter(client.api.base_url)
    # The SDK asked for the engine's version before the client could be adapted.
    pools = len(adapter.pools)
    assert pools <= 2

    def ask(i: int) -> list[str]:
        outcomes = []
        for j in range(5):
            try:
                client.api.inspect_container(f"airlock-no-such-container-{i}-{j}")
            except docker.errors.NotFound:
                outcomes.append("not found")
        return outcomes

    try:
        with ThreadPoolExecutor(MAX_CONNECTIONS) as threads:
            answers = list(threads.map(ask, range(3 * MAX_CONNECTIONS)))
        assert answers == [["not found"] * 5] * (3 * MAX_CONNECTIONS)
        assert len(adapter.pools) == pools
    finally:
        client.close()
