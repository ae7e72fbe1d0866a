"""The other place Airlock reaches into the Docker SDK (the first: sdk_attach.py): one
pool of HTTP connections to the engine for every request (the warm pool of containers is
sandbox/pool.py).

With requests 2.32 and later, docker 7's adapters key their connection pools by the whole
request URL, path included, in a 25-entry LRU that closes whatever it evicts. Calls about
more than 25 containers at once (parallel runs) evict pools still in use, and a request
ending on one fails with "'NoneType' object has no attribute 'qsize'". Keyed by the
engine's address instead, every request shares one pool, as requests' own adapter would
do. That replaces the adapter's `get_connection_with_tls_context` and relies on its
`get_connection` and `pools`, hence `docker` pinned to 7.x; if they move,
`share_one_pool` raises naming this module, and tests/rooms/sandbox/test_docker_connections.py fails
loudly.

The pool's connections to a unix socket also close their socket when connecting fails:
the SDK's leave it open, one unclosed socket for every request made while the engine is
down (as the warm pool's watch on the engine makes them until it is back).
"""

from __future__ import annotations

import socket
from typing import Any

import docker
from docker.transport.basehttpadapter import BaseHTTPAdapter
from docker.transport.unixconn import UnixHTTPConnection, UnixHTTPConnectionPool

# Connections kept open to the engine: as many as anyio runs worker threads by default, so
# engine calls made at once by parallel runs each find one.
MAX_CONNECTIONS = 40

SDK_CHANGED = (
    "the docker SDK no longer pools engine connections where Airlock expects it "
    "(sandbox/docker/sdk_connections.py); pin docker to 7.x or update the adapter"
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
        pool = adapter.get_connection(base_url, proxies)
        if isinstance(pool, UnixHTTPConnectionPool):
            _close_failed_connections(pool)
        return pool

    adapter.get_connection_with_tls_context = one_pool  # type: ignore[method-assign]


class _UnixConnection(UnixHTTPConnection):
    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.unix_socket)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def _close_failed_connections(pool: Any) -> None:
    if getattr(pool, "_airlock_connections", False):
        return
    if not all(hasattr(pool, name) for name in ("_new_conn", "base_url", "socket_path", "timeout")):
        raise RuntimeError(SDK_CHANGED)

    def new_connection() -> _UnixConnection:
        return _UnixConnection(pool.base_url, pool.socket_path, pool.timeout)

    pool._new_conn = new_connection
    pool._airlock_connections = True
