"""The runner's own privileges (the browser driver's too): made undumpable, checked to be
root, dropped for good to the sandbox user in a child, or only for a moment, in this process,
to act on the code's files.

Why this keeps the report channel the runner's alone is in runner.py's docstring.

Only the standard library of the image's Python (3.11) may be used here.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os

from .wire import SANDBOX_UID

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24


def harden() -> None:
    """What every entrypoint of a box does first, before any job is known."""
    make_undumpable()
    check_privileges()
    # Root's supplementary groups would follow it when it acts as the sandbox user.
    os.setgroups([])


def _prctl(option: int, arg: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(option, arg, 0, 0, 0))


def make_undumpable() -> None:
    # The uid already keeps the code away from our /proc entries and from ptrace;
    # undumpable keeps that true for anything of our own uid too (and no core).
    if _prctl(PR_SET_DUMPABLE, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def check_privileges() -> None:
    """Refuse to run code that would share our uid: that is what let it forge our frames."""
    if os.geteuid() != 0:
        raise PermissionError(
            f"the runner runs as uid {os.geteuid()}, not root: it could not drop the code "
            "to another uid; start the container as user 0 with CAP_SETUID and CAP_SETGID"
        )


def become_sandbox_user() -> None:
    """Drop to uid/gid 1000 with no groups, an empty bounding set and no capabilities."""
    for cap in range(64):
        if _prctl(PR_CAPBSET_DROP, cap) != 0:
            # EINVAL past the last capability the kernel knows; anything else is a failure.
            if ctypes.get_errno() != errno.EINVAL:
                raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap}) failed")
            break
    os.setgroups([])
    os.setgid(SANDBOX_UID)
    os.setuid(SANDBOX_UID)
    # setuid from root clears the permitted and effective sets; check, never assume.
    if os.getuid() != SANDBOX_UID or os.geteuid() != SANDBOX_UID or os.getegid() != SANDBOX_UID:
        raise PermissionError("could not drop to the sandbox user")


@contextlib.contextmanager
def as_sandbox_user() -> Iterator[None]:
    """Act on files as the sandbox user, in this process: only the effective ids change.

    Root without CAP_DAC_OVERRIDE may not read the code's files, and what the runner
    writes in /workspace must be the code's. The real and saved ids stay root's, so no
    process of the sandbox user may signal or trace the runner meanwhile, and on the
    way back the runner's capabilities return with its effective uid. (A child that
    dropped to the sandbox user did this before: a fork costs about 25 ms under gVisor.)
    """
    os.setegid(SANDBOX_UID)
    os.seteuid(SANDBOX_UID)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)
