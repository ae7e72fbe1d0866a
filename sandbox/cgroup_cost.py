"""What a container cost, read from its cgroup on the host.

Reading the engine's cgroup files directly is fast (no API round trip) and,
unlike anything the runner reports, cannot be forged from inside the sandbox.
Only works when the engine runs on this host; callers fall back to the stats API.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


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
