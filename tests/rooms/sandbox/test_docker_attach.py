"""The adapter over the Docker SDK's privates (sandbox/docker/sdk_attach.py), on the real engine.

A container from the real sandbox image copies the attached stdin to its stdout: what goes
into the descriptor the adapter hands out comes back from the container. If a docker SDK
upgrade moves what the adapter reads, this fails naming the adapter.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat

import docker
import docker.errors
import pytest

from airlock.sandbox.docker.sdk_attach import attach

pytestmark = pytest.mark.docker


def unframe(data: bytes) -> list[tuple[int, bytes]]:
    """Without a TTY, the engine frames each chunk: stream (1 stdout, 2 stderr), three zero
    bytes, a 4-byte big-endian length. Consecutive chunks of one stream are joined."""
    chunks: list[tuple[int, bytes]] = []
    while data:
        stream, size = data[0], int.from_bytes(data[4:8], "big")
        payload, data = data[8 : 8 + size], data[8 + size :]
        if chunks and chunks[-1][0] == stream:
            chunks[-1] = (stream, chunks[-1][1] + payload)
        else:
            chunks.append((stream, payload))
    return chunks


def test_attach_hands_out_a_socket_the_caller_owns_that_reaches_the_container(
    docker_client: docker.DockerClient, sandbox_image: str
) -> None:
    api = docker_client.api
    sent = b"through the adapter\n"
    container = docker_client.containers.create(
        sandbox_image,
        # Copies exactly what is sent, then exits (which ends its stdout).
        entrypoint=["head", "-c", str(len(sent))],
        stdin_open=True,
        network_mode="none",
        labels={"airlock.test": "docker-attach"},
    ).id
    assert container is not None
    try:
        fd = attach(docker_client, container)
        assert stat.S_ISSOCK(os.fstat(fd).st_mode)
        with socket.socket(fileno=fd) as stream:
            stream.settimeout(60)
            api.start(container)
            stream.sendall(sent)
            received = b""
            while chunk := stream.recv(65536):
                received += chunk
        assert unframe(received) == [(1, sent)]
        assert api.wait(container, timeout=60)["StatusCode"] == 0
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            api.remove_container(container, force=True)
