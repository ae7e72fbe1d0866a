"""Which OCI runtime runs sandboxes: the policy's wish against what the engine has registered.

Decides from the names of the engine's registered runtimes (`docker info`); never calls
the engine itself. gVisor (`runsc`) puts a user-space kernel between the code and the
host's, so it is the choice wherever it exists.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from airlock.errors import SandboxError

GVISOR = "runsc"
RUNC = "runc"
AUTO = "auto"

DAEMON_JSON = (
    '{"runtimes": {"runsc": {"path": "/usr/bin/runsc", '
    '"runtimeArgs": ["--network=none", "--host-uds=open", "--oci-seccomp"]}}}'
)
REGISTER_GVISOR = (
    "install gVisor (`apt-get install runsc`), add "
    f"{DAEMON_JSON} to /etc/docker/daemon.json (merged with what is there), then reload "
    "Docker with `kill -HUP $(pidof dockerd)`"
)


@dataclass(frozen=True)
class RuntimeChoice:
    """The runtime sandboxes use, and the one warning line to give when it is a fallback."""

    runtime: str
    warning: str | None = None


def choose_runtime(wanted: str, registered: Collection[str]) -> RuntimeChoice:
    """`wanted` is the policy's `[sandbox] runtime`; `registered` the engine's runtimes.

    1. "auto" with runsc registered: runsc.
    2. "auto" without it: runc, with a warning naming the fix.
    3. A named runtime the engine has: that runtime.
    4. A named runtime it lacks: `SandboxError` naming the fix (never a silent fallback).
    """
    if wanted == AUTO:
        if GVISOR in registered:
            return RuntimeChoice(GVISOR)
        return RuntimeChoice(
            RUNC,
            "gVisor (runsc) is not registered with the Docker engine, so sandboxes run "
            f"under runc (the host kernel); to use gVisor, {REGISTER_GVISOR}; "
            'to silence this, set [sandbox] runtime = "runc"',
        )
    if wanted in registered:
        return RuntimeChoice(wanted)
    if wanted == GVISOR:
        raise SandboxError(
            f'the policy asks for runtime "runsc" but the Docker engine has no runtime of '
            f'that name; {REGISTER_GVISOR}, or set [sandbox] runtime = "auto"'
        )
    raise SandboxError(
        f"the policy asks for runtime {wanted!r} but the Docker engine has only "
        f"{', '.join(sorted(registered))}"
    )
