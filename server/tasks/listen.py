"""Task status pushed on a `subscriptions/listen` stream: the extension's
`notifications/tasks`, for a listen request whose filter names `taskIds`.

The SDK (mcp 2.3) serves subscriptions/listen with a closed vocabulary (list changes and
resource updates) and drops filter keys it does not know, so `TaskListen` takes the method
over: a request naming no `taskIds` goes to the SDK's own handler as before; one naming
them is this extension's (the caller must declare it: -32021 otherwise). The stream
acknowledges the caller's own tasks among those asked for (anyone else's, an unknown or an
expired id is left out, alike), then sends each one's `DetailedTask`, exactly what
`tasks/get` would answer, whenever it changes, and ends (its `SubscriptionsListenResult`)
once every one of them has ended. It watches the store, not this server's jobs, so a task
running on another replica of the fleet is pushed too, within `WATCH_S`.

Not here: the task's wire shape (`wire.py`), who may see a task (`TasksExtension`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal, cast

import anyio
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import require_client_extension
from mcp.server.subscriptions import SUBSCRIPTION_ID_META_KEY, ListenHandler
from mcp.types import ServerNotification
from mcp_types import (
    INVALID_PARAMS,
    Notification,
    SubscriptionFilter,
    SubscriptionsAcknowledgedNotification,
    SubscriptionsAcknowledgedNotificationParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)
from pydantic import TypeAdapter, ValidationError

from airlock.store import TaskRecord

from . import wire

Context = ServerRequestContext[Any, Any]
Visible = Callable[[Context, str], Awaitable[TaskRecord | None]]
"""The caller's task of that id, or None (unknown, expired, anyone else's); a waiting
task the operator answered is moved on by reading it, as by a poll."""

WATCH_S = 0.5
"""How often a stream reads its tasks from the store."""

TASK_IDS = "taskIds"
METHOD: Literal["notifications/tasks"] = "notifications/tasks"
_IDS = TypeAdapter(list[str])


class TaskStatusNotification(Notification[dict[str, Any], Literal["notifications/tasks"]]):
    """The extension's `notifications/tasks`: a `DetailedTask` as its params."""


class TaskListen:
    """The server's subscriptions/listen handler: the SDK's, plus `taskIds`."""

    def __init__(self, sdk: ListenHandler, visible: Visible) -> None:
        self._sdk, self._visible = sdk, visible

    async def __call__(
        self, ctx: Context, params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        asked = (params.notifications.model_extra or {}).get(TASK_IDS)
        if asked is None:
            return await self._sdk(ctx, params)
        require_client_extension(ctx, wire.EXTENSION)
        try:
            task_ids = _IDS.validate_python(asked)
        except ValidationError as exc:
            raise MCPError(INVALID_PARAMS, f"{TASK_IDS} must be a list of task ids") from exc
        watched = [t for t in dict.fromkeys(task_ids) if await self._visible(ctx, t) is not None]
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: ctx.request_id}
        honored = SubscriptionFilter.model_validate({TASK_IDS: watched})
        ack = SubscriptionsAcknowledgedNotificationParams(notifications=honored, _meta=meta)
        await self._send(ctx, SubscriptionsAcknowledgedNotification(params=ack))
        await self._watch(ctx, watched, meta)
        return SubscriptionsListenResult(_meta=meta)

    async def _watch(self, ctx: Context, watched: list[str], meta: dict[str, Any]) -> None:
        """Send each task's state when it changes, until every one has ended."""
        running = ctx.lifespan_context
        interval = running.tasks.settings.poll_interval_ms
        sent: dict[str, tuple[Any, ...]] = {}
        left = list(watched)
        while left:
            for task_id in list(left):
                record = await self._visible(ctx, task_id)
                if record is None:  # expired meanwhile
                    left.remove(task_id)
                    continue
                seen = (record.status, record.updated_at, record.status_message)
                if sent.get(task_id) != seen:
                    sent[task_id] = seen
                    now = running.services.clock()
                    fields = wire.task_fields(record, now=now, poll_interval_ms=interval)
                    params = {**fields, "_meta": meta}
                    await self._send(ctx, TaskStatusNotification(method=METHOD, params=params))
                if record.ended_at is not None:
                    left.remove(task_id)
            if left:
                await anyio.sleep(WATCH_S)

    async def _send(self, ctx: Context, notification: Notification[Any, Any]) -> None:
        # The SDK types its notifications as a closed union, but writes any model it is
        # given (`model_dump` by alias): the extension's `notifications/tasks` is one.
        await ctx.session.send_notification(
            cast(ServerNotification, notification), related_request_id=ctx.request_id
        )
