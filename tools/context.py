"""What a tool handler works with: the services it calls and the caller's session.

The server builds one `Services` at startup and resolves a `Session` for every
call; handlers take both and never look at the transport.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from .events import Events

if TYPE_CHECKING:
    # Annotations only: the operator's commands import `iso_time` from here, and must not
    # load the engine or the proxy for it.
    from airlock.broker import Grants, RunTokens, Vault
    from airlock.egress import Egress
    from airlock.policies import ImageSettings, Policy
    from airlock.sandbox import Backend, Ready
    from airlock.store import BlobStore, Database, Notices

    from .kept_browsers import KeptBrowsers


def _in_process() -> Notices:
    """One server's notices (no fleet), made when a `Services` is: not at import."""
    from airlock.store import Notices

    return Notices("")


def _no_browsers() -> KeptBrowsers:
    """The server's kept browsers, none yet (made when a `Services` is: not at import)."""
    from .kept_browsers import KeptBrowsers

    return KeptBrowsers()


@dataclass(frozen=True)
class Session:
    """The caller's live session lease, already checked against the caller."""

    id: str
    tenant: str
    expires_at: float

    @property
    def expires_at_iso(self) -> str:
        return iso_time(self.expires_at)


class Engine(Protocol):
    """The engine side, which may still be starting (connecting, building the image);
    `server.engine.Engine` is the one the server runs."""

    async def ready(self, image: ImageSettings | None = None) -> Ready:
        """The backend, the image built with these [image] settings (missing: the
        server's) and the runtime, once available; raises what blocks them."""
        ...

    async def browser(self) -> Ready:
        """The backend, the browser image (built on first use) and the runtime."""
        ...

    def connected(self) -> Backend | None:
        """The backend if it is up already; teardown needs no image and must not wait for one."""
        ...


@dataclass(frozen=True)
class Services:
    db: Database
    blobs: BlobStore
    engine: Engine
    policy: Policy
    grants: Grants
    tokens: RunTokens
    vault: Vault
    egress: Egress
    instance_id: str
    """This server instance: the owner recorded on its runs (`store/fleet/claims.py`)."""
    clock: Callable[[], float] = field(default=time.time)
    tenant_policies: Mapping[str, Policy] = field(default_factory=dict)
    events: Events = field(default_factory=Events)
    notices: Notices = field(default_factory=_in_process)
    """How this server tells the fleet what it changed and hears what others did
    (`store/fleet/notices.py`; in-process on one server, subscribed by `tools.fleet`)."""
    browsers: KeptBrowsers = field(default_factory=_no_browsers)
    """The browsers `browse(keep=true)` left open, by id (`tools.kept_browsers`)."""

    def policy_for(self, tenant: str) -> Policy:
        """The tenant's own policy, or the server's."""
        return self.tenant_policies.get(tenant, self.policy)


def iso_time(timestamp: float) -> str:
    return (
        datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )
