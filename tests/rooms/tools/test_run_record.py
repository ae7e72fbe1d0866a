"""A run's record ends on every path: ran, failing to keep its files, failing before it
ran, cancelled.

The end each path writes is a table over `OpenRun.end`; the paths themselves run on a real
server, engine and store. Keeping fails for real there: the blob a file's bytes would be
stored as is taken by a directory, so writing it fails inside the store as a full or broken
disk would, for that one content only.
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

from airlock.errors import RunnerFailed, StoreError
from airlock.sandbox import JobOutcome, StreamCapture
from airlock.sandbox.spec import Usage
from airlock.store import Database, RunRecord
from airlock.tools.run_record import OpenRun

pytestmark = pytest.mark.anyio

MakeServer = Callable[..., MCPServer]
KEPT = b"bytes whose blob cannot be written\n"


def block_blob(data_dir: Path, data: bytes) -> None:
    """Make storing `data` fail: a directory where its blob file would go."""
    sha = hashlib.sha256(data).hexdigest()
    (data_dir / "blobs" / sha[:2] / sha[2:] / "in-the-way").mkdir(parents=True)


RUNNING = RunRecord(
    id="run_1",
    session_id="ses_1",
    tenant="t1",
    language="python",
    status="running",
    created_at=100.0,
    timeout_s=30,
    limits={},
    code_sha256="c" * 64,
    runtime="runc",
    instance_id="i1",
)
OUTCOME = JobOutcome(
    status="oom",
    exit_code=137,
    duration_ms=1500,
    stdout=StreamCapture(data=b"out", total_bytes=3, sha256="a" * 64),
    stderr=StreamCapture(),
    usage=Usage(cpu_seconds=1.25, peak_memory_bytes=1 << 20),
)
RAN = {
    "status": "oom",
    "exit_code": 137,
    "duration_ms": 1500,
    "cpu_seconds": 1.25,
    "peak_memory_bytes": 1 << 20,
    "stdout_bytes": 3,
    "stdout_sha256": "a" * 64,
    "stderr_bytes": 0,
    "stderr_sha256": "",
    "finished_at": 200.0,
}


@pytest.mark.parametrize(
    ("outcome", "failure", "expected"),
    [
        (OUTCOME, None, RAN),
        (
            OUTCOME,
            StoreError("disk full"),
            {
                **RAN,
                "status": "error",
                "error": "the run finished, but keeping what it left failed: StoreError: disk full",
            },
        ),
        (
            None,
            "cancelled",
            {"status": "killed", "finished_at": 200.0, "error": "the call was cancelled"},
        ),
        (
            None,
            RunnerFailed("the sandbox runner failed", run_id="run_1", reported="bad\x1b[2J"),
            {
                "status": "killed",
                "finished_at": 200.0,
                "error": "RunnerFailed: the sandbox runner failed; the runner reported: bad",
            },
        ),
        (
            None,
            None,
            {"status": "killed", "finished_at": 200.0, "error": "the sandbox reported no outcome"},
        ),
    ],
    ids=["ran", "keeping-failed", "cancelled", "runner-failed", "no-outcome"],
)
async def test_a_run_ends_with_what_its_path_says(
    outcome: JobOutcome | None, failure: BaseException | str | None, expected: dict[str, object]
) -> None:
    if failure == "cancelled":  # the class exists only under a running event loop
        failure = anyio.get_cancelled_exc_class()()
    assert not isinstance(failure, str)
    run = OpenRun(RUNNING)
    if outcome is not None:
        run.ran(outcome)
    assert run.end(failure, at=200.0) == RUNNING.model_copy(update=expected)


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
    # to keep what the run wrote: tests/rooms/tools/test_workspace.py.)
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


async def test_a_run_the_fleet_ended_meanwhile_answers_so_and_keeps_nothing(
    make_server: MakeServer, data_dir: Path
) -> None:
    """Another server ends the record `killed` while the code still runs here (a fenced
    replica's run, as a peer sees it): when the code then finishes `ok`, the call says the
    fleet ended the run, the record stays `killed` and the run's file never lands."""
    code = "import time; time.sleep(8); open('out.txt', 'w').write('late')"
    async with Client(make_server(NO_POOL)) as client, anyio.create_task_group() as tg:
        answers: list[str] = []

        async def call() -> None:
            result = await client.call_tool("run_code", {"code": code, "timeout_s": 60})
            answers.append(("error: " if result.is_error else "ok: ") + text_of(result))

        tg.start_soon(call)
        db = await Database.open(data_dir / "airlock.db")
        try:

            async def running() -> list[RunRecord]:
                return [r for r in await db.list_runs() if r.status == "running"]

            with anyio.fail_after(60):
                while True:  # the record is made before the sandbox starts
                    started = await running()
                    if started:
                        break
                    await anyio.sleep(0.1)
            [run] = started
            await db.mark_unfinished_runs(
                instance_ids=[run.instance_id],
                status="killed",
                error="ended by a peer in this test",
                finished_at=300.0,
            )
        finally:
            await db.close()
        # The code goes on: it finishes `ok`, and its end and its file are refused.
    [answer] = answers
    assert answer.startswith("error: "), answer
    assert f"the fleet ended run {run.id} `killed` (ended by a peer in this test)" in answer
    assert [(r.status, r.error) for r in await the_runs(data_dir)] == [
        ("killed", "ended by a peer in this test")
    ]
    db = await Database.open(data_dir / "airlock.db")
    try:
        head = await db.workspace_head(run.session_id)
        assert (head.version, head.files) == (0, ())
        assert await db.list_artifacts(run.id) == []
    finally:
        await db.close()
