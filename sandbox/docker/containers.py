"""This server instance's containers on one engine: create, start, list, remove.

Belongs here: every engine call about containers, each in a worker thread under one
limiter (`call`), with the SDK's errors translated (`engine.engine_errors`); creating a
container with its options (`options.py`) and, for egress, its own egress directory,
which goes when the container goes (a browser box's also holds the certificate of the CA
made for it, whose private directory goes with it too); removing forgivingly (gone
already, or being removed by a concurrent teardown, is done). Does not belong here: which
container a job gets (`backend.py`, `pooling.py`) or what travels over its attach
(`run.py`).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import docker
import docker.errors
import requests

from airlock.egress.tls import RunCA
from airlock.ids import new_id

from ..instance import LABEL_INSTANCE, Instance
from ..pool import Profile
from .egress_dir import new_egress_dir
from .engine import engine_errors
from .options import container_options

log = logging.getLogger(__name__)

# The SDK keeps 25 connection pools keyed by URL and closes the least recently used one
# even while a thread still uses it; stay below that.
ENGINE_CONCURRENCY = 16
# Beside the socket in a browser box's egress directory (the driver's BOX_CA).
CA_FILE = "ca.pem"

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
        self._cas: dict[str, tuple[RunCA, Path]] = {}

    def ca(self, container_id: str) -> RunCA | None:
        """The CA made with the container (a browser box's), if any."""
        made = self._cas.get(container_id)
        return made[0] if made is not None else None

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
        egress_dir = new_egress_dir() if profile.egress or profile.browser else None
        made = None
        try:
            if profile.browser:
                assert egress_dir is not None
                made = self._new_ca(egress_dir)
            options = container_options(
                profile, labels=labels, egress_dir=str(egress_dir) if egress_dir else None
            )
            container = await self.call(action, lambda: self.client.containers.create(**options))
        except BaseException:
            for directory in (egress_dir, made[1] if made else None):
                if directory is not None:
                    shutil.rmtree(directory, ignore_errors=True)
            raise
        container_id = str(container.id)
        if egress_dir is not None:
            self._egress_dirs[container_id] = egress_dir
        if made is not None:
            self._cas[container_id] = made
        return container_id

    def _new_ca(self, egress_dir: Path) -> tuple[RunCA, Path]:
        """A CA for one browser box: its certificate in the box's egress directory, for
        the driver to trust before Chromium starts; its leaves in a private directory
        that is never mounted."""
        private = Path(tempfile.mkdtemp(prefix="airlock-ca-"))
        try:
            ca = RunCA(new_id("box_"), private / "private")
            certificate = egress_dir / CA_FILE
            certificate.write_bytes(ca.pem)
            certificate.chmod(0o644)
        except BaseException:
            shutil.rmtree(private, ignore_errors=True)
            raise
        return ca, private

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
            made = self._cas.pop(container_id, None)
            for directory in (egress_dir, made[1] if made else None):
                if directory is not None:
                    shutil.rmtree(directory, ignore_errors=True)

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
