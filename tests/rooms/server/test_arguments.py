"""What a model sees when it calls a tool with the wrong arguments, and what the schema tells it.

The server is built in the test and driven with the SDK's in-memory client, in both
protocol eras. Its policy names an image the engine does not have, so no sandbox is
ever started: every call here must be refused before any code could run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools.tool_manager import ToolManager
from mcp.types import TextContent

from airlock.policies import Policy
from airlock.server import Config, build_server
from airlock.server.strict_tools import StrictToolServer, sdk_shape_problem

pytestmark = pytest.mark.anyio
MODES = pytest.mark.parametrize("mode", ["auto", "legacy"])
ABSENT = {"sandbox": {"image": "airlock-test/absent-image:0"}}


@pytest.fixture
def server(tmp_path: Path) -> MCPServer:
    return build_server(Config(data_dir=tmp_path / "data"), Policy.model_validate(ABSENT))


async def refusal(server: MCPServer, mode: str, tool: str, arguments: dict[str, Any]) -> str:
    async with Client(server, mode=mode) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error, result.content
    block = result.content[0]
    assert isinstance(block, TextContent)
    # One sentence the model can act on: no pydantic dump, no URL, no second line.
    assert "\n" not in block.text
    for leak in ("pydantic", "http", "[type=", "input_value", "Arguments"):
        assert leak not in block.text
    return block.text


@MODES
async def test_an_unknown_argument_is_refused_naming_the_valid_ones(
    server: MCPServer, mode: str
) -> None:
    text = await refusal(server, mode, "run_code", {"code": "print(1)", "lang": "bash"})
    assert text == (
        "Invalid arguments for run_code: unknown argument 'lang' (did you mean 'language'?); "
        "run_code takes code, language, files, timeout_s, capabilities, session_id."
    )


@MODES
async def test_an_unknown_field_of_a_file_is_refused(server: MCPServer, mode: str) -> None:
    text = await refusal(
        server, mode, "run_code", {"code": "1", "files": [{"path": "a", "content": "", "mode": 1}]}
    )
    assert text == (
        "Invalid arguments for run_code: files[0] has no field 'mode'; "
        "it takes path, content, encoding."
    )


@MODES
async def test_a_bad_literal_says_what_is_allowed(server: MCPServer, mode: str) -> None:
    text = await refusal(server, mode, "run_code", {"code": "1", "language": "ruby"})
    assert text == "Invalid arguments for run_code: language must be 'python' or 'bash'."


async def test_every_problem_is_in_the_one_sentence(server: MCPServer) -> None:
    text = await refusal(
        server,
        "auto",
        "run_code",
        {
            "code": 1,
            "timeout_s": "soon",
            "files": ["a.txt", {"path": "b", "content": "", "encoding": "hex"}],
        },
    )
    assert text == (
        "Invalid arguments for run_code: code must be a string; "
        "files[0] must be an object with path, content, encoding; "
        "files[1].encoding must be 'utf-8' or 'base64'; timeout_s must be a whole number."
    )


async def test_missing_and_out_of_range_arguments_name_the_bound(server: MCPServer) -> None:
    assert await refusal(server, "auto", "run_code", {}) == (
        "Invalid arguments for run_code: code is required."
    )
    assert await refusal(server, "auto", "run_code", {"code": "1", "timeout_s": 0}) == (
        "Invalid arguments for run_code: timeout_s must be at least 1."
    )
    text = await refusal(
        server, "auto", "fetch_artifact", {"run_id": "r", "path": "p", "offset": -1, "max_bytes": 0}
    )
    assert text == (
        "Invalid arguments for fetch_artifact: offset must be at least 0; "
        "max_bytes must be at least 1."
    )
    text = await refusal(
        server, "auto", "request_capability", {"capability": "x", "reason": "y" * 501}
    )
    assert (
        text == "Invalid arguments for request_capability: reason must have at most 500 characters."
    )


async def test_arguments_filled_by_the_server_cannot_be_sent(server: MCPServer) -> None:
    # `ctx` and the human's `answer` are injected by the server; a client naming them is refused.
    text = await refusal(
        server, "auto", "request_capability", {"capability": "x", "reason": "y", "answer": True}
    )
    assert "unknown argument 'answer'" in text
    text = await refusal(server, "auto", "end_session", {"ctx": {}})
    assert text == (
        "Invalid arguments for end_session: unknown argument 'ctx'; end_session takes session_id."
    )


def _schemas(server: MCPServer) -> Iterator[tuple[str, dict[str, Any], str]]:
    for tool in server._tool_manager.list_tools():
        yield tool.name, tool.parameters, tool.description


async def test_every_tool_schema_forbids_unknown_arguments_and_states_bounds(
    tmp_path: Path,
) -> None:
    strict = Policy.model_validate({**ABSENT, "limits": {"max_timeout_s": 60}})
    generous = Policy.model_validate({**ABSENT, "limits": {"max_timeout_s": 600}})
    server = build_server(
        Config(data_dir=tmp_path / "data"), strict, tenant_policies={"globex": generous}
    )
    async with Client(server, mode="auto") as client:
        listed = {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}
    assert listed
    for name, schema in listed.items():
        assert schema["additionalProperties"] is False, name
    assert listed["run_code"]["$defs"]["FileArg"]["additionalProperties"] is False
    # One schema serves every tenant: its maximum is the largest any tenant's policy allows.
    timeout = listed["run_code"]["properties"]["timeout_s"]["anyOf"][0]
    assert (timeout["minimum"], timeout["maximum"]) == (1, 600)
    fetch = listed["fetch_artifact"]["properties"]
    assert fetch["offset"]["minimum"] == 0
    assert (fetch["max_bytes"]["minimum"], fetch["max_bytes"]["maximum"]) == (1, 1024 * 1024)


def test_tool_descriptions_are_dedented(server: MCPServer) -> None:
    for name, _, description in _schemas(server):
        assert description, name
        for line in description.splitlines():
            assert not line.startswith(" "), (name, line)


def test_the_sdk_still_builds_arguments_the_way_the_adapter_expects(server: MCPServer) -> None:
    # The adapter reaches into SDK internals; if a new SDK moves them, this fails by name.
    assert isinstance(server, StrictToolServer)
    assert sdk_shape_problem(server) is None, f"mcp {version('mcp')}: {sdk_shape_problem(server)}"
    for name, parameters, _ in _schemas(server):
        tool = server._tool_manager.get_tool(name)
        assert tool is not None
        assert tool.fn_metadata.arg_model.model_config.get("extra") == "forbid", name
        assert parameters["additionalProperties"] is False, name


def test_the_adapter_refuses_to_register_when_the_sdk_no_longer_matches() -> None:
    bare = StrictToolServer("probe")
    bare._tool_manager.get_tool = lambda name: None  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match=r"no ArgModelBase.*update the adapter"):
        bare.add_tool(lambda: None, name="probe")


@pytest.mark.parametrize(
    ("break_sdk", "named"),
    [
        (lambda m: m.delattr(MCPServer, "_handle_list_tools"), "_handle_list_tools is gone"),
        (
            lambda m: m.setattr(MCPServer, "_handle_list_tools", _list_tools_of_another_shape),
            "_handle_list_tools takes other arguments",
        ),
        (lambda m: m.delattr(ToolManager, "get_tool"), "_tool_manager.get_tool is gone"),
    ],
)
def test_the_adapter_refuses_to_start_when_the_sdk_no_longer_matches(
    monkeypatch: pytest.MonkeyPatch, break_sdk: Callable[[pytest.MonkeyPatch], None], named: str
) -> None:
    break_sdk(monkeypatch)
    with pytest.raises(RuntimeError, match=named):
        StrictToolServer("probe")


async def _list_tools_of_another_shape(self: MCPServer, params: object) -> None:
    raise AssertionError("never called")
