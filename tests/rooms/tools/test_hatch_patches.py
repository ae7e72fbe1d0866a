"""What get_patch costs: one diff per source, the patch kept and paged from the store,
binary files streamed, and a size cap that names itself.

No container is involved: copy_in takes a real snapshot of a host directory, and the
sandbox's changes are committed onto the session workspace as a run would commit them,
on the real store. The patch then goes through the real `git apply`.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import sys
import zlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from support import TESTS, git_apply, lock_files, services_on

import airlock.tools.hatch as hatch_tool
from airlock.errors import LimitExceeded, NotFound
from airlock.policies import Policy
from airlock.sandbox.gitdiff import build_patch, git_blob_id
from airlock.server.patches import apply, describe, load_patch, write_patch
from airlock.server.terminal import safe_block
from airlock.store import (
    Database,
    PatchRecord,
    SessionRecord,
    WorkspaceDelta,
    WorkspaceFile,
)
from airlock.tools import Services, copy_in, get_patch
from airlock.tools.context import Session

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024


async def make_services(tmp_path: Path, store: Path | str | None = None, **hatch: Any) -> Services:
    """The real store (`store`, else a SQLite file in tmp_path) and a policy offering the
    root `app` (tmp_path/repo); the engine is never started."""
    (tmp_path / "repo").mkdir(exist_ok=True)
    policy = Policy.model_validate({"hatch": {"roots": {"app": str(tmp_path / "repo")}, **hatch}})
    return services_on(tmp_path, policy, await Database.open(store or tmp_path / "airlock.db"))


@pytest.fixture
async def opened(tmp_path: Path, store_at: Path | str) -> AsyncIterator[Callable[..., Any]]:
    made: list[Services] = []

    async def open_services(**hatch: Any) -> Services:
        made.append(await make_services(tmp_path, store_at, **hatch))
        return made[-1]

    yield open_services
    for services in made:
        await services.db.close()


async def copied(services: Services, files: dict[str, bytes]) -> tuple[Session, str]:
    """A session holding a copy of a root with `files`, and the copy's id."""
    repo = Path(services.policy.hatch.roots["app"])
    for name, data in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    session = Session(id="ses_1", tenant="local", expires_at=4e9)
    await services.db.create_session(
        SessionRecord(id=session.id, tenant="local", created_at=0, last_used_at=0, expires_at=4e9)
    )
    result = await copy_in(services, session, root="app", to="app")
    assert result.structured_content is not None
    return session, result.structured_content["copy_id"]


async def sandbox_writes(services: Services, session: Session, files: dict[str, bytes]) -> None:
    """Commit `files` under /workspace/app as a run that wrote them would."""
    head = await services.db.workspace_head(session.id)
    upserts = []
    for name, data in files.items():
        sha = await services.blobs.put(data)
        upserts.append(WorkspaceFile(path=f"app/{name}", sha256=sha, size=len(data)))
    await services.db.commit_workspace(
        session.id,
        WorkspaceDelta(base_version=head.version, upserts=tuple(upserts)),
        writer="run_x",
        at=1.0,
    )


async def whole_patch(services: Services, session: Session, copy_id: str) -> dict[str, Any]:
    page = await get_patch(services, session, copy_id=copy_id, offset=0, max_bytes=1)
    assert page.structured_content is not None
    content: dict[str, Any] = page.structured_content
    return content


def count_builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times get_patch computes a patch (calls into gitdiff.build_patch)."""
    calls: list[int] = []
    real = build_patch  # the one tools/hatch.py imported

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(hatch_tool, "build_patch", counted)
    return calls


async def test_the_lock_file_patch_is_made_once_kept_and_applies_exactly(
    opened: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = lock_files()
    services = await opened()
    session, copy_id = await copied(services, {"Cargo.lock": old})
    await sandbox_writes(services, session, {"Cargo.lock": new})
    builds = count_builds(monkeypatch)
    first = await whole_patch(services, session, copy_id)
    pages = []
    offset = 0
    while True:
        page = await get_patch(services, session, copy_id=copy_id, offset=offset, max_bytes=16384)
        assert page.structured_content is not None
        assert page.structured_content["patch_id"] == first["patch_id"]
        pages.append(page.structured_content["returned_bytes"])
        offset += pages[-1]
        if not page.structured_content["truncated"]:
            break
    # One diff for the first call; every later call and page is served from the store.
    assert builds == [1]
    assert offset == first["size"] and len(pages) > 1
    assert [f["whole"] for f in first["files"]] == [False]
    text = await services.blobs.read(first["sha256"])
    assert hashlib.sha256(text).hexdigest() == first["sha256"]
    work = tmp_path / "checkout"
    work.mkdir()
    (work / "Cargo.lock").write_bytes(old)
    applied = git_apply(work, text)
    assert applied.returncode == 0, applied.stderr.decode()
    assert (work / "Cargo.lock").read_bytes() == new


async def test_a_new_change_makes_a_new_patch_and_going_back_gives_the_first_again(
    opened: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    services = await opened()
    session, copy_id = await copied(services, {"a.txt": b"one\n"})
    await sandbox_writes(services, session, {"a.txt": b"two\n"})
    builds = count_builds(monkeypatch)
    first = await whole_patch(services, session, copy_id)
    await sandbox_writes(services, session, {"a.txt": b"three\n"})
    second = await whole_patch(services, session, copy_id)
    await sandbox_writes(services, session, {"a.txt": b"two\n"})
    again = await whole_patch(services, session, copy_id)
    assert second["patch_id"] != first["patch_id"]
    assert again["patch_id"] == first["patch_id"]
    assert builds == [1, 1]


async def test_callers_asking_at_once_wait_for_one_patch(
    opened: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = lock_files()
    services = await opened()
    session, copy_id = await copied(services, {"Cargo.lock": old})
    await sandbox_writes(services, session, {"Cargo.lock": new})
    builds = count_builds(monkeypatch)
    results: list[dict[str, Any]] = []

    async def ask() -> None:
        results.append(await whole_patch(services, session, copy_id))

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(ask)
    assert builds == [1]
    assert len({r["patch_id"] for r in results}) == 1
    assert len(await services.db.list_patches()) == 1


def _kib(field: str) -> int:
    status = Path("/proc/self/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB$", status, re.MULTILINE)
    assert match is not None, field
    return int(match[1]) * 1024


def _reset_high_water_mark() -> int:
    """Make the kernel's VmHWM the current RSS, and return that."""
    Path("/proc/self/clear_refs").write_text("5")
    return _kib("VmRSS")


async def patch_in_this_process(tmp_path: Path, copy_id: str, store: str) -> dict[str, Any]:
    """get_patch in a fresh process, with how far its resident memory rose above where it
    stood once the store was open (the kernel's high-water mark, reset just before)."""
    services = await make_services(tmp_path, store or None)
    try:
        session = Session(id="ses_1", tenant="local", expires_at=4e9)
        start = _reset_high_water_mark()
        result = await whole_patch(services, session, copy_id)
        return {"growth": _kib("VmHWM") - start, "result": result}
    finally:
        await services.db.close()


async def test_ninety_mib_of_new_binary_files_are_patched_in_bounded_memory(
    opened: Callable[..., Any], tmp_path: Path, store_at: Path | str
) -> None:
    services = await opened()
    session, copy_id = await copied(services, {"README": b"hi\n"})
    digests = {}
    for i in range(9):
        # One file that does not deflate; the others do, so that base85 (pure Python, about
        # 0.15 s of CPU a MiB) does not make the test slow.
        data = b"\0" + (os.urandom(10 * MIB - 1) if i == 0 else os.urandom(4096) * 2560)
        digests[f"assets/blob{i}.bin"] = hashlib.sha256(data).digest()
        await sandbox_writes(services, session, {f"assets/blob{i}.bin": data})
    del data
    child = await anyio.run_process(
        [
            sys.executable,
            "-c",
            "import anyio, json, sys, pathlib, test_hatch_patches as t; print(json.dumps("
            "anyio.run(t.patch_in_this_process, pathlib.Path(sys.argv[1]), *sys.argv[2:])))",
            str(tmp_path),
            copy_id,
            # The child opens the same records: the PostgreSQL URL, or the default file.
            store_at if isinstance(store_at, str) else "",
        ],
        cwd=Path(__file__).parent,
        env={
            "PATH": os.environ["PATH"],
            "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), str(TESTS)]),
        },
    )
    measured = json.loads(child.stdout)
    result = measured["result"]
    assert [(f["path"], f["binary"]) for f in result["files"]] == [
        (name, True) for name in sorted(digests)
    ]
    assert result["size"] > 10 * MIB
    # The old writer held every content and the whole patch at once (410 MiB for this).
    growth = measured["growth"]
    # Python objects of base85 over one 64 KiB chunk, the draft file's buffer, the thread.
    assert growth < 8 * MIB, f"resident memory grew by {growth / MIB:.1f} MiB"
    work = tmp_path / "checkout"
    work.mkdir()
    with services.blobs.open_blob(result["sha256"]) as patch:
        applied = git_apply(work, patch.read())
    assert applied.returncode == 0, applied.stderr.decode()
    assert {
        f"assets/{p.name}": hashlib.sha256(p.read_bytes()).digest()
        for p in (work / "assets").iterdir()
    } == digests


async def test_a_patch_over_the_cap_is_refused_naming_it_and_nothing_is_kept(
    opened: Callable[..., Any],
) -> None:
    services = await opened(max_patch_mb=1)
    session, copy_id = await copied(services, {"README": b"hi\n"})
    await sandbox_writes(services, session, {"big.bin": b"\0" + os.urandom(2 * MIB)})
    with pytest.raises(LimitExceeded) as refused:
        await get_patch(services, session, copy_id=copy_id, offset=0, max_bytes=1024)
    message = str(refused.value)
    assert "larger than 1 MiB ([hatch] max_patch_mb)" in message
    assert "raise [hatch] max_patch_mb" in message
    assert await services.db.list_patches() == []
    # No draft of the refused patch stays behind in the blob store.
    blobs = Path(services.policy.hatch.roots["app"]).parent / "blobs"
    assert [p.name for p in blobs.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("tail", [b"\n\n", b"", b"\n" * 70_000])
async def test_show_streams_the_patch_as_it_would_print_it_whole(
    opened: Callable[..., Any], tail: bytes
) -> None:
    services = await opened()
    # A two-byte character across the first 64 KiB piece, controls, and newlines last.
    patch = b"+" * 65535 + "é\u202e\x1b[31m\n".encode() + b"+line\n" * 3 + tail
    record = PatchRecord(
        id="pat_" + "a" * 26,
        copy_id="cpy_" + "a" * 26,
        tenant="local",
        session_id="ses_1",
        created_at=0,
        version=1,
        sha256=await services.blobs.put(patch),
        size=len(patch),
        entries=[],
        held_back=[],
        refused=[],
    )
    raw, shown = io.BytesIO(), io.BytesIO()
    write_patch(services.blobs, record, raw, raw=True)
    write_patch(services.blobs, record, shown, raw=False)
    assert raw.getvalue() == patch
    expected = safe_block(patch.decode("utf-8", "replace")).rstrip("\n") + "\n"
    assert shown.getvalue().decode() == expected
    assert "é<U+202E><U+001B>[31m" in expected


def _old_literal(data: bytes) -> bytes:
    """A binary hunk as the writer before this one made it: zlib level 9, one base85 call
    per 52-byte line."""
    deflated = zlib.compress(data, 9)
    out = [b"literal %d\n" % len(data)]
    for start in range(0, len(deflated), 52):
        chunk = deflated[start : start + 52]
        letter = (
            chr(ord("A") + len(chunk) - 1) if len(chunk) <= 26 else chr(ord("a") + len(chunk) - 27)
        )
        out.append(letter.encode() + base64.b85encode(chunk, pad=True) + b"\n")
    return b"".join(out) + b"\n"


async def test_a_patch_kept_before_source_keys_still_shows_and_applies(
    opened: Callable[..., Any], tmp_path: Path
) -> None:
    services = await opened()
    old_text, new_text = b"one\ntwo\nthree\n", b"one\n2\nthree\n"
    image = b"\0" + bytes(range(256)) * 64
    session, copy_id = await copied(services, {"a.txt": old_text})
    # What the old writer stored for this change: difflib's hunk and a level-9 literal.
    text = (
        b"diff --git a/a.txt b/a.txt\n"
        + f"index {git_blob_id(old_text)}..{git_blob_id(new_text)} 100644\n".encode()
        + b"--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"
        + b"diff --git a/logo.bin b/logo.bin\nnew file mode 100644\n"
        + f"index {'0' * 40}..{git_blob_id(image)}\n".encode()
        + b"GIT binary patch\n"
        + _old_literal(image)
        + _old_literal(b"")
    )
    record = PatchRecord(
        id="pat_" + "b" * 26,
        copy_id=copy_id,
        tenant="local",
        session_id=session.id,
        created_at=1,
        version=1,
        sha256=await services.blobs.put(text),
        size=len(text),
        entries=[
            {"path": "a.txt", "change": "modified", "old_path": None, "binary": False},
            {"path": "logo.bin", "change": "added", "old_path": None, "binary": True},
        ],
        held_back=[],
        refused=[],
    )
    await services.db.add_patch(record)  # as kept then: no source_sha256, no "whole"
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "a.txt").write_bytes(old_text)
    report, code = await apply(
        services.db, services.blobs, services.policy, record.id, checkout, check=False
    )
    assert code == 0, report
    assert (checkout / "a.txt").read_bytes() == new_text
    assert (checkout / "logo.bin").read_bytes() == image
    kept, copy = await load_patch(services.db, record.id)
    assert "modified  a.txt" in describe(kept, copy)
    # Asking for the same changes now makes a patch by source: the new writer's.
    await sandbox_writes(services, session, {"a.txt": new_text, "logo.bin": image})
    made = await whole_patch(services, session, copy_id)
    assert made["patch_id"] != record.id
    assert [(f["path"], f["whole"]) for f in made["files"]] == [
        ("a.txt", False),
        ("logo.bin", False),
    ]


async def test_get_patch_in_a_fork_diffs_against_the_same_snapshot_and_shows_only_its_changes(
    opened: Callable[..., Any],
) -> None:
    services = await opened()
    parent, copy_id = await copied(services, {"a.txt": b"a\n"})
    await sandbox_writes(services, parent, {"parent.txt": b"parent\n"})
    at = (await services.db.workspace_head(parent.id)).version
    fork = Session(id="ses_2", tenant="local", expires_at=4e9)
    record = SessionRecord(
        id=fork.id, tenant="local", created_at=0, last_used_at=0, expires_at=4e9
    ).model_copy(update={"parent_id": parent.id, "parent_version": at})
    await services.db.fork_session(record, at=2.0)
    await sandbox_writes(services, fork, {"fork.txt": b"fork\n"})
    await sandbox_writes(services, parent, {"later.txt": b"later\n"})

    in_fork = {e["path"] for e in (await whole_patch(services, fork, copy_id))["files"]}
    in_parent = {e["path"] for e in (await whole_patch(services, parent, copy_id))["files"]}
    assert in_fork == {"parent.txt", "fork.txt"}
    assert in_parent == {"parent.txt", "later.txt"}
    # A session that is no fork of the copy's does not see the copy.
    other = Session(id="ses_3", tenant="local", expires_at=4e9)
    await services.db.create_session(
        SessionRecord(id=other.id, tenant="local", created_at=0, last_used_at=0, expires_at=4e9)
    )
    with pytest.raises(NotFound):
        await get_patch(services, other, copy_id=copy_id, offset=0, max_bytes=1)
