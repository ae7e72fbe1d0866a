"""An in-memory sandbox backend, for the tests of logic above the backend seam: no engine.

`MemoryBackend` honours the contract of `airlock.sandbox.Backend` (the same contract tests
run against it and against Docker: tests/rooms/sandbox/test_backend_contract.py): one
never-used sandbox per job, from a warm pool or new, removed when its block ends; one job
per sandbox; the job's files in, its changed files out as drafts within the caps; streams
within their cap with full sizes and hashes; exit status, timeout, killed; a session's
sandboxes removed; this instance's removed; those of dead instances and past their deadline
reaped. Its sandboxes are records in a `MemoryEngine` that several backends share, as
servers share a Docker engine, labelled as Docker's containers are.

It contains nothing: a job's code runs as a plain host process of the test's user
(`memory_job.py`). So it lives here, under tests/, where no configuration of the product can
select it, and runs only code a test wrote; every test of containment, egress or the image
runs on Docker (the `docker` marker). `MemoryServerEngine` is the engine side a test server
runs on with it (`build_server(..., engine_side=...)`, conftest's `make_server`).
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
from memory_job import Started, run_here

from airlock.errors import SandboxError
from airlock.policies import ImageSettings, Policy
from airlock.sandbox import JobOutcome, JobSpec, Ready
from airlock.sandbox.backend import check_first_job
from airlock.sandbox.docker.egress_dir import new_egress_dir
from airlock.sandbox.docker.labels import LABEL_SESSION, is_reapable, job_labels, pooled_labels
from airlock.sandbox.instance import LABEL_INSTANCE, Instance
from airlock.sandbox.pool import Profile, WarmPool
from airlock.store import Staging

IMAGE = "memory"
"""The image and the runtime a memory sandbox reports: there is neither."""
_names = itertools.count(1)


@dataclass
class Box:
    """One sandbox of the engine: its labels, its egress directory, its one process."""

    name: str
    labels: dict[str, str]
    egress_dir: Path | None
    started: Started = field(default_factory=Started)

    @property
    def running(self) -> bool:
        return not self.started.killed


class MemoryEngine:
    """The sandboxes of every memory backend of one test, by name."""

    def __init__(self) -> None:
        self.boxes: dict[str, Box] = {}
        self._deaths: list[Callable[[str], None]] = []

    def add(self, labels: dict[str, str], *, egress: bool) -> Box:
        box = Box(f"mem{next(_names):06d}", labels, new_egress_dir() if egress else None)
        self.boxes[box.name] = box
        return box

    def exists(self, name: str) -> bool:
        return name in self.boxes

    def labelled(self, key: str, value: str | None = None) -> list[Box]:
        """The sandboxes carrying label `key` (with `value`, if given)."""
        return [
            b for b in self.boxes.values() if key in b.labels and value in (None, b.labels[key])
        ]

    def kill(self, name: str) -> None:
        """Kill the sandbox from outside (as `docker kill`); its backends hear of it."""
        box = self.boxes.get(name)
        if box is not None:
            box.started.kill()
            for died in self._deaths:
                died(name)

    def remove(self, name: str) -> None:
        box = self.boxes.pop(name, None)
        if box is not None:
            box.started.kill()
            if box.egress_dir is not None:
                shutil.rmtree(box.egress_dir, ignore_errors=True)

    def on_death(self, died: Callable[[str], None]) -> None:
        self._deaths.append(died)


class MemoryBackend:
    """Runs jobs as host processes, its sandboxes kept in `engine` (see the module)."""

    def __init__(self, engine: MemoryEngine, instance: Instance, *, pool_size: int = 0) -> None:
        self.engine = engine
        self.instance = instance
        self.pool = WarmPool(pool_size, self._start_pooled, self._remove)
        self._active: dict[str, set[str]] = {}
        self._received: dict[str, int] = {}
        self._background: anyio.abc.TaskGroup | None = None
        engine.on_death(self._died)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        try:
            async with anyio.create_task_group() as tg:
                self._background = tg
                tg.start_soon(self.pool.refill_forever)
                try:
                    yield
                finally:
                    self._background = None
                    tg.cancel_scope.cancel()
        finally:
            for name in self.pool.drain():
                self.engine.remove(name)

    @asynccontextmanager
    async def sandbox(self, job: JobSpec, *, egress: bool) -> AsyncIterator[MemorySandbox]:
        profile = Profile(image=job.image, runtime=job.runtime, limits=job.limits, egress=egress)
        box = self._take(profile)
        if box is None:
            await anyio.lowlevel.checkpoint()
            box = self.engine.add(job_labels(self.instance, job), egress=egress)
        self._active.setdefault(job.session_id, set()).add(box.name)
        try:
            yield MemorySandbox(box, job.runtime, self._received)
        finally:
            self._retire(job.session_id, box.name)

    def in_use(self) -> int:
        return sum(map(len, self._active.values()))

    def output_bytes(self, run_id: str) -> int:
        return self._received.get(run_id, 0)

    async def remove_session(self, session_id: str) -> int:
        labelled = {
            b.name
            for b in self.engine.labelled(LABEL_SESSION, session_id)
            if b.labels.get(LABEL_INSTANCE) == self.instance.id
        }
        names = labelled | self._active.get(session_id, set())
        for name in names:
            self.engine.remove(name)
        await anyio.lowlevel.checkpoint()
        return len(names)

    async def remove_all(self) -> int:
        self.pool.drain()
        names = [b.name for b in self.engine.labelled(LABEL_INSTANCE, self.instance.id)]
        for name in names:
            self.engine.remove(name)
        await anyio.lowlevel.checkpoint()
        return len(names)

    async def reap(self, now: float) -> int:
        in_use = set().union(*self._active.values()) if self._active else set()
        doomed = [
            b.name
            for b in self.engine.labelled(LABEL_INSTANCE)
            if b.name not in in_use and is_reapable(b.labels, self.instance, now)
        ]
        for name in doomed:
            self.engine.remove(name)
        await anyio.lowlevel.checkpoint()
        return len(doomed)

    def _take(self, profile: Profile) -> Box | None:
        """A pooled sandbox that still runs, or None; dead ones are removed on the way."""
        while (name := self.pool.take(profile)) is not None:
            box = self.engine.boxes.get(name)
            if box is not None and box.running:
                return box
            self.engine.remove(name)
        return None

    async def _start_pooled(self, profile: Profile) -> str:
        await anyio.lowlevel.checkpoint()
        return self.engine.add(pooled_labels(self.instance), egress=profile.egress).name

    async def _remove(self, name: str) -> None:
        self.engine.remove(name)
        await anyio.lowlevel.checkpoint()

    def _died(self, name: str) -> None:
        if self.pool.discard(name):
            self.engine.remove(name)

    def _retire(self, session_id: str, name: str) -> None:
        self.engine.remove(name)
        active = self._active.get(session_id)
        if active is not None:
            active.discard(name)
            if not active:
                del self._active[session_id]


class MemorySandbox:
    """One memory sandbox taken for one job."""

    def __init__(self, box: Box, runtime: str, received: dict[str, int]) -> None:
        self._box = box
        self._runtime = runtime
        self._received = received
        self._used = False

    @property
    def name(self) -> str:
        return self._box.name

    @property
    def egress_dir(self) -> Path | None:
        return self._box.egress_dir

    @property
    def runtime(self) -> str:
        return self._runtime

    @property
    def ca(self) -> None:
        """No box of its own runs a browser here: a run's egress makes the run's CA."""
        return None

    async def run(self, job: JobSpec, staging: Staging) -> JobOutcome:
        check_first_job(self._used, job, self.egress_dir)
        self._used = True
        if job.browse is not None:
            raise SandboxError(
                "the in-memory backend of the tests runs no browser; mark the test docker"
            )
        if not self._box.running:
            raise SandboxError("the sandbox stopped before it took the job; nothing ran")
        return await run_here(job, staging, self._box.started, self.egress_dir, self._received)

    @property
    def kept(self) -> bool:
        return False

    async def step(self, job: JobSpec, staging: Staging) -> JobOutcome:
        raise SandboxError("the in-memory backend of the tests keeps no sandbox for a step")


class MemoryServerEngine:
    """The engine side of a test server on a `MemoryBackend`: ready at once, no image."""

    def __init__(self, engine: MemoryEngine, policy: Policy, instance: Instance) -> None:
        self.backend = MemoryBackend(engine, instance, pool_size=policy.pool.size)
        self._ready = Ready(self.backend, IMAGE, IMAGE)

    async def ready(self, image: ImageSettings | None = None) -> Ready:
        await anyio.lowlevel.checkpoint()
        return self._ready

    async def browser(self) -> Ready:
        await anyio.lowlevel.checkpoint()
        return self._ready

    def connected(self) -> MemoryBackend:
        return self.backend

    def pool(self) -> WarmPool:
        return self.backend.pool

    async def serve(self) -> None:
        async with self.backend.running():
            await anyio.sleep_forever()

    def close(self) -> None:
        pass


def memory_engine_side(engine: MemoryEngine) -> Callable[[Policy, Instance], MemoryServerEngine]:
    """The `engine_side` of `build_server` for servers on `engine`."""
    return lambda policy, instance: MemoryServerEngine(engine, policy, instance)
