"""Every option of a sandbox container: the hardening lives here and only here.

Belongs here: what `docker create` is given for a profile (user, capabilities, read-only
root, tmpfs mounts and their caps, limits, runtime, no network, no log driver, the one
read-only bind mount of an egress directory, labels) and the figures behind those options.
Does not belong here: creating, starting or removing containers (`containers.py`), or
which labels a container carries (`labels.py`). Pure: nothing here calls the engine.
"""

from __future__ import annotations

from typing import Any

from docker.types import LogConfig, Mount, Ulimit

from airlock.egress import SOCKET_NAME

from ..environment import EGRESS_MOUNT, RELAY_PORT, sandbox_environment
from ..inside.wire import SANDBOX_HOME, SANDBOX_UID
from ..pool import Profile
from ..runtime import GVISOR
from ..seccomp import gvisor_security_opt
from ..spec import JobSpec

# Init and the runner run as root with only the capabilities it takes to drop the code
# to uid 1000 and to kill it (see inside/runner.py); the code itself ends up with none.
RUNNER_USER = "0:0"
RUNNER_CAPABILITIES = ["SETUID", "SETGID", "SETPCAP", "KILL"]
# Under gVisor the host's pids cgroup counts the Sentry's and gofer's threads, not the
# code's tasks: on the ptrace platform each task costs a Sentry thread plus a stub
# process and its threads (measured: 64 tasks need more than 320 host pids, 640 hold).
# Without that room the Sentry fails to start a thread and the whole sandbox dies. The
# code's own limit is RLIMIT_NPROC, which gVisor's kernel enforces inside the sandbox.
RUNSC_HOST_PIDS_PER_TASK = 10
RUNSC_HOST_PIDS = 128
# The CPU quota is counted per second, not per 100 ms (the engine's period for `--cpus`):
# a sandbox starting under gVisor burns about 300 ms of CPU in its first 250, on both
# cores at once, and a 100 ms period held it back by 30 to 90 ms of throttling on each
# cold call. Over any second the quota is what it was; within one, a run may spend its
# second's share sooner. 1 s is the longest period the kernel allows.
CPU_PERIOD_US = 1_000_000


def profile_of(job: JobSpec, *, egress: bool = False) -> Profile:
    """The pool's key for the container `job` needs (a browse's is a browser box's)."""
    return Profile(
        image=job.image,
        runtime=job.runtime,
        limits=job.limits,
        egress=egress,
        browser=job.browse is not None,
    )


def container_options(
    profile: Profile, *, labels: dict[str, str], egress_dir: str | None = None
) -> dict[str, Any]:
    """Every option of a sandbox container of `profile`."""
    limits = profile.limits
    gvisor = profile.runtime == GVISOR
    memory = f"{limits.memory_mb}m"
    # The engine ignores `mode=` on these mounts; ownership is what lets the
    # sandbox user write.
    owner = f"uid={SANDBOX_UID},gid={SANDBOX_UID}"
    return {
        "image": profile.image,
        "detach": True,
        "stdin_open": True,
        "tty": False,
        "user": RUNNER_USER,
        # Arguments of the runner (the image's entrypoint): with egress, it starts the
        # relay to the socket's path at once, so a taken container has it listening.
        "command": ["--egress", f"{EGRESS_MOUNT}/{SOCKET_NAME}", str(RELAY_PORT)]
        if egress_dir
        else None,
        # The environment every run's code starts from, built from an empty dict: the
        # runner starts the code's process in it before the job, whose own environment
        # (also built from an empty dict) then replaces it.
        "environment": sandbox_environment(),
        "network_mode": "none",
        "network_disabled": True,
        "cap_drop": ["ALL"],
        "cap_add": RUNNER_CAPABILITIES,
        "security_opt": ["no-new-privileges:true"] + ([gvisor_security_opt()] if gvisor else []),
        "read_only": True,
        "tmpfs": {
            "/workspace": f"rw,exec,nosuid,nodev,size={limits.workspace_mb}m,{owner}",
            "/tmp": f"rw,noexec,nosuid,nodev,size={limits.tmp_mb}m,{owner}",
            # HOME: caches and dotfiles of one run, gone with its container (as /tmp's
            # files are, and under the same cap).
            SANDBOX_HOME: f"rw,noexec,nosuid,nodev,size={limits.tmp_mb}m,{owner}",
        },
        "pids_limit": limits.pids * RUNSC_HOST_PIDS_PER_TASK + RUNSC_HOST_PIDS
        if gvisor
        else limits.pids,
        "mem_limit": memory,
        "memswap_limit": memory,
        "cpu_period": CPU_PERIOD_US,
        "cpu_quota": int(limits.cpus * CPU_PERIOD_US),
        "ulimits": [Ulimit(name="core", soft=0, hard=0)]
        # gVisor's kernel counts the code's tasks itself; the host cgroup above can't. It
        # admits one task more than the limit (Linux refuses at the limit), hence - 1.
        + ([Ulimit(name="nproc", soft=limits.pids - 1, hard=limits.pids - 1)] if gvisor else []),
        "init": True,
        "ipc_mode": "private",
        "privileged": False,
        "runtime": profile.runtime,
        # Output travels over the attach stream; a log driver would copy every
        # byte of a flood to the host's disk.
        "log_config": LogConfig(type=LogConfig.types.NONE),
        # The one host path a sandbox ever sees: a directory holding only the run's
        # proxy socket (and a browser box's CA certificate), read-only.
        "mounts": [Mount(target=EGRESS_MOUNT, source=egress_dir, type="bind", read_only=True)]
        if egress_dir
        else [],
        "labels": labels,
    }
