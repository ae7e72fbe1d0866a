"""The adapter over the Docker SDK's connection pools (sandbox/docker/sdk_connections.py), on the
real engine: requests about many containers at once, as parallel runs make them, share one
pool.

Without it the SDK keeps a pool per request URL in a 25-entry LRU and closes pools still in
use ("'NoneType' object has no attribute 'qsize'", seen in 1 of 4 runs of sixteen parallel
calls). If a docker SDK upgrade moves what the adapter replaces, this fails naming it.
"""

from __future__ import annotations

import gc
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker.errors
import pytest
import requests
from docker.transport import UnixHTTPAdapter

from airlock.sandbox.docker import connect
from airlock.sandbox.docker.sdk_connections import MAX_CONNECTIONS, share_one_pool

pytestmark = pytest.mark.docker


def test_requests_about_many_containers_at_once_share_one_pool() -> None:
    client = connect()
    adapter = client.api.get_adapter(client.api.base_url)
    assert isinstance(adapter, UnixHTTPAdapter), adapter  # the engine's local socket
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


def test_a_request_to_an_engine_that_is_down_leaves_no_socket_open(tmp_path: Path) -> None:
    # What every call makes while the engine is stopped: the SDK's own connection left
    # its socket open (a ResourceWarning each time, an error under this suite's -W error).
    client = docker.DockerClient(base_url=f"unix://{tmp_path / 'docker.sock'}", version="1.41")
    share_one_pool(client)
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always", ResourceWarning)
            for _ in range(3):
                with pytest.raises(requests.exceptions.ConnectionError):
                    client.api.ping()
            gc.collect()
    finally:
        client.close()
    assert [str(w.message) for w in seen if w.category is ResourceWarning] == []
