"""The console on an address of its own, for a stdio server (`--console-listen HOST:PORT`):
the same console app the HTTP server mounts at /console, behind the same request guard
(Host and Origin named for that address, form posts for the console's own forms only),
served by uvicorn in the stdio server's event loop, next to the MCP session it shows.

The stdio server owns SIGINT and SIGTERM (`server.stdio`): this uvicorn takes no signal
and stops when the server's task group is cancelled.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Mount

from airlock.errors import AddressInUse
from airlock.policies import Policy

from ..bearer import RouteAuth, operator_token
from ..config import Config
from ..guard import RequestGuard
from ..http import listen_socket, security_settings
from ..metrics import parse_listen
from ..registration.lifespan import ForRoutes
from . import CONSOLE_PATH, console_for

log = logging.getLogger("airlock.console")


class _Unsignalled(uvicorn.Server):
    """A uvicorn server that leaves the process's signals to the stdio server."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ConsoleListener:
    """The console bound to its address (bound now, so a taken port stops the start with
    one sentence); `serve` runs it until cancelled."""

    def __init__(self, config: Config, policy: Policy, routes: ForRoutes, listen: str) -> None:
        host, port = parse_listen(listen, "--console-listen", "127.0.0.1:8766")
        try:
            self._socket: socket.socket = listen_socket(host, port)
        except AddressInUse as exc:
            raise AddressInUse(
                f"--console-listen {listen}: port {port} is in use; pick another"
            ) from exc
        security = security_settings(host, port, [], [])
        auth = RouteAuth(None, operator_token(config.data_dir))
        app = Starlette(routes=[Mount(CONSOLE_PATH, console_for(config, policy, routes, auth))])
        guarded = RequestGuard(app, security, forms_under=CONSOLE_PATH)
        self._server = _Unsignalled(
            uvicorn.Config(
                guarded, lifespan="off", log_level="warning", access_log=False, log_config=None
            )
        )
        self.url = f"http://{listen}{CONSOLE_PATH}/"

    async def serve(self) -> None:
        log.info("serving the operator console on %s", self.url)
        try:
            await self._server.serve(sockets=[self._socket])
        finally:
            self._socket.close()
