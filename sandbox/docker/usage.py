"""What a container cost, and whether the OOM killer struck it.

Read from its cgroup on the host while it runs (`UsageWatch`): fast (no API round trip)
and, unlike anything the runner reports, not forgeable from inside the sandbox. That only
works when the engine runs on this host; elsewhere `engine_state` asks the stats API.
`cgroup_verdict` decides from the looks what a run cost and whether it died of memory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import docker

from ..spec import Usage

CGROUP_ROOT = Path("/sys/fs/cgroup")
# The share of its memory limit at which a sandbox that died without a report is taken
# to have died of it (its last look can come a little before the end).
AT_MEMORY_LIMIT = 0.9
MIB = 1 << 20
# How long the engine gets to write a dead sandbox's end (20 x 0.1 s).
OOM_STATE_TRIES = 20
OOM_STATE_PAUSE_S = 0.1


@dataclass(frozen=True)
class CgroupUsage:
    cpu_seconds: float
    peak_memory_bytes: int
    oom_kills: int


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _keyed(path: Path, key: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        return None
    return None


def _v1(container_id: str) -> CgroupUsage | None:
    for parent in ("docker", f"system.slice/docker-{container_id}.scope"):
        leaf = parent if parent.endswith(".scope") else f"{parent}/{container_id}"
        memory = CGROUP_ROOT / "memory" / leaf
        cpu_ns = _read_int(CGROUP_ROOT / "cpuacct" / leaf / "cpuacct.usage")
        peak = _read_int(memory / "memory.max_usage_in_bytes")
        if cpu_ns is not None and peak is not None:
            return CgroupUsage(
                cpu_seconds=cpu_ns / 1e9,
                peak_memory_bytes=peak,
                oom_kills=_keyed(memory / "memory.oom_control", "oom_kill") or 0,
            )
    return None


def _v2(container_id: str) -> CgroupUsage | None:
    for leaf in (f"system.slice/docker-{container_id}.scope", f"docker/{container_id}"):
        group = CGROUP_ROOT / leaf
        cpu_us = _keyed(group / "cpu.stat", "usage_usec")
        peak = _read_int(group / "memory.peak")
        if cpu_us is not None and peak is not None:
            return CgroupUsage(
                cpu_seconds=cpu_us / 1e6,
                peak_memory_bytes=peak,
                oom_kills=_keyed(group / "memory.events", "oom_kill") or 0,
            )
    return None


def read_usage(container_id: str) -> CgroupUsage | None:
    """The container's usage while it still exists, or None when its cgroup isn't visible."""
    return _v1(container_id) or _v2(container_id)


class UsageWatch:
    """A running container's usage, looked at now and then so that the last look
    survives a sandbox that vanishes with its cgroup before its end is read."""

    def __init__(self, container_id: str) -> None:
        self.container_id = container_id
        self.last: CgroupUsage | None = None

    def look(self) -> CgroupUsage | None:
        # Reading a few sysfs files doesn't block in any way that matters.
        seen = read_usage(self.container_id)
        if seen is not None:
            self.last = seen
        return seen


def cgroup_verdict(watch: UsageWatch, *, died: bool, memory_mb: int) -> tuple[Usage, bool] | None:
    """The run's usage and whether the OOM killer struck, from a last look at the cgroup
    (or the look before, for a sandbox that died without a report); None when its cgroup
    was never visible from here (a remote engine: ask `engine_state`)."""
    cgroup = watch.look()
    oom_killed = cgroup is not None and cgroup.oom_kills > 0
    if cgroup is None and died and watch.last is not None:
        # The sandbox went with its cgroup before its end was read: under gVisor the
        # OOM killer takes the whole sandbox, and the engine does not record that as
        # OOMKilled. A sandbox that died at its memory limit was killed for it.
        cgroup = watch.last
        oom_killed = cgroup.oom_kills > 0 or (
            cgroup.peak_memory_bytes >= memory_mb * MIB * AT_MEMORY_LIMIT
        )
    if cgroup is None:
        return None
    usage = Usage(cpu_seconds=cgroup.cpu_seconds, peak_memory_bytes=cgroup.peak_memory_bytes)
    return usage, oom_killed


def engine_oom_killed(client: docker.DockerClient, container_id: str) -> bool:
    """Whether the engine recorded the OOM killer ending the container, once it has seen it
    exit: the attach can end a moment before the engine writes the container's end, so it
    is asked a few times. For a sandbox that died without a report when the host's last
    look at its cgroup came before the climb to the limit (a loaded host)."""
    for _ in range(OOM_STATE_TRIES):
        state = client.api.inspect_container(container_id)["State"]
        if not state.get("Running"):
            return bool(state.get("OOMKilled"))
        time.sleep(OOM_STATE_PAUSE_S)
    return False


def engine_state(client: docker.DockerClient, container_id: str) -> tuple[Usage, bool]:
    """Usage from the stats API (a remote engine) and whether the OOM killer struck."""
    state = client.api.inspect_container(container_id)["State"]
    usage = Usage()
    if state.get("Running"):
        stats = client.api.stats(container_id, stream=False, one_shot=True)
        cpu_ns = (stats.get("cpu_stats") or {}).get("cpu_usage", {}).get("total_usage")
        peak = (stats.get("memory_stats") or {}).get("max_usage")
        usage = Usage(
            cpu_seconds=cpu_ns / 1e9 if cpu_ns else None,
            peak_memory_bytes=peak or None,
        )
    return usage, bool(state.get("OOMKilled"))
