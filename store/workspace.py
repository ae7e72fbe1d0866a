"""Workspace versions: what a run changed, and how that lands on a head others moved.

Pure functions of plain records: no SQL, no files, no clock. `diff` turns the version a run
started from and the run's final listing into its delta; `merge` lays that delta onto the
current head, given what other writers changed since the run's base. The database wraps
`merge` in one transaction (`Database.commit_workspace`).

The rules, in the order `merge` applies them:
1. Each path of the delta takes the run's state. If another writer changed that path since
   the base to something else, that is a conflict the later commit (this one) wins; the
   other version stays an artifact of the run that wrote it. A path this run only touched
   (same kind, content and mode as its base, a new mtime) never overwrites another
   writer's change: theirs stays, and nothing of this run's is lost.
2. A path this run wrote needs its parents to be directories. A parent another writer
   removed or turned into a file is made a directory again (a conflict this run wins).
3. A directory this run deleted stays when another writer put something inside it since
   the base (a conflict the other writer wins: deleting a directory never drops their file).
4. An entry another writer put under a path this run turned into a file cannot stay: it is
   removed and reported as a conflict (this run wins; the file stays an artifact of theirs).
Nothing leaves the head without being either in this run's delta or in `conflicts`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict

from .records import WorkspaceFile

DEFAULT_DIR_MODE = 0o755


class WorkspaceHead(BaseModel):
    """A version of a session's workspace and every entry it holds, ordered by path."""

    model_config = ConfigDict(frozen=True)

    version: int
    files: tuple[WorkspaceFile, ...] = ()

    def by_path(self) -> dict[str, WorkspaceFile]:
        return {entry.path: entry for entry in self.files}


class WorkspaceDelta(BaseModel):
    """What one writer changed relative to the version it started from."""

    model_config = ConfigDict(frozen=True)

    base_version: int
    upserts: tuple[WorkspaceFile, ...] = ()
    """Entries added or modified, in their new state (commit sets `written_by`, `version`)."""
    deletes: tuple[str, ...] = ()
    dirs: tuple[WorkspaceFile, ...] = ()
    """Every directory of the writer's final state, for parents rule 2 has to bring back."""
    touched: tuple[str, ...] = ()
    """Upserts whose only change from the base is the mtime (rule 1 lets them yield)."""


class WorkspaceConflict(BaseModel):
    """A path two writers changed differently; `kept` says whose version the head holds."""

    model_config = ConfigDict(frozen=True)

    path: str
    ours: WorkspaceFile | None
    """This writer's state of the path; None: this writer deleted it."""
    theirs: WorkspaceFile | None
    """The other writer's state; None: the other writer deleted it."""
    other: str | None
    """Which writer made `theirs` (a run id), None if unknown."""
    kept: Literal["ours", "theirs"]
    reason: str


class WorkspaceCommit(BaseModel):
    """The outcome of committing a delta: the new head version and what did not merge."""

    model_config = ConfigDict(frozen=True)

    base_version: int
    version: int
    """The head after this commit (unchanged when the delta changed nothing)."""
    applied: int
    """How many entries of the head this commit changed."""
    conflicts: tuple[WorkspaceConflict, ...] = ()


@dataclass(frozen=True)
class Merged:
    """The result of `merge`: the new head and every conflict met on the way."""

    head: dict[str, WorkspaceFile]
    conflicts: list[WorkspaceConflict] = field(default_factory=list)
    touched: set[str] = field(default_factory=set)
    """Every path the merge may have changed; the others are `old`'s, untouched."""

    def changes(
        self, old: Mapping[str, WorkspaceFile]
    ) -> tuple[list[WorkspaceFile], list[WorkspaceFile]]:
        """(entries to write, entries to delete) turning `old` into this head."""
        written = [
            self.head[p]
            for p in sorted(self.touched)
            if p in self.head and old.get(p) != self.head[p]
        ]
        deleted = [old[p] for p in sorted(self.touched) if p in old and p not in self.head]
        return written, deleted


def ancestors(path: str) -> Iterator[str]:
    """The parent directories of `path`, outermost first: `a/b/c` gives `a`, `a/b`."""
    parts = path.split("/")
    for end in range(1, len(parts)):
        yield "/".join(parts[:end])


def diff(
    base_version: int,
    base: Mapping[str, WorkspaceFile],
    final: Iterable[WorkspaceFile],
    *,
    complete: bool = True,
    unknown_dirs: Iterable[str] = (),
) -> WorkspaceDelta:
    """The delta from `base` to `final` (a listing already validated as a tree).

    A file counts as changed when its kind, content, mode or mtime differ; a directory only
    when it appears, disappears or changes mode (its mtime moves whenever its contents do).
    With `complete=False` the listing may lack entries, so nothing is taken as deleted;
    nor is anything under one of `unknown_dirs` (directories whose contents went unlisted).
    """
    unknown = set(unknown_dirs)
    final_by_path = {entry.path: entry for entry in final}
    upserts = [
        entry for path, entry in sorted(final_by_path.items()) if _changed(base.get(path), entry)
    ]
    touched = [e.path for e in upserts if e.same_as(base.get(e.path))]
    deletes = [
        path
        for path in sorted(set(base) - set(final_by_path))
        if complete and unknown.isdisjoint(ancestors(path))
    ]
    return WorkspaceDelta(
        base_version=base_version,
        upserts=tuple(upserts),
        deletes=tuple(deletes),
        dirs=tuple(e for _, e in sorted(final_by_path.items()) if e.kind == "dir"),
        touched=tuple(touched),
    )


def _changed(before: WorkspaceFile | None, after: WorkspaceFile) -> bool:
    if before is None or not after.same_as(before):
        return True
    return after.kind == "file" and after.mtime != before.mtime


@dataclass(frozen=True)
class Change:
    """The last change another writer made to a path since some version."""

    written_by: str | None
    after: WorkspaceFile | None


def merge(
    head: Mapping[str, WorkspaceFile],
    delta: WorkspaceDelta,
    since: Mapping[str, Change],
    *,
    writer: str | None,
    version: int,
) -> Merged:
    """Lay `delta` onto `head` (a consistent tree) by the rules in the module docstring.

    `since` holds the last change per path committed after `delta.base_version`; `writer`
    and `version` are stamped on every entry this commit writes.
    """
    m = _Merge(head, since, writer=writer, version=version)
    ours: dict[str, WorkspaceFile | None] = {e.path: m.stamped(e) for e in delta.upserts}
    ours.update({path: None for path in delta.deletes})
    # Rule 1: the later commit wins each path it changed, unless it only touched it.
    for path in delta.touched:
        if path in since:
            del ours[path]
    m.lay(ours)
    m.keep_parents(ours, {e.path: e for e in delta.dirs})
    m.keep_filled_dirs()
    m.displace_under_files()
    touched = set(ours) | set(m.conflicts)
    touched.update(p for p in m.new.keys() ^ head.keys())
    return Merged(
        head=m.new, conflicts=[m.conflicts[p] for p in sorted(m.conflicts)], touched=touched
    )


class _Merge:
    """One merge in progress: the tree being built and the conflicts found on the way."""

    def __init__(
        self,
        head: Mapping[str, WorkspaceFile],
        since: Mapping[str, Change],
        *,
        writer: str | None,
        version: int,
    ) -> None:
        self.head, self.since = head, since
        self.writer, self.version = writer, version
        self.new = dict(head)
        self.conflicts: dict[str, WorkspaceConflict] = {}

    def stamped(self, entry: WorkspaceFile) -> WorkspaceFile:
        return entry.model_copy(update={"written_by": self.writer, "version": self.version})

    def conflict(
        self,
        path: str,
        mine: WorkspaceFile | None,
        theirs: WorkspaceFile | None,
        other: str | None,
        kept: Literal["ours", "theirs"],
        reason: str,
    ) -> None:
        self.conflicts[path] = WorkspaceConflict(
            path=path, ours=mine, theirs=theirs, other=other, kept=kept, reason=reason
        )

    def lay(self, ours: Mapping[str, WorkspaceFile | None]) -> None:
        """Rule 1, the rest: each path this run changed takes its version."""
        for path, mine in sorted(ours.items()):
            other = self.since.get(path)
            if other is not None and not _same(mine, other.after):
                self.conflict(
                    path,
                    mine,
                    other.after,
                    other.written_by,
                    "ours",
                    "both runs changed this path; this run committed later, so its version is kept",
                )
            if mine is None:
                self.new.pop(path, None)
            else:
                self.new[path] = mine

    def keep_parents(
        self, ours: Mapping[str, WorkspaceFile | None], dirs: Mapping[str, WorkspaceFile]
    ) -> None:
        """Rule 2: what this run wrote keeps its parent directories."""
        for path, mine in sorted(ours.items()):
            if mine is None:
                continue
            for parent in ancestors(path):
                current = self.new.get(parent)
                if current is not None and current.kind == "dir":
                    continue
                made = self.stamped(dirs.get(parent) or _implied_dir(parent))
                self.new[parent] = made
                gone = self.since.get(parent)
                if current is None and gone is None:
                    continue  # a workspace from before directories were kept never had it
                self.conflict(
                    parent,
                    made,
                    current,
                    current.written_by
                    if current is not None
                    else gone.written_by
                    if gone
                    else None,
                    "ours",
                    f"another run removed or replaced this directory, but this run wrote {path!r} "
                    "inside it; it is a directory again",
                )

    def keep_filled_dirs(self) -> None:
        """Rule 3: a directory this run deleted stays if another run filled it meanwhile.
        The full pass runs only when some entry lacks its parent (one cheap scan finds out)."""
        for path in sorted(self.new, key=_depth) if _orphans(self.new) else ():
            for parent in ancestors(path):
                if parent in self.new:
                    continue
                kept_dir = self.head.get(parent)
                if kept_dir is None:
                    # A workspace from before directories were kept: add the one it implies.
                    self.new[parent] = _implied_dir(parent)
                    continue
                self.new[parent] = kept_dir
                self.conflict(
                    parent,
                    None,
                    kept_dir,
                    self.new[path].written_by,
                    "theirs",
                    f"this run deleted the directory, but another run wrote {path!r} inside it; "
                    "the directory stays",
                )

    def displace_under_files(self) -> None:
        """Rule 4: nothing can live under a path this run turned into a file."""
        for path in sorted(self.new, key=_depth) if _orphans(self.new, files_too=True) else ():
            if path not in self.new:
                continue
            blocker = next((p for p in ancestors(path) if self.new[p].kind != "dir"), None)
            if blocker is None:
                continue
            displaced = self.new.pop(path)
            self.conflict(
                path,
                None,
                displaced,
                displaced.written_by,
                "ours",
                f"this run made {blocker!r} a file, so this entry of another run could not "
                "stay; it is still an artifact of that run",
            )


def _implied_dir(path: str) -> WorkspaceFile:
    return WorkspaceFile(path=path, sha256="", size=0, kind="dir", mode=DEFAULT_DIR_MODE)


def _orphans(entries: Mapping[str, WorkspaceFile], *, files_too: bool = False) -> bool:
    """Whether an entry's parent is missing (or, with `files_too`, is not a directory)."""
    for path in entries:
        parent = path.rpartition("/")[0]
        if not parent:
            continue
        holder = entries.get(parent)
        if holder is None or (files_too and holder.kind != "dir"):
            return True
    return False


def _same(mine: WorkspaceFile | None, theirs: WorkspaceFile | None) -> bool:
    if mine is None or theirs is None:
        return mine is None and theirs is None
    return mine.same_as(theirs)


def _depth(path: str) -> tuple[int, str]:
    return path.count("/"), path
