"""Applying a hatch patch to a directory on the host: a human's or CI's step, never automatic.

The patch was written from what a sandbox left behind, so it is treated as hostile even
though Airlock wrote it:

1. `git apply --numstat` reads the names the way git will; every one must be a name the
   patch record lists, safe (`gitdiff.unsafe_name`) and not protected by the policy.
2. The target is read through directory descriptors with O_NOFOLLOW: a touched path whose
   parent is a symlink, or which is not a regular file, stops the apply.
3. Only the touched files are copied into a private staging directory, where `git apply`
   runs with no configuration (no system or global file, no repository to discover, and
   never `--unsafe-paths`); git never sees the target.
4. If the target differs from the baseline the patch was made against, each file's part
   of the patch is checked on its own and every one that does not apply is named with
   git's reason; any such file refuses the whole apply, unless the whole patch applies in
   reverse: the target already holds its result (applied before), and nothing is written.
5. The results are written back through the same directory descriptors: new content to
   a temporary file beside the target, then renamed over it; a file changed since step 2
   stops the writing there, and the error names the files already written.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from airlock.errors import InvalidRequest

from .gitdiff import FileState, unsafe_name

_GIT_TIMEOUT_S = 120
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


@dataclass(frozen=True)
class Found:
    """A touched path as the target holds it: None content means absent."""

    data: bytes | None
    mode: int = 0o644
    """0o755 or 0o644, as git sees it."""
    perm: int = 0o644
    """The permission bits the target really has, kept when the file is rewritten."""

    def state(self) -> FileState | None:
        if self.data is None:
            return None
        return FileState(sha256=hashlib.sha256(self.data).hexdigest(), mode=self.mode)


@dataclass
class ApplyReport:
    """What applying did, or would do with `--check`."""

    paths: list[str] = field(default_factory=list)
    """Every path the patch touches (both names of a rename)."""
    drifted: list[str] = field(default_factory=list)
    """Touched paths whose target state differs from the baseline."""
    failed: list[tuple[str, str]] = field(default_factory=list)
    """(path, git's reason) for each file whose part does not apply."""
    applied: bool = False
    already_applied: bool = False
    """The target already holds what the patch makes (it was applied before)."""


def apply_patch(
    patch: bytes,
    listed: Iterable[str],
    baseline: Mapping[str, FileState],
    target: Path,
    protected: Callable[[str], str | None],
    *,
    check_only: bool,
) -> ApplyReport:
    """Apply `patch` (whose record lists the paths `listed`) to the directory `target`.

    Raises `InvalidRequest` for anything that must stop it outright (a protected or unsafe
    name, a symlinked parent, a target that is not a directory); hunks that do not apply
    are reported in `failed`, with nothing written.
    """
    report = ApplyReport()
    if not patch:
        return report
    with tempfile.TemporaryDirectory(prefix="airlock-apply-") as scratch:
        stage = Path(scratch) / "stage"
        stage.mkdir()
        paths = _git_paths(patch, stage)
        _check_names(paths, set(listed), protected)
        report.paths = paths
        root_fd = _open_target(target)
        try:
            found = {path: _read(root_fd, path) for path in paths}
            for path, seen in found.items():
                if seen.data is not None:
                    _stage(stage, path, seen)
            report.drifted = [p for p in paths if found[p].state() != baseline.get(p)]
            if report.drifted:
                report.failed = _failing_parts(patch, stage)
                if (
                    report.failed
                    and _git(["apply", "--reverse", "--check"], patch, stage).returncode == 0
                ):
                    report.failed, report.already_applied = [], True
                    return report
            else:
                whole = _git(["apply", "--check"], patch, stage)
                if whole.returncode != 0:
                    report.failed = [("(whole patch)", _reason(whole))]
            if report.failed or check_only:
                return report
            done = _git(["apply"], patch, stage)
            if done.returncode != 0:
                report.failed = [("(whole patch)", _reason(done))]
                return report
            for done_count, path in enumerate(paths):
                try:
                    _write_back(root_fd, stage, path, found[path])
                except (OSError, InvalidRequest) as exc:
                    why = exc.strerror if isinstance(exc, OSError) else str(exc)
                    written = ", ".join(paths[:done_count]) or "none"
                    raise InvalidRequest(
                        f"{path}: cannot write it in the target ({why}); stopped. "
                        f"Already written: {written}"
                    ) from exc
            report.applied = True
        finally:
            os.close(root_fd)
    return report


def _git(args: list[str], patch: bytes, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    scratch = str(cwd.parent)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": scratch,
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ATTR_NOSYSTEM": "1",
        # No repository above the staging directory is ever discovered.
        "GIT_CEILING_DIRECTORIES": scratch,
    }
    try:
        return subprocess.run(
            ["git", *args, "--whitespace=nowarn", "-p1", "-"],
            input=patch,
            cwd=cwd,
            env=env,
            capture_output=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InvalidRequest(f"cannot run git to apply the patch: {exc}") from exc


def _reason(done: subprocess.CompletedProcess[bytes]) -> str:
    text = done.stderr.decode("utf-8", "replace").strip()
    return " ".join(line.removeprefix("error: ") for line in text.splitlines()) or "git failed"


def _git_paths(patch: bytes, stage: Path) -> list[str]:
    """Every path git reads from the patch: the names after it, then (read in reverse)
    the names before it, so both sides of a rename are seen as git sees them."""
    paths: set[str] = set()
    for direction in ([], ["-R"]):
        done = _git(["apply", "--numstat", "-z", *direction], patch, stage)
        if done.returncode != 0:
            raise InvalidRequest(f"git cannot read the patch: {_reason(done)}")
        fields = done.stdout.split(b"\0")
        i = 0
        while i < len(fields) and fields[i]:
            _, _, name = fields[i].split(b"\t", 2)
            if name:
                names = [name]
                i += 1
            else:  # "-z" may also give a rename's two names as fields of their own
                names = fields[i + 1 : i + 3]
                i += 3
            paths.update(n.decode("utf-8", "surrogateescape") for n in names)
    return sorted(paths)


def _check_names(
    paths: list[str], listed: set[str], protected: Callable[[str], str | None]
) -> None:
    for path in paths:
        if path not in listed:
            raise InvalidRequest(f"{path!r} is in the patch text but not in its record; refusing")
        reason = unsafe_name(path)
        if reason is not None:
            raise InvalidRequest(f"{path!r} {reason}; refusing the patch")
        glob = protected(path)
        if glob is not None:
            raise InvalidRequest(
                f"the patch changes {path!r}, which the policy protects ({glob}); refusing. "
                "A human must make that change by hand"
            )


def _open_target(target: Path) -> int:
    try:
        return os.open(target, _DIR_FLAGS)
    except OSError as exc:
        raise InvalidRequest(
            f"{target} cannot be opened as a directory ({exc.strerror}); give an existing "
            "directory that is not a symlink"
        ) from exc


def _walk_parents(root_fd: int, path: str, *, create: bool) -> int | None:
    """A descriptor of `path`'s parent, opened segment by segment without following links;
    None if a parent is missing and `create` is false."""
    fd = os.dup(root_fd)
    try:
        for segment in path.split("/")[:-1]:
            try:
                child = os.open(segment, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    return None
                os.mkdir(segment, 0o755, dir_fd=fd)
                child = os.open(segment, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise InvalidRequest(
                    f"{path}: {segment!r} in the target is not a plain directory "
                    f"({exc.strerror}); refusing to write through it"
                ) from exc
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read(root_fd: int, path: str) -> Found:
    parent = _walk_parents(root_fd, path, create=False)
    if parent is None:
        return Found(data=None)
    name = path.rsplit("/", 1)[-1]
    try:
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            return Found(data=None)
        except OSError as exc:
            raise InvalidRequest(
                f"{path}: not a regular file in the target ({exc.strerror}); refusing"
            ) from exc
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise InvalidRequest(f"{path}: not a regular file in the target; refusing")
            with os.fdopen(os.dup(fd), "rb") as f:
                data = f.read()
        finally:
            os.close(fd)
    finally:
        os.close(parent)
    mode = 0o755 if info.st_mode & 0o111 else 0o644
    return Found(data=data, mode=mode, perm=stat.S_IMODE(info.st_mode))


def _stage(stage: Path, path: str, seen: Found) -> None:
    assert seen.data is not None
    staged = stage / path
    staged.parent.mkdir(parents=True, exist_ok=True)
    staged.write_bytes(seen.data)
    staged.chmod(seen.mode)


def _sections(patch: bytes) -> list[bytes]:
    # Every line of a patch Airlock wrote starts with a header word, a hunk prefix or a
    # base85 length letter, so "diff --git " at a line start always begins a file's part.
    return [part for part in re.split(rb"(?m)^(?=diff --git )", patch) if part]


def _failing_parts(patch: bytes, stage: Path) -> list[tuple[str, str]]:
    failed = []
    for section in _sections(patch):
        done = _git(["apply", "--check"], section, stage)
        if done.returncode != 0:
            names = _git_paths(section, stage)
            failed.append((", ".join(names), _reason(done)))
    return failed


def _write_back(root_fd: int, stage: Path, path: str, before: Found) -> None:
    staged = stage / path
    data = staged.read_bytes() if staged.is_file() else None
    mode = 0o755 if data is not None and staged.stat().st_mode & 0o111 else 0o644
    if (data, mode) == (before.data, before.mode):
        return
    if _read(root_fd, path) != before:
        raise InvalidRequest("it changed in the target while the patch was applied")
    parent = _walk_parents(root_fd, path, create=data is not None)
    if parent is None:
        return
    name = path.rsplit("/", 1)[-1]
    try:
        if data is None:
            os.unlink(name, dir_fd=parent)
            return
        temp = f".{name}.airlock-{secrets.token_hex(6)}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temp, flags, 0o600, dir_fd=parent)
        try:
            with os.fdopen(os.dup(fd), "wb") as f:
                f.write(data)
            os.fchmod(fd, _permissions(before, mode))
        finally:
            os.close(fd)
        os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
    finally:
        os.close(parent)


def _permissions(before: Found, mode: int) -> int:
    """The target's own bits with the execute bits the patch asks for; git's for new files."""
    if before.data is None:
        return mode
    if mode & 0o111:
        return before.perm | (before.perm & 0o444) >> 2
    return before.perm & ~0o111
