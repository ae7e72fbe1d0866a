"""MCP tasks outlive what they ran on: a finished task still answers after its server
restarts, and on any replica of a fleet, where any replica cancels it; a task whose server
was SIGKILLed mid-run ends `failed`, naming its run and the run's `killed` record, never
staying `working`. Every poll is a new HTTP connection: the one that asked is long gone."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import anyio
import docker
import httpx
import pytest
from support import (
    NO_POOL_TOML,
    http_server,
    none_left,
    running,
    serving_http,
    vault_key_file,
    wait_for_containers,
)
from task_wire import TaskClient

from airlock.broker.vault import KEY_FILE_ENV
from airlock.server.auth import generate_api_key
from airlock.store import Database

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

QUICK = "[tasks]\nanswer_within_s = 1.0\n"
SLEEP = "import time; time.sleep({s}); print('slept {s}')"


async def its_run(db: Database, task_id: str) -> str:
    """The run the task's call started, once it has one."""
    with anyio.fail_after(60):
        while True:
            record = await db.get_task(task_id)
            if record is not None and record.run_id is not None:
                return record.run_id
            await anyio.sleep(0.2)


def assert_failed_with_killed_run(task: dict[str, Any], run_id: str) -> None:
    assert task["status"] == "failed", task
    assert task["error"]["code"] == -32603
    assert run_id in task["error"]["message"] and "killed" in task["error"]["message"]
    assert task["error"]["data"] == {"run_id": run_id, "run_status": "killed"}


async def test_a_client_that_lost_its_connection_mid_run_gets_the_result_on_a_new_one(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "tasks.toml"
    policy.write_text(QUICK)
    async with http_server(tmp_path, "--policy", str(policy)) as server:
        key = server.keys["acme"]
        # One kept-alive connection asks and polls, then drops while the run goes on.
        async with httpx.AsyncClient(timeout=60) as first:
            before = TaskClient(server.url, key, http=first)
            task_id = (await before.call_tool("run_code", {"code": SLEEP.format(s=8)}))["taskId"]
            working = (await before.get(task_id))["result"]
        assert first.is_closed
        # The agent comes back on another connection (another client object altogether).
        async with httpx.AsyncClient(timeout=60) as second:
            after = TaskClient(server.url, key, http=second)
            done = await after.until_ended(task_id, within=60)
    assert working["status"] == "working"
    assert done["status"] == "completed" and "slept 8" in str(done["result"]), done


async def test_tasks_answer_after_a_restart_and_one_whose_server_died_fails_naming_its_run(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "tasks.toml"
    policy.write_text(QUICK)
    async with http_server(tmp_path, "--policy", str(policy)) as server:
        acme = TaskClient(server.url, server.keys["acme"])
        finished = (await acme.call_tool("run_code", {"code": SLEEP.format(s=3)}))["taskId"]
        before = await acme.until_ended(finished, within=60)
        lost = await acme.call_tool("run_code", {"code": SLEEP.format(s=100), "timeout_s": 120})
        db = await Database.open(server.data_dir / "airlock.db")
        try:
            run_id = await its_run(db, lost["taskId"])
        finally:
            await db.close()
        server.process.send_signal(signal.SIGKILL)
        await server.process.wait()
    # The same data directory, a new server (the keys are new, their ids and tenants kept).
    async with http_server(tmp_path, "--policy", str(policy)) as again:
        acme = TaskClient(again.url, again.keys["acme"])
        after = (await acme.get(finished))["result"]
        died = await acme.until_ended(lost["taskId"], within=30)
    assert after["status"] == "completed" and after["result"] == before["result"]
    assert "slept 3" in str(after["result"])
    assert_failed_with_killed_run(died, run_id)


async def test_a_replicas_task_is_polled_and_cancelled_on_another_and_fails_with_its_replica(
    tmp_path: Path,
    postgres_url: str,
    docker_client: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_FILE_ENV, str(vault_key_file(tmp_path / "fleet.key")))
    # The URL holds the test database's password, which --store refuses.
    monkeypatch.setenv("AIRLOCK_STORE_URL", postgres_url)
    policy = tmp_path / "policy.toml"
    policy.write_text(NO_POOL_TOML + QUICK)

    def replica(name: str) -> Any:
        return serving_http("--data-dir", str(tmp_path / name), "--policy", str(policy))

    db = await Database.open(postgres_url)
    try:
        async with replica("b") as b:
            on_b = TaskClient(f"{b.base}/mcp")
            async with replica("a") as a:
                on_a = TaskClient(f"{a.base}/mcp")
                short = await on_a.call_tool("run_code", {"code": SLEEP.format(s=3)})
                long = await on_a.call_tool(
                    "run_code", {"code": SLEEP.format(s=100), "timeout_s": 120}
                )
                working = (await on_b.get(long["taskId"]))["result"]
                done = await on_b.until_ended(short["taskId"], within=60)
                # Cancelled through B: A, which runs it, stops its container.
                doomed = await on_a.call_tool(
                    "run_code", {"code": SLEEP.format(s=100), "timeout_s": 120}
                )
                label = f"airlock.run={await its_run(db, doomed['taskId'])}"
                await wait_for_containers(docker_client, label, running(1), within=30)
                at = time.monotonic()
                await on_b.cancel(doomed["taskId"])
                await wait_for_containers(docker_client, label, none_left, within=5)
                stopped_in = time.monotonic() - at
                cancelled = await on_b.until_ended(doomed["taskId"], within=5)
                run_id = await its_run(db, long["taskId"])
                a.process.send_signal(signal.SIGKILL)
                await a.process.wait()
            # B finds A's claim free within a sweep and ends its run and its task.
            died = await on_b.until_ended(long["taskId"], within=90)
    finally:
        await db.close()
    assert working["status"] == "working"
    assert cancelled["status"] == "cancelled", f"stopped in {stopped_in:.1f}s"
    assert done["status"] == "completed" and "slept 3" in str(done["result"])
    assert_failed_with_killed_run(died, run_id)


async def test_a_task_is_its_principals_and_a_stopped_server_leaves_none_working(
    tmp_path: Path,
) -> None:
    # Two keys of one tenant: the task of one is unknown to the other.
    keys = {name: generate_api_key() for name in ("ci", "laptop")}
    auth = tmp_path / "auth.toml"
    auth.write_text(
        "".join(
            f'[[keys]]\nid = "acme-{name}"\ntenant = "acme"\nhash = "{digest}"\n'
            for name, (_, digest) in keys.items()
        )
    )
    policy = tmp_path / "tasks.toml"
    policy.write_text(QUICK)
    args = ("--auth", str(auth), "--data-dir", str(tmp_path / "data"), "--policy", str(policy))
    async with serving_http(*args) as server:
        ci = TaskClient(f"{server.base}/mcp", keys["ci"][0])
        laptop = TaskClient(f"{server.base}/mcp", keys["laptop"][0])
        task_id = (await ci.call_tool("run_code", {"code": SLEEP.format(s=100)}))["taskId"]
        other = await laptop.get(task_id)
        never = await laptop.get("task_" + "d" * 26)
        working = (await ci.get(task_id))["result"]
        # SIGTERM: the server ends its sessions and their runs, and its tasks with them.
        server.process.send_signal(signal.SIGTERM)
        await server.process.wait()
    async with serving_http(*args) as again:
        ci = TaskClient(f"{again.base}/mcp", keys["ci"][0])
        after = (await ci.get(task_id))["result"]
    assert other["error"]["code"] == -32602
    assert str(other["error"]).replace(task_id, "ID") == str(never["error"]).replace(
        "task_" + "d" * 26, "ID"
    )
    assert working["status"] == "working"
    # Never `working`: either the ended session answered the call first (a tool error
    # naming it, kept as the result), or the server's stop cancelled the call (failed).
    assert after["status"] in ("completed", "failed"), after
    if after["status"] == "completed":
        assert after["result"]["isError"] is True
        assert "ended while the call was running" in str(after["result"])
    else:
        assert "the server stopped before the call finished" in after["error"]["message"]
