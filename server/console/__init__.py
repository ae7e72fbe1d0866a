"""The operator console (`/console`): approvals with one click, sessions and runs with their
code, output, egress and artifacts, the exception review and the last drill, and a fleet's
replicas, as server-rendered HTML that works without JavaScript (docs/operating.md, "The operator
console").

- `site.py`: the Starlette app put together from the routes below.
- `app.py`: the console's state, the template environment (everything printed is inert text,
  control and invisible characters made visible), the headers every response carries
  (strict CSP, no referrer, no caching), and the gates: a signed-in cookie for every page,
  the cookie and the session's CSRF token for every form.
- `signin.py`: the signed, expiring cookie, the CSRF tokens, the limit on failed sign-ins.
- `actions.py`: the forms (sign in, sign out, approve, deny).
- `pages.py`: the pages and what each reads.
- `files.py`: artifact downloads (attachments only), validated screenshots, static files.
- `views.py`: records as rows of plain strings for the templates.
- `templates/`, `static/`: the markup, the one style sheet and the one script.

Mounted by `server.http` on the HTTP server and by `server.stdio` on `--console-listen`'s
address; `server.guard` lets the console's own form posts through, which `app.Console.form`
then checks. Sign-in takes the operator token only (`bearer.RouteAuth.is_operator`).
"""

from __future__ import annotations

from starlette.types import ASGIApp

from airlock.policies import Policy

from ..bearer import RouteAuth
from ..config import Config
from ..registration.lifespan import ForRoutes
from ..tenant_policy import server_policy_label
from .site import console_app

CONSOLE_PATH = "/console"

__all__ = ["CONSOLE_PATH", "console_app", "console_for"]


def console_for(config: Config, policy: Policy, routes: ForRoutes, auth: RouteAuth) -> ASGIApp:
    """The console of the server whose lifespan fills `routes`, to mount at `CONSOLE_PATH`."""
    return console_app(
        serving=routes.services,
        auth=auth,
        settings=policy.console,
        policy_label=server_policy_label(config),
    )
