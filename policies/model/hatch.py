"""The hatch ([hatch]): the host directories an agent may have copied into its session,
what a copy leaves out, and what may come back from them as a patch. Matching the globs is
`policies.globs`; copying and diffing is `sandbox/`."""

from __future__ import annotations

import os
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

from airlock.policies.globs import (
    DEFAULT_EXCLUDED,
    DEFAULT_IGNORED,
    DEFAULT_PROTECTED,
    matching_glob,
    protecting_glob,
    validate_glob,
)

from .section import MIB, Name, Section, as_tuple, quoted, reasoned


def _check_root(value: str) -> str:
    if not os.path.isabs(value):
        raise ValueError(
            f"{quoted(value)} is relative; a hatch root is an absolute host path, such as "
            '"/srv/repos/app"'
        )
    if os.path.normpath(value) != value or value.startswith("//"):
        normal = os.path.normpath(value)
        raise ValueError(f"{quoted(value)} is not in normal form; write {quoted(normal)}")
    if value == "/":
        raise ValueError('"/" would offer the whole host; name the repository directory itself')
    if not os.path.isdir(value):
        raise ValueError(
            f"{quoted(value)} is not an existing directory on this host; create it or fix the path"
        )
    real = os.path.realpath(value)
    if real != value:
        # The root is the boundary the snapshot never leaves, so it is named as it is;
        # a symlink in it could be repointed after the policy was checked.
        raise ValueError(
            f"{quoted(value)} passes through a symlink; write the real path {quoted(real)}"
        )
    return value


_RootPath = Annotated[str, AfterValidator(reasoned("hatch_root", _check_root))]
_Glob = Annotated[str, AfterValidator(reasoned("glob", validate_glob))]


class HatchSettings(Section):
    """Host directories an agent may have copied into its session, and what may come back
    from them as a patch."""

    roots: dict[Name, _RootPath] = {}
    """Directories an agent may ask for by name ([hatch.roots] table: name = absolute
    path). Each must exist, be a directory and be written as its real path (no symlinks).
    The server copies a snapshot in; nothing is ever mounted. Missing or empty: there is
    nothing to copy, and every copy_in call is refused."""

    protected: Annotated[tuple[_Glob, ...], BeforeValidator(as_tuple)] = DEFAULT_PROTECTED
    """Globs of paths (from the root) a patch never carries; changes to them are listed as
    needing a human. "**" is any number of segments, "*" and "?" match within one; a path
    is read as Windows and macOS read it (case, trailing dots and spaces and ":" data
    streams ignored), and a Windows short name such as GITHUB~1 counts as matching.
    Missing means CI and deploy configuration, code owners, submodules, .env files,
    registry settings, and files editors, hook managers and coding agents run on their
    own. Writing it replaces that list, so keep its entries unless you mean to let agents'
    patches change them."""

    exclude: Annotated[tuple[_Glob, ...], BeforeValidator(as_tuple)] = DEFAULT_EXCLUDED
    """Globs of paths (from the root) a copy never takes into the sandbox, listed as
    skipped: files that hold credentials, since a sandbox holds no secret. Matched as
    `protected` is, except that a short name stands only for itself. Missing means .env
    files, package registries', git, database, cluster and cloud credentials (service
    account keys included), SSH keys, keys and certificates. Writing it replaces that
    list."""

    ignore: Annotated[tuple[_Glob, ...], BeforeValidator(as_tuple)] = DEFAULT_IGNORED
    """Globs of new files (absent from the copy) a patch leaves out and only counts:
    caches and build output. Missing means Python caches and node_modules; files the
    copy brought in are never ignored, whatever their name."""

    max_files: int = Field(default=5000, gt=0, le=100_000)
    """Most files and directories one copy_in may take from a root; more is refused,
    naming this cap."""

    max_bytes: int = Field(default=64 * MIB, gt=0)
    """Total size in bytes of the files one copy_in may take; more is refused."""

    max_patch_mb: int = Field(default=256, gt=0, le=4096)
    """Largest patch get_patch writes, in MiB (binary files count about 1.3 times their
    deflated size); a larger one is refused, naming this cap, and nothing is kept."""

    include_git_dir_read_only: bool = False
    """Copy nested `.git` directories too. They hold history and may hold credentials
    (remote URLs, hooks), so missing means false: they are skipped. The root's own `.git`
    is never copied: the copy gets a fresh repository of its own instead. Either way no
    change under a `.git` directory ever leaves in a patch."""

    def protecting_glob(self, path: str) -> str | None:
        """The glob of `protected` that holds the root-relative `path` back, or None."""
        return protecting_glob(self.protected, path)

    def ignores(self, path: str) -> bool:
        """Whether a new file at the root-relative `path` stays out of patches."""
        return matching_glob(self.ignore, path) is not None
