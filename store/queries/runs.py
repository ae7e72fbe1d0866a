"""Sessions, runs, their artifacts and inputs: the rows the warm path of `run_code` writes."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import (
    ColumnElement,
    Connection,
    bindparam,
    exists,
    func,
    insert,
    not_,
    or_,
    select,
    text,
    update,
)

from ..records import ArtifactRecord, RunRecord, RunStatus, SessionRecord, WorkspaceFile
from ..schema import airlock_instances, artifacts, run_inputs, runs, sessions
from .browsers import close_browsers_of
from .rows import lock_tenant, matching, record_columns, run_from_row, run_params
from .tasks import fail_tasks_of

_INSERT_SESSION = insert(sessions)
_GET_SESSION = select(*sessions.c).where(sessions.c.id == bindparam("id"))
_TOUCH_SESSION = (
    update(sessions)
    .where(sessions.c.id == bindparam("session_id"), sessions.c.ended_at.is_(None))
    .values(last_used_at=bindparam("last_used_at"), expires_at=bindparam("expires_at"))
)
_END_SESSION = (
    update(sessions)
    .where(sessions.c.id == bindparam("session_id"), sessions.c.ended_at.is_(None))
    .values(
        ended_at=bindparam("ended_at"),
        end_reason=bindparam("end_reason"),
        containers_removed=bindparam("containers_removed"),
    )
)

# A run's owner still holds the claim it started under: its row lists the run's epoch (a
# run without one, 0, has only its status to go by). A replica that lost its claim and took
# it again has a new epoch; one a peer found dead has no row: either way its old runs are
# no longer its to end (the fencing of `pg_claims`).
_CLAIM_CURRENT: ColumnElement[bool] = or_(
    runs.c.claim_epoch == 0,
    exists().where(
        airlock_instances.c.id == runs.c.instance_id,
        airlock_instances.c.epoch == runs.c.claim_epoch,
    ),
)
_OPEN = (runs.c.status == "running") & _CLAIM_CURRENT
# On PostgreSQL the claim must also be live: its advisory lock held (as in
# queries/replicas.py), so a replica that lost its claim writes nothing meanwhile, and a run
# counts toward its tenant's quota only while its owner lives.
_CLAIM_LIVE = text(
    """
    EXISTS (SELECT 1 FROM airlock_instances i JOIN pg_locks l
      ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
     AND l.classid = ((i.lock_key >> 32) & 4294967295)::oid
     AND l.objid = (i.lock_key & 4294967295)::oid
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

_RUN_COLUMNS = record_columns(runs)
_INSERT_RUN = insert(runs)
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
_GET_RUN = select(*_RUN_COLUMNS).where(runs.c.id == bindparam("id"))

_INSERT_ARTIFACT = insert(artifacts)
_ARTIFACTS = select(*artifacts.c).where(artifacts.c.run_id == bindparam("run_id"))
_GET_ARTIFACT = _ARTIFACTS.where(artifacts.c.path == bindparam("path"))
_LIST_ARTIFACTS = _ARTIFACTS.order_by(artifacts.c.path)

_INSERT_RUN_INPUT = insert(run_inputs)
_LIST_RUN_INPUTS = (
    select(run_inputs.c.path, run_inputs.c.sha256, run_inputs.c.size)
    .where(run_inputs.c.run_id == bindparam("run_id"))
    .order_by(run_inputs.c.path)
)


def create_session(conn: Connection, rec: SessionRecord) -> None:
    conn.execute(_INSERT_SESSION, rec.model_dump())


def get_session(conn: Connection, session_id: str) -> SessionRecord | None:
    row = conn.execute(_GET_SESSION, {"id": session_id}).mappings().first()
    return SessionRecord.model_validate(dict(row)) if row is not None else None


def list_sessions(
    conn: Connection, *, live_at: float | None, tenant: str | None, limit: int
) -> list[SessionRecord]:
    query = select(*sessions.c).where(matching(sessions, {"tenant": tenant}))
    if live_at is not None:
        query = query.where(sessions.c.ended_at.is_(None), sessions.c.expires_at > live_at)
    query = query.order_by(sessions.c.created_at.desc(), sessions.c.id).limit(limit)
    return [SessionRecord.model_validate(dict(row)) for row in conn.execute(query).mappings()]


def touch_session(
    conn: Connection, session_id: str, *, last_used_at: float, expires_at: float
) -> bool:
    params = {"session_id": session_id, "last_used_at": last_used_at, "expires_at": expires_at}
    return conn.execute(_TOUCH_SESSION, params).rowcount == 1


def end_session(
    conn: Connection, session_id: str, *, ended_at: float, reason: str, containers_removed: int
) -> None:
    params = {
        "session_id": session_id,
        "ended_at": ended_at,
        "end_reason": reason,
        "containers_removed": containers_removed,
    }
    conn.execute(_END_SESSION, params)


def create_run(conn: Connection, rec: RunRecord, *, max_running: int | None = None) -> bool:
    """Insert `rec`, with its owner's current claim epoch (0 without a listed claim), unless
    its tenant already has `max_running` live runs (counted under the tenant's quota lock,
    so the count holds across servers); whether it was inserted."""
    if max_running is not None:
        lock_tenant(conn, rec.tenant)
        if _live_running(conn, rec.tenant) >= max_running:
            return False
    epoch = conn.execute(_EPOCH_OF, {"owner": rec.instance_id}).scalar()
    conn.execute(_INSERT_RUN, {**run_params(rec), "claim_epoch": epoch or 0})
    return True


def _live_running(conn: Connection, tenant: str) -> int:
    if conn.dialect.name == "postgresql":
        count: int = conn.execute(_LIVE_RUNNING, {"tenant": tenant}).scalar_one()
        return count
    # One machine's servers: a dead one's runs are ended at the next server's start and
    # by every live one's housekeeping (`instances.py`).
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


def get_run(conn: Connection, run_id: str) -> RunRecord | None:
    row = conn.execute(_GET_RUN, {"id": run_id}).mappings().first()
    return run_from_row(row) if row is not None else None


def list_runs(
    conn: Connection, *, session_id: str | None, tenant: str | None, limit: int
) -> list[RunRecord]:
    query = (
        select(*_RUN_COLUMNS)
        .where(matching(runs, {"session_id": session_id, "tenant": tenant}))
        # seq breaks ties between runs created within the same clock tick.
        .order_by(runs.c.created_at.desc(), runs.c.seq.desc())
        .limit(limit)
    )
    return [run_from_row(row) for row in conn.execute(query).mappings()]


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


def add_artifacts(conn: Connection, records: Sequence[ArtifactRecord]) -> None:
    if records:
        conn.execute(_INSERT_ARTIFACT, [rec.model_dump() for rec in records])


def get_artifact(conn: Connection, run_id: str, path: str) -> ArtifactRecord | None:
    row = conn.execute(_GET_ARTIFACT, {"run_id": run_id, "path": path}).mappings().first()
    return ArtifactRecord.model_validate(dict(row)) if row is not None else None


def list_artifacts(conn: Connection, run_id: str) -> list[ArtifactRecord]:
    rows = conn.execute(_LIST_ARTIFACTS, {"run_id": run_id}).mappings()
    return [ArtifactRecord.model_validate(dict(row)) for row in rows]


def add_run_inputs(conn: Connection, run_id: str, files: Sequence[WorkspaceFile]) -> None:
    params = [{"run_id": run_id, "path": f.path, "sha256": f.sha256, "size": f.size} for f in files]
    if params:
        conn.execute(_INSERT_RUN_INPUT, params)


def list_run_inputs(conn: Connection, run_id: str) -> list[WorkspaceFile]:
    rows = conn.execute(_LIST_RUN_INPUTS, {"run_id": run_id}).mappings()
    return [WorkspaceFile.model_validate(dict(row)) for row in rows]
