"""`airlock audit runs`: whose runs they are, and only one tenant's when asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from airlock.server.audit import runs_table
from airlock.store import Database, RunRecord, SessionRecord

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
