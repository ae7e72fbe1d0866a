"""MCP Tasks over real HTTP, written by hand as the 2026-07-28 transport and the
extension write them (the SDK's client cannot send tasks), and every task response checked
against the extension's published JSON schema.

The schema is the public modelcontextprotocol/ext-tasks repository's
`schema/2026-07-28/schema.json` at commit 05dde3b (the one version of 2026-07-28). It is
not committed here (this workplace keeps a fetched repository's data files only in the
steering repository's shared/): it is read from `shared/vendor/` beside the repository,
else from the machine's mirror of the repository; neither there fails the test by name.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import anyio
import httpx
import jsonschema
from support import NO_POOL_TOML

EXTENSION = "io.modelcontextprotocol/tasks"
VERSION = "2026-07-28"
SCHEMA_COMMIT = "05dde3b"
_BESIDE = Path(__file__).resolve().parents[2]
_IN_SHARED = _BESIDE / "shared/vendor/ext-tasks-2026-07-28.schema.json"
_MIRROR = Path("/work/.mirror/modelcontextprotocol+ext-tasks/repo")
_ids = itertools.count(1)

# So short that no call ends within it (10 ms did not hold: a small get_patch answered in
# time in a CI run and came back as its plain result).
EVERY_CALL_S = 0.000001


def quick_tasks(tmp_path: Path, seconds: float = 1.0, *, pool: bool = True, more: str = "") -> str:
    """A policy whose calls become tasks after `seconds` (tests need not wait 5); without
    the pool, a run's container carries its session's label from the start."""
    path = tmp_path / "tasks.toml"
    no_pool = "" if pool else NO_POOL_TOML
    path.write_text(f"[tasks]\nanswer_within_s = {seconds}\nttl_s = 600\n{no_pool}{more}")
    return str(path)


def text(result: dict[str, Any]) -> str:
    """The text blocks of a CallToolResult, as the wire has it."""
    return "\n".join(block["text"] for block in result["content"] if block["type"] == "text")


@cache
def schema() -> dict[str, Any]:
    if _IN_SHARED.is_file():
        loaded: dict[str, Any] = json.loads(_IN_SHARED.read_text())
        return loaded
    shown = subprocess.run(
        ["git", "-C", str(_MIRROR), "show", f"{SCHEMA_COMMIT}:schema/{VERSION}/schema.json"],
        capture_output=True,
        text=True,
    )
    assert shown.returncode == 0, (
        f"the Tasks extension's schema is neither at {_IN_SHARED} nor in {_MIRROR}: "
        "put schema/2026-07-28/schema.json of modelcontextprotocol/ext-tasks at 05dde3b there"
    )
    loaded = json.loads(shown.stdout)
    return loaded


def check(definition: str, value: dict[str, Any]) -> dict[str, Any]:
    """`value` if it is the schema's `definition`; else the test fails saying why."""
    root = schema()
    jsonschema.Draft202012Validator(
        {"$ref": f"#/$defs/{definition}", "$defs": root["$defs"]}
    ).validate(value)
    return value


def meta(*, tasks: bool, elicitation: bool = False) -> dict[str, Any]:
    capabilities: dict[str, Any] = {"extensions": {EXTENSION: {}}} if tasks else {}
    if elicitation:
        capabilities["elicitation"] = {}
    return {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "task-wire-test", "version": "0"},
    }


class TaskClient:
    """One caller (a bearer key, or none) of one server's /mcp: each request on a
    connection of its own, or all on `http`'s kept-alive one."""

    def __init__(
        self,
        url: str,
        key: str | None = None,
        *,
        tasks: bool = True,
        elicitation: bool = False,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.url, self.tasks, self.elicitation = url, tasks, elicitation
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = http

    async def rpc(self, method: str, params: dict[str, Any], *, name: str | None = None) -> Any:
        """The JSON-RPC response (result or error) of one request, as a dict."""
        return _message(await self.post(method, params, name=name, request_id=next(_ids)))

    async def post(
        self, method: str, params: dict[str, Any], *, name: str | None, request_id: int
    ) -> httpx.Response:
        """The HTTP response to one request."""
        body = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": method,
            "params": {**params, "_meta": meta(tasks=self.tasks, elicitation=self.elicitation)},
        }
        headers = {
            **self._headers,
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": VERSION,
            "Mcp-Method": method,
        }
        if name is not None:
            headers["Mcp-Name"] = name
        if self._http is not None:
            return await self._http.post(self.url, json=body, headers=headers)
        async with httpx.AsyncClient(timeout=120) as http:
            return await http.post(self.url, json=body, headers=headers)

    async def call_tool(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        answer = await self.rpc("tools/call", {"name": tool, "arguments": arguments}, name=tool)
        assert "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        if result.get("resultType") == "task":
            check("CreateTaskResult", result)
        return result

    async def get(self, task_id: str) -> dict[str, Any]:
        """The tasks/get answer: the result (checked as a GetTaskResult) or the error."""
        answer = await self.rpc("tasks/get", {"taskId": task_id}, name=task_id)
        if "result" in answer:
            check("GetTaskResult", answer["result"])
        return dict(answer)

    async def until_ended(self, task_id: str, *, within: float) -> dict[str, Any]:
        """Poll tasks/get until the task leaves `working`: its last answer's result."""
        seen: dict[str, Any] = {}
        with anyio.move_on_after(within):
            while True:
                seen = (await self.get(task_id))["result"]
                if seen["status"] != "working":
                    return seen
                await anyio.sleep(0.25)
        raise AssertionError(f"task {task_id} still {seen.get('status')} after {within}s")

    async def update(self, task_id: str, responses: dict[str, Any]) -> dict[str, Any]:
        params = {"taskId": task_id, "inputResponses": responses}
        check(
            "UpdateTaskRequest",
            {"jsonrpc": "2.0", "id": 0, "method": "tasks/update", "params": params},
        )
        answer = await self.rpc("tasks/update", params, name=task_id)
        if "result" in answer:
            check("UpdateTaskResult", answer["result"])
        return dict(answer)

    async def listen(self, task_ids: list[str]) -> list[dict[str, Any]]:
        """The messages of a subscriptions/listen stream for `task_ids`, read until the
        server ends it, each task notification checked as a `TaskStatusNotification`."""
        params = {"notifications": {"taskIds": task_ids}}
        request_id = next(_ids)
        sent = messages(
            await self.post("subscriptions/listen", params, name=None, request_id=request_id)
        )
        for message in sent:
            if message.get("method") == "notifications/tasks":
                check("TaskStatusNotification", message)
        return sent

    async def cancel(self, task_id: str) -> dict[str, Any]:
        answer = await self.rpc("tasks/cancel", {"taskId": task_id}, name=task_id)
        if "result" in answer:
            check("CancelTaskResult", answer["result"])
        return dict(answer)


def messages(response: httpx.Response) -> list[dict[str, Any]]:
    """Every JSON-RPC message of a response, in order: JSON, or an SSE stream's events."""
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        return [response.json()]
    data = [
        line[len("data:") :].strip()
        for line in response.text.splitlines()
        if line.startswith("data:") and line[len("data:") :].strip()
    ]
    return [json.loads(item) for item in data]


def _message(response: httpx.Response) -> Any:
    """The one JSON-RPC response of a response, JSON or an SSE stream."""
    final = [m for m in messages(response) if "id" in m and ("result" in m or "error" in m)]
    assert final, response.text
    return final[-1]
