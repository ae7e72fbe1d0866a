"""The Docker backend: one fresh, hardened, network-less container per job.

Owns the container's whole life: create with every hardening option, attach,
start, hand the runner its one job, read the exchange, read usage, remove. The
removal sits in a shielded `finally`, so cancellation, timeouts and engine errors
all end with the container gone. Also finds and removes containers by label for
session teardown and for reaping what a dead server left behind.

A container for a run with egress is created with its own empty egress directory
bind-mounted read-only (so pooled ones can be made before the run exists) and its
runner starts the in-container relay to that directory's socket path at once; the
run's proxy binds its socket there once the container is taken, and the directory
goes with the container.

A pooled container is handed out only once it is attached and then seen running (see
`attach_if_running`); `docker_events.py` keeps the pool itself clear of containers that
died while they waited, and of all of them when the engine restarts.

Blocking Docker SDK calls run in worker threads; the attach stream is read
asynchronously, from the descriptor `docker_attach.py` takes out of the SDK (the one
place that touches the SDK's privates).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import IO, Any, TypeAlias, TypeVar

import anyio
import anyio.abc
import docker
import docker.errors
import requests
from docker.types import LogConfig, Mount, Ulimit

from airlock.egress import MAX_SOCKET_PATH, SOCKET_NAME
from airlock.errors import (
    EgressUnavailable,
    EngineUnavailable,
    ImageUnavailable,
    RunnerFailed,
    SandboxError,
    StoreError,
)
from airlock.store import Staging

from .cgroup_cost import UsageWatch
from .docker_attach import attach
from .docker_connections import MAX_CONNECTIONS, share_one_pool
from .docker_events import EngineWatch
from .environment import CA_BUNDLE, EGRESS_MOUNT, RELAY_PORT, sandbox_environment
from .exchange import Exchange, RunnerReport
from .file_transfer import pack_inputs, read_listing
from .inside.wire import SANDBOX_HOME, SANDBOX_UID, encode_job
from .instance import LABEL_INSTANCE, Instance
from .intake import Intake
from .pool import MAX_AGE_S as POOL_MAX_AGE_S
from .pool import Profile, WarmPool
from .runtime import GVISOR
from .seccomp import gvisor_security_opt
from .spec import JobOutcome, JobSpec, OutputFile, Status, StreamCapture, Usage, WorkspaceEntry

log = logging.getLogger(__name__)

LABEL_SESSION = "airlock.session"
LABEL_RUN = "airlock.run"
LABEL_TENANT = "airlock.tenant"
LABEL_DEADLINE = "airlock.deadline"
# Init and the runner run as root with only the capabilities it takes to drop the code
# to uid 1000 and to kill it (see inside/runner.py); the code itself ends up with none.
RUNNER_USER = "0:0"
RUNNER_CAPABILITIES = ["SETUID", "SETGID", "SETPCAP", "KILL"]
# Container start and packing the workspace happen outside the user's timeout.
EXCHANGE_GRACE_S = 15.0
# How often a running container's cgroup is read, so its usage is known if it vanishes.
USAGE_LOOK_INTERVAL_S = 0.05
# The share of its memory limit at which a sandbox that died without a report is taken
# to have died of it (its last look can come a little before the end).
AT_MEMORY_LIMIT = 0.9
MIB = 1 << 20
RECEIVE_CHUNK = 65536
SEND_CHUNK = 65536
# The input tar stays in memory up to this size, then moves to a file in the run's staging area.
INPUT_TAR_IN_MEMORY = 1024 * 1024
ENGINE_CONCURRENCY = 16
# Under gVisor the host's pids cgroup counts the Sentry's and gofer's threads, not the
# code's tasks: on the ptrace platform each task costs a Sentry thread plus a stub
# process and its threads (measured: 64 tasks need more than 320 host pids, 640 hold).
# Without that room the Sentry fails to start a thread and the whole sandbox dies. The
# code's own limit is RLIMIT_NPROC, which gVisor's kernel enforces inside the sandbox.
RUNSC_HOST_PIDS_PER_TASK = 10
RUNSC_HOST_PIDS = 128
# The CPU quota is counted per second, not per 100 ms (the engine's period for `--cpus`):
# a sandbox starting under gVisor burns about 300 ms of CPU in its first 250, on both
# cores at once, and a 100 ms period held it back by 30 to 90 ms of throttling on each
# cold call. Over any second the quota is what it was; within one, a run may spend its
# second's share sooner. 1 s is the longest period the kernel allows.
CPU_PERIOD_US = 1_000_000

T = TypeVar("T")


@contextmanager
def engine_errors(action: str) -> Iterator[None]:
    """Translate Docker SDK and transport errors into Airlock's, naming the fix."""
    try:
        yield
    except docker.errors.ImageNotFound as exc:
        raise ImageUnavailable(
            f"{action}: the sandbox image is missing; run `airlock image build`, or for an "
            "image named by [sandbox] image in the policy, `docker pull` it (`airlock doctor` "
            "says which)"
        ) from exc
    except (docker.errors.APIError, docker.errors.DockerException) as exc:
        if isinstance(exc, docker.errors.APIError) and not _is_connection_error(exc):
            raise SandboxError(f"{action}: the Docker engine refused: {exc.explanation}") from exc
        raise EngineUnavailable(
            f"{action}: cannot reach the Docker engine ({exc}); start it "
            "(`sudo systemctl start docker`, or `dockerd &`) and check `airlock doctor`"
        ) from exc
    except requests.exceptions.RequestException as exc:
        raise EngineUnavailable(
            f"{action}: cannot reach the Docker engine ({exc}); start it and check `airlock doctor`"
        ) from exc


def _is_connection_error(exc: docker.errors.APIError) -> bool:
    return exc.response is None


def connect() -> docker.DockerClient:
    """A client for the engine named by the environment (DOCKER_HOST or the default socket)."""
    client: docker.DockerClient | None = None
    try:
        with engine_errors("connecting"):
            client = docker.from_env(timeout=120, max_pool_size=MAX_CONNECTIONS)
            share_one_pool(client)
            client.ping()
    except EngineUnavailable as exc:
        if client is not None:
            client.close()
        host = os.environ.get("DOCKER_HOST")
        if not host:
            raise
        raise EngineUnavailable(
            f"cannot reach the Docker engine at DOCKER_HOST={host} ({exc.__cause__}); start "
            "the engine it names, or correct DOCKER_HOST (or unset it for the local socket)"
        ) from exc.__cause__
    assert client is not None
    return client


# The engine client as the rooms above hold it: a handle they get from `connect`, pass back
# into this room and close. Only this room imports docker (pyproject's import contracts).
EngineClient: TypeAlias = docker.DockerClient


def engine_version(client: EngineClient) -> str:
    """The engine's version, as `docker version` reports it."""
    return str(client.version().get("Version", "?"))


def session_containers(client: EngineClient, session_id: str) -> list[str]:
    """The short ids of every container, running or not, labelled with this session."""
    containers = client.containers.list(
        all=True, filters={"label": f"{LABEL_SESSION}={session_id}"}, ignore_removed=True
    )
    return [c.short_id for c in containers]


def attach_if_running(client: docker.DockerClient, container_id: str) -> int | None:
    """The attach descriptor of a container that is running once attached, or None (and
    nothing left open) for one that is not, or is gone.

    Attach first, then ask: the engine ends an attach when its container exits, so one
    seen running after attaching can never leave the exchange waiting; an attach to a
    container that has already exited stays open, silent, until its next start."""
    try:
        fd = attach(client, container_id)
    except docker.errors.NotFound:
        return None
    try:
        state = client.api.inspect_container(container_id)["State"]
    except docker.errors.NotFound:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    if state.get("Running") and not state.get("Paused") and not state.get("Restarting"):
        return fd
    os.close(fd)
    return None


def registered_runtimes(client: docker.DockerClient) -> frozenset[str]:
    """The OCI runtimes the engine has registered (`docker info`), by name."""
    with engine_errors("asking the engine for its runtimes"):
        info: dict[str, Any] = client.info()
    return frozenset(info.get("Runtimes") or {})


def container_options(
    profile: Profile, *, labels: dict[str, str], egress_dir: str | None = None
) -> dict[str, Any]:
    """Every option of a sandbox container. The hardening lives here and only here."""
    limits = profile.limits
    gvisor = profile.runtime == GVISOR
    memory = f"{limits.memory_mb}m"
    # The engine ignores `mode=` on these mounts; ownership is what lets the
    # sandbox user write.
    owner = f"uid={SANDBOX_UID},gid={SANDBOX_UID}"
    return {
        "image": profile.image,
        "detach": True,
        "stdin_open": True,
        "tty": False,
        "user": RUNNER_USER,
        # Arguments of the runner (the image's entrypoint): with egress, it starts the
        # relay to the socket's path at once, so a taken container has it listening.
        "command": ["--egress", f"{EGRESS_MOUNT}/{SOCKET_NAME}", str(RELAY_PORT)]
        if egress_dir
        else None,
        # The environment every run's code starts from, built from an empty dict: the
        # runner starts the code's process in it before the job, whose own environment
        # (also built from an empty dict) then replaces it.
        "environment": sandbox_environment(),
        "network_mode": "none",
        "network_disabled": True,
        "cap_drop": ["ALL"],
        "cap_add": RUNNER_CAPABILITIES,
        "security_opt": ["no-new-privileges:true"] + ([gvisor_security_opt()] if gvisor else []),
        "read_only": True,
        "tmpfs": {
            "/workspace": f"rw,exec,nosuid,nodev,size={limits.workspace_mb}m,{owner}",
            "/tmp": f"rw,noexec,nosuid,nodev,size={limits.tmp_mb}m,{owner}",
            # HOME: caches and dotfiles of one run, gone with its container (as /tmp's
            # files are, and under the same cap).
            SANDBOX_HOME: f"rw,noexec,nosuid,nodev,size={limits.tmp_mb}m,{owner}",
        },
        "pids_limit": limits.pids * RUNSC_HOST_PIDS_PER_TASK + RUNSC_HOST_PIDS
        if gvisor
        else limits.pids,
        "mem_limit": memory,
        "memswap_limit": memory,
        "cpu_period": CPU_PERIOD_US,
        "cpu_quota": int(limits.cpus * CPU_PERIOD_US),
        "ulimits": [Ulimit(name="core", soft=0, hard=0)]
        # gVisor's kernel counts the code's tasks itself; the host cgroup above can't. It
        # admits one task more than the limit (Linux refuses at the limit), hence - 1.
        + ([Ulimit(name="nproc", soft=limits.pids - 1, hard=limits.pids - 1)] if gvisor else []),
        "init": True,
        "ipc_mode": "private",
        "privileged": False,
        "runtime": profile.runtime,
        # Output travels over the attach stream; a log driver would copy every
        # byte of a flood to the host's disk.
        "log_config": LogConfig(type=LogConfig.types.NONE),
        # The one host path a sandbox ever sees: a directory holding only the run's
        # proxy socket, read-only.
        "mounts": [Mount(target=EGRESS_MOUNT, source=egress_dir, type="bind", read_only=True)]
        if egress_dir
        else [],
        "labels": labels,
    }


def profile_of(job: JobSpec, *, egress: bool = False) -> Profile:
    return Profile(image=job.image, runtime=job.runtime, limits=job.limits, egress=egress)


def new_egress_dir() -> Path:
    """An empty directory for one container's proxy socket, in a short place (the
    system's temporary directory), unguessable, enterable by the sandbox user."""
    path = Path(tempfile.mkdtemp(prefix="airlock-"))
    if len(str(path / SOCKET_NAME)) > MAX_SOCKET_PATH:
        path.rmdir()
        raise EgressUnavailable(
            f"the egress socket path under {path.parent} is too long for a unix socket; "
            "set TMPDIR to a short directory"
        )
    # The umask may have taken bits from mkdtemp's 0700; the sandbox user must enter it.
    path.chmod(0o755)
    return path


class DockerBackend:
    """Runs jobs in Docker containers labelled with this server instance.

    `running()` (entered for the server's lifetime) owns the background work:
    the warm pool's refill and the removal of containers after their reply.
    Without it, containers are removed before `run` returns.
    """

    def __init__(
        self, client: docker.DockerClient, instance: Instance, *, pool_size: int = 0
    ) -> None:
        self.client = client
        self.instance = instance
        self._mine = f"{LABEL_INSTANCE}={instance.id}"
        # The SDK keeps 25 connection pools keyed by URL and closes the least recently
        # used one even while a thread still uses it; stay below that.
        self._engine_calls = anyio.CapacityLimiter(ENGINE_CONCURRENCY)
        self.pool = WarmPool(pool_size, self._start_pooled, self._remove)
        self._watch = EngineWatch(client, self._mine, self.pool, self._remove_many)
        self._background: anyio.abc.TaskGroup | None = None
        # Containers handed a job, by session: pooled ones carry no session label.
        self._active: dict[str, set[str]] = {}
        # Output received so far, by run in progress (for progress notifications).
        self._received: dict[str, int] = {}
        # Each egress directory goes when its container goes.
        self._egress_dirs: dict[str, Path] = {}

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
        pooled, attached = await self._take_running(profile_of(job, egress=egress))
        if pooled is None:
            try:
                container_id = await self._create(job, egress=egress)
            except BaseException:
                # The engine may have created it before the call failed; find it by label.
                with anyio.CancelScope(shield=True), contextlib.suppress(SandboxError):
                    leftover = await self._list({"label": [f"{LABEL_RUN}={job.run_id}"]})
                    await self._remove_many(leftover)
                raise
        else:
            container_id = pooled
        self._active.setdefault(job.session_id, set()).add(container_id)
        box = DockerSandbox(
            self,
            container_id,
            runtime=job.runtime,
            egress_dir=self._egress_dirs.get(container_id),
            attached=attached,
        )
        try:
            yield box
        except BaseException:
            with anyio.CancelScope(shield=True):
                await box.close()
                await self._retire(job.session_id, container_id)
            raise
        with anyio.CancelScope(shield=True):
            await box.close()
        if self._background is not None:
            self._background.start_soon(self._retire, job.session_id, container_id)
        else:
            await self._retire(job.session_id, container_id)

    async def _take_running(
        self, profile: Profile
    ) -> tuple[str | None, anyio.abc.SocketStream | None]:
        """A pooled container of `profile` that is running, attached; (None, None) when the
        pool has none. Pooled ones found dead are dropped on the way (the code never ran
        in them), so a call after an engine restart gets a new container, not a dead one."""
        while (container_id := self.pool.take(profile)) is not None:
            try:
                fd = await self._call(
                    "attaching to a pooled container",
                    lambda: attach_if_running(self.client, container_id),
                )
                stream = None if fd is None else await _stream_of(fd)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self._remove(container_id)
                raise
            if stream is not None:
                return container_id, stream
            log.info("warm pool: pooled container %s is not running; skipped", container_id[:12])
            if self._background is not None:
                self._background.start_soon(self._remove, container_id)
            else:
                await self._remove(container_id)
        return None, None

    async def _create(self, job: JobSpec, *, egress: bool) -> str:
        labels = {
            **self.instance.labels(),
            LABEL_SESSION: job.session_id,
            LABEL_RUN: job.run_id,
            LABEL_TENANT: job.tenant,
            LABEL_DEADLINE: str(int(time.time() + job.timeout_s + EXCHANGE_GRACE_S)),
        }
        return await self._create_container(
            profile_of(job, egress=egress), labels, "creating the container"
        )

    async def _start_pooled(self, profile: Profile) -> str:
        labels = {
            **self.instance.labels(),
            LABEL_SESSION: "",
            LABEL_RUN: "",
            LABEL_TENANT: "",
            # A taken container may run up to the longest timeout past its pool age;
            # the reaper also skips containers that are in use.
            LABEL_DEADLINE: str(int(time.time() + POOL_MAX_AGE_S + 3600)),
        }
        container_id = await self._create_container(profile, labels, "creating a pooled container")
        try:
            await self._call(
                "starting a pooled container", lambda: self.client.api.start(container_id)
            )
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._remove(container_id)
            raise
        return container_id

    async def _create_container(self, profile: Profile, labels: dict[str, str], action: str) -> str:
        egress_dir = new_egress_dir() if profile.egress else None
        options = container_options(
            profile, labels=labels, egress_dir=str(egress_dir) if egress_dir else None
        )
        try:
            container = await self._call(action, lambda: self.client.containers.create(**options))
        except BaseException:
            if egress_dir is not None:
                shutil.rmtree(egress_dir, ignore_errors=True)
            raise
        container_id = str(container.id)
        if egress_dir is not None:
            self._egress_dirs[container_id] = egress_dir
        return container_id

    async def _retire(self, session_id: str, container_id: str) -> None:
        with anyio.CancelScope(shield=True):
            await self._remove(container_id)
            active = self._active.get(session_id)
            if active is not None:
                active.discard(container_id)
                if not active:
                    del self._active[session_id]

    async def _exchange(
        self,
        container_id: str,
        job: JobSpec,
        staging: Staging,
        *,
        attached: anyio.abc.SocketStream | None,
    ) -> JobOutcome:
        """Run `job` in the container: one already attached and running (pooled), or, with
        `attached` None, one created for it, attached and started here. Owns `attached`."""
        started = time.monotonic()
        stream = attached
        inputs: IO[bytes] | None = None
        intake: Intake | None = None
        try:
            inputs = staging.temporary_file(INPUT_TAR_IN_MEMORY)
            intake = Intake(staging, job.artifact_caps)
            # The workspace goes in as a tar built from its blobs chunk by chunk, kept
            # in memory only while small.
            with _disk_errors("packing the workspace to send in"):
                input_bytes = await anyio.to_thread.run_sync(
                    pack_inputs, inputs, job.files, job.dirs, staging.store.open_blob
                )
                await anyio.to_thread.run_sync(inputs.seek, 0)
            if stream is None:
                stream = await self._attach_and_start(container_id)
            exchange = Exchange(job)
            await self._send_job(stream, job, input_bytes, inputs)
            watch = UsageWatch(container_id)
            with anyio.move_on_after(job.timeout_s + EXCHANGE_GRACE_S) as scope:
                try:
                    await self._receive(stream, exchange, intake, job.run_id, watch)
                finally:
                    self._received.pop(job.run_id, None)
            # Read while the container still exists: the runner waits for us to hang up.
            usage, oom_killed = await self._final_state(
                watch, died=exchange.report is None, memory_mb=job.limits.memory_mb
            )
            await stream.aclose()
            elapsed_ms = int((time.monotonic() - started) * 1000)
            if exchange.report is None and exchange.runner_log:
                # The runner's own stderr is for the operator; it never reaches the agent.
                log.warning(
                    "runner of %s ended without a report: %r",
                    job.run_id,
                    bytes(exchange.runner_log),
                )
            if exchange.fault is not None and exchange.report is None:
                raise RunnerFailed(
                    "the sandbox runner failed; retry the call, and tell the operator if it "
                    "keeps failing",
                    run_id=job.run_id,
                    reported=exchange.fault,
                )
            host_timeout = scope.cancelled_caught
            # Matching drafts with the listing touches files: work for a thread.
            with _disk_errors("keeping the run's files"):
                return await anyio.to_thread.run_sync(
                    lambda: _outcome(
                        job,
                        exchange,
                        intake,
                        usage,
                        oom_killed=oom_killed,
                        host_timeout=host_timeout,
                        elapsed_ms=elapsed_ms,
                    )
                )
        finally:
            with anyio.CancelScope(shield=True):
                if stream is not None:
                    await stream.aclose()
                if inputs is not None:
                    await anyio.to_thread.run_sync(inputs.close)
                # A draft cut short by a failure; the staging area removes the rest.
                if intake is not None:
                    await anyio.to_thread.run_sync(intake.close)

    async def _attach_and_start(self, container_id: str) -> anyio.abc.SocketStream:
        fd = await self._call(
            "attaching to the container", lambda: attach(self.client, container_id)
        )
        try:
            await self._call("starting the container", lambda: self.client.api.start(container_id))
        except BaseException:
            os.close(fd)
            raise
        return await _stream_of(fd)

    async def _send_job(
        self, stream: anyio.abc.SocketStream, job: JobSpec, input_bytes: int, inputs: IO[bytes]
    ) -> None:
        try:
            await stream.send(encode_job(_job_payload(job), input_bytes))
            while chunk := await _read_chunk(inputs):
                await stream.send(chunk)
        except (anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            # The container went between being seen running and taking the job: its
            # attach ended, so the runner never had the whole job and nothing ran.
            raise SandboxError(
                "the sandbox stopped before it took the job (killed, or the Docker engine "
                "stopped or restarted); nothing ran. Retry the call"
            ) from exc

    async def _receive(
        self,
        stream: anyio.abc.SocketStream,
        exchange: Exchange,
        intake: Intake,
        run_id: str,
        watch: UsageWatch,
    ) -> None:
        """Feed the exchange until it is done or the stream ends, handing the tar's bytes
        to the intake as they come (a frame at most is held in memory), and looking at
        the container's usage every USAGE_LOOK_INTERVAL_S meanwhile."""
        next_look = 0.0
        while not exchange.done:
            if time.monotonic() >= next_look:
                watch.look()
                next_look = time.monotonic() + USAGE_LOOK_INTERVAL_S
            data = b""
            # Cancelling a receive that is waiting loses nothing.
            with anyio.move_on_after(USAGE_LOOK_INTERVAL_S):
                try:
                    data = await stream.receive(RECEIVE_CHUNK)
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
            if not data:
                continue
            exchange.feed(data)
            tar = exchange.take_tar()
            if tar:
                with _disk_errors("writing the run's files"):
                    await anyio.to_thread.run_sync(intake.feed, tar)
            self._received[run_id] = len(exchange.stdout) + len(exchange.stderr)

    async def _final_state(
        self, watch: UsageWatch, *, died: bool, memory_mb: int
    ) -> tuple[Usage, bool]:
        cgroup = watch.look()
        oom_killed = cgroup is not None and cgroup.oom_kills > 0
        if cgroup is None and died and watch.last is not None:
            # The sandbox went with its cgroup before its end was read: under gVisor the
            # OOM killer takes the whole sandbox, and the engine does not record that as
            # OOMKilled. A sandbox that died at its memory limit was killed for it.
            cgroup = watch.last
            oom_killed = cgroup.oom_kills > 0 or (
                cgroup.peak_memory_bytes >= memory_mb * MIB * AT_MEMORY_LIMIT
            )
        if cgroup is not None:
            usage = Usage(
                cpu_seconds=cgroup.cpu_seconds, peak_memory_bytes=cgroup.peak_memory_bytes
            )
            return usage, oom_killed
        container_id = watch.container_id
        return await self._call("reading usage", lambda: _engine_state(self.client, container_id))

    def output_bytes(self, run_id: str) -> int:
        return self._received.get(run_id, 0)

    async def remove_session(self, session_id: str) -> int:
        """Kill and remove every container of a session; returns how many."""
        labelled = await self._list({"label": [self._mine, f"{LABEL_SESSION}={session_id}"]})
        ids = sorted(set(labelled) | self._active.get(session_id, set()))
        await self._remove_many(ids)
        return len(ids)

    async def remove_all(self) -> int:
        """Kill and remove every container of this instance (shutdown)."""
        self.pool.drain()
        ids = await self._list({"label": [self._mine]})
        await self._remove_many(ids)
        return len(ids)

    async def reap(self, now: float) -> int:
        """Remove containers of dead instances and those past their deadline."""
        found = await self._call(
            "listing containers",
            lambda: self.client.api.containers(all=True, filters={"label": [LABEL_INSTANCE]}),
        )
        in_use = set().union(*self._active.values()) if self._active else set()
        doomed = [
            c["Id"]
            for c in found
            if c["Id"] not in in_use and _is_reapable(c.get("Labels") or {}, self.instance, now)
        ]
        await self._remove_many(doomed)
        return len(doomed)

    async def _list(self, filters: dict[str, Any]) -> list[str]:
        found = await self._call(
            "listing containers", lambda: self.client.api.containers(all=True, filters=filters)
        )
        return [c["Id"] for c in found]

    async def _remove_many(self, ids: list[str]) -> None:
        async with anyio.create_task_group() as tg:
            for container_id in ids:
                tg.start_soon(self._remove, container_id)

    async def _remove(self, container_id: str) -> None:
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

    async def _call(self, action: str, fn: Callable[[], T]) -> T:
        def guarded() -> T:
            with engine_errors(action):
                return fn()

        return await anyio.to_thread.run_sync(guarded, limiter=self._engine_calls)


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
    ) -> None:
        self._backend = backend
        self.container_id = container_id
        self._runtime = runtime
        self._egress_dir = egress_dir
        # A pooled container comes attached (that is how it was seen running), a new one not.
        self._attached = attached
        self._used = False

    @property
    def egress_dir(self) -> Path | None:
        return self._egress_dir

    @property
    def runtime(self) -> str:
        return self._runtime

    async def run(self, job: JobSpec, staging: Staging) -> JobOutcome:
        if self._used:
            raise SandboxError("a sandbox takes exactly one job; take a new one")
        if job.egress is not None and self._egress_dir is None:
            raise SandboxError("this job has egress but its sandbox was taken without it")
        self._used = True
        attached, self._attached = self._attached, None
        return await self._backend._exchange(self.container_id, job, staging, attached=attached)

    async def close(self) -> None:
        """Let go of an attach `run` never took over."""
        attached, self._attached = self._attached, None
        if attached is not None:
            await attached.aclose()


async def _stream_of(fd: int) -> anyio.abc.SocketStream:
    """The attach descriptor as a stream, which then owns it.

    Closed through its socket object if that fails, never with os.close: the event loop
    may already have closed the socket (a cancelled wrap closes its transport), and a
    second close of the bare number would close whatever socket took that number since."""
    sock = socket.socket(fileno=fd)
    try:
        return await anyio.abc.SocketStream.from_socket(sock)
    except BaseException:
        sock.close()  # a no-op once closed
        raise


@contextmanager
def _disk_errors(action: str) -> Iterator[None]:
    """The host's own files failing (a full disk, a lost blob) is a `StoreError`."""
    try:
        yield
    except OSError as exc:
        raise StoreError(f"{action} failed on the server's disk: {exc}") from exc


async def _read_chunk(spool: IO[bytes]) -> bytes:
    with _disk_errors("reading the workspace to send in"):
        return await anyio.to_thread.run_sync(spool.read, SEND_CHUNK)


def _job_payload(job: JobSpec) -> dict[str, Any]:
    return {
        "language": job.language,
        "code": job.code,
        "env": job.env,
        "timeout_s": job.timeout_s,
        "stream_cap_bytes": job.stream_cap_bytes,
        "artifact_caps": job.artifact_caps.model_dump(),
        "egress": {
            "ca_pem": job.egress.ca_pem,
            "ca_bundle": CA_BUNDLE,
        }
        if job.egress
        else None,
        "browse": job.browse.model_dump(mode="json") if job.browse else None,
    }


def _is_reapable(labels: dict[str, str], instance: Instance, now: float) -> bool:
    if instance.owner_is_dead(labels):
        return True
    try:
        return float(labels.get(LABEL_DEADLINE, "0")) < now
    except ValueError:
        return True


def _engine_state(client: docker.DockerClient, container_id: str) -> tuple[Usage, bool]:
    """Usage from the stats API (a remote engine) and whether the OOM killer struck."""
    state = client.api.inspect_container(container_id)["State"]
    usage = Usage()
    if state.get("Running"):
        stats = client.api.stats(container_id, stream=False, one_shot=True)
        cpu_ns = (stats.get("cpu_stats") or {}).get("cpu_usage", {}).get("total_usage")
        peak = (stats.get("memory_stats") or {}).get("max_usage")
        usage = Usage(
            cpu_seconds=cpu_ns / 1e9 if cpu_ns else None,
            peak_memory_bytes=peak or None,
        )
    return usage, bool(state.get("OOMKilled"))


def _outcome(
    job: JobSpec,
    exchange: Exchange,
    intake: Intake,
    usage: Usage,
    *,
    oom_killed: bool,
    host_timeout: bool,
    elapsed_ms: int,
) -> JobOutcome:
    report = exchange.report
    notes: list[str] = []
    if exchange.overflow:
        notes.append(f"{exchange.overflow}; no files were kept from this run")
    workspace: tuple[WorkspaceEntry, ...] | None = None
    complete = True
    files: tuple[OutputFile, ...] = ()
    if report is not None and not report.listing_sent:
        notes.append("the code's processes could not be stopped; no files were kept")
    if report is not None and report.listing_sent and not exchange.overflow:
        listing, complete, listing_notes = read_listing(
            exchange.entries, complete=report.listing_complete, caps=job.artifact_caps
        )
        files = tuple(intake.match(listing))
        notes.extend(exchange.notes)
        if exchange.notes_dropped:
            notes.append(f"and {exchange.notes_dropped} more notes from the runner")
        notes.extend(_at_most(listing_notes, 100))
        notes.extend(_at_most(intake.notes, 100))
        workspace = tuple(listing)
    else:
        # No file of this run is kept: none of its content may become a blob.
        intake.discard_all()
    if report is not None:
        usage = Usage(
            cpu_seconds=usage.cpu_seconds if usage.cpu_seconds is not None else report.cpu_seconds,
            peak_memory_bytes=usage.peak_memory_bytes or report.max_rss_bytes,
        )
    return JobOutcome(
        status=_status(report, oom_killed=oom_killed, host_timeout=host_timeout),
        exit_code=report.exit_code if report else None,
        duration_ms=report.duration_ms if report else elapsed_ms,
        stdout=_capture(
            bytes(exchange.stdout),
            report.stdout.bytes if report else None,
            report.stdout.sha256 if report else None,
        ),
        stderr=_capture(
            bytes(exchange.stderr),
            report.stderr.bytes if report else None,
            report.stderr.sha256 if report else None,
        ),
        files=files,
        workspace=workspace,
        listing_complete=complete,
        notes=tuple(notes),
        usage=usage,
    )


def _at_most(notes: list[str], count: int) -> list[str]:
    """The first `count` notes, and a last one saying how many more there were."""
    if len(notes) <= count:
        return notes
    return [*notes[:count], f"... and {len(notes) - count} more like these"]


def _status(report: RunnerReport | None, *, oom_killed: bool, host_timeout: bool) -> Status:
    # The OOM killer may have hit a child the code survived; only a failed run is "oom".
    if oom_killed and (report is None or report.exit_code != 0):
        return "oom"
    if report is None:
        return "timeout" if host_timeout else "killed"
    if report.timed_out:
        return "timeout"
    if report.oom_kills > 0 and report.exit_code != 0:
        return "oom"
    return "ok" if report.exit_code == 0 else "error"


def _capture(data: bytes, total: int | None, sha256: str | None) -> StreamCapture:
    return StreamCapture(
        data=data,
        total_bytes=max(total or 0, len(data)),
        sha256=sha256 or hashlib.sha256(data).hexdigest(),
    )
