"""Sessions, runs, their artifacts and inputs: the rows the warm path of `run_code` writes.
Whether a run is still open to its owner's writes (the claim epochs, the fleet's sweep) is
`fleet/fencing.py`'s."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, bindparam, insert, select, update

from ..records import ArtifactRecord, RunRecord, SessionRecord, WorkspaceFile
from ..schema import artifacts, run_inputs, runs, sessions
from .rows import matching, record_columns, run_from_row, run_params

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

_RUN_COLUMNS = record_columns(runs)
_INSERT_RUN = insert(runs)
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


def create_run(conn: Connection, rec: RunRecord, *, claim_epoch: int) -> None:
    """Insert `rec`, recording the epoch of its owner's claim (`fleet/fencing.py`)."""
    conn.execute(_INSERT_RUN, {**run_params(rec), "claim_epoch": claim_epoch})


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
