"""The copy's own repository, written in Python, read back by the real git.

Each test lays a snapshot and the repository `build_base` wrote for it out as the hatch
does in a sandbox (contents, modes, whole-second mtimes), then asks git, run with no
configuration of this machine's, what it sees: a whole, clean repository whose commit is
the snapshot, and, once files change, the same patch `get_patch` builds.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import struct
import subprocess
from pathlib import Path

from airlock.policies import DEFAULT_IGNORED
from airlock.sandbox.gitbase import (
    BASE_TAG,
    BaseRepository,
    _Pack,
    build_base,
    in_repository,
    is_repository_internal,
)
from airlock.sandbox.gitdiff import FileState, build_patch, git_blob_id
from airlock.sandbox.snapshot import SnapshotFile

NOW = 1_700_000_000
OLD = NOW - 3600

Tree = dict[str, tuple[bytes, int]]

TREE: Tree = {
    "README.md": (b"# app\n", 0o644),
    "run.sh": (b"#!/bin/sh\necho run\n", 0o755),
    "src/app.py": (b"def f():\n    return 1\n\n\ndef g():\n    return 2\n", 0o644),
    "src/pkg/__init__.py": (b"", 0o644),
    "src/pkg-data.txt": (b"sorts before src/pkg/ in a tree\n", 0o644),
    "caf\u00e9.txt": (b"accent\n", 0o644),
    "same-a.txt": (b"same\n", 0o644),
    "same-b.txt": (b"same\n", 0o644),
    "tail.txt": (b"no newline at the end", 0o644),
    "logo.bin": (bytes(range(256)) * 4, 0o644),
}


def snapshot_of(tree: Tree) -> tuple[list[SnapshotFile], dict[str, bytes]]:
    files, blobs = [], {}
    for path, (data, mode) in sorted(tree.items()):
        sha = hashlib.sha256(data).hexdigest()
        blobs[sha] = data
        files.append(SnapshotFile(path=path, sha256=sha, size=len(data), mode=mode, mtime=OLD))
    return files, blobs


def lay_out(root: Path, tree: Tree, repo: BaseRepository) -> None:
    """What a sandbox's /workspace/<to> holds after the hatch unpacked the copy."""
    for d in repo.dirs:
        (root / d).mkdir(parents=True)
    for path, (data, mode) in tree.items():
        write(root / path, data, mode, OLD)
    for f in repo.files:
        write(root / f.path, f.data, f.mode, NOW)


def write(path: Path, data: bytes, mode: int, mtime: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)
    os.utime(path, (mtime, mtime))


def git(root: Path, *args: str) -> str:
    home = root.parent / "home"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": str(home / "none"),
        "LANG": "C.UTF-8",
    }
    done = subprocess.run(
        ["git", *args], cwd=root, env=env, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, (args, done.stderr.decode())
    return done.stdout.decode()


def base(tree: Tree, root: Path) -> BaseRepository:
    files, blobs = snapshot_of(tree)
    repo = build_base(
        files, blobs.__getitem__, ignore=DEFAULT_IGNORED, message="copy of root 'app'", when=NOW
    )
    lay_out(root, tree, repo)
    return repo


def test_the_base_is_a_whole_repository_whose_one_commit_is_the_snapshot(tmp_path: Path) -> None:
    root = tmp_path / "app"
    repo = base(TREE, root)
    git(root, "fsck", "--strict", "--full", "--no-dangling")
    assert git(root, "rev-parse", "HEAD", BASE_TAG, "refs/heads/main").split() == [repo.commit] * 3
    assert git(root, "log", "--format=%an <%ae> %at %s") == (
        f"Airlock sandbox <sandbox@airlock.invalid> {NOW} copy of root 'app'\n"
    )
    listed = git(root, "-c", "core.quotepath=false", "ls-tree", "-r", "--full-tree", "HEAD")
    assert listed.splitlines() == [
        f"{'100755' if mode & 0o111 else '100644'} blob {git_blob_id(data)}\t{path}"
        for path, (data, mode) in sorted(TREE.items())
    ]
    assert repo.tracked == len(TREE)
    # The index's stat data is what the sandbox sees: git trusts it, hashes nothing, and
    # so does not rewrite the index (no churn in every run's changed files).
    index = root / ".git" / "index"
    before = (index.read_bytes(), index.stat().st_mtime_ns)
    assert git(root, "status", "--porcelain", "--untracked-files=all") == ""
    assert git(root, "diff", "HEAD") == ""
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before
    assert git(root, "config", "--list", "--local").splitlines() == [
        "core.repositoryformatversion=0",
        "core.filemode=true",
        "core.bare=false",
        "core.logallrefupdates=true",
        "core.checkstat=minimal",
        "core.trustctime=false",
        "user.name=Airlock sandbox",
        "user.email=sandbox@airlock.invalid",
        "gc.autodetach=false",
    ]
    assert not (root / ".git" / "hooks").exists()


def test_git_diff_in_the_copy_is_the_patch_get_patch_builds(tmp_path: Path) -> None:
    root = tmp_path / "app"
    base(TREE, root)
    after = dict(TREE)
    after["src/app.py"] = (b"def f():\n    return 10\n\n\ndef g():\n    return 2\n", 0o644)
    after["run.sh"] = (TREE["run.sh"][0], 0o644)
    after["tail.txt"] = (b"no newline at the end, still", 0o644)
    after["new/tool.py"] = (b"print('hi')\n", 0o755)
    after["empty.txt"] = (b"", 0o644)
    after["moved.txt"] = after.pop("same-b.txt")
    del after["README.md"]
    for path in set(TREE) - set(after):
        (root / path).unlink()
    for path, (data, mode) in after.items():
        if TREE.get(path) != (data, mode):
            write(root / path, data, mode, NOW + 60)
    write(root / "src" / "__pycache__" / "app.cpython-311.pyc", b"\0cache", 0o644, NOW + 60)

    # New caches are left out of `git status` as they are left out of the patch.
    assert "__pycache__" not in git(root, "status", "--porcelain", "--untracked-files=all")
    git(root, "add", "-A")
    seen = git(root, "diff", "--cached", "--full-index", "--binary", BASE_TAG)
    old, blobs = states(TREE)
    new, new_blobs = states(after)
    blobs.update(new_blobs)
    out = io.BytesIO()
    patch = build_patch(old, new, lambda sha: io.BytesIO(blobs[sha]), out, lambda _: None)
    # git names the function a hunk is in after its range; get_patch never does.
    assert re.sub(r"(?m)^(@@ [^@]+ @@).*$", r"\1", seen) == out.getvalue().decode()
    assert {e.path for e in patch.entries} >= {"src/app.py", "README.md", "moved.txt"}


def test_the_copys_attributes_cannot_make_git_see_other_bytes(tmp_path: Path) -> None:
    tree: Tree = {
        ".gitattributes": (b"* text eol=crlf\n*.txt filter=lfs ident\n", 0o644),
        "dos.txt": (b"one\r\ntwo\r\n", 0o644),
        "unix.txt": (b"$Id$\none\n", 0o644),
    }
    root = tmp_path / "app"
    base(tree, root)
    assert git(root, "status", "--porcelain", "--untracked-files=all") == ""
    write(root / "unix.txt", b"$Id$\none\r\n", 0o644, NOW + 60)
    assert "+one\r\n" in git(root, "diff")


def test_names_no_patch_could_carry_stay_out_of_the_commit(tmp_path: Path) -> None:
    files, blobs = snapshot_of({"ok.txt": (b"ok\n", 0o644), "sub/.git/config": (b"x\n", 0o644)})
    repo = build_base(files, blobs.__getitem__, ignore=(), message="m", when=NOW)
    assert repo.tracked == 1
    root = tmp_path / "app"
    lay_out(root, {"ok.txt": (b"ok\n", 0o644)}, repo)
    assert git(root, "ls-files") == "ok.txt\n"
    git(root, "fsck", "--strict")


def test_exclude_anchors_each_glob_at_the_copys_root() -> None:
    files, blobs = snapshot_of({"a": (b"a", 0o644)})
    repo = build_base(
        files, blobs.__getitem__, ignore=("**/*.pyc", "build/**", "trail "), message="m", when=NOW
    )
    [exclude] = [f for f in repo.files if f.path == ".git/info/exclude"]
    assert exclude.data == b"/**/*.pyc\n/build/**\n/trail\\ \n"


def test_offsets_past_2_gib_go_to_the_64_bit_table() -> None:
    pack = _Pack()
    first = pack.add(3, b"small")
    pack._size = (1 << 31) + 5  # as if 2 GiB of objects came before the next one
    second = pack.add(3, b"far")
    _, index, _ = pack.finish()
    ids = sorted([first, second])
    at = 8 + 256 * 4 + 2 * 20 + 2 * 4
    offsets = struct.unpack(">2I", index[at : at + 8])
    [large] = struct.unpack(">Q", index[at + 8 : at + 16])
    assert offsets[ids.index(first)] == 12
    assert offsets[ids.index(second)] == 1 << 31
    assert large == (1 << 31) + 5


def test_which_paths_are_repository_internals() -> None:
    assert in_repository(".git") and in_repository(".git/index")
    assert not in_repository(".github/x") and not in_repository("src/.git/x")
    assert is_repository_internal("app/.git/objects/ab/cd")
    assert is_repository_internal("app/sub/.git")
    assert not is_repository_internal("app/.gitignore")
    assert not is_repository_internal("app/x.git/y")


def states(tree: Tree) -> tuple[dict[str, FileState], dict[str, bytes]]:
    found, blobs = {}, {}
    for path, (data, mode) in tree.items():
        sha = hashlib.sha256(data).hexdigest()
        found[path] = FileState(sha256=sha, mode=mode)
        blobs[sha] = data
    return found, blobs
