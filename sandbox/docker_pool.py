"""The other place Airlock reaches into the Docker SDK (the first: docker_attach.py): one
connection pool to the engine for every request.

With requests 2.32 and later, docker 7's adapters key their connection pools by the whole
request URL, path included, in a 25-entry LRU that closes whatever it evicts. Calls about
more than 25 containers at once (parallel runs) evict pools still in use, and a request
ending on one fails with "'NoneType' object has no attribute 'qsize'". Keyed by the
engine's address instead, every request shares one pool, as requests' own adapter would
do. That replaces the adapter's `get_connection_with_tls_context` and relies on its
`get_connection` and `pools`, hence `docker` pinned to 7.x; if they move,
`share_one_pool` raises naming this module, and tests/test_docker_pool.py fails loudly.
"""

from __future__ import annotations

from typing import Any

import docker
from docker.transport.basehttpadapter import BaseHTTPAdapter

# Connections kept open to the engine: as many as anyio runs worker threads by default, so
# engine calls made at once by parallel runs each find one.
MAX_CONNECTIONS = 40

SDK_CHANGED = (
    "the docker SDK no longer pools engine connections where Airlock expects it "
    "(sandbox/docker_pool.py); pin docker to 7.x or update the adapter"
)


def share_one_pool(client: docker.DockerClient) -> None:
    """Make every request `client` sends to a local engine (unix socket) use one pool."""
    api: Any = client.api
    adapter = api.get_adapter(api.base_url)
    if not isinstance(adapter, BaseHTTPAdapter):
        # requests' own adapter (an engine over TCP) pools by host already.
        return
    if not (callable(getattr(adapter, "get_connection", None)) and hasattr(adapter, "pools")):
        raise RuntimeError(SDK_CHANGED)
    base_url: str = api.base_url

    def one_pool(request: Any, verify: Any, proxies: Any = None, cert: Any = None) -> Any:
        return adapter.get_connection(base_url, proxies)

    adapter.get_connection_with_tls_context = one_pool  # type: ignore[method-assign]
