"""The engine side of the server: connect to Docker, make sure the image exists.

Started in the background at server start, so the MCP handshake never waits for
an image build; the first `run_code` waits for it instead. A failure is kept and
reported to each caller (with the fix), and the next call tries again.
"""

from __future__ import annotations

import logging
import time

import anyio

from airlock.errors import ImageUnavailable
from policies import Policy
from sandbox import Backend, DockerBackend, connect, limits_of
from sandbox.image import ensure_image, image_exists, missing_policy_image
from sandbox.instance import Instance
from sandbox.pool import Profile

log = logging.getLogger(__name__)


class Engine:
    def __init__(self, policy: Policy, instance: Instance) -> None:
        self._policy = policy
        self._instance = instance
        self._lock = anyio.Lock()
        self._backend: DockerBackend | None = None
        self._image: str | None = None
        self._connected = anyio.Event()

    async def ready(self) -> tuple[Backend, str]:
        async with self._lock:
            backend = self._backend
            if backend is None:
                client = await anyio.to_thread.run_sync(connect)
                backend = DockerBackend(client, self._instance, pool_size=self._policy.pool.size)
                reaped = await backend.reap(time.time())
                if reaped:
                    log.info("removed %d container(s) left behind by a stopped server", reaped)
                self._backend = backend
            image = self._image
            if image is None:
                image = self._policy.sandbox.image
                if image is None:
                    image = await anyio.to_thread.run_sync(self._build, backend)
                elif not await anyio.to_thread.run_sync(image_exists, backend.client, image):
                    raise ImageUnavailable(missing_policy_image(image))
                self._image = image
                backend.pool.want(
                    Profile(
                        image=image,
                        runtime=self._policy.sandbox.runtime,
                        limits=limits_of(self._policy),
                    )
                )
                self._connected.set()
            return backend, image

    def connected(self) -> DockerBackend | None:
        return self._backend

    def close(self) -> None:
        if self._backend is not None:
            self._backend.client.close()

    async def serve(self) -> None:
        """For the server's lifetime: get ready, then keep the pool warm and run background
        removals; on cancellation, remove the pool and wait for pending removals."""
        await self.warm_up()
        await self._connected.wait()
        assert self._backend is not None
        async with self._backend.running():
            await anyio.sleep_forever()

    async def warm_up(self) -> None:
        """Get ready at startup; a failure is only logged, callers will hear it again."""
        try:
            _, image = await self.ready()
        except Exception as exc:
            log.error("sandbox engine not ready: %s", exc)
            return
        log.info("sandbox engine ready (image %s)", image)

    def _build(self, backend: DockerBackend) -> str:
        return ensure_image(backend.client, lambda line: log.info("image: %s", line))
