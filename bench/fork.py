"""How much a fork costs: a session whose workspace holds 1 GiB (1024 files of 1 MiB,
each its own blob) is forked with `fork_session`'s store step on SQLite, and the time and
the blobs written by the fork are reported (target: under 100 ms, no new blob).

    python bench/fork.py [--files N] [--repeat K]

Prints one JSON object: the workspace's bytes and files, each fork's milliseconds, their
median, and how many blob files the forks added (0: no bytes copied).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from airlock.store import BlobStore, Database, SessionRecord, WorkspaceDelta, WorkspaceFile

_MIB = 1024 * 1024


def _blob_files(root: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(root))


async def _bench(files: int, repeat: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        blobs = BlobStore(root / "blobs")
        db = await Database.open(root / "airlock.db")
        try:
            parent = SessionRecord(
                id="ses_parent", tenant="t", created_at=0, last_used_at=0, expires_at=4e9
            )
            await db.create_session(parent)
            entries = []
            for i in range(files):
                data = i.to_bytes(8, "big") * (_MIB // 8)
                sha = await blobs.put(data)
                entries.append(WorkspaceFile(path=f"data/{i:04}.bin", sha256=sha, size=len(data)))
            dirs = (WorkspaceFile(path="data", sha256="", size=0, kind="dir", mode=0o755),)
            await db.commit_workspace(
                parent.id,
                WorkspaceDelta(base_version=0, upserts=(*dirs, *entries), dirs=dirs),
                writer="bench",
                at=1.0,
            )
            before = _blob_files(root / "blobs")
            times = []
            for k in range(repeat):
                child = parent.model_copy(
                    update={"id": f"ses_fork{k}", "parent_id": parent.id, "parent_version": 1}
                )
                start = time.perf_counter()
                await db.fork_session(child, at=2.0)
                times.append((time.perf_counter() - start) * 1000)
            forked = await db.workspace_head("ses_fork0")
            return {
                "workspace_bytes": sum(e.size for e in entries),
                "workspace_files": len(forked.files),
                "fork_ms": [round(t, 2) for t in times],
                "fork_ms_median": round(statistics.median(times), 2),
                "new_blob_files": _blob_files(root / "blobs") - before,
            }
        finally:
            await db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1024, help="1 MiB files (default 1024)")
    parser.add_argument("--repeat", type=int, default=5, help="forks to time (default 5)")
    args = parser.parse_args()
    report = anyio.run(_bench, args.files, args.repeat)
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
