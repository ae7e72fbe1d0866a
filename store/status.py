"""What `airlock doctor` says about a store: can it be reached, and is its schema the one
this Airlock writes, an older one (upgraded at the next start) or a newer one (refused).

Reads only: never makes a file, a table or a row, and never migrates.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from airlock.errors import StoreError

from .connection import CHECK_URL, create_reader, location, translate
from .migrations import HEAD, current, refuse_newer


@dataclass(frozen=True)
class StoreStatus:
    ok: bool
    detail: str
    fix: str = ""


def store_status(where: Path | str) -> StoreStatus:
    """The state of the store `where` names (blocking: call it off the event loop)."""
    try:
        place = location(where)
    except StoreError as exc:
        return StoreStatus(False, str(exc), "correct the --store URL (or AIRLOCK_STORE_URL)")
    if place.path is not None and not place.path.is_file():
        return StoreStatus(True, f"{place.shown}: no records yet (made at the first start)")
    engine = create_reader(place)
    try:
        with engine.connect() as conn:
            revision = current(conn)
            refuse_newer(conn, place.shown)
    except StoreError as exc:
        return StoreStatus(False, str(exc), "upgrade Airlock to the version that wrote it")
    except SQLAlchemyError as exc:
        return StoreStatus(
            False,
            f"cannot reach {translate(exc, place)}",
            CHECK_URL,
        )
    finally:
        engine.dispose()
    if revision == HEAD:
        return StoreStatus(True, f"{place.shown}: schema {revision} (this Airlock's)")
    before = f"schema {revision}" if revision else "no Airlock schema yet, or a pre-Alembic one"
    return StoreStatus(True, f"{place.shown}: {before}; the next start upgrades it to {HEAD}")


def channel_status(url: str) -> StoreStatus:
    """Whether a fleet's notices can travel through the PostgreSQL at `url`: a LISTEN on a
    channel of doctor's own hears this connection's NOTIFY (a pooler in transaction mode, or
    a role without the right, would break the fleet's revocations and ends). Blocking."""
    import psycopg  # for a fleet only

    from .connection import CONNECT_TIMEOUT_S, shown_url
    from .fleet.pg_notices import CHANNEL

    channel = f"{CHANNEL}_doctor"
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
            conn.execute(f"LISTEN {channel}")
            conn.execute("SELECT pg_notify(%s, 'ping')", (channel,))
            heard = any(n.payload == "ping" for n in conn.notifies(timeout=5, stop_after=1))
    except psycopg.Error as exc:
        return StoreStatus(
            False,
            f"notices: {shown_url(url)}: {type(exc).__name__}",
            "check the --store URL and that the database accepts connections",
        )
    if not heard:
        return StoreStatus(
            False,
            f"notices: {shown_url(url)} delivered no LISTEN/NOTIFY within 5 s",
            "connect the fleet to PostgreSQL directly or through a session-mode pooler",
        )
    return StoreStatus(True, f"notices: LISTEN/NOTIFY works on {shown_url(url)}")
