"""The host directory of one container's way out: made empty, mounted read-only, removed
with its container.

A container for a run with egress is created with its own empty directory bind-mounted
read-only (so pooled ones can be made before the run exists); the run's proxy binds its
socket there once the container is taken. Nothing else ever goes in it but a browser box's
CA certificate (`containers.CA_FILE`, public: its key stays on the host), written before
the box starts.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from airlock.egress import MAX_SOCKET_PATH, SOCKET_NAME
from airlock.errors import EgressUnavailable


def new_egress_dir() -> Path:
    """An empty directory for one container's proxy socket, in a short place (the
    system's temporary directory), unguessable, enterable by the sandbox user."""
    path = Path(tempfile.mkdtemp(prefix="airlock-"))
    if len(str(path / SOCKET_NAME)) > MAX_SOCKET_PATH:
        path.rmdir()
        raise EgressUnavailable(
            f"the egress socket path under {path.parent} is too long for a unix socket; "
            "set TMPDIR to a short directory"
        )
    # The umask may have taken bits from mkdtemp's 0700; the sandbox user must enter it.
    path.chmod(0o755)
    return path
