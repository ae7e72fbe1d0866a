"""A container's attach connection: the only channel between the host and its runner.

Belongs here: taking the attach of a pooled container only when it is running
(`attach_if_running`), attaching to a new one before starting it, and turning the bare
descriptor into an anyio stream with one owner (`stream_of`). The descriptor itself comes
out of the SDK through `sdk_attach.py`, the one place that touches the SDK's privates for
it. What travels over the stream is `run.py`'s.
"""

from __future__ import annotations

import os
import socket

import anyio.abc
import docker
import docker.errors

from .sdk_attach import attach


def attach_if_running(client: docker.DockerClient, container_id: str) -> int | None:
    """The attach descriptor of a container that is running once attached, or None (and
    nothing left open) for one that is not, or is gone.

    Attach first, then ask: the engine ends an attach when its container exits, so one
    seen running after attaching can never leave the exchange waiting; an attach to a
    container that has already exited stays open, silent, until its next start."""
    try:
        fd = attach(client, container_id)
    except docker.errors.NotFound:
        return None
    try:
        state = client.api.inspect_container(container_id)["State"]
    except docker.errors.NotFound:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    if state.get("Running") and not state.get("Paused") and not state.get("Restarting"):
        return fd
    os.close(fd)
    return None


async def stream_of(fd: int) -> anyio.abc.SocketStream:
    """The attach descriptor as a stream, which then owns it.

    Closed through its socket object if that fails, never with os.close: the event loop
    may already have closed the socket (a cancelled wrap closes its transport), and a
    second close of the bare number would close whatever socket took that number since."""
    sock = socket.socket(fileno=fd)
    try:
        return await anyio.abc.SocketStream.from_socket(sock)
    except BaseException:
        sock.close()  # a no-op once closed
        raise
