"""Serving over stdio until stdin closes, stdout's reader leaves or a signal arrives, then
tearing down.

SIGINT and SIGTERM (Claude Code stops a stdio server with SIGINT) cancel the
server, whose lifespan then ends every session. The SDK reads stdin in a worker
thread that no cancellation can interrupt, so once the lifespan has finished the
process exits without waiting for that thread. With `--console-listen`, the operator
console (`console.listen`) is served in the same event loop, showing this server's records.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

import anyio

from airlock.policies import Policy

from .app import build_server
from .config import Config
from .metrics import Metrics
from .registration.lifespan import ForRoutes

log = logging.getLogger(__name__)


def _exit_now() -> None:
    log.info("stopped")
    sys.stderr.flush()
    os._exit(0)


async def _serve(
    config: Config, policy: Policy, metrics: Metrics | None, console_listen: str | None
) -> None:
    stopped, routes = anyio.Event(), ForRoutes()
    mcp = build_server(config, policy, on_stopped=stopped.set, metrics=metrics, for_routes=routes)
    console = None
    if console_listen is not None:
        from .console.listen import ConsoleListener  # uvicorn and the console: only if asked

        console = ConsoleListener(config, policy, routes, console_listen)
    async with anyio.create_task_group() as tg:
        if console is not None:
            tg.start_soon(console.serve)

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    log.info("received %s; ending all sessions", signal.Signals(signum).name)
                    serving.cancel()
                    await stopped.wait()
                    _exit_now()

        serving = anyio.CancelScope()
        tg.start_soon(stop_on_signal)
        with serving:
            try:
                await mcp.run_stdio_async()
            except* BrokenPipeError:
                # The client died and its end of stdout went with it: the end stdin's EOF
                # is, found on writing instead. The lifespan has ended every session by now.
                log.info("the client closed its end of stdout; stopping")
        tg.cancel_scope.cancel()


def serve_stdio(
    config: Config,
    policy: Policy,
    metrics: Metrics | None = None,
    console_listen: str | None = None,
) -> None:
    """Serve MCP on stdin/stdout (and the operator console on `console_listen`, if given)."""
    anyio.run(_serve, config, policy, metrics, console_listen)
    _exit_now()
