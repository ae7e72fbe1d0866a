"""`airlock keys create`: a new API key for an HTTP client, printed once, and its auth-file
entry (shown, or added to the file with --auth)."""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from . import out

if TYPE_CHECKING:
    from . import Subparsers

NAME = "keys"


def add_parser(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    keys = commands.add_parser(NAME, help="API keys for HTTP clients").add_subparsers(
        dest="keys_command", metavar="ACTION", required=True
    )
    create = keys.add_parser(
        "create",
        help="print a new API key (once) and its auth-file entry, or add it with --auth",
    )
    create.add_argument(
        "tenant", metavar="TENANT", help="lowercase letters, digits and '-' (e.g. acme)"
    )
    create.add_argument("--id", help="a label for the key (default: TENANT-<random>)")
    create.add_argument(
        "--auth",
        metavar="FILE",
        type=Path,
        help="append the entry to this auth file (created 0600 if missing; replaced atomically)",
    )


def run(args: argparse.Namespace) -> int:
    from ..keys import append_key, new_key

    new = new_key(args.tenant, args.id)
    if args.auth is not None:
        append_key(args.auth, new)
    _private_stdout()
    out(new.key)
    sys.stderr.write(
        "airlock: this key is shown once; give it to the client (Authorization: Bearer <key>).\n"
    )
    if args.auth is not None:
        entry = new.entry
        sys.stderr.write(f"airlock: added key {entry.id} for {entry.tenant} to {args.auth}\n")
    else:
        sys.stderr.write(
            "airlock: add this to the auth file (only the hash is stored), or rerun with "
            "--auth FILE:\n\n" + new.toml
        )
    return 0


def _private_stdout() -> None:
    """`airlock keys create acme > acme.key`: the shell made the file with its umask (0644
    under 022) before airlock started, so another user may already hold it open, and a
    chmod leaves their descriptor readable. An empty file others could read is therefore
    replaced by a new 0600 file at the same path, which stdout then writes (what they
    opened stays empty); any other regular file is made 0600 before the key is in it."""
    fd = sys.stdout.fileno()
    with contextlib.suppress(OSError):
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return
        if info.st_mode & 0o077 and info.st_size == 0:
            # Without /proc (macOS) or a writable directory, chmod is all there is.
            with contextlib.suppress(OSError):
                fresh = _fresh_file_in_place_of(info, os.readlink(f"/proc/self/fd/{fd}"))
                if fresh is not None:
                    sys.stdout.flush()
                    os.dup2(fresh, fd)
                    os.close(fresh)
                    return
        os.fchmod(fd, 0o600)


def _fresh_file_in_place_of(info: os.stat_result, path: str) -> int | None:
    """A new 0600 file renamed over `path`, opened for writing, if `path` still names the
    file `info` describes; None otherwise (stdout is then only made 0600)."""
    now = os.stat(path, follow_symlinks=False)
    if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
        return None
    fresh, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".airlock-key-")
    try:
        os.rename(tmp, path)
    except OSError:
        os.close(fresh)
        os.unlink(tmp)
        raise
    return fresh
