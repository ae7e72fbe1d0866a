"""A run's record ends on every path: failing to keep its files, cancelled.

Real server, real engine, real store. Keeping fails for real: the blob a file's bytes would
be stored as is taken by a directory, so writing it fails inside the store as a full or
broken disk would, for that one content only.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Callable
from pathlib import Path

import anyio
import docker
import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from support import NO_POOL, text_of, wait_until

from airlock.store import Database, RunRecord

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

MakeServer = Callable[..., MCPServer]
KEPT = b"bytes whose blob cannot be written\n"


def block_blob(data_dir: Path, data: bytes) -> None:
    """Make storing `data` fail: a directory where its blob file would go."""
    sha = hashlib.sha256(data).hexdigest()
    (data_dir / "blobs" / sha[:2] / sha[2:] / "in-the-way").mkdir(parents=True)


async def the_runs(data_dir: Path) -> list[RunRecord]:
    db = await Database.open(data_dir / "airlock.db")
    try:
        return await db.list_runs()
    finally:
        await db.close()


async def test_a_run_whose_input_cannot_be_kept_ends_with_an_error_not_running(
    make_server: MakeServer, data_dir: Path
) -> None:
    # The call's own files are kept before the sandbox starts, for the audit. (A failure
    # to keep what the run wrote: tests/test_workspace.py.)
    block_blob(data_dir, KEPT)
    async with Client(make_server()) as client:
        args = {"code": "print(1)", "files": [{"path": "in.txt", "content": KEPT.decode()}]}
        result = await client.call_tool("run_code", args)
        assert result.is_error, text_of(result)
        assert "could not read or write its records" in text_of(result)
    [run] = await the_runs(data_dir)
    assert run.status == "killed"
    assert run.finished_at is not None
    assert run.error is not None and "cannot write blob" in run.error, run.error


async def test_a_cancelled_call_ends_its_run_killed(
    make_server: MakeServer, data_dir: Path, docker_client: docker.DockerClient
) -> None:
    # The server runs in this process, so its containers carry this pid (no pool: the one
    # container is the run's).
    mine = [f"airlock.pid={os.getpid()}", f"airlock.host={socket.gethostname()}"]
    async with Client(make_server(NO_POOL)) as client, anyio.create_task_group() as tg:
        tg.start_soon(client.call_tool, "run_code", {"code": "import time; time.sleep(120)"})
        await wait_until(
            lambda: docker_client.containers.list(filters={"label": mine}, ignore_removed=True)
        )
        tg.cancel_scope.cancel()
    [run] = await the_runs(data_dir)
    assert (run.status, run.error) == ("killed", "the call was cancelled")
    assert run.finished_at is not None
