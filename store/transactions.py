"""The ground every family of records stands on (`store/database/`): opening a store
(`connection.py`) and bringing its schema to the migrations' head (`migrations/`), then one
transaction per call on a worker thread, so the event loop never waits on the database.
Database and OSError failures leave as `StoreError`; no SQL of the records lives here.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Self, TypeVar

import anyio.to_thread
from sqlalchemy import Connection, Engine, event, text
from sqlalchemy.exc import DBAPIError, DisconnectionError, SQLAlchemyError
from sqlalchemy.pool import ConnectionPoolEntry

from airlock.errors import StoreError

from .connection import (
    CHECK_URL,
    Location,
    begin_sqlite,
    create,
    location,
    switch_to_wal,
    translate,
)
from .migrations import refuse_newer, upgrade
from .retry import at_once

_T = TypeVar("_T")

# Two servers opening one new PostgreSQL database at once: one migrates, the other waits.
_MIGRATION_LOCK = 0x61_69_72_6C_6F_63_6B  # "airlock"
_TAKE_MIGRATION_LOCK = text("SELECT pg_advisory_xact_lock(:key)")
# SERIALIZABLE transactions PostgreSQL aborted for a conflict are tried again this often.
_SERIALIZABLE_TRIES = 8
_RETRYABLE = ("40001", "40P01")  # serialization_failure, deadlock_detected


def _conflict(exc: BaseException) -> bool:
    """Whether PostgreSQL aborted a transaction only for a conflict with another one."""
    return isinstance(exc, DBAPIError) and getattr(exc.orig, "sqlstate", None) in _RETRYABLE


def checked_limit(limit: int) -> int:
    """`limit` as a query may take it: SQLite would read a negative one as none."""
    if limit < 0:
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


class Transactions:
    """What every family of records stands on: the engine, a transaction per call on a
    worker thread, the ping. On SQLite one connection, used by one thread at a time; on
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
    async def open(cls, where: Path | str, *, instance_id: str | None = None) -> Self:
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
        same database (`postgres/`, its pool); a SQLite store has none to share (its one
        connection is this object's) and raises `StoreError`."""
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
            try:
                if not serializable:
                    return self._once(fn, write, serializable)
                tries = at_once(on=_conflict, tries=_SERIALIZABLE_TRIES)
                done: _T = tries(self._once, fn, write, serializable)
                return done
            except (SQLAlchemyError, sqlite3.Error) as exc:
                # sqlite3's own: the BEGIN sent on the driver's connection.
                raise translate(exc, self._place) from exc

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
