"""Session leases: Airlock's own sessions, since the 2026-07-28 protocol has none.

A lease belongs to one tenant, has an idle TTL refreshed by each call and a
maximum lifetime. Which lease a call gets is the one session rule (`SessionRule`), the same
on every transport and protocol era: where a connection exists (stdio; an HTTP client of the
handshake era, with its Mcp-Session-Id) a call without a session id uses that connection's
default lease, created on demand; where none exists (HTTP on 2026-07-28) it starts a new
lease; `session_id="new"` starts a separate lease everywhere.

`Leases` is the one owner of a session's end on this server, whatever ended it: a local
end (`end_session`, a connection closing its default lease), idle or maximum lifetime (the
sweep), another server's announced end or the records found on re-reading (one re-read
path, `_reread`, for the sweep and a reconnected listener), a call's touch that finds it
ended, this server's shutdown (`end_all`) and a fleet replica leaving (`leave_all`). Every one goes
through `_forget` (under the lock: the lease dropped, its calls cancelled) and then
`_end`, which stops what this server holds of the session (`tools.session_end.STOPS`:
grants, run tokens, containers) and, when the session ends here rather than only being
let go, records and announces its end.
An id of another tenant, or of an ended lease, is "unknown session": the same
answer as for an id that never existed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Hashable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from functools import partial

import anyio

from airlock.errors import LimitExceeded, NotFound, SessionEnded
from airlock.ids import new_id
from airlock.policies import SessionSettings
from airlock.store import AnyNotice, InstanceClaim, Sampled, SessionRecord
from airlock.store import SessionEnded as SessionEndNotice
from airlock.tools import EndSessionResult, Services, Session, stop_session

log = logging.getLogger(__name__)

STDIO = "stdio"
"""The connection key of a stdio server: the process is the one connection."""
NEW_SESSION = "new"
"""The session_id that asks for a new, separate session on every transport."""
START_ANYWHERE = f'pass session_id "{NEW_SESSION}" to start a new session'


@dataclass(frozen=True)
class SessionRule:
    """What a call without a session id gets, told to the model in one sentence per tool:
    the tool descriptions are the only place it reads the rule (tools/list)."""

    connection: bool
    """Whether the call comes over a connection (which then has a default session)."""

    @property
    def argument(self) -> str:
        if self.connection:
            return (
                "A session_id from an earlier result; omit it for this connection's default "
                f'session, or pass "{NEW_SESSION}" for a separate one.'
            )
        return (
            "The session_id of an earlier result, to keep its /workspace files; omit it "
            "to start a new session."
        )

    @property
    def end_argument(self) -> str:
        if self.connection:
            return "The session to end; omit it to end this connection's default session."
        return "The session_id of the session to end."

    @property
    def start_hint(self) -> str:
        if self.connection:
            return f"{START_ANYWHERE}, or omit session_id for this connection's default session"
        return "omit session_id to start a new session"


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
    """The live leases of this server process.

    A lease whose session another server of the fleet ended (its notice, or the records
    on re-reading them) is forgotten here too, its running calls cancelled."""

    def __init__(self, services: Services, claim: InstanceClaim) -> None:
        self._services = services
        self._claim = claim
        self._runs_by_tenant: dict[str, int] = {}
        self._live: dict[str, _Lease] = {}
        self._defaults: dict[tuple[str, Hashable], str] = {}
        self._ending: set[str] = set()
        """Leases let go here whose end is not recorded yet: never adopted back meanwhile."""
        """The default lease of each (tenant, connection)."""
        self._lock = anyio.Lock()
        self.forged_ends = Sampled("ignored a session_ended notice: its session's record goes on")
        services.notices.subscribe(self._ended_elsewhere, "session_ended")
        services.notices.on_resync(self._reread)

    async def resolve(
        self, session_id: str | None, tenant: str, *, connection: Hashable | None
    ) -> tuple[Session, bool]:
        """The caller's live lease, refreshed, and whether this call created it.

        The session rule (`SessionRule`): an id continues that session; `NEW_SESSION` starts
        a separate one; no id means the connection's default lease (created on demand), or a
        new lease where there is no connection (`connection` None: stateless HTTP)."""
        # A server that lost its claim (its database) takes no call it could not record.
        self._claim.check()
        now = self._services.clock()
        rule = SessionRule(connection is not None)
        async with self._lock:
            found: _Lease | None = None
            if session_id == NEW_SESSION:
                pass
            elif session_id is not None:
                found = await self._current(self._live.get(session_id), session_id, tenant, now)
                if found is None:
                    raise NotFound(
                        f"unknown session {session_id!r} (it may have ended or expired); "
                        + rule.start_hint
                    )
            elif connection is not None:
                found = self._live.get(self._defaults.get((tenant, connection), ""))
            if found is not None and not self._expired(found, now):
                lease, created = found, False
            else:
                lease, created = await self._create(tenant, now), True
                if session_id is None and connection is not None:
                    self._defaults[(tenant, connection)] = lease.id
            lease.expires_at = self._idle_end(lease, now)
        # Outside the lock: every call writes here, and no call should wait on another's.
        if not await self._services.db.touch_session(
            lease.id, last_used_at=now, expires_at=lease.expires_at
        ):
            # Ended on another server of the fleet since this one last heard of it.
            await self._let_go(lease.id, lease.tenant, "found on its next call")
            raise NotFound(
                f"unknown session {lease.id!r} (it may have ended or expired); {rule.start_hint}"
            )
        return lease.view(), created

    @asynccontextmanager
    async def running(self, session: Session) -> AsyncIterator[None]:
        """Scope of one call in a lease: ending the lease cancels it."""
        lease = self._live.get(session.id)
        if lease is None:
            raise NotFound(f"unknown session {session.id!r}; {START_ANYWHERE}")
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
                f"stopped; {START_ANYWHERE} to run again"
            )

    async def end(
        self, session_id: str | None, tenant: str, *, connection: Hashable | None, reason: str
    ) -> EndSessionResult:
        """End the caller's lease (the connection's default lease when no id is given)."""
        async with self._lock:
            if session_id is not None:
                target = session_id
            elif connection is not None:
                target = self._defaults.get((tenant, connection), "")
            else:
                raise NotFound(
                    "pass the session_id of the session to end: over this transport a call "
                    "without one has no default session"
                )
            lease = await self._current(
                self._live.get(target), target, tenant, self._services.clock()
            )
            if lease is None:
                raise NotFound(
                    f"unknown session {session_id!r}; it may have ended already"
                    if session_id
                    else "there is no live default session to end"
                )
            self._forget(lease)
        return await self._end(lease, ended_because=reason)

    async def end_all(self, *, reason: str) -> None:
        async with self._lock:
            leases = list(self._live.values())
            for lease in leases:
                self._forget(lease)
        async with anyio.create_task_group() as tg:
            for lease in leases:
                tg.start_soon(partial(self._end, lease, ended_because=reason))

    async def leave_all(self) -> None:
        """Let go of every lease without ending its session: a replica of a fleet going
        away, whose sessions live on at the others. Its calls in them are cancelled and its
        containers of them removed; their records are left as they are."""
        async with anyio.create_task_group() as tg:
            for lease in list(self._live.values()):
                tg.start_soon(self._let_go, lease.id, lease.tenant, "left to the fleet")

    async def sweep(self) -> int:
        """End every lease past its idle TTL or maximum lifetime, and let go of those another
        server of the fleet ended (its runs here cancelled, its containers here removed);
        returns how many ended here."""
        now = self._services.clock()
        await self._reread()
        async with self._lock:
            # A call still running is activity: idle expiry waits for it (max lifetime
            # doesn't).
            expired = [
                lease
                for lease in self._live.values()
                if now >= self._hard_end(lease) or (not lease.running and self._expired(lease, now))
            ]
            for lease in expired:
                self._forget(lease)
        for lease in expired:
            await self._end(lease, ended_because="expired")
        return len(expired)

    def end_with(self, stack: AsyncExitStack, session: Session) -> None:
        """End `session` when `stack` closes (a handshake-era connection going away): only
        for the connection's default lease, never one the agent asked for by "new"."""

        async def end() -> None:
            with contextlib.suppress(NotFound):
                await self.end(
                    session.id, session.tenant, connection=None, reason="client disconnected"
                )

        stack.push_async_callback(end)

    async def _ended_elsewhere(self, notice: AnyNotice) -> None:
        # This server's own end did all of this before it published.
        mine = notice.origin == self._services.notices.origin
        if not isinstance(notice, SessionEndNotice) or mine:
            return
        # A session not live here costs nothing (a flood of unknown ids takes neither the
        # lock the calls take nor a query); one that is is let go only if its record says
        # it ended: a notice is a hint that anyone who may connect can forge.
        lease = self._live.get(notice.session_id)
        if lease is None or lease.tenant != notice.tenant:
            return
        record = await self._services.db.get_session(lease.id)
        if record is None or record.ended_at is None:
            self.forged_ends.warn()
            return
        await self._let_go(lease.id, lease.tenant, "ended on another server")

    async def _reread(self) -> None:
        """The one re-read of the records of the leases live here: let go of each whose
        session the records say ended (its notice may have been missed), and take the later
        expiry of each another server used since. Read outside the lock: calls resolving
        meanwhile do not wait."""
        for lease in list(self._live.values()):
            record = await self._services.db.get_session(lease.id)
            if record is not None and record.ended_at is not None:
                await self._let_go(lease.id, lease.tenant, "found on re-reading")
            elif record is not None:
                lease.expires_at = max(lease.expires_at, record.expires_at)

    async def _let_go(self, session_id: str, tenant: str, how: str) -> None:
        """The local half of a session that goes on, or ended, elsewhere: its calls here
        cancelled first (so they answer that the session ended), then what this server
        holds of it stopped. Its record is not touched."""
        async with self._lock:
            lease = self._live.get(session_id)
            if lease is None or lease.tenant != tenant:
                return
            self._forget(lease)
        await self._end(lease, ended_because=None, how=how)

    @property
    def services(self) -> Services:
        return self._services

    def live_ids(self) -> list[str]:
        return list(self._live)

    def running_by_tenant(self) -> dict[str, int]:
        """Calls running now, per tenant (each run holds one container)."""
        return {tenant: n for tenant, n in self._runs_by_tenant.items() if n}

    async def fork(self, parent: Session, version: int | None) -> tuple[Session, int]:
        """A new lease of the parent's tenant whose workspace is the parent's at `version`
        (its head when None), and that version. It counts toward the tenant's live
        sessions like any other and carries nothing else of the parent: no grant, run
        token or kept browser (those belong to a session id)."""
        now = self._services.clock()
        if version is None:
            version = (await self._services.db.workspace_head(parent.id)).version
        async with self._lock:
            lease = await self._create(parent.tenant, now, forked=(parent.id, version))
        return lease.view(), version

    async def _create(
        self, tenant: str, now: float, *, forked: tuple[str, int] | None = None
    ) -> _Lease:
        most = self._services.policy_for(tenant).tenants.max_live_sessions
        live = [lease for lease in self._live.values() if lease.tenant == tenant]
        if sum(1 for lease in live if not self._expired(lease, now)) >= most:
            raise LimitExceeded(
                f"{most} sessions of this tenant are live already; pass the session_id of one "
                "of them, or end_session one you are done with (the operator sets [tenants] "
                "max_live_sessions)"
            )
        lease = _Lease(id=new_id("ses_"), tenant=tenant, created_at=now, expires_at=now)
        lease.expires_at = self._idle_end(lease, now)
        record = SessionRecord(
            id=lease.id,
            tenant=tenant,
            created_at=now,
            last_used_at=now,
            expires_at=lease.expires_at,
            parent_id=forked[0] if forked else None,
            parent_version=forked[1] if forked else None,
        )
        if forked is None:
            await self._services.db.create_session(record)
        else:
            await self._services.db.fork_session(record, at=now)
        self._live[lease.id] = lease
        return lease

    async def _current(
        self, lease: _Lease | None, session_id: str, tenant: str, now: float
    ) -> _Lease | None:
        """The live lease `session_id` of `tenant`, as its record tells: this server's, or
        one another server of the fleet started or used since (adopted here); None when it
        ended, expired or is another tenant's."""
        if lease is not None and lease.tenant == tenant and not self._expired(lease, now):
            return lease
        if session_id in self._ending:
            return None
        record = await self._services.db.get_session(session_id)
        if record is None or record.tenant != tenant or record.ended_at is not None:
            return None
        if lease is None:
            lease = _Lease(
                id=record.id,
                tenant=tenant,
                created_at=record.created_at,
                expires_at=record.expires_at,
            )
        lease.expires_at = max(lease.expires_at, record.expires_at)
        if self._expired(lease, now) or now >= self._hard_end(lease):
            return None
        self._live[lease.id] = lease
        return lease

    def _forget(self, lease: _Lease) -> None:
        """Let go of `lease` here and cancel its calls; its `_end` must follow."""
        self._ending.add(lease.id)
        self._live.pop(lease.id, None)
        for key in [key for key, lease_id in self._defaults.items() if lease_id == lease.id]:
            del self._defaults[key]
        for scope in lease.running:
            scope.cancel()

    async def _end(
        self, lease: _Lease, *, ended_because: str | None, how: str | None = None
    ) -> EndSessionResult:
        """The one end of a session on this server, after `_forget`: what this server holds
        of it stopped and, with `ended_because`, its end recorded and announced
        (`tools.session_end.stop_session`). Shielded: a cancelled caller (a shutdown, a
        disconnect) must not leave half a session behind."""
        with anyio.CancelScope(shield=True):
            try:
                result = await stop_session(
                    self._services, lease.tenant, lease.id, ended_because=ended_because
                )
            finally:
                # Recorded now (or failing to be: the next server to read it may adopt it).
                self._ending.discard(lease.id)
        log.info(
            "session %s %s (%s); %d container(s) removed",
            lease.id,
            "let go here" if ended_because is None else "ended",
            how or ended_because,
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
