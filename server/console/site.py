"""The console's Starlette app put together: its state (`app.Console`), the routes of
`actions`, `pages` and `files`, and the headers every response carries. A module of its own
because those three import `app`, so the app cannot import them back."""

from __future__ import annotations

import time
from collections.abc import Callable

from starlette.applications import Starlette
from starlette.routing import BaseRoute
from starlette.types import ASGIApp

from airlock.policies import ConsoleSettings
from airlock.tools import Services

from ..bearer import RouteAuth
from .actions import routes as action_routes
from .app import Console, SecurityHeaders, environment
from .files import routes as file_routes
from .pages import routes as page_routes
from .signin import ConsoleSessions, SignInLimiter


def console_app(
    *,
    serving: Callable[[], Services | None],
    auth: RouteAuth,
    settings: ConsoleSettings,
    policy_label: str,
    clock: Callable[[], float] = time.time,
) -> ASGIApp:
    """The console, to mount at /console: `serving` gives what the running server is made
    of (None while it starts or stops); `auth` knows the operator token."""
    console = Console(
        templates=environment(),
        sessions=ConsoleSessions(settings.session_s, clock),
        limiter=SignInLimiter(clock),
        auth=auth,
        serving=serving,
        policy_label=policy_label,
        clock=clock,
    )
    routes: list[BaseRoute] = [
        *action_routes(console),
        *page_routes(console),
        *file_routes(console),
    ]
    return SecurityHeaders(Starlette(routes=routes))
