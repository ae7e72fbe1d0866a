"""The engine side of the server: connect to Docker, make sure the image exists.

The image is the one Airlock builds for the policy's [image] section, or the one [sandbox]
image names, pulled from the team's registry when the engine lacks it and refused unless its
in-container runner is this server's (`sandbox/image_source.py`). Started in the background
at server start, so the MCP handshake never waits for an image build or pull. Meanwhile a
call is not kept waiting in silence: it gets `ImageBuilding` at once, saying about how long
is left, and retries. A failure is kept and
reported to the next caller (with the fix); the call after that starts the work again in
the background.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import anyio
import anyio.abc

from airlock.errors import AirlockError, ImageBuilding
from airlock.policies import ImageSettings, Policy
from airlock.policies.references import parse_reference
from airlock.sandbox import DockerBackend, Ready, connect, limits_of
from airlock.sandbox.browser_image import browser_base_tag, browser_image_tag, ensure_browser_image
from airlock.sandbox.docker import registered_runtimes
from airlock.sandbox.image import (
    ImageInputs,
    base_exists,
    build_image,
    image_inputs,
)
from airlock.sandbox.image import image_tag as sandbox_image_tag
from airlock.sandbox.image_build import image_exists
from airlock.sandbox.image_source import check_sandbox_image, policy_image
from airlock.sandbox.instance import Instance
from airlock.sandbox.pool import Profile, WarmPool
from airlock.sandbox.runtime import choose_runtime
from airlock.sandbox.spec import browser_limits
from airlock.tools.context import Engine as ToolsEngine

log = logging.getLogger(__name__)

# Rough durations of the build steps measured on a small, busy machine (2 shared cores,
# deb.debian.org and PyPI reachable, nothing cached), for the "about N s left" a caller is
# told: the Debian base took 446 s, wheels and layer 217 s.
BASE_BUILD_S = 450.0
LAYER_BUILD_S = 220.0
# The browser image's: its base (debootstrap plus Chromium) took 119 s here, its layer 8 s.
BROWSER_BASE_S = 150.0
BROWSER_LAYER_S = 15.0
BROWSER_IMAGE = "browser image"
# Pulling the 1.1 GB sandbox image (or its base) from a registry on the same network; a
# push of it to a local registry took 42 s here.
PULL_S = 60.0


@dataclass(frozen=True)
class _Build:
    started: float
    expected_s: float
    doing: str = "being built (first use, or its recipe changed)"

    def message(self, now: float, what: str = "sandbox image") -> str:
        elapsed = now - self.started
        left = self.expected_s - elapsed
        when = (
            f"about {max(5, round(left / 5) * 5):.0f} s left"
            if left > 0
            else f"taking longer than the usual {self.expected_s:.0f} s ({elapsed:.0f} s so far)"
        )
        return f"the {what} is {self.doing}, {when}; retry this call then. Nothing ran."


class ServerEngine(ToolsEngine, Protocol):
    """What a serving Airlock needs of its engine side, beyond what the tools use: its warm
    pool (for the metrics), its background work for the server's lifetime, and its close.
    `Engine` is Docker's; `running.serving` takes another (the tests' in-memory one) by
    its factory, `EngineFactory`."""

    def pool(self) -> WarmPool | None:
        """The warm pool once the backend is up, if it has one."""
        ...

    async def serve(self) -> None:
        """Get ready and run the background work until cancelled, then stop it."""
        ...

    def close(self) -> None: ...


EngineFactory = Callable[[Policy, Instance], ServerEngine]
"""How a serving Airlock makes its engine side from the server policy and its instance."""


class Engine:
    """One Docker backend, and the images runs start from: the server policy's, and those of
    tenant policies whose [image] section differs (each built on its first use)."""

    def __init__(self, policy: Policy, instance: Instance) -> None:
        self._policy = policy
        self._instance = instance
        self._lock = anyio.Lock()
        # One backend for the server's life: a browse arriving while the warm-up connects
        # must wait for that backend, not make a second one whose pool nobody refills.
        self._connect_lock = anyio.Lock()
        self._backend: DockerBackend | None = None
        self._images: dict[ImageSettings, str] = {}
        self._runtime = ""
        self._connected = anyio.Event()
        self._builds: dict[ImageSettings, _Build] = {}
        self._task_group: anyio.abc.TaskGroup | None = None
        # Why the last background attempt failed, told to the next caller only: the call
        # after that tries again.
        self._failures: dict[ImageSettings, AirlockError] = {}
        self._browser_lock = anyio.Lock()
        self._browser_image: str | None = None
        self._browser_build: _Build | None = None
        self._browser_failure: AirlockError | None = None

    async def ready(self, image: ImageSettings | None = None) -> Ready:
        """The backend, the runtime and the image for these [image] settings (missing: the server
        policy's). While that image is being built this raises `ImageBuilding` at once; if it
        must be built and nobody is building it, the build starts in the background and the
        caller hears the same."""
        key = self._policy.image if image is None else image
        build = self._builds.get(key)
        if build is not None:
            raise ImageBuilding(build.message(time.monotonic()))
        failure = self._failures.pop(key, None)
        if failure is not None:
            raise failure
        return await self._get_ready(key, wait=False)

    async def _get_ready(self, key: ImageSettings, *, wait: bool) -> Ready:
        """Connect and find the image under the lock; build outside it, so that callers
        meanwhile hear `ImageBuilding` instead of queueing behind the build."""
        async with self._lock:
            backend = await self._connect()
            if key in self._images:
                return Ready(backend, self._images[key], self._runtime)
            # [sandbox] image is the server's alone (tenant policies may not set it).
            named = self._policy.sandbox.image
            inputs = image_inputs(key)
            image: str | None = None
            if named is None:
                tag = sandbox_image_tag(inputs)
                if await anyio.to_thread.run_sync(image_exists, backend.client, tag):
                    image = tag
                else:
                    await self._start_build(backend, key, inputs, wait=wait)
            else:
                pinned = parse_reference(named).pinned
                if await anyio.to_thread.run_sync(image_exists, backend.client, pinned):
                    await anyio.to_thread.run_sync(check_sandbox_image, backend.client, pinned)
                    image = pinned
                else:
                    pulling = f"being pulled from {parse_reference(named).registry}"
                    self._start(key, _Build(time.monotonic(), PULL_S, pulling), wait=wait)
        if image is None:
            try:
                if named is None:
                    image = await anyio.to_thread.run_sync(self._build_image, backend, inputs)
                else:
                    image = await anyio.to_thread.run_sync(self._pull_image, backend, named)
            finally:
                self._builds.pop(key, None)
        async with self._lock:
            if key not in self._images:
                self._images[key] = image
                backend.pool.want(
                    # With an allow rule every run has egress: keep those containers ready.
                    Profile(
                        image=image,
                        runtime=self._runtime,
                        limits=limits_of(self._policy),
                        egress=bool(self._policy.egress.allow),
                    )
                )
                self._connected.set()
            return Ready(backend, self._images[key], self._runtime)

    async def _connect(self) -> DockerBackend:
        async with self._connect_lock:
            if self._backend is None:
                self._backend = await self._new_backend()
            return self._backend

    async def _new_backend(self) -> DockerBackend:
        """A connected backend on a runtime the engine has, with what a stopped server left
        behind removed."""
        client = await anyio.to_thread.run_sync(connect)
        try:
            registered = await anyio.to_thread.run_sync(registered_runtimes, client)
            choice = choose_runtime(self._policy.sandbox.runtime, registered)
        except BaseException:
            client.close()
            raise
        if choice.warning:
            log.warning("%s", choice.warning)
        self._runtime = choice.runtime
        backend = DockerBackend(
            client,
            self._instance,
            pool_size=self._policy.pool.size,
            browser_pool_size=self._policy.browser.pool,
        )
        reaped = await backend.reap(time.time())
        if reaped:
            log.info("removed %d container(s) left behind by a stopped server", reaped)
        return backend

    async def _start_build(
        self, backend: DockerBackend, key: ImageSettings, inputs: ImageInputs, *, wait: bool
    ) -> None:
        """Mark the build as running; for a caller that must not wait, hand it to the
        background and raise `ImageBuilding`."""
        expected_s = LAYER_BUILD_S
        if key not in self._builds and not await anyio.to_thread.run_sync(
            base_exists, backend.client, inputs
        ):
            expected_s += BASE_BUILD_S if inputs.base is None else PULL_S
        self._start(key, _Build(time.monotonic(), expected_s), wait=wait)

    def _start(self, key: ImageSettings, build: _Build, *, wait: bool) -> None:
        """Record `build` as running for `key` unless one is; for a caller that must not wait,
        hand the work to the background and raise `ImageBuilding`."""
        running = self._builds.get(key)
        if running is not None and not wait:
            raise ImageBuilding(running.message(time.monotonic()))
        build = self._builds.setdefault(key, build)
        if not wait and self._task_group is not None:
            # The entry in `_builds` stays until the background build ends.
            self._task_group.start_soon(self.warm_up, key)
            raise ImageBuilding(build.message(time.monotonic()))

    async def browser(self) -> Ready:
        """The backend, the browser image and the runtime. A missing browser image is built
        in the background (progress in the server's log) while callers hear
        `ImageBuilding` at once, as for the sandbox image; a failed build is told to the
        next caller, and the call after that starts it again."""
        backend = await self._connect()
        async with self._browser_lock:
            if self._browser_image is None:
                await self._find_or_build_browser(backend)
            assert self._browser_image is not None
            return Ready(backend, self._browser_image, self._runtime)

    async def _find_or_build_browser(self, backend: DockerBackend) -> None:
        """Under the lock: take the image if it exists, else raise what the caller hears."""
        if self._browser_build is not None:
            raise ImageBuilding(self._browser_build.message(time.monotonic(), BROWSER_IMAGE))
        failure, self._browser_failure = self._browser_failure, None
        if failure is not None:
            raise failure
        tag = browser_image_tag()
        if await anyio.to_thread.run_sync(image_exists, backend.client, tag):
            self._found_browser(backend, tag)
            return
        has_base = await anyio.to_thread.run_sync(image_exists, backend.client, browser_base_tag())
        self._browser_build = _Build(
            time.monotonic(), BROWSER_LAYER_S + (0 if has_base else BROWSER_BASE_S)
        )
        if self._task_group is None:
            # Not serving (a one-off command such as the drill's server): build in this call.
            await self._build_browser(backend)
            failure, self._browser_failure = self._browser_failure, None
            if failure is not None:
                raise failure
            return
        self._task_group.start_soon(self._build_browser, backend)
        raise ImageBuilding(self._browser_build.message(time.monotonic(), BROWSER_IMAGE))

    def _found_browser(self, backend: DockerBackend, image: str) -> None:
        """Browse from `image` from now on, with [browser] pool boxes of it kept warm."""
        self._browser_image = image
        backend.pool.want(
            Profile(
                image=image,
                runtime=self._runtime,
                limits=browser_limits(self._policy.browser),
                egress=True,
                browser=True,
            )
        )

    async def _warm_browsers(self, backend: DockerBackend) -> None:
        """Where the browser image exists already, start its warm pool with the server's
        (a missing image is built on the first browse, not for the pool)."""
        async with self._browser_lock:
            tag = browser_image_tag()
            if self._browser_image is None and await anyio.to_thread.run_sync(
                image_exists, backend.client, tag
            ):
                self._found_browser(backend, tag)

    async def _build_browser(self, backend: DockerBackend) -> None:
        try:
            image = await anyio.to_thread.run_sync(
                lambda: ensure_browser_image(
                    backend.client, lambda line: log.info("browser image: %s", line)
                )
            )
            self._found_browser(backend, image)
        except AirlockError as exc:
            log.error("browser image not built: %s", exc)
            self._browser_failure = exc
        finally:
            self._browser_build = None

    def connected(self) -> DockerBackend | None:
        return self._backend

    def pool(self) -> WarmPool | None:
        return self._backend.pool if self._backend is not None else None

    def close(self) -> None:
        if self._backend is not None:
            self._backend.client.close()

    async def serve(self) -> None:
        """For the server's lifetime: get ready, then keep the pool warm and run background
        removals; on cancellation, remove the pool and wait for pending removals."""
        async with anyio.create_task_group() as tg:
            self._task_group = tg
            try:
                await self.warm_up()
                await self._connected.wait()
                assert self._backend is not None
                if self._policy.browser.pool:
                    await self._warm_browsers(self._backend)
                async with self._backend.running():
                    await anyio.sleep_forever()
            finally:
                self._task_group = None

    async def warm_up(self, key: ImageSettings | None = None) -> None:
        """Get ready; a failure is only logged, the next caller hears it."""
        key = self._policy.image if key is None else key
        try:
            ready = await self._get_ready(key, wait=True)
        except Exception as exc:
            log.error("sandbox engine not ready: %s", exc)
            if isinstance(exc, AirlockError):
                self._failures[key] = exc
            return
        log.info("sandbox engine ready (image %s, runtime %s)", ready.image, ready.runtime)

    def _build_image(self, backend: DockerBackend, inputs: ImageInputs) -> str:
        return build_image(backend.client, lambda line: log.info("image: %s", line), inputs)

    def _pull_image(self, backend: DockerBackend, reference: str) -> str:
        return policy_image(backend.client, reference, lambda line: log.info("image: %s", line))
