"""Host snapshots of hatch roots: what is copied, what is skipped, and the caps."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from airlock.errors import InvalidRequest, LimitExceeded
from airlock.policies import DEFAULT_EXCLUDED
from airlock.sandbox.snapshot import Snapshot, SnapshotCaps, take_snapshot

CAPS = SnapshotCaps(max_entries=100, max_bytes=1 << 20, max_path_length=255)


def _snap(root: Path, caps: SnapshotCaps = CAPS) -> tuple[Snapshot, dict[str, bytes]]:
    stored: dict[str, bytes] = {}

    def store(data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        stored[sha] = data
        return sha

    return take_snapshot(str(root), "app", caps, store), stored


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "src" / "app.py").write_text("print('hi')\n")
    run = root / "run.sh"
    run.write_text("#!/bin/sh\n")
    run.chmod(0o750)
    return root


def test_copies_files_with_hash_mode_and_mtime_and_keeps_empty_dirs(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    os.utime(root / "src" / "app.py", (1_600_000_000, 1_600_000_000))
    snap, stored = _snap(root)
    files = {f.path: f for f in snap.files}
    assert sorted(files) == ["run.sh", "src/app.py"]
    assert files["run.sh"].mode == 0o755
    assert files["src/app.py"].mode == 0o644
    assert files["src/app.py"].mtime == 1_600_000_000
    assert stored[files["src/app.py"].sha256] == b"print('hi')\n"
    assert [d.path for d in snap.dirs] == ["empty", "src"]
    assert snap.skipped == []


def test_symlinks_out_of_the_root_are_skipped_never_followed(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host secret\n")
    (root / "passwd").symlink_to("/etc/passwd")
    (root / "src" / "out").symlink_to(outside)
    (root / "inside").symlink_to("src/app.py")
    snap, stored = _snap(root)
    assert sorted(f.path for f in snap.files) == ["run.sh", "src/app.py"]
    assert not any(b"host secret" in data or b"root:" in data for data in stored.values())
    assert sorted(snap.skipped) == [
        "inside: skipped, symlinks are never followed or copied",
        "passwd: skipped, symlinks are never followed or copied",
        "src/out: skipped, symlinks are never followed or copied",
    ]


def test_the_roots_git_is_never_copied_and_nested_ones_only_if_the_policy_says(
    tmp_path: Path,
) -> None:
    root = _repo(tmp_path)
    for repo in (root, root / "src"):
        (repo / ".git").mkdir()
        (repo / ".git" / "config").write_text(f'[remote "origin"]\nurl = https://{repo.name}\n')
    snap, _ = _snap(root)
    assert not any(".git" in f.path for f in snap.files)
    assert ".git: skipped, the copy gets a fresh git repository instead" in snap.skipped
    assert "src/.git: skipped, .git is not copied (the policy keeps it out)" in snap.skipped
    with_git, stored = _snap(root, SnapshotCaps(100, 1 << 20, 255, include_git_dir=True))
    assert {f.path for f in with_git.files if ".git" in f.path} == {"src/.git/config"}
    assert ".git: skipped, the copy gets a fresh git repository instead" in with_git.skipped
    assert f"https://{root.name}".encode() not in b"".join(stored.values())


def test_fifos_hard_links_and_unsafe_names_are_skipped(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    os.mkfifo(root / "pipe")
    os.link(root / "src" / "app.py", tmp_path / "elsewhere")
    (root / "bad\nname").write_text("x")
    snap, _ = _snap(root)
    assert sorted(f.path for f in snap.files) == ["run.sh"]
    text = "\n".join(snap.skipped)
    assert "pipe: skipped, not a regular file or directory" in text
    assert "src/app.py: skipped, it has other hard links" in text
    assert "'bad\\nname': skipped, the name cannot be copied safely" in text


def test_ten_thousand_files_hit_the_file_cap_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "many"
    root.mkdir()
    for i in range(10_000):
        (root / f"f{i:05}.txt").write_bytes(b"x")
    with pytest.raises(LimitExceeded, match=r"more than 5000 files and directories.*max_files"):
        _snap(root, SnapshotCaps(max_entries=5000, max_bytes=1 << 30, max_path_length=255))
    snap, _ = _snap(root, SnapshotCaps(max_entries=10_000, max_bytes=1 << 30, max_path_length=255))
    assert len(snap.files) == 10_000


def test_the_byte_cap_counts_what_is_read_not_what_stat_said(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / "big.bin").write_bytes(b"\0" * 5000)
    with pytest.raises(LimitExceeded, match=r"more than 4000 bytes.*max_bytes"):
        _snap(root, SnapshotCaps(max_entries=100, max_bytes=4000, max_path_length=255))


def test_paths_too_long_with_the_destination_are_skipped(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    caps = SnapshotCaps(max_entries=100, max_bytes=1 << 20, max_path_length=12, prefix_length=5)
    snap, _ = _snap(root, caps)
    assert [f.path for f in snap.files] == ["run.sh"]
    assert any(s.startswith("'src/app.py': skipped") for s in snap.skipped)


def test_an_entry_swapped_for_a_symlink_mid_walk_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _repo(tmp_path)
    victim = root / "src" / "app.py"
    real_lstat = os.lstat

    def lstat_then_swap(path: str, *, dir_fd: int | None = None) -> os.stat_result:
        seen = real_lstat(path, dir_fd=dir_fd)
        if path == "app.py":
            victim.unlink()
            victim.symlink_to("/etc/passwd")
        return seen

    monkeypatch.setattr(os, "lstat", lstat_then_swap)
    with pytest.raises(InvalidRequest, match=r"src/app.py: changed while it was being copied"):
        _snap(root)


def test_a_missing_root_is_an_error_naming_the_root_not_the_host_path(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest) as caught:
        _snap(tmp_path / "gone")
    assert "root 'app' cannot be read on the host" in str(caught.value)
    assert str(tmp_path) not in str(caught.value)


def test_credentials_the_policy_excludes_never_enter_the_copy(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / ".env").write_text("TOKEN=x\n")
    (root / "src" / ".env.local").write_text("TOKEN=y\n")
    (root / ".ssh").mkdir()
    (root / ".ssh" / "id_ed25519").write_text("key\n")
    (root / "tls.pem").write_text("cert\n")
    caps = SnapshotCaps(100, 1 << 20, 255, exclude=DEFAULT_EXCLUDED)
    snap, stored = _snap(root, caps)
    assert sorted(f.path for f in snap.files) == ["run.sh", "src/app.py"]
    assert ".ssh" not in {d.path for d in snap.dirs}
    assert sorted(snap.skipped) == [
        ".env: skipped, the policy keeps it out of sandboxes (**/.env*)",
        ".ssh: skipped, the policy keeps it out of sandboxes (**/.ssh/**)",
        "src/.env.local: skipped, the policy keeps it out of sandboxes (**/.env*)",
        "tls.pem: skipped, the policy keeps it out of sandboxes (**/*.pem)",
    ]
    assert not any(b"TOKEN" in data for data in stored.values())
