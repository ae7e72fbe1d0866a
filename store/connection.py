"""Where the records live and how to reach them: a store location (a SQLite file, or a
`postgresql://` URL) becomes a SQLAlchemy engine set up for Airlock, and a failure of
either database becomes a `StoreError` that never shows a password.

SQLite: the file is made 0600 under a 0700 directory, opened in WAL mode with a busy
timeout (a second process, e.g. `airlock gc`, may hold the write lock briefly) and foreign
keys on, and a write transaction starts with BEGIN IMMEDIATE so a concurrent writer makes
it wait instead of failing halfway. PostgreSQL: psycopg 3 (`postgresql://` means it), a
small connection pool. No SQL of the records lives here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.pool import NullPool, StaticPool

from airlock.errors import StoreError

from .private import private_dir

BUSY_TIMEOUT_MS = 5000
CONNECT_TIMEOUT_S = 5

KEEPALIVES: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}
"""libpq's settings for every PostgreSQL connection of a server (its pool, its claim, its
notices): a database that vanished without closing the socket (a cut network) is found by
TCP keepalives within about idle + interval * count = 11 s when idle, and by
`tcp_user_timeout` (ms) within 10 s when sent data goes unacknowledged, instead of the
kernel's two hours."""

_POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
_FIX = "pass --store postgresql://USER:PASSWORD@HOST:PORT/DATABASE (or sqlite:///PATH)"
CHECK_URL = (
    "check the store URL (--store or AIRLOCK_STORE_URL: host, port, database, user and "
    "password) and that PostgreSQL runs there"
)


@dataclass(frozen=True)
class Location:
    """A store to open: its engine URL, and how messages name it (never with a password)."""

    url: URL
    shown: str
    path: Path | None = None
    """The SQLite file; None for PostgreSQL."""
    own_directory: bool = True
    """Whether the SQLite file's directory is Airlock's to make private (0700): the data
    dir's is; the directory of a `sqlite:///PATH` URL (say /tmp) is left as it is."""

    @property
    def is_sqlite(self) -> bool:
        return self.path is not None


def sqlite_location(path: Path) -> Location:
    return Location(
        url=URL.create("sqlite+pysqlite", database=str(path)), shown=str(path), path=path
    )


def location(where: Path | str) -> Location:
    """The store that `where` names: a path is a SQLite file; a string is a URL,
    `postgresql://…` or `sqlite:///PATH`. Anything else is a `StoreError` naming the fix."""
    if isinstance(where, Path):
        return sqlite_location(where)
    try:
        url = make_url(where.strip())
    except (ArgumentError, ValueError) as exc:  # ValueError: a port that is no number
        raise StoreError(f"the store {shown_url(where)!r} is not a database URL: {_FIX}") from exc
    if url.drivername in ("sqlite", "sqlite+pysqlite"):
        if not url.database or url.database == ":memory:":
            raise StoreError(f"the store {shown_url(where)!r} names no file: {_FIX}")
        path = Path(url.database).expanduser()
        return Location(
            url=sqlite_location(path).url, shown=str(path), path=path, own_directory=False
        )
    if url.drivername not in _POSTGRES_SCHEMES:
        raise StoreError(
            f"the store {shown_url(where)!r} is neither PostgreSQL nor SQLite (Airlock drives "
            f"PostgreSQL with psycopg 3): {_FIX}"
        )
    url = url.set(drivername="postgresql+psycopg")
    return Location(url=url, shown=shown_url(url))


_SECRET_KEYS = frozenset({"password", "sslpassword"})
"""libpq's parameters that hold a secret (the user's password, the password of the client
certificate's key): never shown, whatever their spelling's case."""
# libpq's key=value form: `key = value`, a value either single-quoted (with backslash
# escapes) or running to the next unescaped space.
_CONNINFO_PAIR = re.compile(r"\s*([A-Za-z_]+)\s*=\s*('(?:[^'\\]|\\.)*'|(?:[^\s'\\]|\\.)*)")
_SHOWN_KEYS = ("host", "hostaddr", "port", "dbname", "user")


def shown_url(url: URL | str) -> str:
    """A database's URL as a message may show it, never with a password: the one place that
    decides it, for a parsed URL, a string a user gave (a URL, or libpq's `key=value`
    form), and one that parses as neither. A password in the userinfo becomes `***`; one in
    the query (`?password=`, `?sslpassword=`, percent-encoded or not) is left out."""
    if isinstance(url, str):
        text = url.strip()
        if "://" not in text:
            return _shown_conninfo(text)
        if text.split("?", 1)[0].count("@") > 1:
            # An unencoded `@` in the password: SQLAlchemy (like libpq) would end the
            # userinfo at the first one and show the rest as a host.
            return _shown_unparsed(text)
        try:
            url = make_url(text)
        except (ArgumentError, ValueError):
            return _shown_unparsed(text)
    query = {k: v for k, v in url.query.items() if k.lower() not in _SECRET_KEYS}
    # Made anew: `URL.set` reads password=None as "keep it".
    safe = URL.create(url.drivername, url.username, None, url.host, url.port, url.database, query)
    shown = safe.render_as_string(hide_password=False).replace("postgresql+psycopg", "postgresql")
    return shown if url.password is None else shown.replace("@", ":***@", 1)


def _shown_conninfo(text: str) -> str:
    """libpq's `key=value` string: only the keys that name the database, rebuilt from what
    parsed, so a value that did not parse is never echoed; a path (no `=`) as it is."""
    if "=" not in text:
        return text
    pairs = {m[1].lower(): m[2] for m in _CONNINFO_PAIR.finditer(text) if m[1]}
    shown = [f"{key}={pairs[key]}" for key in _SHOWN_KEYS if key in pairs]
    if _SECRET_KEYS & pairs.keys():
        shown.append("password=***")
    return " ".join(shown) or "a PostgreSQL connection string"


def _shown_unparsed(text: str) -> str:
    """A `scheme://…` string SQLAlchemy could not parse: its scheme and what follows the last
    `@` (a password may hold an unencoded `@`), without any query."""
    scheme, _, rest = text.partition("://")
    userinfo, at, host = rest.rpartition("@")
    shown = host.split("?", 1)[0]
    return f"{scheme}://***@{shown}" if at and userinfo else f"{scheme}://{shown}"


def translate(exc: BaseException, place: Location) -> StoreError:
    """The `StoreError` for a database failure: the driver's own sentence, and which store
    failed."""
    return StoreError(f"database {place.shown}: {driver_sentence(exc)}")


def driver_sentence(exc: BaseException) -> str:
    """What the driver said of a database failure, on one line: never the SQL's parameters,
    which SQLAlchemy's text carries (a blob's bytes, a vault's ciphertext)."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        detail = str(exc.orig)
    else:
        detail = str(exc).split("\n", 1)[0]
    # One line: libpq's messages carry a tab-indented hint on a line of their own.
    return " ".join(detail.split())


def application_name(instance_id: str) -> str:
    """What PostgreSQL shows (`pg_stat_activity.application_name`) for the connections of
    server `instance_id`: how its claim finds its own backends left by a cut network
    (`pg_claims`), and how an operator tells the replicas apart."""
    return f"airlock:{instance_id}"[:63]  # PostgreSQL keeps NAMEDATALEN - 1 bytes


def create(place: Location, instance_id: str | None = None) -> Engine:
    """The engine for `place`, its connections named for server `instance_id` when given;
    for SQLite, the file and its directory are made private first."""
    if place.path is not None:
        return _sqlite_engine(place.path, own_directory=place.own_directory)
    return create_engine(
        place.url,
        connect_args={
            **KEEPALIVES,
            # A database that does not answer (a cut network) fails the call, not hangs it.
            "connect_timeout": CONNECT_TIMEOUT_S,
            "application_name": application_name(instance_id or "store"),
        },
        # A fleet replica's calls run concurrently; a few connections cover them, and a
        # connection the server closed is found at its next use, not on every checkout.
        pool_size=5,
        max_overflow=10,
        pool_recycle=1800,
    )


def create_reader(place: Location) -> Engine:
    """An engine that only reads `place` (`status.py`): for SQLite, an existing file is
    opened read-only, never made, its directory never changed."""
    if place.path is None:
        return create_engine(place.url, poolclass=NullPool)
    url = URL.create(
        "sqlite+pysqlite", database=f"file:{place.path}?mode=ro", query={"uri": "true"}
    )
    return create_engine(url, poolclass=NullPool)


def _sqlite_engine(path: Path, *, own_directory: bool) -> Engine:
    try:
        if own_directory:
            private_dir(path.parent)
        # Made 0600 here: SQLite gives the -wal and -shm files the same mode.
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    except OSError as exc:
        raise StoreError(f"cannot open database {path}: {exc}") from exc
    # One connection, used by one thread at a time (the Database's lock), as before.
    engine = create_engine(
        URL.create("sqlite+pysqlite", database=str(path)),
        poolclass=StaticPool,
        connect_args={"check_same_thread": False},
    )
    event.listen(engine, "connect", _sqlite_connected)
    return engine


def _sqlite_connected(dbapi_connection: Any, _record: object) -> None:
    # No implicit transactions from the sqlite3 module: `begin_sqlite` opens each one.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # First, so that even switching to WAL waits out another process's lock.
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def begin_sqlite(conn: Connection, *, write: bool) -> None:
    """Begin SQLite's transaction inside SQLAlchemy's (the driver itself starts none),
    IMMEDIATE for a write, so a concurrent writer in another process makes it wait
    (busy_timeout) instead of failing at its first write. Sent on the driver's connection,
    raising sqlite3's errors: this is on every call of the warm path."""
    raw = conn.connection.dbapi_connection
    assert raw is not None  # a checked-out connection always has one
    raw.cursor().execute("BEGIN IMMEDIATE" if write else "BEGIN")


def switch_to_wal(conn: Connection, place: Location) -> None:
    """Put the SQLite file in WAL mode: on the driver's connection, since SQLite refuses
    it inside a transaction and SQLAlchemy would open one."""
    raw = conn.connection.dbapi_connection
    assert raw is not None  # a checked-out connection always has one
    cursor = raw.cursor()
    cursor.execute("PRAGMA journal_mode = WAL")
    mode = (cursor.fetchone() or ("",))[0]
    if mode != "wal":
        raise StoreError(f"database {place.shown}: cannot switch to WAL mode (still {mode!r})")
