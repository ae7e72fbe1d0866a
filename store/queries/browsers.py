"""Kept browsers (`tools/kept_browsers.py`): a row when one opens, a row per call naming its
browse run, the close with its reason; the audit's list with each browser's runs, and the
count of a tenant's open ones that a fleet's cap reads.

Belongs here: the queries. Does not belong here: when a browser opens or closes (`tools`),
how the audit prints them (`server/audit.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, and_, func, insert, select, true, update

from ..records import KeptBrowserRecord, KeptBrowserStep
from ..schema import kept_browser_runs, kept_browsers, runs

LOST = "its server was lost"
"""Why a browser of a server that died is closed (with that server's runs)."""


def open_browser(conn: Connection, rec: KeptBrowserRecord) -> None:
    conn.execute(insert(kept_browsers), rec.model_dump(exclude={"steps"}))


def add_step(conn: Connection, browser_id: str, step: int, run_id: str) -> None:
    conn.execute(
        insert(kept_browser_runs), {"browser_id": browser_id, "step": step, "run_id": run_id}
    )


def close_browser(conn: Connection, browser_id: str, *, at: float, why: str) -> None:
    """Its first close stands: a second (a late sweep) changes nothing."""
    query = (
        update(kept_browsers)
        .where(kept_browsers.c.id == browser_id, kept_browsers.c.closed_at.is_(None))
        .values(closed_at=at, closed_why=why)
    )
    conn.execute(query)


def close_browsers_of(conn: Connection, instance_ids: Sequence[str], at: float) -> int:
    """Close the open browsers kept by servers that died; how many."""
    query = (
        update(kept_browsers)
        .where(
            kept_browsers.c.instance_id.in_(list(instance_ids)), kept_browsers.c.closed_at.is_(None)
        )
        .values(closed_at=at, closed_why=LOST)
    )
    closed: int = conn.execute(query).rowcount
    return closed


def count_open(conn: Connection, tenant: str, *, except_instance: str) -> int:
    """The tenant's open kept browsers on every server but `except_instance`."""
    query = select(func.count()).where(
        kept_browsers.c.tenant == tenant,
        kept_browsers.c.closed_at.is_(None),
        kept_browsers.c.instance_id != except_instance,
    )
    return int(conn.execute(query).scalar_one())


def step_of_run(conn: Connection, run_id: str) -> tuple[str, int] | None:
    """(browser id, call number) when the run was a call on a kept browser."""
    query = select(kept_browser_runs.c.browser_id, kept_browser_runs.c.step).where(
        kept_browser_runs.c.run_id == run_id
    )
    row = conn.execute(query).first()
    return (str(row[0]), int(row[1])) if row is not None else None


def list_browsers(
    conn: Connection, *, tenant: str | None, session_id: str | None, limit: int
) -> list[KeptBrowserRecord]:
    """Newest first, each with its calls in order and how each run ended."""
    chosen = and_(
        true(),
        *([kept_browsers.c.tenant == tenant] if tenant is not None else []),
        *([kept_browsers.c.session_id == session_id] if session_id is not None else []),
    )
    query = (
        select(*kept_browsers.c)
        .where(chosen)
        .order_by(kept_browsers.c.opened_at.desc(), kept_browsers.c.id)
        .limit(limit)
    )
    found = [dict(row) for row in conn.execute(query).mappings()]
    if not found:
        return []
    steps = (
        select(
            kept_browser_runs.c.browser_id,
            kept_browser_runs.c.step,
            kept_browser_runs.c.run_id,
            runs.c.status,
            runs.c.created_at,
            runs.c.duration_ms,
        )
        .select_from(kept_browser_runs.outerjoin(runs, runs.c.id == kept_browser_runs.c.run_id))
        .where(kept_browser_runs.c.browser_id.in_([row["id"] for row in found]))
        .order_by(kept_browser_runs.c.browser_id, kept_browser_runs.c.step)
    )
    by_browser: dict[str, list[KeptBrowserStep]] = {}
    for row in conn.execute(steps).mappings():
        fields = dict(row)
        by_browser.setdefault(fields.pop("browser_id"), []).append(
            KeptBrowserStep.model_validate(fields)
        )
    return [
        KeptBrowserRecord.model_validate(row | {"steps": tuple(by_browser.get(row["id"], ()))})
        for row in found
    ]
