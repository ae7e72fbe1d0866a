"""The Docker side of the warm pool: starting a pooled container, and taking one that runs.

The pool itself (`sandbox/pool.py`) only keeps ids by profile; `events.py` keeps it clear
of containers that die while they wait. A container is handed out only once it is
attached and then seen running (`attach.attach_if_running`): the pool hears of a death
after the fact, and an attach to a dead container would never end.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc

from ..pool import Profile, WarmPool
from .attach import attach_if_running, stream_of
from .containers import Containers
from .labels import pooled_labels

log = logging.getLogger(__name__)


async def start_pooled(containers: Containers, profile: Profile) -> str:
    """A started container of `profile` with no job yet (its runner waits for one)."""
    labels = pooled_labels(containers.instance)
    container_id = await containers.create(profile, labels, "creating a pooled container")
    try:
        await containers.start(container_id, "starting a pooled container")
    except BaseException:
        with anyio.CancelScope(shield=True):
            await containers.remove(container_id)
        raise
    return container_id


async def take_running(
    pool: WarmPool,
    containers: Containers,
    profile: Profile,
    remove_later: Callable[[str], Awaitable[None]],
) -> tuple[str | None, anyio.abc.SocketStream | None]:
    """A pooled container of `profile` that is running, attached; (None, None) when the
    pool has none. Pooled ones found dead are dropped on the way (`remove_later`: the code
    never ran in them), so a call after an engine restart gets a new container."""
    while (container_id := pool.take(profile)) is not None:
        try:
            fd = await containers.call(
                "attaching to a pooled container",
                lambda: attach_if_running(containers.client, container_id),
            )
            stream = None if fd is None else await stream_of(fd)
        except BaseException:
            pool.give_back(profile)
            with anyio.CancelScope(shield=True):
                await containers.remove(container_id)
            raise
        if stream is not None:
            return container_id, stream
        log.info("warm pool: pooled container %s is not running; skipped", container_id[:12])
        pool.give_back(profile)
        await remove_later(container_id)
    return None, None
