"""The database: sessions, runs, artifact metadata, session workspaces and the audit's
records, on SQLite (the default, a file in the data dir) or PostgreSQL (a fleet's).

`Database` is the one way in: it opens the store (`connection.py`), brings its schema to
the migrations' head (`migrations/`), and runs each call's queries (`queries/`) in one
transaction on a worker thread, so the event loop never waits on the database. Blob
contents live in `blobs.py`; who may see which row (tenants, sessions) is decided by the
callers, which filter by the ids they pass. Database and OSError failures leave this
module as `StoreError`; a missing row is `None` or an empty list, never an exception.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import anyio.to_thread
from sqlalchemy import Connection, Engine, event, text
from sqlalchemy.exc import DBAPIError, DisconnectionError, SQLAlchemyError
from sqlalchemy.pool import ConnectionPoolEntry

from airlock.errors import RunEndedByFleet, StoreError

from .connection import (
    CHECK_URL,
    Location,
    begin_sqlite,
    create,
    location,
    switch_to_wal,
    translate,
)
from .migrations import HEAD, refuse_newer, upgrade
from .migrations import SCHEMA_VERSION as SCHEMA_VERSION
from .queries import audit, browsers, replicas, runs, tasks, workspace
from .records import (
    ApprovalRecord,
    ArtifactRecord,
    DrillRecord,
    EgressCount,
    EgressRecord,
    GrantRecord,
    HatchCopyRecord,
    KeptBrowserRecord,
    PatchRecord,
    ReplicaRecord,
    RunRecord,
    RunStatus,
    SessionRecord,
    TaskRecord,
    TaskStatus,
    WorkspaceFile,
)
from .workspace import WorkspaceCommit, WorkspaceDelta, WorkspaceHead

_T = TypeVar("_T")

ENDED_BY_FENCING = (
    "its server lost its claim on the fleet's database while it ran and stopped its sandbox"
)

SCHEMA_REVISION = HEAD

# Two servers opening one new PostgreSQL database at once: one migrates, the other waits.
_MIGRATION_LOCK = 0x61_69_72_6C_6F_63_6B  # "airlock"
_TAKE_MIGRATION_LOCK = text("SELECT pg_advisory_xact_lock(:key)")
# SERIALIZABLE transactions PostgreSQL aborted for a conflict are tried again this often.
_SERIALIZABLE_TRIES = 8
_RETRYABLE = ("40001", "40P01")  # serialization_failure, deadlock_detected


def _limit(limit: int) -> int:
    if limit < 0:
        # SQLite reads a negative LIMIT as "no limit".
        raise ValueError(f"limit must be 0 or more, not {limit}")
    return limit


@contextlib.contextmanager
def _transaction(conn: Connection, place: Location, *, write: bool) -> Iterator[None]:
    """One transaction on `conn`: committed when the block ends, rolled back if it raises."""
    if not place.is_sqlite:
        with conn.begin():
            yield
        return
    conn.begin()
    try:
        begin_sqlite(conn, write=write)
        yield
    except BaseException:
        # SQLite may already have rolled back on its own (e.g. disk full), or never have
        # begun (the write lock not had in time): then this only ends SQLAlchemy's.
        conn.rollback()
        raise
    conn.commit()


def _prepare(place: Location, instance_id: str | None) -> tuple[Engine, Connection | None]:
    """Make the engine, refuse a newer schema (writing nothing), then migrate to the head.
    For SQLite, also the one connection every call then uses."""
    engine = create(place, instance_id)
    try:
        conn = engine.connect()
        try:
            with _transaction(conn, place, write=False):
                refuse_newer(conn, place.shown)
            if place.is_sqlite:
                switch_to_wal(conn, place)
            with _transaction(conn, place, write=True):
                if not place.is_sqlite:
                    conn.execute(_TAKE_MIGRATION_LOCK, {"key": _MIGRATION_LOCK})
                upgrade(conn, place.shown)
        except BaseException:
            conn.close()
            raise
    except BaseException:
        engine.dispose()
        raise
    if place.is_sqlite:
        return engine, conn
    conn.close()
    return engine, None


class Database:
    """The Airlock database. On SQLite one connection, used by one thread at a time; on
    PostgreSQL a pool, used concurrently (each call one transaction)."""

    def __init__(self, place: Location, engine: Engine, conn: Connection | None) -> None:
        """Use `Database.open`; this only wraps an engine already migrated (and for
        SQLite its one connection)."""
        self._place = place
        self._engine = engine
        self._conn = conn
        self._closed = False
        self._pinging = False
        self._lock: contextlib.AbstractContextManager[object] = (
            threading.Lock() if place.is_sqlite else contextlib.nullcontext()
        )
        # Pooled connections made before the last `renew_connections` are replaced when
        # next checked out (SQLAlchemy closes one refused with DisconnectionError and makes
        # a new one in its place); the migration's connection counts as of generation 0.
        self._generation = 0
        if not place.is_sqlite:
            event.listen(engine, "connect", self._connected)
            event.listen(engine, "checkout", self._checked_out)

    @classmethod
    async def open(cls, where: Path | str, *, instance_id: str | None = None) -> Database:
        """Open the store `where` names: a path is a SQLite file (made, with its parent
        directory, if missing); a string is a URL, `postgresql://…` or `sqlite:///PATH`
        (its connections named for server `instance_id`, `connection.application_name`).
        Its schema is brought to this Airlock's; a newer one is refused, untouched."""
        place = location(where)
        try:
            engine, conn = await anyio.to_thread.run_sync(_prepare, place, instance_id)
        except (SQLAlchemyError, sqlite3.Error) as exc:
            fix = "" if place.is_sqlite else f"; {CHECK_URL}"
            raise StoreError(f"cannot open {translate(exc, place)}{fix}") from exc
        except OSError as exc:
            raise StoreError(f"cannot open database {place.shown}: {exc}") from exc
        return cls(place, engine, conn)

    @property
    def shown(self) -> str:
        """The store as messages may name it (a path, or a URL without its password)."""
        return self._place.shown

    @property
    def is_fleet(self) -> bool:
        """Whether the records are on PostgreSQL, where a fleet's replicas meet."""
        return not self._place.is_sqlite

    @property
    def engine(self) -> Engine:
        """The engine of a PostgreSQL store, for what a fleet keeps beside its records on the
        same database (`pg_blobs`, `pg_documents`, its pool); a SQLite store has none to
        share (its one connection is this object's) and raises `StoreError`."""
        if self._place.is_sqlite:
            raise StoreError(f"the store {self._place.shown} is SQLite: it shares no engine")
        return self._engine

    async def renew_connections(self) -> None:
        """Replace the pool's connections with new ones as they are next needed (a fleet
        replica's, after it regained its claim: those from before a partition may be dead
        without knowing it), those in use included, at their next checkout."""
        self._generation += 1

    def _connected(self, _dbapi: object, record: ConnectionPoolEntry) -> None:
        record.info["generation"] = self._generation

    def _checked_out(self, _dbapi: object, record: ConnectionPoolEntry, _proxy: object) -> None:
        if record.info.get("generation", 0) != self._generation:
            raise DisconnectionError("made before the pool was renewed")

    async def close(self) -> None:
        """Close the connections; later calls raise `StoreError`."""

        def close() -> None:
            with self._lock:
                self._closed = True
                if self._conn is not None:
                    self._conn.close()
                self._engine.dispose()

        await anyio.to_thread.run_sync(close)

    def _run(self, fn: Callable[[Connection], _T], write: bool, serializable: bool) -> _T:
        with self._lock:
            if self._closed:
                raise StoreError(f"database {self._place.shown} is closed")
            attempt = 1
            while True:
                try:
                    return self._once(fn, write, serializable)
                except DBAPIError as exc:
                    code = getattr(exc.orig, "sqlstate", None)
                    if not (serializable and code in _RETRYABLE and attempt < _SERIALIZABLE_TRIES):
                        raise translate(exc, self._place) from exc
                except (SQLAlchemyError, sqlite3.Error) as exc:
                    # sqlite3's own: the BEGIN sent on the driver's connection.
                    raise translate(exc, self._place) from exc
                attempt += 1

    def _once(self, fn: Callable[[Connection], _T], write: bool, serializable: bool) -> _T:
        if self._conn is not None:
            with _transaction(self._conn, self._place, write=write):
                return fn(self._conn)
        with self._engine.connect() as conn:
            if serializable:
                conn.execution_options(isolation_level="SERIALIZABLE")
            with _transaction(conn, self._place, write=write):
                return fn(conn)

    async def _read(self, fn: Callable[[Connection], _T]) -> _T:
        return await anyio.to_thread.run_sync(self._run, fn, False, False)

    async def _write(self, fn: Callable[[Connection], _T], *, serializable: bool = False) -> _T:
        """Run `fn` in one transaction: all of its changes are kept, or none."""
        return await anyio.to_thread.run_sync(self._run, fn, True, serializable)

    async def ping(self, within_s: float) -> bool:
        """Whether the store answered one trivial query within `within_s` seconds;
        `StoreError` when it refused (`/readyz`). At most one ping is out at a time: the
        thread of one that did not answer is left to finish by itself (a cut network holds
        a connect far longer than a probe waits), and a ping meanwhile waits for it, so
        frequent probes never pile up threads the calls need."""
        deadline = anyio.current_time() + within_s
        while self._pinging:
            if anyio.current_time() >= deadline:
                return False
            await anyio.sleep(0.01)
        self._pinging = True
        began = threading.Event()

        def ping() -> None:
            began.set()
            try:
                self._run(lambda conn: conn.execute(text("SELECT 1")), False, False)
            finally:
                self._pinging = False

        try:
            with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
                await anyio.to_thread.run_sync(ping, abandon_on_cancel=True)
                return True
            return False
        finally:
            if not began.is_set():
                self._pinging = False  # cancelled before its thread took it: none is out

    # Sessions

    async def create_session(self, rec: SessionRecord) -> None:
        """Insert a new session; an existing id is a `StoreError`."""
        await self._write(lambda conn: runs.create_session(conn, rec))

    async def get_session(self, session_id: str) -> SessionRecord | None:
        return await self._read(lambda conn: runs.get_session(conn, session_id))

    async def list_sessions(
        self, *, live_at: float | None = None, tenant: str | None = None, limit: int = 100
    ) -> list[SessionRecord]:
        """Sessions, newest first: with `live_at`, only those neither ended nor expired then."""
        limit = _limit(limit)
        return await self._read(
            lambda conn: runs.list_sessions(conn, live_at=live_at, tenant=tenant, limit=limit)
        )

    async def touch_session(
        self, session_id: str, *, last_used_at: float, expires_at: float
    ) -> bool:
        """Record a use of a live session and its new expiry; an ended session stays as it
        was. Whether the session was live (False: it ended, maybe on another server)."""
        return await self._write(
            lambda conn: runs.touch_session(
                conn, session_id, last_used_at=last_used_at, expires_at=expires_at
            )
        )

    async def end_session(
        self, session_id: str, *, ended_at: float, reason: str, containers_removed: int
    ) -> None:
        """Record the end of a session; the first end wins, later ones change nothing."""
        await self._write(
            lambda conn: runs.end_session(
                conn,
                session_id,
                ended_at=ended_at,
                reason=reason,
                containers_removed=containers_removed,
            )
        )

    # Runs

    async def create_run(self, rec: RunRecord, *, max_running: int | None = None) -> bool:
        """Insert a new run, unless its tenant already has `max_running` runs `running`
        (of every server on these records: counted and inserted in one transaction under
        the tenant's quota lock, so concurrent servers cannot overshoot); whether it was
        inserted. Its session must exist and its id must be new (else `StoreError`)."""
        return await self._write(lambda conn: runs.create_run(conn, rec, max_running=max_running))

    async def finish_run(self, rec: RunRecord) -> None:
        """Write the outcome fields of the run `rec.id` (status through error), if its record
        is still open: `running` under its owner's current claim, live on PostgreSQL
        (`queries/runs.finish_run`). Else nothing of `rec` is written and `RunEndedByFleet`
        names what the record says; a record still `running` under a lapsed claim is ended
        `killed` first (`ENDED_BY_FENCING`).

        The fields fixed at creation (session, tenant, language, limits, code) are kept.
        A run that was never created is a `StoreError`: its outcome would be lost.
        """

        def finish(conn: Connection) -> bool:
            if runs.finish_run(conn, rec):
                return True
            # Still `running` but no longer under a live claim of its owner: `killed`, since
            # the owner stopped its sandbox when it found the claim lost.
            at = rec.finished_at if rec.finished_at is not None else rec.created_at
            runs.end_fenced_run(conn, rec.id, error=ENDED_BY_FENCING, finished_at=at)
            return False

        if not await self._write(finish):
            await self._refuse_closed(rec.id)

    async def _refuse_closed(self, run_id: str) -> NoReturn:
        """Raise for a run whose end was not written: `RunEndedByFleet` naming what its
        record says, or `StoreError` for a run that was never created."""
        stored = await self.get_run(run_id)
        if stored is None:
            raise StoreError(f"database {self.shown}: cannot finish unknown run {run_id!r}")
        raise RunEndedByFleet(run_id, stored.status, stored.error)

    async def end_orphaned_runs(self, *, error: str, finished_at: float) -> int:
        """End `killed` every run left `running` whose owner holds no current claim on it
        (`queries/runs.end_orphaned_runs`); how many. A fleet's sweep: on SQLite, where no
        claim is listed, it ends nothing (the flocks of `instances.py` find the dead)."""
        if self._place.is_sqlite:
            return 0
        return await self._write(
            lambda conn: runs.end_orphaned_runs(conn, error=error, finished_at=finished_at)
        )

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await self._read(lambda conn: runs.get_run(conn, run_id))

    async def list_runs(
        self, *, session_id: str | None = None, tenant: str | None = None, limit: int = 50
    ) -> list[RunRecord]:
        """Runs matching every filter given, newest first, at most `limit` of them."""
        limit = _limit(limit)
        return await self._read(
            lambda conn: runs.list_runs(conn, session_id=session_id, tenant=tenant, limit=limit)
        )

    async def mark_unfinished_runs(
        self, *, instance_ids: Sequence[str], status: RunStatus, error: str, finished_at: float
    ) -> int:
        """End every run still `running` that one of `instance_ids` owns (servers that
        died: see `instances.py`), and close their kept browsers; return how many runs."""
        return await self._write(
            lambda conn: runs.mark_unfinished_runs(
                conn, instance_ids=instance_ids, status=status, error=error, finished_at=finished_at
            )
        )

    # Tasks

    async def create_task(self, rec: TaskRecord) -> None:
        """Insert a new task; an existing id is a `StoreError`. Committed when this returns,
        so a `tasks/get` on any server reading these records finds it."""
        await self._write(lambda conn: tasks.create_task(conn, rec))

    async def get_task(self, task_id: str) -> TaskRecord | None:
        return await self._read(lambda conn: tasks.get_task(conn, task_id))

    async def set_task_run(self, task_id: str, run_id: str) -> None:
        """Name the run a task's call started (what its failure names if its server dies)."""
        await self._write(lambda conn: tasks.set_task_run(conn, task_id, run_id))

    async def set_task_input(
        self,
        task_id: str,
        *,
        at: float,
        requests: dict[str, Any] | None,
        call: dict[str, Any] | None = None,
        message: str | None = None,
        instance_id: str | None = None,
    ) -> bool:
        """Move a task to `input_required` (with `requests` and the `call` to retry), or,
        with None, back to `working` (one caller wins: the one that retries the call on
        `instance_id`); either with `message`. Whether it moved."""
        return await self._write(
            lambda conn: tasks.set_input(
                conn,
                task_id,
                at=at,
                requests=requests,
                call=call,
                message=message,
                instance_id=instance_id,
            )
        )

    async def note_task(self, task_id: str, *, at: float, message: str) -> bool:
        """Set an open task's status message (what `tasks/get` shows of its progress)."""
        return await self._write(lambda conn: tasks.note(conn, task_id, at, message))

    async def request_task_cancel(self, task_id: str, *, at: float) -> bool:
        """Record a caller's cancel of an open task (the server running it stops it when
        told, `TaskCancelRequested`); whether the task was open and not asked before."""
        return await self._write(lambda conn: tasks.request_cancel(conn, task_id, at))

    async def forget_expired_tasks(self, *, now: float) -> int:
        """Delete the tasks that ended more than their `ttl_s` before `now`; how many."""
        return await self._write(lambda conn: tasks.forget_expired(conn, now))

    async def end_task(
        self,
        task_id: str,
        *,
        status: TaskStatus,
        at: float,
        message: str | None = None,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> bool:
        """End an open task with its outcome; the first end wins. Whether this one did."""
        return await self._write(
            lambda conn: tasks.end_task(
                conn, task_id, status=status, at=at, message=message, result=result, error=error
            )
        )

    # Kept browsers

    async def open_kept_browser(self, rec: KeptBrowserRecord) -> None:
        await self._write(lambda conn: browsers.open_browser(conn, rec))

    async def add_kept_browser_step(self, browser_id: str, step: int, run_id: str) -> None:
        await self._write(lambda conn: browsers.add_step(conn, browser_id, step, run_id))

    async def close_kept_browser(self, browser_id: str, *, at: float, why: str) -> None:
        await self._write(lambda conn: browsers.close_browser(conn, browser_id, at=at, why=why))

    async def count_open_kept_browsers(self, tenant: str, *, except_instance: str) -> int:
        """The tenant's open kept browsers on every other server of these records."""
        return await self._read(
            lambda conn: browsers.count_open(conn, tenant, except_instance=except_instance)
        )

    async def kept_browser_step_of(self, run_id: str) -> tuple[str, int] | None:
        """(browser id, call number) when run `run_id` was a call on a kept browser."""
        return await self._read(lambda conn: browsers.step_of_run(conn, run_id))

    async def list_kept_browsers(
        self, *, tenant: str | None = None, session_id: str | None = None, limit: int = 50
    ) -> list[KeptBrowserRecord]:
        limit = _limit(limit)
        return await self._read(
            lambda conn: browsers.list_browsers(
                conn, tenant=tenant, session_id=session_id, limit=limit
            )
        )

    # Artifacts and run inputs

    async def add_artifacts(self, records: Sequence[ArtifactRecord]) -> None:
        """Insert all of `records` or none; a (run_id, path) already present is a `StoreError`."""
        await self._write(lambda conn: runs.add_artifacts(conn, records))

    async def get_artifact(self, run_id: str, path: str) -> ArtifactRecord | None:
        return await self._read(lambda conn: runs.get_artifact(conn, run_id, path))

    async def list_artifacts(self, run_id: str) -> list[ArtifactRecord]:
        """The artifacts of one run, ordered by path."""
        return await self._read(lambda conn: runs.list_artifacts(conn, run_id))

    async def add_run_inputs(self, run_id: str, files: Sequence[WorkspaceFile]) -> None:
        """Record the files run `run_id` started with (all or none)."""
        if files:
            await self._write(lambda conn: runs.add_run_inputs(conn, run_id, files))

    async def list_run_inputs(self, run_id: str) -> list[WorkspaceFile]:
        """The files a run started with, ordered by path; empty for none or an unknown run."""
        return await self._read(lambda conn: runs.list_run_inputs(conn, run_id))

    # Egress decisions and capability grants

    async def add_egress(self, records: Sequence[EgressRecord]) -> None:
        if records:
            await self._write(lambda conn: audit.add_egress(conn, records))

    async def list_egress(
        self,
        *,
        tenant: str | None = None,
        session_id: str | None = None,
        run_id: str | None = None,
        limit: int = 200,
    ) -> list[EgressRecord]:
        """Egress decisions, oldest first, of one run, session or tenant (or all)."""
        filters = {"tenant": tenant, "session_id": session_id, "run_id": run_id}
        limit = _limit(limit)
        return await self._read(lambda conn: audit.list_egress(conn, filters, limit))

    async def egress_counts(
        self, *, since: float, tenant: str | None = None, except_tenant: str | None = None
    ) -> list[EgressCount]:
        """Egress decisions from `since` on, summed by rule, verdict and destination, each
        with its latest reason; of one tenant, or of all but `except_tenant`."""
        return await self._read(
            lambda conn: audit.egress_counts(
                conn, since=since, tenant=tenant, except_tenant=except_tenant
            )
        )

    async def last_egress_use(
        self, *, tenant: str | None = None, except_tenant: str | None = None
    ) -> dict[str, float]:
        """The last time each rule let a request out, over all time."""
        return await self._read(
            lambda conn: audit.last_egress_use(conn, tenant=tenant, except_tenant=except_tenant)
        )

    async def record_grant(
        self,
        rec: GrantRecord,
        *,
        max_per_session: int | None = None,
        max_live_per_tenant: int | None = None,
    ) -> str | None:
        """Insert `rec`, unless its session already holds `max_per_session` grants live at
        `rec.created_at` (unrevoked, unexpired) or its tenant `max_live_per_tenant`, of every
        server on these records: counted and inserted under the tenant's quota lock. The
        quota that refused it ("max_per_session" or "max_live_per_tenant"), or None."""
        return await self._write(
            lambda conn: audit.record_grant(
                conn, rec, max_per_session=max_per_session, max_live_per_tenant=max_live_per_tenant
            ),
        )

    async def mark_grants_revoked(self, grant_ids: Sequence[str], *, at: float) -> None:
        if grant_ids:
            await self._write(lambda conn: audit.mark_grants_revoked(conn, grant_ids, at=at))

    async def revoked_grants(self, grant_ids: Sequence[str]) -> set[str]:
        """Which of `grant_ids` the records say are revoked (by any server of a fleet): the
        check that refuses a revoked grant even before its notice arrives. One lookup by
        primary key per id."""
        ids = list(dict.fromkeys(grant_ids))
        return await self._read(lambda conn: audit.revoked_grants(conn, ids)) if ids else set()

    async def get_grant(self, grant_id: str) -> GrantRecord | None:
        return await self._read(lambda conn: audit.get_grant(conn, grant_id))

    async def list_grants(
        self, *, tenant: str | None = None, session_id: str | None = None, limit: int = 100
    ) -> list[GrantRecord]:
        """Grants, newest first."""
        filters = {"tenant": tenant, "session_id": session_id}
        limit = _limit(limit)
        return await self._read(lambda conn: audit.list_grants(conn, filters, limit))

    # Approvals

    async def create_approval(
        self,
        rec: ApprovalRecord,
        *,
        max_pending: int | None = None,
        max_pending_tenant: int | None = None,
    ) -> str | None:
        """Insert `rec`, unless its session already has `max_pending` approvals still
        pending (unexpired at `rec.created_at`) or its tenant `max_pending_tenant`: counted
        and inserted in one serializable transaction so concurrent requests (of any
        server) cannot overshoot. The cap that refused it ("session" or "tenant"), or None
        when inserted."""
        return await self._write(
            lambda conn: audit.create_approval(conn, rec, max_pending, max_pending_tenant),
            serializable=True,
        )

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        return await self._read(lambda conn: audit.get_approval(conn, approval_id))

    async def list_approvals(
        self,
        *,
        tenant: str | None = None,
        status: str | None = None,
        limit: int = 100,
        newest_first: bool = False,
    ) -> list[ApprovalRecord]:
        """Approvals, oldest first (or, with `newest_first`, the latest `limit` of them)."""
        filters = {"tenant": tenant, "status": status}
        limit = _limit(limit)
        return await self._read(
            lambda conn: audit.list_approvals(conn, filters, limit, newest_first=newest_first)
        )

    async def move_approval(
        self,
        approval_id: str,
        *,
        from_status: str,
        to_status: str,
        at: float,
        by: str | None = None,
        grant_id: str | None = None,
        live_at: float | None = None,
    ) -> bool:
        """Move one approval from `from_status` to `to_status`, atomically; False when it
        is not in `from_status` (or, with `live_at`, expired by then): someone else won."""
        return await self._write(
            lambda conn: audit.move_approval(
                conn,
                approval_id,
                from_status=from_status,
                to_status=to_status,
                at=at,
                by=by,
                grant_id=grant_id,
                live_at=live_at,
            )
        )

    async def expire_approvals(
        self, *, now: float, session_id: str | None = None
    ) -> list[ApprovalRecord]:
        """Mark pending approvals past their wait (or every pending one of `session_id`,
        which ended) expired; return them as they were."""
        return await self._write(
            lambda conn: audit.expire_approvals(conn, now=now, session_id=session_id)
        )

    # A fleet's replicas

    async def list_replicas(self) -> list[ReplicaRecord]:
        """The replicas a fleet's PostgreSQL lists, oldest claim first, each with whether its
        lock is held and its last heartbeat; empty on SQLite, which has no fleet."""
        if self._place.is_sqlite:
            return []
        return await self._read(replicas.list_replicas)

    # Drills

    async def record_drill(self, rec: DrillRecord) -> None:
        await self._write(lambda conn: audit.record_drill(conn, rec))

    async def list_drills(self, *, limit: int = 20) -> list[DrillRecord]:
        """Drills, newest first."""
        limit = _limit(limit)
        return await self._read(lambda conn: audit.list_drills(conn, limit))

    # Session workspaces

    async def workspace_head(self, session_id: str) -> WorkspaceHead:
        """The current version of a session's workspace and its entries, read together.

        A session without commits (or unknown) is version 0 with no entries.
        """
        return await self._read(lambda conn: workspace.head(conn, session_id))

    async def commit_workspace(
        self, session_id: str, delta: WorkspaceDelta, *, writer: str | None, at: float
    ) -> WorkspaceCommit:
        """Lay `delta` onto the session's current head in one transaction.

        `writer` (a run id, or another name such as a copy-in) is recorded as the last writer
        of every entry the commit changes. Paths other writers changed since
        `delta.base_version` merge as `store.workspace.merge` describes; every path where
        the two differ is in the result's `conflicts`. A commit that changes nothing makes
        no new version. Commits of one session are ordered, across servers too
        (`queries/workspace.py`). The session must exist (else `StoreError`).
        """
        return await self._write(lambda conn: workspace.commit(conn, session_id, delta, writer, at))

    async def commit_run(
        self,
        session_id: str,
        run_id: str,
        produced: Sequence[ArtifactRecord],
        delta: WorkspaceDelta,
        *,
        at: float,
    ) -> WorkspaceCommit:
        """Keep what run `run_id` left: its artifacts, and `delta` committed as
        `commit_workspace` does with the run as writer, in one transaction that first holds
        the run's record open (`running`, under its owner's current claim): else nothing is
        written and it raises `RunEndedByFleet`, so a fenced replica's files never land."""

        def commit(conn: Connection) -> WorkspaceCommit | None:
            if not runs.hold_open_run(conn, run_id):
                return None
            runs.add_artifacts(conn, produced)
            return workspace.commit(conn, session_id, delta, run_id, at)

        done = await self._write(commit)
        if done is None:
            await self._refuse_closed(run_id)
        return done

    async def fork_session(self, child: SessionRecord, *, at: float) -> None:
        """Create `child`, forked from `child.parent_id` at `child.parent_version`: its
        workspace is that version's, the same blobs, no content copied. A version the
        parent does not have is `InvalidRequest`."""
        await self._write(lambda conn: workspace.fork(conn, child, at))

    async def restore_workspace(
        self, session_id: str, version: int, *, writer: str, at: float
    ) -> WorkspaceCommit:
        """Commit a new version equal to version `version` of the session's own history
        (a fork's starts at its fork point); nothing of the history is rewritten."""
        return await self._write(
            lambda conn: workspace.restore(conn, session_id, version, writer, at)
        )

    async def workspace_versions(self, session_id: str) -> list[tuple[int, int, str | None, float]]:
        """(version, base version, writer, time) of each version of the session, oldest
        first: a fork's first is written by its parent, a restore's by "restore of ..."."""
        return await self._read(lambda conn: workspace.versions(conn, session_id))

    # Hatch copies and patches

    async def add_copy(self, rec: HatchCopyRecord) -> None:
        await self._write(lambda conn: workspace.add_copy(conn, rec))

    async def get_copy(self, copy_id: str) -> HatchCopyRecord | None:
        return await self._read(lambda conn: workspace.get_copy(conn, copy_id))

    async def add_patch(self, rec: PatchRecord) -> None:
        await self._write(lambda conn: workspace.add_patch(conn, rec))

    async def get_patch(self, patch_id: str) -> PatchRecord | None:
        return await self._read(lambda conn: workspace.get_patch(conn, patch_id))

    async def list_patches(
        self, *, session_id: str | None = None, limit: int = 50, except_tenant: str | None = None
    ) -> list[PatchRecord]:
        """Patches, newest first, of one session (or all), none of `except_tenant`."""
        limit = _limit(limit)
        return await self._read(
            lambda conn: workspace.list_patches(conn, session_id, limit, except_tenant)
        )

    async def find_patch(self, copy_id: str, source_sha256: str) -> PatchRecord | None:
        """The first patch of a copy made from exactly this source, if one was made already."""
        return await self._read(lambda conn: workspace.find_patch(conn, copy_id, source_sha256))
