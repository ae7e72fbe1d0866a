"""Write a database with Airlock's pre-Alembic store (commit 1887fc6) and dump it."""

import sqlite3
import sys
from pathlib import Path

import anyio

from airlock.store import (
    ApprovalRecord,
    ArtifactRecord,
    Database,
    DrillRecord,
    EgressRecord,
    GrantRecord,
    HatchCopyRecord,
    PatchRecord,
    RunRecord,
    SessionRecord,
    WorkspaceDelta,
    WorkspaceFile,
)


async def main(path: Path) -> None:
    db = await Database.open(path)
    await db.create_session(
        SessionRecord(
            id="s1",
            tenant="t1",
            created_at=1700000000.125,
            last_used_at=1700000001.5,
            expires_at=1700000600.25,
        )
    )
    await db.create_session(
        SessionRecord(
            id="s2",
            tenant="t2",
            created_at=1700000002.0,
            last_used_at=1700000002.0,
            expires_at=1700000602.0,
        )
    )
    await db.end_session(
        "s2", ended_at=1700000003.0, reason="ended by the agent", containers_removed=1
    )
    base = dict(
        session_id="s1",
        tenant="t1",
        language="python",
        created_at=1700000010.0,
        timeout_s=30,
        limits={"memory_bytes": 5 << 30, "pids": 64},
        code_sha256="c" * 64,
        runtime="runsc",
        instance_id="i-old",
    )
    await db.create_run(RunRecord(id="r1", status="running", **base))
    await db.create_run(RunRecord(id="r2", status="running", **base))  # same tick as r1
    await db.finish_run(
        RunRecord(
            id="r2",
            status="ok",
            finished_at=1700000011.0,
            duration_ms=1000,
            exit_code=0,
            cpu_seconds=0.25,
            peak_memory_bytes=3 << 30,
            stdout_bytes=6,
            stdout_sha256="d" * 64,
            **base,
        )
    )
    await db.add_artifacts(
        [
            ArtifactRecord(
                run_id="r2",
                path="out/a.txt",
                size=6,
                sha256="a" * 64,
                mime_type="text/plain",
                tenant="t1",
                created_at=1700000011.0,
            )
        ]
    )
    await db.add_run_inputs("r2", [WorkspaceFile(path="in.txt", sha256="b" * 64, size=3)])
    await db.add_egress(
        [
            EgressRecord(
                time=1700000010.5,
                tenant="t1",
                session_id="s1",
                run_id="r2",
                capability="policy:default",
                method="GET",
                host="api.example.com",
                port=443,
                path="/v1?key",
                status=200,
                bytes_in=100,
                bytes_out=50,
                duration_ms=12,
                decision="allow",
                reason="allowed",
                resolved_ip="93.184.216.34",
                injected=("Authorization",),
            )
        ]
    )
    await db.record_grant(
        GrantRecord(
            id="g1",
            tenant="t1",
            session_id="s1",
            capability="http",
            params={"host": "api.example.com"},
            scope={"hosts": ["api.example.com"], "ports": [443]},
            approved_by="operator",
            reason="needs it",
            created_at=1700000004.0,
            expires_at=1700003604.0,
        )
    )
    await db.mark_grants_revoked(["g1"], at=1700000005.0)
    await db.create_approval(
        ApprovalRecord(
            id="a1",
            tenant="t1",
            session_id="s1",
            capability="http",
            params={"host": "x.example.com"},
            ttl_s=600,
            reason="please",
            status="pending",
            created_at=1700000006.0,
            expires_at=1700000306.0,
        )
    )
    await db.record_drill(
        DrillRecord(
            id="d1",
            target="default",
            tenant="airlock-drill",
            started_at=1700000007.0,
            finished_at=1700000008.0,
            held=3,
            failed=0,
            not_applicable=1,
            sessions=["sd1"],
            rows=[{"attack": "dns", "expected": "deny", "observed": "deny", "held": True}],
        )
    )
    await db.commit_workspace(
        "s1",
        WorkspaceDelta(
            base_version=0,
            upserts=(
                WorkspaceFile(
                    path="src", sha256="", size=0, kind="dir", mode=0o755, mtime=1700000009
                ),
                WorkspaceFile(
                    path="src/x.py", sha256="e" * 64, size=10, mode=0o600, mtime=1700000009
                ),
                WorkspaceFile(path="gone.txt", sha256="f" * 64, size=1),
            ),
        ),
        writer="r1",
        at=1700000009.0,
    )
    await db.commit_workspace(
        "s1", WorkspaceDelta(base_version=1, deletes=("gone.txt",)), writer="r2", at=1700000012.0
    )
    await db.add_copy(
        HatchCopyRecord(
            id="c1",
            tenant="t1",
            session_id="s1",
            root="repo",
            root_path="/home/u/repo",
            dest="repo",
            baseline_sha256="9" * 64,
            files=2,
            bytes=20,
            version=2,
            created_at=1700000013.0,
        )
    )
    for pid in ("p1", "p2"):  # same created_at: insertion order decides
        await db.add_patch(
            PatchRecord(
                id=pid,
                copy_id="c1",
                tenant="t1",
                session_id="s1",
                created_at=1700000014.0,
                version=2,
                sha256="8" * 64,
                size=40,
                entries=[{"path": "x.py", "change": "modified"}],
                held_back=[],
                refused=[],
                ignored=["__pycache__/x.pyc"],
                source_sha256="7" * 64,
            )
        )
    await db.close()


path = Path(sys.argv[1])
anyio.run(main, path)
with sqlite3.connect(path) as conn:
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    lines = list(conn.iterdump())
sys.stdout.write("\n".join(lines) + f"\nPRAGMA user_version = {version};\n")
