"""`airlock audit runs`: whose runs they are, and only one tenant's when asked; `airlock
audit sessions` and `versions`: what a fork started from, and a restore as a version."""

from __future__ import annotations

from pathlib import Path

import pytest

from airlock.server.audit import runs_table, sessions_table, versions_table
from airlock.store import Database, RunRecord, SessionRecord, WorkspaceDelta, WorkspaceFile

pytestmark = pytest.mark.anyio


def _run(run_id: str, session_id: str, tenant: str) -> RunRecord:
    return RunRecord(
        id=run_id,
        session_id=session_id,
        tenant=tenant,
        language="python",
        status="running",
        created_at=100.0,
        timeout_s=30,
        limits={},
        code_sha256="c" * 64,
    )


async def test_runs_show_their_tenant_and_filter_by_it(store_at: Path | str) -> None:
    db = await Database.open(store_at)
    try:
        for tenant in ("acme", "globex"):
            session = f"ses_{tenant}"
            await db.create_session(
                SessionRecord(
                    id=session, tenant=tenant, created_at=1.0, last_used_at=1.0, expires_at=9.0
                )
            )
            await db.create_run(_run(f"run_{tenant}", session, tenant))
        every = (await runs_table(db, session_id=None, limit=10)).splitlines()
        acme = (await runs_table(db, session_id=None, limit=10, tenant="acme")).splitlines()
        nobody = await runs_table(db, session_id=None, limit=10, tenant="initech")
    finally:
        await db.close()
    assert every[0].split()[:3] == ["RUN", "TENANT", "SESSION"]
    assert {line.split()[1] for line in every[1:] if line.startswith("run_")} == {"acme", "globex"}
    assert [line.split()[:2] for line in acme if line.startswith("run_")] == [["run_acme", "acme"]]
    assert nobody == "no runs recorded for tenant 'initech'"


def test_audit_runs_takes_a_tenant() -> None:
    from airlock.server.cli import _parser

    args = _parser().parse_args(["audit", "runs", "--tenant", "acme"])
    assert args.tenant == "acme"


async def test_sessions_show_what_a_fork_started_from_and_versions_show_a_restore(
    store_at: Path | str,
) -> None:
    db = await Database.open(store_at)
    try:
        parent = SessionRecord(
            id="ses_p", tenant="t", created_at=1.0, last_used_at=1.0, expires_at=9.0
        )
        await db.create_session(parent)
        delta = WorkspaceDelta(
            base_version=0, upserts=(WorkspaceFile(path="a", sha256="a" * 64, size=1),)
        )
        await db.commit_workspace("ses_p", delta, writer="run_1", at=2.0)
        fork = parent.model_copy(update={"id": "ses_f", "parent_id": "ses_p", "parent_version": 1})
        await db.fork_session(fork, at=3.0)
        await db.restore_workspace("ses_p", 0, writer="restore of version 0", at=4.0)
        sessions = await sessions_table(db, tenant=None, limit=10)
        versions = (await versions_table(db, "ses_p")).splitlines()
        forked = (await versions_table(db, "ses_f")).splitlines()
    finally:
        await db.close()
    assert "ses_p at version 1" in next(line for line in sessions.splitlines() if "ses_f" in line)
    assert [line.split()[:3] for line in versions[1:]] == [
        ["1", "0", "run_1"],
        ["2", "1", "restore"],
    ]
    assert forked[1].split()[:3] == ["1", "1", "ses_p"]
