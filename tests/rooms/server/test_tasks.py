"""MCP Tasks (io.modelcontextprotocol/tasks, 2026-07-28) over real HTTP against a real
`airlock serve --http`: requests written by hand with the schema's field names
(`task_wire`), every task response checked against the extension's JSON schema."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import anyio
import docker
import httpx
import pytest
from support import ROOT, http_server, none_left, poll_containers, running
from task_wire import EVERY_CALL_S, EXTENSION, TaskClient, check, meta, quick_tasks, text

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

SLOW = "import time; time.sleep({s}); print('slept {s}'); open('out.txt', 'w').write('kept')"


async def progress_of(client: TaskClient, task_id: str) -> dict[str, Any]:
    """The first poll of a working task whose status message reports the run's progress."""
    seen: dict[str, Any] = {}
    with anyio.move_on_after(30):
        while True:
            seen = (await client.get(task_id))["result"]
            if seen["status"] != "working" or "running for" in seen.get("statusMessage", ""):
                return seen
            await anyio.sleep(0.25)
    raise AssertionError(f"no progress in task {task_id}: {seen}")


async def test_discover_lists_the_extension_and_a_long_run_becomes_a_task(tmp_path: Path) -> None:
    async with http_server(tmp_path, "--policy", quick_tasks(tmp_path)) as server:
        acme = TaskClient(server.url, server.keys["acme"])
        discovered = await acme.rpc("server/discover", {})
        created = await acme.call_tool("run_code", {"code": SLOW.format(s=20)})
        working = (await acme.get(created["taskId"]))["result"]
        progress = await progress_of(acme, created["taskId"])
        done = await acme.until_ended(created["taskId"], within=90)
    assert EXTENSION in discovered["result"]["capabilities"]["extensions"]
    assert created["resultType"] == "task" and created["status"] == "working"
    assert created["taskId"].startswith("task_") and len(created["taskId"]) == 5 + 26
    assert created["pollIntervalMs"] == 2000
    assert working["status"] == "working" and working["resultType"] == "complete"
    # The run's progress, which the extension carries in the task (no progress
    # notification for a task), polled: our own numbers, never the sandbox's text.
    assert progress["status"] == "working", progress
    assert re.fullmatch(
        r"running for \d+ s; \d+ bytes of output so far", progress["statusMessage"]
    ), progress
    assert done["status"] == "completed"
    result = done["result"]
    # The CallToolResult the call would have answered: summary, envelope, structured output.
    assert result["isError"] is False
    assert "<untrusted-output" in text(result) and "slept 20" in text(result)
    assert result["structuredContent"]["status"] == "ok"
    assert "out.txt" in str(result["structuredContent"])
    # Kept ttl_s (600 s) after its end, counted from creation.
    assert 600_000 <= done["ttlMs"] <= 600_000 + 60_000


async def test_a_quick_call_and_a_caller_without_the_extension_get_plain_results(
    tmp_path: Path,
) -> None:
    # The default answer_within_s (5 s): a quick run answers well within it.
    async with http_server(tmp_path) as server:
        declaring = TaskClient(server.url, server.keys["acme"])
        plain = TaskClient(server.url, server.keys["acme"], tasks=False)
        quick = await declaring.call_tool("run_code", {"code": "print('quick')"})
        slow = await plain.call_tool("run_code", {"code": SLOW.format(s=7)})
        poll = await plain.get("task_" + "a" * 26)
    for result in (quick, slow):
        assert result["resultType"] == "complete" and "taskId" not in result
        assert result["structuredContent"]["status"] == "ok"
    assert "slept 7" in text(slow)
    # tasks/* from a caller that did not declare the extension: -32021, naming it.
    assert poll["error"]["code"] == -32021
    assert EXTENSION in str(poll["error"]["data"])


async def test_another_tenants_poll_and_cancel_answer_as_an_unknown_task(tmp_path: Path) -> None:
    async with http_server(tmp_path, "--policy", quick_tasks(tmp_path)) as server:
        acme = TaskClient(server.url, server.keys["acme"])
        globex = TaskClient(server.url, server.keys["globex"])
        task_id = (await acme.call_tool("run_code", {"code": SLOW.format(s=4)}))["taskId"]
        never = "task_" + "b" * 26
        answers: dict[str, dict[str, httpx.Response]] = {}
        for method in ("tasks/get", "tasks/cancel", "tasks/update"):
            params: dict[str, Any] = {"inputResponses": {}} if method == "tasks/update" else {}
            # The same JSON-RPC id for both: the task's id is the one difference left.
            answers[method] = {
                asked: await globex.post(
                    method, {"taskId": asked, **params}, name=asked, request_id=7
                )
                for asked in (task_id, never)
            }
        own = await acme.until_ended(task_id, within=60)
    for method, by_id in answers.items():
        theirs, unknown = by_id[task_id], by_id[never]
        assert (theirs.status_code, theirs.headers["content-type"]) == (
            unknown.status_code,
            unknown.headers["content-type"],
        )
        assert json.loads(theirs.content)["error"]["code"] == -32602, theirs.text
        # Byte for byte, but for the ids.
        assert theirs.content.replace(task_id.encode(), b"ID") == unknown.content.replace(
            never.encode(), b"ID"
        ), method
    # The other tenant's cancel changed nothing.
    assert own["status"] == "completed"


async def test_a_listen_stream_pushes_the_callers_task_until_it_ends(tmp_path: Path) -> None:
    async with http_server(tmp_path, "--policy", quick_tasks(tmp_path)) as server:
        acme = TaskClient(server.url, server.keys["acme"])
        globex = TaskClient(server.url, server.keys["globex"])
        plain = TaskClient(server.url, server.keys["acme"], tasks=False)
        mine = (await acme.call_tool("run_code", {"code": SLOW.format(s=4)}))["taskId"]
        never = "task_" + "e" * 26
        refused = await plain.rpc("subscriptions/listen", {"notifications": {"taskIds": [mine]}})
        foreign = await globex.listen([mine])
        pushed = await acme.listen([mine, never])
        polled = (await acme.get(mine))["result"]
    ack, *notes, end = pushed
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    # Only the caller's own task is honoured; an unknown id and another tenant's alike not.
    assert check("TaskSubscriptionAcknowledgedNotifications", ack["params"]["notifications"]) == {
        "taskIds": [mine]
    }
    assert {note["method"] for note in notes} == {"notifications/tasks"}
    states = [note["params"] for note in notes]
    assert states[0]["status"] == "working" and states[-1]["status"] == "completed"
    subscription = {"io.modelcontextprotocol/subscriptionId": end["id"]}
    assert all(state["_meta"] == subscription for state in states)
    # Each is what tasks/get answers: the last one, the task as it ended.
    assert {k: v for k, v in states[-1].items() if k != "_meta"} == {
        k: v for k, v in polled.items() if k not in ("_meta", "resultType")
    }
    assert "slept 4" in text(states[-1]["result"])
    # The stream ends once every task it watched has ended.
    assert end["result"]["_meta"].items() >= subscription.items()
    assert foreign[0]["params"]["notifications"] == {"taskIds": []}
    assert [m.get("method") for m in foreign[1:]] == [None] and "result" in foreign[-1]
    # Task notifications are the extension's: a caller that did not declare it is -32021.
    assert refused["error"]["code"] == -32021


async def test_cancel_stops_the_runs_container_within_5_s(tmp_path: Path) -> None:
    engine = docker.from_env()
    async with http_server(tmp_path, "--policy", quick_tasks(tmp_path, pool=False)) as server:
        acme = TaskClient(server.url, server.keys["acme"])
        plain = TaskClient(server.url, server.keys["acme"], tasks=False)
        first = await plain.call_tool("run_code", {"code": "print(1)"})
        session = first["structuredContent"]["session_id"]
        label = f"airlock.session={session}"
        created = await acme.call_tool(
            "run_code", {"code": SLOW.format(s=120), "session_id": session, "timeout_s": 300}
        )
        started = await poll_containers(engine, label, running(1), within=30)
        assert running(1)(started)
        at = time.monotonic()
        acked = await acme.cancel(created["taskId"])
        gone = await poll_containers(engine, label, none_left, within=5)
        took = time.monotonic() - at
        ended = await acme.until_ended(created["taskId"], within=5)
    assert acked["result"]["resultType"] == "complete"
    assert none_left(gone), f"containers left {took:.1f}s after the cancel: {gone}"
    assert ended["status"] == "cancelled"


async def test_only_the_long_tools_become_tasks(tmp_path: Path) -> None:
    # answer_within_s so short that every run_code outlasts it.
    async with http_server(tmp_path, "--policy", quick_tasks(tmp_path, EVERY_CALL_S)) as server:
        acme = TaskClient(server.url, server.keys["acme"])
        ran = await acme.call_tool("run_code", {"code": "open('a.txt', 'w').write('a')"})
        done = await acme.until_ended(ran["taskId"], within=60)
        session = done["result"]["structuredContent"]["session_id"]
        listed = await acme.call_tool("list_workspace", {"session_id": session})
        read = await acme.call_tool("read_workspace_file", {"session_id": session, "path": "a.txt"})
    assert ran["resultType"] == "task"
    for plain in (listed, read):
        assert plain["resultType"] == "complete" and not plain.get("isError"), plain
    assert "a.txt" in str(listed["structuredContent"])


async def test_copy_in_and_get_patch_become_tasks_that_complete_with_their_results(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("print('old')\n")
    policy = quick_tasks(tmp_path, EVERY_CALL_S, more=f'\n[hatch.roots]\napp = "{repo}"\n')
    async with http_server(tmp_path, "--policy", policy) as server:
        acme = TaskClient(server.url, server.keys["acme"])
        plain = TaskClient(server.url, server.keys["acme"], tasks=False)
        copying = await acme.call_tool("copy_in", {"root": "app", "to": "app"})
        assert copying["resultType"] == "task", copying
        copied = (await acme.until_ended(copying["taskId"], within=60))["result"]
        session = copied["structuredContent"]["session_id"]
        edit = "open('app/app.py', 'w').write(\"print('new')\\n\")"
        await plain.call_tool("run_code", {"code": edit, "session_id": session})
        patching = await acme.call_tool(
            "get_patch",
            {"copy_id": copied["structuredContent"]["copy_id"], "session_id": session},
        )
        assert patching["resultType"] == "task", patching
        patched = (await acme.until_ended(patching["taskId"], within=60))["result"]
    assert copying["resultType"] == patching["resultType"] == "task"
    assert not copied["isError"] and not patched["isError"], (copied, patched)
    assert "+print('new')" in json.dumps(patched)


async def test_a_task_past_its_ttl_answers_as_an_unknown_one(tmp_path: Path) -> None:
    policy = tmp_path / "short.toml"
    policy.write_text(f"[tasks]\nanswer_within_s = {EVERY_CALL_S}\nttl_s = 1\n")
    async with http_server(tmp_path, "--policy", str(policy)) as server:
        acme = TaskClient(server.url, server.keys["acme"])
        task_id = (await acme.call_tool("run_code", {"code": "print(1)"}))["taskId"]
        ended = await acme.until_ended(task_id, within=60)
        await anyio.sleep(1.5)
        expired = await acme.get(task_id)
        never = await acme.get("task_" + "c" * 26)
    assert ended["status"] == "completed" and ended["ttlMs"] >= 1000
    assert expired["error"]["code"] == -32602
    assert str(expired["error"]).replace(task_id, "ID") == str(never["error"]).replace(
        "task_" + "c" * 26, "ID"
    )


@pytest.mark.usefixtures("browser_image")
async def test_browse_becomes_a_task_that_completes_with_its_answer(tmp_path: Path) -> None:
    async with http_server(tmp_path, "--policy", quick_tasks(tmp_path, EVERY_CALL_S)) as server:
        acme = TaskClient(server.url, server.keys["acme"])
        # No capability reaches the host: the browse answers what its box saw (denied).
        browsing = await acme.call_tool("browse", {"url": "https://docs.example.com/"})
        browsed = await acme.until_ended(browsing["taskId"], within=120)
    assert browsing["resultType"] == "task"
    assert browsed["status"] == "completed"
    assert "docs.example.com" in json.dumps(browsed["result"])


def readme_exchange() -> tuple[dict[str, Any], dict[str, Any]]:
    """The request and the answer the README shows under "Long calls as MCP tasks"."""
    section = (ROOT / "README.md").read_text().split("### Long calls as MCP tasks", 1)[1]
    blocks = re.findall(r"^```json\n(.*?)^```", section, re.M | re.S)
    return json.loads(blocks[0]), json.loads(blocks[1])


async def test_the_readmes_exchange_is_what_the_server_answers(tmp_path: Path) -> None:
    request, shown = readme_exchange()
    params = request["params"]
    # The README's run would end at once here (no pytest to run): sleep instead.
    arguments = {**params["arguments"], "code": SLOW.format(s=3)}
    async with http_server(tmp_path, "--policy", quick_tasks(tmp_path)) as server:
        acme = TaskClient(server.url, server.keys["acme"])
        answer = await acme.call_tool(params["name"], arguments)
    assert params["_meta"] == {
        key: value for key, value in meta(tasks=True).items() if "clientInfo" not in key
    }
    assert set(answer) - {"_meta"} == set(shown["result"])
    assert (answer["resultType"], answer["status"]) == ("task", "working")
