"""`DockerBackend`: one fresh, hardened, network-less container per job.

Owns which container a job gets and that it goes: a pooled one that is running
(`pooling.py`), or one created for the job (always for a kept browser, whose labels must
name its session and live as long: labels are fixed when a container is created), removed
when the job's block ends, in a shielded step, so cancellation, timeouts and engine errors
all end with it gone (after the reply, in the background, while `running()`). Also
removes a session's containers, all of this instance's, and those a dead server left
(`reaping.py`). The job's exchange itself is `run.py`'s; every engine call is
`containers.py`'s.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import docker

from airlock.egress.tls import RunCA
from airlock.errors import SandboxError
from airlock.store import Staging

from ..backend import check_first_job
from ..instance import Instance
from ..pool import WarmPool
from ..spec import JobOutcome, JobSpec
from .containers import Containers
from .events import EngineWatch
from .labels import LABEL_RUN, job_labels
from .options import profile_of
from .pooling import start_pooled, take_running
from .reaping import of_session, reapable
from .run import run_job


class DockerBackend:
    """Runs jobs in Docker containers labelled with this server instance.

    `running()` (entered for the server's lifetime) owns the background work:
    the warm pool's refill and the removal of containers after their reply.
    Without it, containers are removed before `run` returns.
    """

    def __init__(
        self,
        client: docker.DockerClient,
        instance: Instance,
        *,
        pool_size: int = 0,
        browser_pool_size: int = 0,
    ) -> None:
        """`browser_pool_size` browser boxes wait ready once one is wanted, `pool_size` of
        every other kind."""
        self.client = client
        self.instance = instance
        self.containers = Containers(client, instance)
        self.pool = WarmPool(
            pool_size,
            lambda profile: start_pooled(self.containers, profile),
            self._remove,
            browser_size=browser_pool_size,
        )
        self._watch = EngineWatch(client, self.containers.mine, self.pool, self._remove_many)
        self._background: anyio.abc.TaskGroup | None = None
        # Containers handed a job, by session: pooled ones carry no session label.
        self._active: dict[str, set[str]] = {}
        # Output received so far, by run in progress (for progress notifications).
        self._received: dict[str, int] = {}

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        try:
            async with anyio.create_task_group() as tg:
                self._background = tg
                pool_work = anyio.CancelScope()

                async def keep_pool() -> None:
                    with pool_work:
                        async with anyio.create_task_group() as pool_tasks:
                            pool_tasks.start_soon(self._watch.run)
                            pool_tasks.start_soon(self.pool.refill_forever)

                tg.start_soon(keep_pool)
                try:
                    yield
                finally:
                    pool_work.cancel()
                    self._background = None
        finally:
            # Only now: an engine call cannot be abandoned, so a refill that was creating
            # a container when cancelled adds it to the pool after the cancel returns.
            with anyio.CancelScope(shield=True):
                await self._remove_many(self.pool.drain())

    @asynccontextmanager
    async def sandbox(self, job: JobSpec, *, egress: bool) -> AsyncIterator[DockerSandbox]:
        """A never-used container for `job`: a pooled one if ready, else a new one.
        Removed when the block ends (after the reply, when `running()`)."""
        profile = profile_of(job, egress=egress)
        if job.browse is not None and job.browse.keep:
            # A kept browser outlives a pooled box's deadline label and must carry its
            # session's: it gets a box made for it.
            pooled, attached = None, None
        else:
            pooled, attached = await take_running(self.pool, self.containers, profile, self._later)
        if pooled is None:
            try:
                labels = job_labels(self.instance, job)
                container_id = await self.containers.create(
                    profile, labels, "creating the container"
                )
            except BaseException:
                # The engine may have created it before the call failed; find it by label.
                with anyio.CancelScope(shield=True), contextlib.suppress(SandboxError):
                    leftover = await self.containers.ids({"label": [f"{LABEL_RUN}={job.run_id}"]})
                    await self._remove_many(leftover)
                raise
        else:
            container_id = pooled
        self._active.setdefault(job.session_id, set()).add(container_id)
        box = DockerSandbox(
            self,
            container_id,
            runtime=job.runtime,
            egress_dir=self.containers.egress_dir(container_id),
            attached=attached,
            ca=self.containers.ca(container_id),
        )
        try:
            yield box
        except BaseException:
            with anyio.CancelScope(shield=True):
                await box.close()
                await self._retire(job.session_id, container_id)
            raise
        finally:
            if pooled is not None:
                self.pool.give_back(profile)
        with anyio.CancelScope(shield=True):
            await box.close()
        if self._background is not None:
            self._background.start_soon(self._retire, job.session_id, container_id)
        else:
            await self._retire(job.session_id, container_id)

    def in_use(self) -> int:
        """How many containers have a job right now."""
        return sum(map(len, self._active.values()))

    def output_bytes(self, run_id: str) -> int:
        return self._received.get(run_id, 0)

    async def remove_session(self, session_id: str) -> int:
        """Kill and remove every container of a session; returns how many."""
        labelled = await of_session(self.containers, session_id)
        ids = sorted(set(labelled) | self._active.get(session_id, set()))
        await self._remove_many(ids)
        return len(ids)

    async def remove_all(self) -> int:
        """Kill and remove every container of this instance (shutdown)."""
        self.pool.drain()
        ids = await self.containers.ids({"label": [self.containers.mine]})
        await self._remove_many(ids)
        return len(ids)

    async def reap(self, now: float) -> int:
        """Remove containers of dead instances and those past their deadline."""
        in_use = set().union(*self._active.values()) if self._active else set()
        doomed = await reapable(self.containers, in_use, now)
        await self._remove_many(doomed)
        return len(doomed)

    async def _exchange(
        self,
        container_id: str,
        job: JobSpec,
        staging: Staging,
        attached: anyio.abc.SocketStream | None,
        hold: Callable[[anyio.abc.SocketStream], None],
    ) -> JobOutcome:
        return await run_job(
            self.containers,
            container_id,
            job,
            staging,
            attached=attached,
            received=self._received,
            hold=hold,
        )

    async def _later(self, container_id: str) -> None:
        """Remove the container in the background while `running()`, else now."""
        if self._background is not None:
            self._background.start_soon(self._remove, container_id)
        else:
            await self._remove(container_id)

    async def _retire(self, session_id: str, container_id: str) -> None:
        with anyio.CancelScope(shield=True):
            await self._remove(container_id)
            active = self._active.get(session_id)
            if active is not None:
                active.discard(container_id)
                if not active:
                    del self._active[session_id]

    async def _remove(self, container_id: str) -> None:
        await self.containers.remove(container_id)

    async def _remove_many(self, ids: list[str]) -> None:
        await self.containers.remove_many(ids)


class DockerSandbox:
    """One container taken for one job (see `Backend.sandbox`)."""

    def __init__(
        self,
        backend: DockerBackend,
        container_id: str,
        *,
        runtime: str,
        egress_dir: Path | None,
        attached: anyio.abc.SocketStream | None,
        ca: RunCA | None = None,
    ) -> None:
        self._backend = backend
        self.container_id = container_id
        self._runtime = runtime
        self._egress_dir = egress_dir
        self._ca = ca
        # A pooled container comes attached (that is how it was seen running), a new one not.
        self._attached = attached
        self._used = False
        # The stream of a box whose last job kept it for another (a kept browser).
        self._kept: anyio.abc.SocketStream | None = None

    @property
    def egress_dir(self) -> Path | None:
        return self._egress_dir

    @property
    def runtime(self) -> str:
        return self._runtime

    @property
    def ca(self) -> RunCA | None:
        return self._ca

    async def run(self, job: JobSpec, staging: Staging) -> JobOutcome:
        check_first_job(self._used, job, self._egress_dir)
        self._used = True
        attached, self._attached = self._attached, None
        return await self._backend._exchange(self.container_id, job, staging, attached, self._hold)

    @property
    def kept(self) -> bool:
        return self._kept is not None

    async def step(self, job: JobSpec, staging: Staging) -> JobOutcome:
        stream, self._kept = self._kept, None
        if stream is None:
            raise SandboxError(
                "this sandbox is not waiting for another job (its last one did not keep it)"
            )
        return await self._backend._exchange(self.container_id, job, staging, stream, self._hold)

    def _hold(self, stream: anyio.abc.SocketStream) -> None:
        self._kept = stream

    async def close(self) -> None:
        """Let go of an attach `run` never took over, or one a job kept."""
        attached, self._attached = self._attached, None
        kept, self._kept = self._kept, None
        for stream in (attached, kept):
            if stream is not None:
                await stream.aclose()
