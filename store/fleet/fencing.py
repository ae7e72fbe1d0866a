"""Fencing: which replica may still write a run's end, and the sweeps that end the runs no
live replica holds. A run records the claim epoch its owner held when it was created
(`claim_epoch`); its end and its workspace commit are written only while it is `running`
under that epoch (and, on PostgreSQL, while its owner's advisory lock is held), so a
replica cut off from the database, whose peers ended its runs, has its late results refused
(`RunEndedByFleet`, raised by `database/runs.py`). Epoch 0 (one server on SQLite, runs from
before migration 0005) is fenced by the status alone.

Queries only, each a function of an open `Connection` inside the caller's transaction; who
holds which claim is `pg_claims.py` (a fleet) and `claims.py` (one machine's servers).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import (
    ColumnElement,
    Connection,
    bindparam,
    exists,
    func,
    not_,
    or_,
    select,
    text,
    update,
)

from ..queries.browsers import close_browsers_of
from ..queries.rows import lock_tenant, run_params
from ..queries.tasks import fail_tasks_of
from ..records import RunRecord, RunStatus
from ..schema import airlock_instances, runs
from .locks import held_lock

# A run's owner still holds the claim it started under: its row lists the run's epoch (a
# run without one, 0, has only its status to go by). A replica that lost its claim and took
# it again has a new epoch; one a peer found dead has no row: either way its old runs are
# no longer its to end.
_CLAIM_CURRENT: ColumnElement[bool] = or_(
    runs.c.claim_epoch == 0,
    exists().where(
        airlock_instances.c.id == runs.c.instance_id,
        airlock_instances.c.epoch == runs.c.claim_epoch,
    ),
)
_OPEN = (runs.c.status == "running") & _CLAIM_CURRENT
# On PostgreSQL the claim must also be live: its advisory lock held, so a replica that lost
# its claim writes nothing meanwhile, and a run counts toward its tenant's quota only while
# its owner lives.
_CLAIM_LIVE = text(
    f"""
    EXISTS (SELECT 1 FROM airlock_instances i JOIN pg_locks l
      ON {held_lock("i.lock_key")}
     WHERE i.id = runs.instance_id AND (runs.claim_epoch = 0 OR i.epoch = runs.claim_epoch))
    """
)
_OPEN_LIVE = _OPEN & or_(runs.c.claim_epoch == 0, _CLAIM_LIVE)
_OWNER_LISTED = exists().where(
    airlock_instances.c.id == runs.c.instance_id,
    or_(runs.c.claim_epoch == 0, airlock_instances.c.epoch == runs.c.claim_epoch),
)
_EPOCH_OF = select(airlock_instances.c.epoch).where(airlock_instances.c.id == bindparam("owner"))
_LIVE_RUNNING = (
    select(func.count())
    .select_from(runs)
    .where(runs.c.tenant == bindparam("tenant"), runs.c.status == "running", _CLAIM_LIVE)
)
_END_FENCED = (
    update(runs)
    .where(runs.c.id == bindparam("run_id"), runs.c.status == "running")
    .values(status="killed", error=bindparam("error"), finished_at=bindparam("finished_at"))
)
_OUTCOME = (
    "status",
    "finished_at",
    "duration_ms",
    "exit_code",
    "cpu_seconds",
    "peak_memory_bytes",
    "stdout_bytes",
    "stdout_sha256",
    "stderr_bytes",
    "stderr_sha256",
    "error",
)
# By dialect: PostgreSQL's "open" also asks for the owner's lock.
_FINISH_RUN = {
    dialect: update(runs)
    .where(runs.c.id == bindparam("run_id"), open_)
    .values({name: bindparam(name) for name in _OUTCOME})
    for dialect, open_ in (("sqlite", _OPEN), ("postgresql", _OPEN_LIVE))
}
_HOLD_OPEN_RUN = {
    dialect: select(runs.c.id).where(runs.c.id == bindparam("id"), open_).with_for_update(of=runs)
    for dialect, open_ in (("sqlite", _OPEN), ("postgresql", _OPEN_LIVE))
}


def claim_epoch(conn: Connection, owner: str) -> int:
    """The epoch of `owner`'s current claim, which a run it creates records; 0 for an
    instance without a listed claim (one server on SQLite)."""
    epoch = conn.execute(_EPOCH_OF, {"owner": owner}).scalar()
    return int(epoch or 0)


def over_quota(conn: Connection, tenant: str, max_running: int) -> bool:
    """Whether `tenant` already has `max_running` live runs, counted under the tenant's
    quota lock (held until the transaction ends, so the count holds across servers while
    the caller inserts)."""
    lock_tenant(conn, tenant)
    return _live_running(conn, tenant) >= max_running


def _live_running(conn: Connection, tenant: str) -> int:
    """How many of `tenant`'s runs are `running` under a live claim."""
    if conn.dialect.name == "postgresql":
        count: int = conn.execute(_LIVE_RUNNING, {"tenant": tenant}).scalar_one()
        return count
    # One machine's servers: a dead one's runs are ended at the next server's start and
    # by every live one's housekeeping (`claims.py`).
    return conn.execute(
        select(func.count())
        .select_from(runs)
        .where(runs.c.tenant == tenant, runs.c.status == "running")
    ).scalar_one()


def finish_run(conn: Connection, rec: RunRecord) -> int:
    """Write the outcome fields of run `rec.id` if it is still open: `running`, under its
    owner's current claim (in the same UPDATE, so a peer's end and this one cannot both
    land); how many rows changed (0 or 1)."""
    params = run_params(rec)
    values = {name: params[name] for name in _OUTCOME}
    query = _FINISH_RUN[conn.dialect.name]
    return conn.execute(query, {"run_id": rec.id, **values}).rowcount


def end_fenced_run(conn: Connection, run_id: str, *, error: str, finished_at: float) -> int:
    """End `killed` run `run_id` if still `running`: its owner's claim lapsed under it (the
    owner stopped its sandbox when it found the claim lost), so no result of it stands."""
    params = {"run_id": run_id, "error": error, "finished_at": finished_at}
    return conn.execute(_END_FENCED, params).rowcount


def hold_open_run(conn: Connection, run_id: str) -> bool:
    """Whether run `run_id` is still open (as `finish_run` means it), locking its row until
    the transaction ends so no peer ends it meanwhile (PostgreSQL; SQLite's writing
    transaction holds the whole database)."""
    query = _HOLD_OPEN_RUN[conn.dialect.name]
    return conn.execute(query, {"id": run_id}).first() is not None


def end_orphaned_runs(conn: Connection, *, error: str, finished_at: float) -> int:
    """End `killed` every run still `running` whose owner holds no claim it could end it
    under: unlisted (it stopped, or a peer found it dead) or listed at another epoch (it lost
    its claim, stopped its runs, and took the claim again); how many."""
    query = (
        update(runs)
        .where(runs.c.status == "running", not_(_OWNER_LISTED))
        .values(status="killed", error=error, finished_at=finished_at)
    )
    return conn.execute(query).rowcount


def mark_unfinished_runs(
    conn: Connection,
    *,
    instance_ids: Sequence[str],
    status: RunStatus,
    error: str,
    finished_at: float,
) -> int:
    query = (
        update(runs)
        .where(runs.c.status == "running", runs.c.instance_id.in_(list(instance_ids)))
        .values(status=status, error=error, finished_at=finished_at)
    )
    ended: int = conn.execute(query).rowcount
    # Their tasks end with them, in this transaction: a task never outlives its run open;
    # nor a kept browser its server.
    fail_tasks_of(conn, instance_ids, finished_at)
    close_browsers_of(conn, instance_ids, finished_at)
    return ended
