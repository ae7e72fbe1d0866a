"""The workspace merge rules of store/workspace.py, as pure functions: no database, no Docker."""

from __future__ import annotations

from airlock.store import WorkspaceDelta, WorkspaceFile, ancestors, diff
from airlock.store.workspace import Change, merge


def f(
    path: str, content: str = "x", *, mode: int = 0o644, mtime: int = 1, by: str | None = None
) -> WorkspaceFile:
    return WorkspaceFile(
        path=path,
        sha256=content * 64 if len(content) == 1 else content,
        size=1,
        mode=mode,
        mtime=mtime,
        written_by=by,
    )


def d(path: str, *, mode: int = 0o755, by: str | None = None) -> WorkspaceFile:
    return WorkspaceFile(path=path, sha256="", size=0, kind="dir", mode=mode, written_by=by)


def tree(*entries: WorkspaceFile) -> dict[str, WorkspaceFile]:
    return {e.path: e for e in entries}


def test_ancestors_are_outermost_first() -> None:
    assert list(ancestors("a/b/c")) == ["a", "a/b"]
    assert list(ancestors("a")) == []


def test_diff_finds_added_modified_deleted_and_mode_and_mtime_changes() -> None:
    base = tree(f("same"), f("content"), f("mode"), f("touched"), f("gone"), d("dir"))
    final = [
        f("same"),
        f("content", "y"),
        f("mode", mode=0o755),
        f("touched", mtime=2),
        f("new"),
        d("dir"),
        d("empty"),
    ]
    delta = diff(3, base, final)
    assert delta.base_version == 3
    assert [e.path for e in delta.upserts] == ["content", "empty", "mode", "new", "touched"]
    assert delta.deletes == ("gone",)
    assert [e.path for e in delta.dirs] == ["dir", "empty"]


def test_diff_ignores_a_directory_mtime_but_not_its_mode() -> None:
    base = tree(d("a"), d("b"))
    moved = WorkspaceFile(path="a", sha256="", size=0, kind="dir", mode=0o755, mtime=99)
    delta = diff(0, base, [moved, d("b", mode=0o700)])
    assert [e.path for e in delta.upserts] == ["b"]


def test_incomplete_listing_deletes_nothing() -> None:
    delta = diff(0, tree(f("a"), f("b")), [f("a", "z")], complete=False)
    assert delta.deletes == ()
    assert [e.path for e in delta.upserts] == ["a"]


def test_different_paths_merge_without_conflict() -> None:
    head = tree(f("a", by="run_a"))
    delta = WorkspaceDelta(base_version=0, upserts=(f("b"),))
    merged = merge(head, delta, {"a": Change("run_a", head["a"])}, writer="run_b", version=2)
    assert sorted(merged.head) == ["a", "b"]
    assert merged.head["b"].written_by == "run_b"
    assert merged.head["b"].version == 2
    assert merged.conflicts == []


def test_same_path_later_commit_wins_and_reports_both_hashes_and_the_other_run() -> None:
    theirs = f("x", "1", by="run_a")
    delta = WorkspaceDelta(base_version=0, upserts=(f("x", "2"),))
    merged = merge(tree(theirs), delta, {"x": Change("run_a", theirs)}, writer="run_b", version=2)
    assert merged.head["x"].sha256 == "2" * 64
    [conflict] = merged.conflicts
    assert conflict.path == "x"
    assert conflict.ours is not None and conflict.ours.sha256 == "2" * 64
    assert conflict.theirs is not None and conflict.theirs.sha256 == "1" * 64
    assert conflict.other == "run_a"
    assert conflict.kept == "ours"


def test_two_deletions_of_one_file_apply_once_without_conflict() -> None:
    delta = WorkspaceDelta(base_version=0, deletes=("shared",))
    merged = merge({}, delta, {"shared": Change("run_a", None)}, writer="run_b", version=2)
    assert merged.head == {}
    assert merged.conflicts == []
    assert merged.changes({}) == ([], [])


def test_same_result_by_two_runs_is_not_a_conflict() -> None:
    theirs = f("x", "1", mtime=5, by="run_a")
    delta = WorkspaceDelta(base_version=0, upserts=(f("x", "1", mtime=7),))
    merged = merge(tree(theirs), delta, {"x": Change("run_a", theirs)}, writer="run_b", version=2)
    assert merged.conflicts == []


def test_modify_after_other_deleted_keeps_ours_and_reports_it() -> None:
    delta = WorkspaceDelta(base_version=0, upserts=(f("x", "2"),))
    merged = merge({}, delta, {"x": Change("run_a", None)}, writer="run_b", version=2)
    assert "x" in merged.head
    [conflict] = merged.conflicts
    assert conflict.theirs is None and conflict.other == "run_a"


def test_file_then_dir_clash_later_dir_wins_and_reports_the_file() -> None:
    # Run A made `x` a file and committed first; run B (same base) made `x/y`.
    theirs = f("x", "1", by="run_a")
    delta = WorkspaceDelta(
        base_version=0, upserts=(d("x"), f("x/y", "2")), dirs=(d("x", mode=0o750),)
    )
    merged = merge(tree(theirs), delta, {"x": Change("run_a", theirs)}, writer="run_b", version=2)
    assert merged.head["x"].kind == "dir"
    assert merged.head["x/y"].sha256 == "2" * 64
    [conflict] = merged.conflicts
    assert conflict.path == "x" and conflict.other == "run_a" and conflict.kept == "ours"


def test_dir_then_file_clash_later_file_wins_and_displaced_child_is_reported() -> None:
    # Run B made `x/y` and committed first; run A (same base) made `x` a file.
    head = tree(d("x", by="run_b"), f("x/y", "2", by="run_b"))
    since = {"x": Change("run_b", head["x"]), "x/y": Change("run_b", head["x/y"])}
    delta = WorkspaceDelta(base_version=0, upserts=(f("x", "1"),))
    merged = merge(head, delta, since, writer="run_a", version=2)
    assert merged.head == {"x": merged.head["x"]}
    assert merged.head["x"].kind == "file"
    by_path = {c.path: c for c in merged.conflicts}
    assert set(by_path) == {"x", "x/y"}
    assert by_path["x/y"].theirs is not None and by_path["x/y"].other == "run_b"
    _written, deleted = merged.changes(head)
    assert [e.path for e in deleted] == ["x/y"]


def test_deleted_directory_stays_when_another_run_wrote_inside_it() -> None:
    head = tree(d("dir"), f("dir/old"), f("dir/new", by="run_a"))
    delta = WorkspaceDelta(base_version=1, deletes=("dir", "dir/old"))
    since = {"dir/new": Change("run_a", head["dir/new"])}
    merged = merge(head, delta, since, writer="run_b", version=3)
    assert sorted(merged.head) == ["dir", "dir/new"]
    [conflict] = merged.conflicts
    assert conflict.path == "dir" and conflict.kept == "theirs" and conflict.other == "run_a"


def test_parent_removed_by_another_run_comes_back_for_our_file() -> None:
    delta = WorkspaceDelta(base_version=1, upserts=(f("dir/mine"),), dirs=(d("dir", mode=0o700),))
    merged = merge({}, delta, {"dir": Change("run_a", None)}, writer="run_b", version=3)
    assert merged.head["dir"].kind == "dir" and merged.head["dir"].mode == 0o700
    assert [c.path for c in merged.conflicts] == ["dir"]


def test_nothing_leaves_the_head_unreported() -> None:
    # Every path gone from the head is in this run's deletes or in a conflict.
    head = tree(d("x", by="run_b"), f("x/y", by="run_b"), f("keep"), f("del"))
    since = {p: Change("run_b", e) for p, e in head.items() if e.written_by}
    delta = WorkspaceDelta(base_version=0, upserts=(f("x", "9"),), deletes=("del",))
    merged = merge(head, delta, since, writer="run_a", version=2)
    gone = set(head) - set(merged.head)
    assert gone <= set(delta.deletes) | {c.path for c in merged.conflicts}


def test_a_touch_never_overwrites_another_runs_change() -> None:
    base = tree(f("x", "1", mtime=1))
    delta = diff(1, base, [f("x", "1", mtime=9)])
    assert delta.touched == ("x",)
    theirs = f("x", "2", by="run_a")
    merged = merge(tree(theirs), delta, {"x": Change("run_a", theirs)}, writer="run_b", version=3)
    assert merged.head["x"] == theirs
    assert merged.conflicts == []


def test_a_touch_applies_when_nobody_else_changed_the_path() -> None:
    base = tree(f("x", "1", mtime=1))
    merged = merge(base, diff(1, base, [f("x", "1", mtime=9)]), {}, writer="run_b", version=2)
    assert merged.head["x"].mtime == 9


def test_nothing_under_a_directory_whose_contents_went_unlisted_is_deleted() -> None:
    base = tree(d("locked"), f("locked/x"), f("gone"))
    delta = diff(1, base, [d("locked")], unknown_dirs=["locked"])
    assert delta.deletes == ("gone",)


def test_a_workspace_from_before_directories_gains_them_without_conflicts() -> None:
    # Schema 1 kept files only: `dir/a` with no entry for `dir`.
    head = tree(f("dir/a"), f("other/b"))
    delta = WorkspaceDelta(base_version=0, upserts=(f("dir/new"),), deletes=("dir/a",))
    merged = merge(head, delta, {}, writer="run_a", version=1)
    assert sorted(merged.head) == ["dir", "dir/new", "other", "other/b"]
    assert merged.conflicts == []
