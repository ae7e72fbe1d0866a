"""MCP tasks waiting on a human (io.modelcontextprotocol/tasks, 2026-07-28): a
request_capability whose capability needs approval, from a client declaring the extension
and elicitation, is a task in `input_required`, answered by the client (tasks/update) or
by the operator out of band (`airlock approvals`, POST /approvals as the console does),
whichever answers first, on any server of the records. Over real HTTP with the schema's
field names (`task_wire`), every task response checked against the extension's schema."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import airlock_async, http_server, serving_http, vault_key_file
from task_wire import TaskClient, quick_tasks, text

from airlock.broker.vault import KEY_FILE_ENV
from airlock.server.bearer import OPERATOR_TOKEN_FILE
from airlock.store import Database

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

ASK = """
[capabilities.docs]
hosts = ["docs.example.com"]
methods = ["GET"]
paths = ["/**"]
approval = "ask"
"""
ASKING = {"capability": "docs", "reason": "read the API docs"}


def approval_of(waiting: dict[str, Any]) -> str:
    """The operator's approval id a waiting task's status message names."""
    found = re.search(r"\bapr_[a-z0-9]+", waiting.get("statusMessage", ""))
    assert found, waiting
    return found.group(0)


def acknowledged(answer: dict[str, Any]) -> bool:
    """Whether a tasks/update answer is the spec's empty acknowledgement."""
    result = answer.get("result", {})
    return result.get("resultType") == "complete" and set(result) <= {"resultType", "_meta"}


def accept(key: str, approve: bool) -> dict[str, Any]:
    return {key: {"action": "accept", "content": {"approve": approve}}}


async def approvals(data_dir: Path, *args: str, store: str | None = None) -> tuple[int, str]:
    """`airlock approvals ARGS` against `data_dir` (or `store`): exit code, stdout + stderr."""
    env = {**os.environ, "AIRLOCK_STORE_URL": store} if store is not None else None
    done = await airlock_async("approvals", *args, "--data-dir", str(data_dir), env=env)
    return done.returncode, done.stdout + done.stderr


async def test_a_capability_waiting_on_the_human_is_input_required_until_tasks_update(
    tmp_path: Path,
) -> None:
    async with http_server(tmp_path, "--policy", quick_tasks(tmp_path, more=ASK)) as server:
        acme = TaskClient(server.url, server.keys["acme"], elicitation=True)
        globex = TaskClient(server.url, server.keys["globex"], elicitation=True)
        asked = await acme.call_tool("request_capability", ASKING)
        waiting = (await acme.get(asked["taskId"]))["result"]
        [(key, question)] = waiting["inputRequests"].items()
        foreign = await globex.update(asked["taskId"], accept(key, True))
        still = (await acme.get(asked["taskId"]))["result"]
        acked = await acme.update(asked["taskId"], accept(key, True))
        done = (await acme.get(asked["taskId"]))["result"]
        again = await acme.update(asked["taskId"], accept(key, False))
        after = (await acme.get(asked["taskId"]))["result"]
        # The client answered first: the operator has nothing left to decide.
        operator = await approvals(server.data_dir, "approve", approval_of(waiting))
        listed = await approvals(server.data_dir, "list")
    assert asked["resultType"] == "task" and asked["status"] == "input_required"
    assert waiting["status"] == "input_required"
    assert question["method"] == "elicitation/create"
    assert "docs" in question["params"]["message"]
    assert "read the API docs" in question["params"]["message"]
    assert foreign["error"]["code"] == -32602 and still["status"] == "input_required"
    assert acked["result"]["resultType"] == "complete"
    assert done["status"] == "completed", done
    granted = done["result"]["structuredContent"]
    assert granted["capability"] == "docs" and granted["approved_by"] == "user"
    assert granted["scope"]["hosts"] == ["docs.example.com"]
    assert done["statusMessage"] == "answered by the client (tasks/update)"
    # An answer to a task no longer waiting is acknowledged and changes nothing.
    assert acknowledged(again) and after == done
    assert operator[0] == 1 and "is used, not pending" in operator[1], operator
    assert approval_of(waiting) not in listed[1]


async def test_the_operator_answers_a_waiting_task_with_airlock_approvals(
    tmp_path: Path,
) -> None:
    async with http_server(tmp_path, "--policy", quick_tasks(tmp_path, more=ASK)) as server:
        acme = TaskClient(server.url, server.keys["acme"], elicitation=True)
        asked = await acme.call_tool("request_capability", ASKING)
        waiting = (await acme.get(asked["taskId"]))["result"]
        approval = approval_of(waiting)
        [key] = waiting["inputRequests"]
        # The human closes the question unanswered: the operator may still answer.
        await acme.update(asked["taskId"], {key: {"action": "cancel"}})
        dismissed = (await acme.get(asked["taskId"]))["result"]
        listed = await approvals(server.data_dir, "list")
        decided = await approvals(server.data_dir, "approve", approval)
        done = (await acme.get(asked["taskId"]))["result"]
        # The human's late answer, for the request the operator already answered.
        late = await acme.update(asked["taskId"], accept(key, False))
        after = (await acme.get(asked["taskId"]))["result"]
    assert asked["status"] == "input_required" and approval in asked["statusMessage"]
    assert dismissed["status"] == "input_required", dismissed
    assert "dismissed" in dismissed["statusMessage"]
    assert listed[0] == 0 and approval in listed[1], listed
    assert decided[0] == 0, decided
    assert done["status"] == "completed", done
    assert done["statusMessage"] == f"the operator approved approval {approval}"
    granted = done["result"]["structuredContent"]
    assert granted["capability"] == "docs" and granted["approved_by"] == "operator"
    assert acknowledged(late) and after == done


async def test_the_operators_denial_on_one_replica_ends_the_task_polled_on_another(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_FILE_ENV, str(vault_key_file(tmp_path / "fleet.key")))
    monkeypatch.setenv("AIRLOCK_STORE_URL", postgres_url)
    policy = quick_tasks(tmp_path, more=ASK)

    def replica(name: str) -> Any:
        return serving_http("--data-dir", str(tmp_path / name), "--policy", policy)

    async with replica("a") as a, replica("b") as b:
        on_a = TaskClient(f"{a.base}/mcp", elicitation=True)
        on_b = TaskClient(f"{b.base}/mcp", elicitation=True)
        asked = await on_a.call_tool("request_capability", ASKING)
        waiting = (await on_b.get(asked["taskId"]))["result"]
        approval = approval_of(waiting)
        [key] = waiting["inputRequests"]
        # The operator's HTTP route on replica A (what the console's button posts, too).
        token = (tmp_path / "a" / OPERATOR_TOKEN_FILE).read_text().strip()
        async with httpx.AsyncClient(base_url=a.base) as http:
            denied = await http.post(
                f"/approvals/{approval}/deny", headers={"Authorization": f"Bearer {token}"}
            )
        # A listen stream on B moves the task on, as a poll would, and pushes its end.
        pushed = await on_b.listen([asked["taskId"]])
        done = (await on_b.get(asked["taskId"]))["result"]
        late = await on_b.update(asked["taskId"], accept(key, True))
        after = (await on_a.get(asked["taskId"]))["result"]
    db = await Database.open(postgres_url)
    try:
        record = await db.get_approval(approval)
    finally:
        await db.close()
    assert waiting["status"] == "input_required"
    assert denied.status_code == 200, denied.text
    assert done["status"] == "completed", done
    assert done["statusMessage"] == f"the operator denied approval {approval}"
    [final] = [m["params"] for m in pushed if m.get("method") == "notifications/tasks"]
    assert final["status"] == "completed" and final["result"] == done["result"]
    # The result the call itself gives for a denied approval: a tool error saying so.
    assert done["result"]["isError"] is True
    assert f"the operator denied approval {approval}" in text(done["result"])
    assert acknowledged(late) and after == done
    assert record is not None and record.status == "denied"
