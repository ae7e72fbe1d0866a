"""The one session rule, on every transport and protocol era, and what tools/list says of it.

Where a connection exists (stdio; an HTTP client of the handshake era) a call without
session_id uses that connection's default session; where none exists (HTTP on 2026-07-28) it
starts a new one; session_id "new" starts a separate session everywhere. The model reads only
tools/list, so each era's tools/list must state its own rule. No tool here runs code: the
rule is the server's, and list_workspace shows which session a call got.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from support import NO_POOL_TOML, serving_http, text_of

from airlock.policies import Policy
from airlock.server import Config, build_server

pytestmark = pytest.mark.anyio

# tools/list with the default policy: 32.4 KB before pydantic's titles left the schemas,
# 28.2 KB after (with the limits sentence added to run_code), 28.5 KB once run_code also
# said what an editable install and the home do and images joined the untrusted data;
# 30.6 KB with the browse tool (2.0 KB of its own); 31.4 KB once browse had its snapshot,
# refs, screenshot=false and the new action kinds (issue 31 item 2); 34.0 KB with
# fork_session and restore_workspace (issue 33: one-sentence descriptions, most of their
# 2.6 KB the input and output schemas).
TOOLS_LIST_BUDGET = 34_100


def server(tmp_path: Path, *, http: bool) -> MCPServer:
    policy = Policy.model_validate({"pool": {"size": 0}})
    return build_server(Config(data_dir=tmp_path / "data"), policy, http=http)


async def session_of(client: Client, session_id: str | None = None) -> str:
    args: dict[str, Any] = {} if session_id is None else {"session_id": session_id}
    result = await client.call_tool("list_workspace", args)
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    return str(result.structured_content["session_id"])


async def session_sentences(client: Client) -> dict[str, str]:
    tools = (await client.list_tools()).tools
    return {
        t.name: t.input_schema["properties"]["session_id"]["description"]
        for t in tools
        if "session_id" in t.input_schema.get("properties", {})
    }


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_stdio_calls_share_the_default_session_and_new_starts_a_separate_one(
    tmp_path: Path, mode: str
) -> None:
    async with Client(server(tmp_path, http=False), mode=mode) as c:
        default = await session_of(c)
        assert await session_of(c) == default
        separate = await session_of(c, "new")
        assert separate != default
        assert await session_of(c, separate) == separate
        assert await session_of(c) == default  # "new" did not move the default


@pytest.mark.docker
async def test_over_real_http_each_connection_has_a_default_and_stateless_calls_do_not(
    tmp_path: Path,
) -> None:
    """A real `airlock serve --http`: two handshake-era connections at once, each with its
    own default session, ended when the connection ends (a "new" one lives on);
    2026-07-28 calls get new ones."""
    policy = tmp_path / "no-pool.toml"
    policy.write_text(NO_POOL_TOML)
    async with serving_http("--data-dir", str(tmp_path / "data"), "--policy", str(policy)) as s:
        url = f"{s.base}/mcp"
        async with Client(url, mode="legacy") as first:
            default = await session_of(first)
            assert await session_of(first) == default
            separate = await session_of(first, "new")
            assert separate != default
            async with Client(url, mode="legacy") as second:
                other = await session_of(second)
                assert other not in (default, separate)
                assert await session_of(second) == other
                # A session id works on any connection of its tenant.
                assert await session_of(second, default) == default
        async with Client(url, mode="auto") as stateless:
            one, two = await session_of(stateless), await session_of(stateless)
            assert len({one, two, default, separate, other}) == 5
            # The first connection ended, and its default session with it; the session it
            # asked for by "new" is the agent's, until end_session or its idle limit.
            gone = await stateless.call_tool("list_workspace", {"session_id": default})
            assert gone.is_error and "unknown session" in text_of(gone), text_of(gone)
            assert await session_of(stateless, separate) == separate


async def test_stateless_http_calls_without_session_id_each_start_a_new_session(
    tmp_path: Path,
) -> None:
    async with Client(server(tmp_path, http=True), mode="auto") as c:
        one, two = await session_of(c), await session_of(c)
        assert one != two
        assert await session_of(c, one) == one
        assert await session_of(c, "new") not in (one, two)
        ended = await c.call_tool("end_session", {})
        assert ended.is_error and "pass the session_id" in text_of(ended), text_of(ended)


@pytest.mark.parametrize(
    ("http", "mode", "hint"),
    [
        (False, "auto", 'pass session_id "new"'),
        (True, "legacy", 'pass session_id "new"'),
        (True, "auto", "omit session_id to start a new session"),
    ],
)
async def test_an_unknown_session_says_how_to_start_one_on_this_transport(
    tmp_path: Path, http: bool, mode: str, hint: str
) -> None:
    async with Client(server(tmp_path, http=http), mode=mode) as c:
        result = await c.call_tool(
            "list_workspace", {"session_id": "ses_NEVERWASASESSION000000000"}
        )
    assert result.is_error and hint in text_of(result), text_of(result)


@pytest.mark.parametrize(
    ("http", "mode", "default_words"),
    [
        (False, "auto", "this connection's default session"),
        (False, "legacy", "this connection's default session"),
        (True, "legacy", "this connection's default session"),
        (True, "auto", "omit it to start a new session"),
    ],
)
async def test_tools_list_states_the_rule_of_the_callers_transport_in_one_sentence(
    tmp_path: Path, http: bool, mode: str, default_words: str
) -> None:
    async with Client(server(tmp_path, http=http), mode=mode) as c:
        sentences = await session_sentences(c)
    end = sentences.pop("end_session")
    assert sentences, "no tool takes session_id"
    for tool, sentence in sentences.items():
        assert default_words in sentence, (tool, sentence)
        assert sentence.count(".") == 1 and len(sentence) <= 140, (tool, sentence)
    assert "new" not in end and len(end) <= 100, end
    if default_words.startswith("this connection"):
        assert all('"new"' in s for s in sentences.values())


async def test_tools_list_stays_within_its_budget_and_carries_no_generated_titles(
    tmp_path: Path,
) -> None:
    async with Client(server(tmp_path, http=False)) as c:
        tools = (await c.list_tools()).tools
    listed = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
    size = len(json.dumps(listed))
    assert size <= TOOLS_LIST_BUDGET, f"tools/list is {size} bytes, over {TOOLS_LIST_BUDGET}"
    for tool in listed:
        for schema in (tool["inputSchema"], tool.get("outputSchema", {})):
            assert '"title":' not in json.dumps(schema), tool["name"]


async def test_run_code_tells_the_model_the_limits_it_will_hit(tmp_path: Path) -> None:
    policy = Policy.model_validate({"pool": {"size": 0}, "limits": {"memory_mb": 384}})
    mcp = build_server(Config(data_dir=tmp_path / "data"), policy)
    async with Client(mcp) as c:
        (run_code,) = [t for t in (await c.list_tools()).tools if t.name == "run_code"]
    description = run_code.description or ""
    assert "384 MiB of memory" in description and '"oom"' in description
    assert "128 processes" in description and "30 s unless timeout_s" in description


async def test_a_tenant_cannot_open_sessions_without_end(tmp_path: Path) -> None:
    """Every session keeps a workspace on the host's disk: "new" (or a stateless HTTP call)
    per call must not grow them without bound."""
    policy = Policy.model_validate({"pool": {"size": 0}, "tenants": {"max_live_sessions": 2}})
    async with Client(build_server(Config(data_dir=tmp_path / "data"), policy)) as c:
        first, second = await session_of(c), await session_of(c, "new")
        refused = await c.call_tool("list_workspace", {"session_id": "new"})
        assert refused.is_error and "max_live_sessions" in text_of(refused), text_of(refused)
        assert await session_of(c, first) == first  # the live ones still serve
        ended = await c.call_tool("end_session", {"session_id": second})
        assert not ended.is_error, text_of(ended)
        assert await session_of(c, "new") not in (first, second)
