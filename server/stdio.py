"""Serving over stdio until stdin closes or a signal arrives, then tearing down.

SIGINT and SIGTERM (Claude Code stops a stdio server with SIGINT) cancel the
server, whose lifespan then ends every session. The SDK reads stdin in a worker
thread that no cancellation can interrupt, so once the lifespan has finished the
process exits without waiting for that thread.
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

log = logging.getLogger(__name__)


def _exit_now() -> None:
    log.info("stopped")
    sys.stderr.flush()
    os._exit(0)


async def _serve(config: Config, policy: Policy, metrics: Metrics | None) -> None:
    stopped = anyio.Event()
    mcp = build_server(config, policy, on_stopped=stopped.set, metrics=metrics)
    async with anyio.create_task_group() as tg:

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
            await mcp.run_stdio_async()
        tg.cancel_scope.cancel()


def serve_stdio(config: Config, policy: Policy, metrics: Metrics | None = None) -> None:
    anyio.run(_serve, config, policy, metrics)
    _exit_now()
