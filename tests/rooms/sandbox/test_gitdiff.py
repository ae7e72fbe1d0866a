"""Patches in git's format, checked by applying them with the real `git apply`."""

from __future__ import annotations

import hashlib
import io
import random
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import Tree, git_apply, lock_files, read_tree, write_tree

from airlock.policies import DEFAULT_PROTECTED, protecting_glob
from airlock.sandbox.gitdiff import (
    FileState,
    GitPatch,
    build_patch,
    git_blob_id,
    quote_name,
    unsafe_name,
)
from airlock.sandbox.linediff import budget


def _states(tree: Tree) -> tuple[dict[str, FileState], dict[str, bytes]]:
    states, blobs = {}, {}
    for path, (data, mode) in tree.items():
        sha = hashlib.sha256(data).hexdigest()
        states[path] = FileState(sha256=sha, mode=mode)
        blobs[sha] = data
    return states, blobs


@dataclass(frozen=True)
class Written:
    text: bytes
    patch: GitPatch


def written_patch(
    before: Tree, after: Tree, protected: tuple[str, ...] = DEFAULT_PROTECTED
) -> Written:
    """The patch from `before` to `after`, written to memory."""
    old, old_blobs = _states(before)
    new, new_blobs = _states(after)
    blobs = {**old_blobs, **new_blobs}
    out = io.BytesIO()
    patch = build_patch(
        old,
        new,
        lambda sha: io.BytesIO(blobs[sha]),
        out,
        lambda p: protecting_glob(protected, p),
    )
    return Written(text=out.getvalue(), patch=patch)


def _round_trip(tmp_path: Path, before: Tree, after: Tree) -> bytes:
    root = tmp_path / "work"
    root.mkdir()
    write_tree(root, before)
    patch = written_patch(before, after)
    applied = git_apply(root, patch.text)
    assert applied.returncode == 0, (applied.stderr.decode(), patch.text.decode("latin-1"))
    assert read_tree(root) == after
    return patch.text


BIN = bytes(range(256)) * 40 + b"\0tail"


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param({"a.txt": (b"one\ntwo\n", 0o644)}, {"a.txt": (b"one\n2\n", 0o644)}, id="edit"),
        pytest.param({}, {"new/deep/f.py": (b"print(1)\n", 0o644)}, id="add"),
        pytest.param({"gone.txt": (b"bye\n", 0o644)}, {}, id="delete"),
        pytest.param({}, {"empty": (b"", 0o644)}, id="add-empty"),
        pytest.param({"empty": (b"", 0o644)}, {}, id="delete-empty"),
        pytest.param({"s.sh": (b"echo\n", 0o644)}, {"s.sh": (b"echo\n", 0o755)}, id="chmod"),
        pytest.param(
            {"s.sh": (b"echo\n", 0o755)}, {"s.sh": (b"echo hi\n", 0o644)}, id="chmod-and-edit"
        ),
        pytest.param({"n": (b"a\nb", 0o644)}, {"n": (b"a\nc", 0o644)}, id="no-final-newline"),
        pytest.param({"n": (b"a\nb", 0o644)}, {"n": (b"a\nb\n", 0o644)}, id="newline-added"),
        pytest.param({"c": (b"x\r\ny\r\n", 0o644)}, {"c": (b"x\r\nz\r\n", 0o644)}, id="crlf"),
        pytest.param(
            {"long.txt": (b"".join(b"line %d\n" % i for i in range(200)), 0o644)},
            {"long.txt": (b"".join(b"line %d\n" % (i * (i % 37 != 0)) for i in range(200)), 0o644)},
            id="many-hunks",
        ),
        pytest.param({"b.bin": (BIN, 0o644)}, {"b.bin": (BIN[::-1], 0o644)}, id="binary-edit"),
        pytest.param({}, {"b.bin": (BIN, 0o755)}, id="binary-add"),
        pytest.param({"b.bin": (BIN, 0o644)}, {}, id="binary-delete"),
        pytest.param({"t": (b"text\n", 0o644)}, {"t": (b"\0now binary", 0o644)}, id="to-binary"),
        pytest.param(
            {"old/name.py": (b"x = 1\n", 0o644)}, {"new/name.py": (b"x = 1\n", 0o644)}, id="rename"
        ),
        pytest.param({"r": (b"x\n", 0o644)}, {"r2": (b"x\n", 0o755)}, id="rename-and-chmod"),
        pytest.param(
            {}, {'sp ace/é "q" \\not.txt'.replace("\\", ""): (b"ok\n", 0o644)}, id="quoted-names"
        ),
        pytest.param(
            {},
            {
                "diff --git a/x b/y": (b"a\n", 0o644),
                "+++ b/evil": (b"b\n", 0o644),
                "--- a/README": (b"c\n", 0o644),
                "@@ -1 +1 @@": (b"d\n", 0o644),
            },
            id="header-lookalike-names",
        ),
        pytest.param(
            {"f": (b"keep\n", 0o644)},
            {"f": (b"keep\ndiff --git a/f b/f\n+++ b/g\n@@ -0,0 +1 @@\n", 0o644)},
            id="header-lookalike-content",
        ),
    ],
)
def test_patches_apply_with_git_and_give_the_current_files(
    tmp_path: Path, before: Tree, after: Tree
) -> None:
    _round_trip(tmp_path, before, after)


def test_a_header_lookalike_name_is_quoted_and_makes_exactly_its_own_file(tmp_path: Path) -> None:
    text = _round_trip(tmp_path, {}, {"a/+++ b/.github/workflows/ci.yml": (b"x\n", 0o644)})
    assert b'diff --git "a/a/+++ b/.github/workflows/ci.yml"' in text
    assert not (tmp_path / "work" / ".github").exists()


def test_unchanged_files_make_an_empty_patch() -> None:
    tree = {"a": (b"1\n", 0o644)}
    patch = written_patch(tree, tree)
    assert patch.text == b""
    assert patch.patch.entries == ()


def test_entries_say_what_changed() -> None:
    patch = written_patch(
        {"m": (b"1\n", 0o644), "d": (b"2\n", 0o644), "r": (b"3\n", 0o644)},
        {"m": (b"9\n", 0o644), "a": (b"4\n", 0o644), "r2": (b"3\n", 0o644)},
    )
    assert [(e.path, e.change, e.old_path) for e in patch.patch.entries] == [
        ("a", "added", None),
        ("d", "deleted", None),
        ("m", "modified", None),
        ("r2", "renamed", "r"),
    ]


def test_protected_paths_are_held_back_on_either_side_of_a_rename(tmp_path: Path) -> None:
    before = {"ci.yml": (b"on: push\n", 0o644), "src/a.py": (b"a\n", 0o644)}
    after = {
        ".github/workflows/ci.yml": (b"on: push\n", 0o644),
        ".GITHUB/workflows/deploy.yml": (b"run: curl evil\n", 0o644),
        "app/.env": (b"TOKEN=x\n", 0o644),
        "src/a.py": (b"b\n", 0o644),
    }
    patch = written_patch(before, after)
    assert {(h.path, h.change, h.glob) for h in patch.patch.held_back} == {
        (".github/workflows/ci.yml", "added", ".github/**"),
        (".GITHUB/workflows/deploy.yml", "added", ".github/**"),
        ("app/.env", "added", "**/.env*"),
    }
    # The move of ci.yml is not a rename: its new name is held back, its deletion is not.
    assert [(e.path, e.change) for e in patch.patch.entries] == [
        ("ci.yml", "deleted"),
        ("src/a.py", "modified"),
    ]
    assert b".github" not in patch.text.lower()
    assert b".env" not in patch.text


def test_every_file_under_dot_github_is_held_back_not_only_workflows() -> None:
    # dependabot.yml picks the registries CI installs from, CODEOWNERS who must review,
    # issue templates and FUNDING.yml what reviewers and sponsors are shown (issue 28.14).
    steering = {
        ".github/dependabot.yml": b"registries:\n  evil: {url: https://evil.example}\n",
        ".github/CODEOWNERS": b"* @attacker\n",
        ".github/ISSUE_TEMPLATE/bug.yml": b"name: bug\n",
        ".github/FUNDING.yml": b"custom: https://evil.example\n",
    }
    after = {"src/a.py": (b"b\n", 0o644)} | {p: (d, 0o644) for p, d in steering.items()}
    patch = written_patch({"src/a.py": (b"a\n", 0o644)}, after)
    assert {(h.path, h.glob) for h in patch.patch.held_back} == {
        (path, ".github/**") for path in steering
    }
    assert [e.path for e in patch.patch.entries] == ["src/a.py"]
    assert b".github" not in patch.text.lower() and b"evil" not in patch.text


@pytest.mark.parametrize(
    "name",
    [
        ".git/config",
        "sub/.git/hooks/pre-commit",
        ".GIT/config",
        ".git./config",
        ".git /hooks/x",
        "git~1/config",
        ".g\u0131t/hooks/pre-commit",  # dotless i: .GIT where the upcase table says so
        "a\nb",
        "a\tb",
        "bidi\u202etxt",
        "vs\U000e0100\U000e01eftxt",
        "emoji\ufe0f.txt",
        "zero\u200bwidth",
        "../escape",
        "a/../../b",
        "/abs",
        "a//b",
        "a\\b",
    ],
)
def test_unsafe_names_are_refused_not_written(name: str) -> None:
    assert unsafe_name(name) is not None
    patch = written_patch({}, {name: (b"x\n", 0o644), "ok.txt": (b"y\n", 0o644)})
    assert [r.path for r in patch.patch.refused] == [name]
    assert [e.path for e in patch.patch.entries] == ["ok.txt"]
    assert b"ok.txt" in patch.text
    assert name.encode() not in patch.text


def test_quote_name_follows_git() -> None:
    assert quote_name("a/src/app.py") == "a/src/app.py"
    assert quote_name('a/q"x') == '"a/q\\"x"'
    assert quote_name("a/é") == '"a/\\303\\251"'
    assert quote_name("a/x y") == '"a/x y"'


def test_git_blob_id_matches_git(tmp_path: Path) -> None:
    data = b"hello\n"
    path = tmp_path / "f"
    path.write_bytes(data)
    out = subprocess.run(
        ["git", "hash-object", "--no-filters", str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert git_blob_id(data) == out.stdout.strip()


def test_a_repetitive_lock_file_edit_costs_a_bounded_diff_and_applies_exactly(
    tmp_path: Path,
) -> None:
    old, new = lock_files()
    started = time.process_time()
    text = _round_trip(tmp_path, {"Cargo.lock": (old, 0o644)}, {"Cargo.lock": (new, 0o644)})
    spent = time.process_time() - started
    [entry] = written_patch(
        {"Cargo.lock": (old, 0o644)}, {"Cargo.lock": (new, 0o644)}
    ).patch.entries
    # A shortest diff, found within the file's budget: every hunk is one bumped version.
    assert not entry.whole
    assert 0 < entry.work <= budget(len(old), len(new))
    bumped = new.count(b'version = "1.0.1"')
    assert text.count(b"\n-version = ") == text.count(b"\n+version = ") == bumped
    # difflib.SequenceMatcher spent 49 s of CPU on this pair; the bound is generous.
    assert spent < 5, f"{spent:.1f} s of CPU"


def test_hostile_lines_past_the_budget_make_one_replacement_hunk_that_applies(
    tmp_path: Path,
) -> None:
    rng = random.Random(3)
    old = b"# keep\n" + b"".join(rng.choice([b"a\n", b"b\n"]) for _ in range(60_000))
    new = b"# keep\n" + b"".join(rng.choice([b"a\n", b"b\n"]) for _ in range(60_000))
    text = _round_trip(tmp_path, {"f": (old, 0o644)}, {"f": (new, 0o644)})
    [entry] = written_patch({"f": (old, 0o644)}, {"f": (new, 0o644)}).patch.entries
    assert entry.whole
    assert entry.work <= budget(len(old), len(new)) + 60_000
    assert text.count(b"\n@@ ") == 1
