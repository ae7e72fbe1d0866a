"""One of the two places Airlock reaches into the Docker SDK's privates (the other:
sdk_connections.py): a container's attach connection as a bare file descriptor.

The SDK's public `attach_socket` leaves the socket shared with an HTTP response object that
closes it again (or warns) whenever that object is collected. Taking the descriptor out and
closing the response gives the stream one owner. That needs the SDK's private `_post`,
`_url` and `_raise_for_status`, and the response's `raw._fp.fp.raw._sock` (urllib3, then
http.client, then the socket), hence `docker` pinned to 7.x. If any of it moves, `attach`
raises naming this module, and tests/rooms/sandbox/test_docker_attach.py fails loudly.
"""

from __future__ import annotations

import socket
from typing import Any

import docker

SDK_CHANGED = (
    "the docker SDK no longer exposes the attach connection where Airlock expects it "
    "(sandbox/docker/sdk_attach.py); pin docker to 7.x or update the adapter"
)


def attach(client: docker.DockerClient, container_id: str) -> int:
    """The container's stdin, stdout and stderr as one connected socket's descriptor, which
    the caller owns (and closes). Nothing can be left in the response's read buffer: the
    runner (and the egress relay it may start) writes nothing before it gets its job."""
    api: Any = client.api
    try:
        post, url, raise_for_status = api._post, api._url, api._raise_for_status
    except AttributeError as exc:
        raise RuntimeError(SDK_CHANGED) from exc
    response = post(
        url("/containers/{0}/attach", container_id),
        params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1},
        stream=True,
    )
    try:
        raise_for_status(response)
        try:
            connection = response.raw._fp.fp.raw._sock
        except AttributeError as exc:
            raise RuntimeError(SDK_CHANGED) from exc
        if not isinstance(connection, socket.socket):
            raise RuntimeError(SDK_CHANGED)
        fd: int = connection.detach()
    finally:
        response.close()
    return fd
