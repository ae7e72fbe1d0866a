"""The server's lifespan: `running.serving` builds (and takes down) everything a serving
Airlock is made of; the SDK hands what it yields to every MCP request as its lifespan
context. The lifespan also leaves it in `ForRoutes` for the plain HTTP routes, and feeds
the metrics."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

from mcp.server.mcpserver import MCPServer

from airlock.policies import Policy
from airlock.tools import Services

from ..config import Config
from ..engine import Engine, EngineFactory
from ..metrics import Metrics
from ..running import Running, serving


@dataclass
class ForRoutes:
    """What the lifespan built, for the plain HTTP routes (/healthz, /approvals): the SDK
    hands its lifespan context to MCP requests only, so the lifespan also leaves it here
    while it serves (for /healthz, /approvals and the console). Tools and resources read
    the SDK's context (`AirlockContext`)."""

    running: Running | None = None

    def services(self) -> Services | None:
        """What the running server is made of, or None while it starts or stops."""
        return self.running.services if self.running is not None else None


def lifespan(
    config: Config,
    policy: Policy,
    *,
    tenant_policies: Mapping[str, Policy],
    routes: ForRoutes,
    metrics: Metrics,
    on_stopped: Callable[[], None] | None,
    clock: Callable[[], float] = time.time,
    engine_side: EngineFactory = Engine,
) -> Callable[[MCPServer], AbstractAsyncContextManager[Running]]:
    """The lifespan to give `MCPServer`; `on_stopped` runs once it has taken everything down."""

    @asynccontextmanager
    async def serve(_: MCPServer) -> AsyncIterator[Running]:
        try:
            async with serving(
                config,
                policy,
                tenant_policies=tenant_policies,
                clock=clock,
                engine_side=engine_side,
            ) as running:
                running.services.events.subscribe(metrics.observe)
                metrics.watch(running.live_state)
                routes.running = running
                try:
                    yield running
                finally:
                    routes.running = None
                    metrics.watch(lambda: None)
        finally:
            if on_stopped is not None:
                on_stopped()

    return serve
