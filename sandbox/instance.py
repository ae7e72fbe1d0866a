"""Which server instance owns a container, and whether that instance still lives.

Several Airlock servers may share one engine (an editor and a terminal agent,
say), so "not mine" must not mean "dead". A container is labelled with the
owner's host, pid and the pid's start time; on the same host a dead or reused
pid proves the owner is gone. Containers of other hosts are left to their
deadline label.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from airlock.ids import new_id

LABEL_INSTANCE = "airlock.instance"
LABEL_HOST = "airlock.host"
LABEL_PID = "airlock.pid"
LABEL_PID_START = "airlock.pid_start"


def _pid_start(pid: int) -> str | None:
    """The start time of `pid` in clock ticks since boot, or None if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses; fields resume after the last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    # A zombie is dead, however long its parent takes to collect it.
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


@dataclass(frozen=True)
class Instance:
    id: str
    host: str
    pid: int
    pid_start: str

    @classmethod
    def current(cls) -> Instance:
        pid = os.getpid()
        return cls(
            id=new_id("srv_", random_bytes=10),
            host=socket.gethostname(),
            pid=pid,
            pid_start=_pid_start(pid) or "",
        )

    def labels(self) -> dict[str, str]:
        return {
            LABEL_INSTANCE: self.id,
            LABEL_HOST: self.host,
            LABEL_PID: str(self.pid),
            LABEL_PID_START: self.pid_start,
        }

    def owner_is_dead(self, labels: dict[str, str]) -> bool:
        """True when `labels` name an instance on this host that no longer runs."""
        if labels.get(LABEL_INSTANCE) == self.id:
            return False
        if labels.get(LABEL_HOST) != self.host:
            return False
        try:
            pid = int(labels.get(LABEL_PID, ""))
        except ValueError:
            return True
        return _pid_start(pid) != labels.get(LABEL_PID_START)
