"""Finding containers by their labels: a session's, and those a dead server left behind.

Session teardown and the reaper work from the engine's labels (`labels.py`), not from
what this process remembers, so containers of a crashed server are found too; the
containers this process has in use are never reaped.
"""

from __future__ import annotations

from collections.abc import Set

from ..instance import LABEL_INSTANCE
from .containers import Containers
from .engine import EngineClient
from .labels import LABEL_SESSION, is_reapable


def session_containers(client: EngineClient, session_id: str) -> list[str]:
    """The short ids of every container, running or not, labelled with this session."""
    found = client.containers.list(
        all=True, filters={"label": f"{LABEL_SESSION}={session_id}"}, ignore_removed=True
    )
    return [c.short_id for c in found]


async def of_session(containers: Containers, session_id: str) -> list[str]:
    """The ids of this instance's containers labelled with `session_id`."""
    return await containers.ids({"label": [containers.mine, f"{LABEL_SESSION}={session_id}"]})


async def reapable(containers: Containers, in_use: Set[str], now: float) -> list[str]:
    """The ids of Airlock's containers on this engine, of any instance, whose owner is dead
    or whose deadline is before `now` (Unix seconds), but for those in use here."""
    found = await containers.listing({"label": [LABEL_INSTANCE]})
    instance = containers.instance
    return [
        c["Id"]
        for c in found
        if c["Id"] not in in_use and is_reapable(c.get("Labels") or {}, instance, now)
    ]
