"""The store's cost on the warm path of `run_code`: CPU per call of the database calls one
run makes (create_run, finish_run, commit_workspace of one changed file), on SQLite.

    .venv/bin/python -m bench.store_calls [--calls 1000] [--store URL]

CPU is the whole process's (`time.process_time`: the event loop and the worker thread the
store hops to), divided by the calls; wall time is printed beside it. Run it against an
older checkout with PYTHONPATH to compare: it uses only `Database.open(path)` and the three
calls, which every version has.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import anyio

from airlock.store import Database, RunRecord, SessionRecord, WorkspaceDelta, WorkspaceFile


def _run(i: int) -> RunRecord:
    return RunRecord(
        id=f"r{i}",
        session_id="s1",
        tenant="t1",
        language="python",
        status="running",
        created_at=float(i),
        timeout_s=30,
        limits={"memory_bytes": 256 << 20, "pids": 64, "egress": []},
        code_sha256="c" * 64,
        instance_id="bench",
    )


async def _measure(where: Path | str, calls: int) -> dict[str, float]:
    db = await Database.open(where)
    try:
        await db.create_session(
            SessionRecord(id="s1", tenant="t1", created_at=0, last_used_at=0, expires_at=1e12)
        )
        spent = {"create_run": 0.0, "finish_run": 0.0, "commit_workspace": 0.0}
        wall = dict.fromkeys(spent, 0.0)
        version = 0
        for i in range(calls):
            rec = _run(i)
            done = rec.model_copy(update={"status": "ok", "finished_at": i + 0.5, "exit_code": 0})
            entry = WorkspaceFile(path="out.txt", sha256=f"{i:064x}", size=i)
            delta = WorkspaceDelta(base_version=version, upserts=(entry,))
            for name, call in (
                ("create_run", lambda rec=rec: db.create_run(rec)),
                ("finish_run", lambda done=done: db.finish_run(done)),
                (
                    "commit_workspace",
                    lambda delta=delta, i=i: db.commit_workspace(
                        "s1", delta, writer=f"r{i}", at=float(i)
                    ),
                ),
            ):
                cpu, started = time.process_time(), time.perf_counter()
                result = await call()
                spent[name] += time.process_time() - cpu
                wall[name] += time.perf_counter() - started
                if name == "commit_workspace":
                    version = result.version  # type: ignore[union-attr]
    finally:
        await db.close()
    report = {f"{k} cpu_ms": v * 1000 / calls for k, v in spent.items()}
    report |= {f"{k} wall_ms": v * 1000 / calls for k, v in wall.items()}
    return report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--store", help="a store URL (default: a new SQLite file)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="airlock-bench-store-") as tmp:
        where: Path | str = args.store or Path(tmp) / "data" / "airlock.db"
        report = anyio.run(_measure, where, args.calls)
    total = sum(v for k, v in report.items() if k.endswith("cpu_ms"))
    for name, value in report.items():
        sys.stdout.write(f"{name:28} {value:8.3f}\n")
    sys.stdout.write(f"{'per run (3 calls) cpu_ms':28} {total:8.3f}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
