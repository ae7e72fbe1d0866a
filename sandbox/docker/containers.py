"""This server instance's containers on one engine: create, start, list, remove.

Belongs here: every engine call about containers, each in a worker thread under one
limiter (`call`), with the SDK's errors translated (`engine.engine_errors`); creating a
container with its options (`options.py`) and, for egress, its own egress directory,
which goes when the container goes; removing forgivingly (gone already, or being removed
by a concurrent teardown, is done). Does not belong here: which container a job gets
(`backend.py`, `pooling.py`) or what travels over its attach (`run.py`).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import docker
import docker.errors
import requests

from ..instance import LABEL_INSTANCE, Instance
from ..pool import Profile
from .egress_dir import new_egress_dir
from .engine import engine_errors
from .options import container_options

log = logging.getLogger(__name__)

# The SDK keeps 25 connection pools keyed by URL and closes the least recently used one
# even while a thread still uses it; stay below that.
ENGINE_CONCURRENCY = 16

T = TypeVar("T")


class Containers:
    """The containers `instance` makes on the engine `client` reaches."""

    def __init__(self, client: docker.DockerClient, instance: Instance) -> None:
        self.client = client
        self.instance = instance
        self.mine = f"{LABEL_INSTANCE}={instance.id}"
        """The label filter that finds this instance's containers."""
        self._engine_calls = anyio.CapacityLimiter(ENGINE_CONCURRENCY)
        self._egress_dirs: dict[str, Path] = {}

    def egress_dir(self, container_id: str) -> Path | None:
        """The egress directory made with the container, if it was made for egress."""
        return self._egress_dirs.get(container_id)

    def egress_dirs(self) -> dict[str, Path]:
        """Every egress directory of a container not removed yet, by container."""
        return dict(self._egress_dirs)

    async def call(self, action: str, fn: Callable[[], T]) -> T:
        """`fn` (a blocking SDK call) in a worker thread, its errors in Airlock's words."""

        def guarded() -> T:
            with engine_errors(action):
                return fn()

        return await anyio.to_thread.run_sync(guarded, limiter=self._engine_calls)

    async def create(self, profile: Profile, labels: dict[str, str], action: str) -> str:
        """A new container of `profile`, not started; its id."""
        egress_dir = new_egress_dir() if profile.egress else None
        options = container_options(
            profile, labels=labels, egress_dir=str(egress_dir) if egress_dir else None
        )
        try:
            container = await self.call(action, lambda: self.client.containers.create(**options))
        except BaseException:
            if egress_dir is not None:
                shutil.rmtree(egress_dir, ignore_errors=True)
            raise
        container_id = str(container.id)
        if egress_dir is not None:
            self._egress_dirs[container_id] = egress_dir
        return container_id

    async def start(self, container_id: str, action: str) -> None:
        await self.call(action, lambda: self.client.api.start(container_id))

    async def ids(self, filters: dict[str, Any]) -> list[str]:
        """The ids of every container, running or not, that `filters` select."""
        return [c["Id"] for c in await self.listing(filters)]

    async def listing(self, filters: dict[str, Any]) -> list[dict[str, Any]]:
        """The engine's listing of the containers `filters` select (labels included)."""
        found: list[dict[str, Any]] = await self.call(
            "listing containers", lambda: self.client.api.containers(all=True, filters=filters)
        )
        return found

    async def remove_many(self, ids: list[str]) -> None:
        async with anyio.create_task_group() as tg:
            for container_id in ids:
                tg.start_soon(self.remove, container_id)

    async def remove(self, container_id: str) -> None:
        """Kill and remove the container and its egress directory; never raises for an
        engine that failed (logged: the reaper or the next teardown finishes the job)."""
        try:
            await self._remove_container(container_id)
        finally:
            egress_dir = self._egress_dirs.pop(container_id, None)
            if egress_dir is not None:
                shutil.rmtree(egress_dir, ignore_errors=True)

    async def _remove_container(self, container_id: str) -> None:
        try:
            await anyio.to_thread.run_sync(
                lambda: self.client.api.remove_container(container_id, force=True, v=True),
                limiter=self._engine_calls,
            )
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            # Already being removed by a concurrent teardown: that one finishes the job.
            if exc.status_code != 409:
                log.warning("removing container %s failed: %s", container_id[:12], exc)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            log.warning("removing container %s failed: %s", container_id[:12], exc)
