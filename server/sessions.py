"""Session leases: Airlock's own sessions, since the 2026-07-28 protocol has none.

A lease belongs to one tenant, has an idle TTL refreshed by each call and a
maximum lifetime. A call without a session id uses the tenant's default lease
(created on demand). Ending a lease, for whatever reason, cancels the calls still
running in it and tears the session down in one step (`tools.teardown_session`).
An id of another tenant, or of an ended lease, is "unknown session": the same
answer as for an id that never existed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

import anyio

from airlock.errors import LimitExceeded, NotFound, SessionEnded
from airlock.ids import new_id
from airlock.policies import SessionSettings
from airlock.store import SessionRecord
from airlock.tools import EndSessionResult, Services, Session, teardown_session

log = logging.getLogger(__name__)


@dataclass
class _Lease:
    id: str
    tenant: str
    created_at: float
    expires_at: float
    running: set[anyio.CancelScope] = field(default_factory=set)

    def view(self) -> Session:
        return Session(id=self.id, tenant=self.tenant, expires_at=self.expires_at)


class Leases:
    """The live leases of this server process."""

    def __init__(self, services: Services) -> None:
        self._services = services
        self._runs_by_tenant: dict[str, int] = {}
        self._live: dict[str, _Lease] = {}
        self._defaults: dict[str, str] = {}
        self._lock = anyio.Lock()

    async def resolve(self, session_id: str | None, tenant: str, *, fresh: bool = False) -> Session:
        """The caller's live lease, refreshed. Without an id: the tenant's default lease,
        or with `fresh` (remote callers, which can't share one) a new lease."""
        now = self._services.clock()
        async with self._lock:
            found: _Lease | None
            if session_id is None and fresh:
                found = None
            elif session_id is None:
                found = self._live.get(self._defaults.get(tenant, ""))
            else:
                found = self._live.get(session_id)
                if found is None or found.tenant != tenant or self._expired(found, now):
                    raise NotFound(
                        f"unknown session {session_id!r} (it may have ended or expired); "
                        "omit session_id to start a new session"
                    )
            if found is None or self._expired(found, now):
                lease = await self._create(tenant, now)
                if not fresh:
                    self._defaults[tenant] = lease.id
            else:
                lease = found
            lease.expires_at = self._idle_end(lease, now)
        await self._services.db.touch_session(
            lease.id, last_used_at=now, expires_at=lease.expires_at
        )
        return lease.view()

    @asynccontextmanager
    async def running(self, session: Session) -> AsyncIterator[None]:
        """Scope of one call in a lease: ending the lease cancels it."""
        lease = self._live.get(session.id)
        if lease is None:
            raise NotFound(f"unknown session {session.id!r}; omit session_id to start a new one")
        max_runs = self._services.policy_for(lease.tenant).tenants.max_concurrent_runs
        if self._runs_by_tenant.get(lease.tenant, 0) >= max_runs:
            raise LimitExceeded(
                f"{max_runs} runs of this tenant are already running; wait for one to "
                "finish (the operator sets [tenants] max_concurrent_runs)"
            )
        self._runs_by_tenant[lease.tenant] = self._runs_by_tenant.get(lease.tenant, 0) + 1
        with anyio.CancelScope() as scope:
            lease.running.add(scope)
            try:
                yield
            finally:
                lease.running.discard(scope)
                self._runs_by_tenant[lease.tenant] -= 1
                # The idle clock starts when the call ends, not when it started.
                now = self._services.clock()
                lease.expires_at = self._idle_end(lease, now)
        if scope.cancelled_caught:
            raise SessionEnded(
                f"session {session.id} ended while the call was running, so the run was "
                "stopped; start a new session (omit session_id) to run again"
            )

    async def end(self, session_id: str | None, tenant: str, *, reason: str) -> EndSessionResult:
        """End the caller's lease (default lease when no id is given)."""
        async with self._lock:
            target = session_id if session_id is not None else self._defaults.get(tenant)
            lease = self._live.get(target or "")
            if lease is None or lease.tenant != tenant:
                raise NotFound(
                    f"unknown session {session_id!r}; it may have ended already"
                    if session_id
                    else "there is no live default session to end"
                )
            self._forget(lease)
        return await self._teardown(lease, reason)

    async def end_all(self, *, reason: str) -> None:
        async with self._lock:
            leases = list(self._live.values())
            for lease in leases:
                self._forget(lease)
        async with anyio.create_task_group() as tg:
            for lease in leases:
                tg.start_soon(self._teardown, lease, reason)

    async def sweep(self) -> int:
        """End every lease past its idle TTL or maximum lifetime; returns how many."""
        now = self._services.clock()
        async with self._lock:
            # A call still running is activity: idle expiry waits for it (max lifetime doesn't).
            expired = [
                lease
                for lease in self._live.values()
                if now >= self._hard_end(lease) or (not lease.running and self._expired(lease, now))
            ]
            for lease in expired:
                self._forget(lease)
        for lease in expired:
            await self._teardown(lease, "expired")
        return len(expired)

    def end_with(self, stack: AsyncExitStack, session: Session) -> None:
        """End `session` when `stack` closes (a handshake-era connection going away)."""

        async def end() -> None:
            with contextlib.suppress(NotFound):
                await self.end(session.id, session.tenant, reason="client disconnected")

        stack.push_async_callback(end)

    @property
    def services(self) -> Services:
        return self._services

    def live_ids(self) -> list[str]:
        return list(self._live)

    def running_by_tenant(self) -> dict[str, int]:
        """Calls running now, per tenant (each run holds one container)."""
        return {tenant: n for tenant, n in self._runs_by_tenant.items() if n}

    async def _create(self, tenant: str, now: float) -> _Lease:
        lease = _Lease(id=new_id("ses_"), tenant=tenant, created_at=now, expires_at=now)
        lease.expires_at = self._idle_end(lease, now)
        await self._services.db.create_session(
            SessionRecord(
                id=lease.id,
                tenant=tenant,
                created_at=now,
                last_used_at=now,
                expires_at=lease.expires_at,
            )
        )
        self._live[lease.id] = lease
        return lease

    def _forget(self, lease: _Lease) -> None:
        self._live.pop(lease.id, None)
        if self._defaults.get(lease.tenant) == lease.id:
            del self._defaults[lease.tenant]
        for scope in lease.running:
            scope.cancel()

    async def _teardown(self, lease: _Lease, reason: str) -> EndSessionResult:
        with anyio.CancelScope(shield=True):
            result = await teardown_session(self._services, lease.id, lease.tenant, reason=reason)
        log.info(
            "session %s ended (%s); %d container(s) removed",
            lease.id,
            reason,
            result.containers_removed,
        )
        return result

    def _hard_end(self, lease: _Lease) -> float:
        return lease.created_at + self._sessions(lease.tenant).max_lifetime_s

    def _idle_end(self, lease: _Lease, now: float) -> float:
        return min(now + self._sessions(lease.tenant).idle_ttl_s, self._hard_end(lease))

    def _sessions(self, tenant: str) -> SessionSettings:
        return self._services.policy_for(tenant).sessions

    @staticmethod
    def _expired(lease: _Lease, now: float) -> bool:
        return now >= lease.expires_at
