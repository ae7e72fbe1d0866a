"""Serving over stdio until stdin closes or a signal arrives, then tearing down.

SIGINT and SIGTERM (Claude Code stops a stdio server with SIGINT) cancel the
server, whose lifespan then ends every session. The SDK reads stdin in a worker
thread that cannot be interrupted, so after teardown the process exits without
waiting for that thread.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

import anyio
from mcp.server.mcpserver import MCPServer

log = logging.getLogger(__name__)


async def _serve(mcp: MCPServer) -> None:
    async with anyio.create_task_group() as tg:

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    log.info("received %s; ending all sessions", signal.Signals(signum).name)
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(stop_on_signal)
        await mcp.run_stdio_async()
        tg.cancel_scope.cancel()


def serve_stdio(mcp: MCPServer) -> None:
    anyio.run(_serve, mcp)
    log.info("stopped")
    sys.stderr.flush()
    os._exit(0)
