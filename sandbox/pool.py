"""The warm pool: started, never-used containers, each waiting for its one job.

A pooled container runs the same runner as any other and blocks reading its
job, so taking one skips only create and start. It is handed out once, is
removed after its call like every other container, and carries the same
instance labels, so a crashed server's pool is reaped like the rest.

Each taken container is replaced at once (a browser box once its call gave it back,
`give_back`: a Chromium starting beside the call's own would take the CPU it needs on a
small machine), and the missing ones of a profile are
started concurrently, so calls arriving faster than one container start find the
pool refilling in parallel rather than one at a time. Browser boxes (`Profile.browser`)
are kept `browser_size` at a time, apart from `size` ([browser] pool and [pool] size): each
waits with Chromium running and a CA of its own, which serves the one browse that takes it
(a kept browser is made for its session instead: `DockerBackend.sandbox`). The counters (`hits`,
`misses`, `started`, `failures`, `dropped`, `ready_count`) are for metrics.

A pooled container can die while it waits (killed, or stopped with the engine). The
backend tells the pool: `discard` drops one that died, `lose_engine` drops them all
when the engine's connection breaks and hands out nothing until `engine_back`. A
container whose start overlapped a lost engine is not kept either. The backend still
checks the one it takes (see `DockerBackend.sandbox`): the pool only hears of a death
after the fact.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from airlock.errors import SandboxError

from .spec import ContainerLimits

log = logging.getLogger(__name__)

# Older pooled containers are replaced, so none outlives its deadline label.
MAX_AGE_S = 30 * 60
RETRY_AFTER_FAILURE_S = 5.0


@dataclass(frozen=True)
class Profile:
    """Everything fixed when a container is created: what a pooled one must match."""

    image: str
    runtime: str
    limits: ContainerLimits
    egress: bool = False
    """Created with an (empty) egress directory mounted, for a run's proxy to bind in."""
    browser: bool = False
    """A browser box: created with a CA of its own beside its egress socket, which its
    Chromium, started before any job, trusts; the box's one run's proxy is bound to it."""


class WarmPool:
    def __init__(
        self,
        size: int,
        start: Callable[[Profile], Awaitable[str]],
        remove: Callable[[str], Awaitable[None]],
        *,
        browser_size: int = 0,
    ) -> None:
        self.size = size
        self.browser_size = browser_size
        self._start = start
        self._remove = remove
        self._ready: dict[Profile, deque[tuple[str, float]]] = {}
        self._starting: dict[Profile, int] = {}
        # Browser boxes taken and not given back yet: replaced only once they are.
        self._lent: dict[Profile, int] = {}
        self._wake = anyio.Event()
        # Set (and replaced) when the engine is back, ending the wait after a failed start.
        self._back = anyio.Event()
        self._engine_lost = False
        # Counts lost engines: a start that began before the last one is not trusted.
        self._generation = 0
        self.hits = 0
        """Calls that got a ready container."""
        self.misses = 0
        """Calls that found none ready (the backend then creates one)."""
        self.started = 0
        """Containers started for the pool."""
        self.failures = 0
        """Pool starts the engine refused."""
        self.dropped = 0
        """Ready containers dropped unused: they died, or were lost with the engine."""

    def ready_count(self) -> int:
        """Ready containers across all profiles."""
        return sum(len(ready) for ready in self._ready.values())

    def waiting(self) -> list[str]:
        """The ids of the ready containers across all profiles, oldest first per profile."""
        return [container_id for ready in self._ready.values() for container_id, _ in ready]

    def size_of(self, profile: Profile) -> int:
        """How many of `profile` are kept ready: `browser_size` of browser boxes, else `size`."""
        return self.browser_size if profile.browser else self.size

    def want(self, profile: Profile) -> None:
        """Keep `size_of(profile)` containers of this profile ready from now on."""
        if self.size_of(profile) > 0 and profile not in self._ready:
            self._ready[profile] = deque()
            self._wake.set()

    def take(self, profile: Profile) -> str | None:
        """A ready container of `profile`, never handed out before, or None."""
        self.want(profile)
        ready = self._ready.get(profile)
        now = time.monotonic()
        while ready and not self._engine_lost:
            container_id, born = ready.popleft()
            self._wake.set()
            if now - born < MAX_AGE_S:
                self.hits += 1
                if profile.browser:
                    self._lent[profile] = self._lent.get(profile, 0) + 1
                return container_id
            # Too old to hand out; the refill loop replaces it.
            ready.appendleft((container_id, born))
            break
        if self.size_of(profile) > 0:
            self.misses += 1
        return None

    def give_back(self, profile: Profile) -> None:
        """A browser box `take` handed out has ended its call: replace it now."""
        lent = self._lent.get(profile, 0)
        if lent:
            self._lent[profile] = lent - 1
            self._wake.set()

    def discard(self, container_id: str) -> bool:
        """Drop a ready container that died; whether it was one of them."""
        for ready in self._ready.values():
            for entry in ready:
                if entry[0] == container_id:
                    ready.remove(entry)
                    self.dropped += 1
                    self._wake.set()
                    return True
        return False

    def lose_engine(self) -> list[str]:
        """The engine's connection broke (it stopped or restarted): drop every ready
        container, return their ids for removal, and hand out none until `engine_back`."""
        self._engine_lost = True
        self._generation += 1
        ids = self.drain()
        self.dropped += len(ids)
        return ids

    def engine_back(self) -> None:
        """The engine answers again: refill now."""
        self._engine_lost = False
        self._back.set()
        self._back = anyio.Event()
        self._wake.set()

    def drain(self) -> list[str]:
        """Forget every ready container and return their ids, for removal."""
        ids = self.waiting()
        for ready in self._ready.values():
            ready.clear()
        return ids

    async def refill_forever(self) -> None:
        """Top every wanted profile up to its size, replacing old containers, until cancelled.

        Missing containers are started concurrently, each in its own task."""
        async with anyio.create_task_group() as tg:
            while True:
                self._wake = anyio.Event()
                # Nothing starts while the engine is away; `engine_back` wakes this loop.
                wanted = [] if self._engine_lost else list(self._ready.items())
                for profile, ready in wanted:
                    await self._retire_old(ready)
                    starting = self._starting.get(profile, 0) + self._lent.get(profile, 0)
                    for _ in range(self.size_of(profile) - len(ready) - starting):
                        self._starting[profile] = self._starting.get(profile, 0) + 1
                        tg.start_soon(self._start_one, profile)
                with anyio.move_on_after(MAX_AGE_S / 4):
                    await self._wake.wait()

    async def _start_one(self, profile: Profile) -> None:
        generation = self._generation
        try:
            container_id = await self._start(profile)
        except SandboxError as exc:
            self.failures += 1
            log.warning("warm pool: cannot start a container: %s", exc)
            with anyio.move_on_after(RETRY_AFTER_FAILURE_S):
                await self._back.wait()
        else:
            self.started += 1
            if generation == self._generation:
                self._ready[profile].append((container_id, time.monotonic()))
            else:
                # Started around an engine restart: it may have died with the old engine.
                self.dropped += 1
                with anyio.CancelScope(shield=True):
                    await self._remove(container_id)
        finally:
            self._starting[profile] -= 1
            self._wake.set()

    async def _retire_old(self, ready: deque[tuple[str, float]]) -> None:
        now = time.monotonic()
        while ready and now - ready[0][1] >= MAX_AGE_S:
            container_id, _ = ready.popleft()
            await self._remove(container_id)
