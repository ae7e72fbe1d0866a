"""subscriptions/listen is the Tasks extension's for a filter naming `taskIds`
(`server/tasks/listen.py`, over real HTTP in test_tasks.py); a filter naming none is still
the SDK's own stream, acknowledged as the SDK does."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer

pytestmark = pytest.mark.anyio


async def test_a_listen_naming_no_task_ids_is_the_sdks_own_stream(
    make_server: Callable[..., MCPServer],
) -> None:
    async with (
        Client(make_server(), mode="auto") as client,
        client.listen(tools_list_changed=True) as subscription,
    ):
        honored = subscription.honored
    assert honored.tools_list_changed is True
    assert "taskIds" not in (honored.model_extra or {})
