"""One job in one container: send it over the attach, read the exchange, measure, report.

The IO around the sans-IO cores: the workspace goes in as a tar built from its blobs chunk
by chunk (`file_transfer.pack_inputs`), after the job's frame (`inside/wire.py`); what
comes back is fed to `exchange.Exchange` as it arrives, the files' tar handed on to
`intake.Intake` (so a frame at most is held in memory), the container's cgroup looked at
meanwhile (`usage.py`), and `outcome.job_outcome` makes the result. The host's deadline
is the job's timeout plus `EXCHANGE_GRACE_S`. Which container, and its removal, are the
backend's (`backend.py`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import IO, Any

import anyio
import anyio.abc

from airlock.errors import RunnerFailed, SandboxError, StoreError
from airlock.store import Staging

from ..backend import EXCHANGE_GRACE_S
from ..environment import CA_BUNDLE
from ..exchange import Exchange
from ..file_transfer import pack_inputs
from ..inside.wire import encode_job
from ..intake import Intake
from ..outcome import job_outcome
from ..spec import JobOutcome, JobSpec, Usage
from .attach import stream_of
from .containers import Containers
from .sdk_attach import attach
from .usage import UsageWatch, cgroup_verdict, engine_oom_killed, engine_state

log = logging.getLogger(__name__)

# How often a running container's cgroup is read, so its usage is known if it vanishes.
USAGE_LOOK_INTERVAL_S = 0.05
RECEIVE_CHUNK = 65536
SEND_CHUNK = 65536
# The input tar stays in memory up to this size, then moves to a file in the run's staging area.
INPUT_TAR_IN_MEMORY = 1024 * 1024


async def run_job(
    containers: Containers,
    container_id: str,
    job: JobSpec,
    staging: Staging,
    *,
    attached: anyio.abc.SocketStream | None,
    received: MutableMapping[str, int],
    hold: Callable[[anyio.abc.SocketStream], None] | None = None,
) -> JobOutcome:
    """Run `job` in the container: one already attached and running (pooled, or kept by
    its last job), or, with `attached` None, one created for it, attached and started
    here. Owns `attached`, unless the runner reports it `kept` the box for another job:
    then the stream goes to `hold` (when given) instead of being closed.
    `received[job.run_id]` counts the output bytes while the job runs."""
    started = time.monotonic()
    stream = attached
    inputs: IO[bytes] | None = None
    intake: Intake | None = None
    try:
        inputs = staging.temporary_file(INPUT_TAR_IN_MEMORY)
        intake = Intake(staging, job.artifact_caps)
        with _disk_errors("packing the workspace to send in"):
            input_bytes = await anyio.to_thread.run_sync(
                pack_inputs, inputs, job.files, job.dirs, staging.store.open_blob
            )
            await anyio.to_thread.run_sync(inputs.seek, 0)
        if stream is None:
            stream = await _attach_and_start(containers, container_id)
        exchange = Exchange(job)
        await _send_job(stream, job, input_bytes, inputs)
        watch = UsageWatch(container_id)
        with anyio.move_on_after(job.timeout_s + EXCHANGE_GRACE_S) as scope:
            try:
                await _receive(stream, exchange, intake, watch, job.run_id, received)
            finally:
                received.pop(job.run_id, None)
        # Read while the container still exists: the runner waits for us to hang up. A box
        # the host timed out is still running: it did not die.
        died = exchange.report is None and not scope.cancelled_caught
        usage, oom_killed = await _final_state(
            containers, watch, died=died, memory_mb=job.limits.memory_mb
        )
        if hold is not None and exchange.report is not None and exchange.report.kept:
            hold(stream)
            stream = None
        else:
            await stream.aclose()
        elapsed_ms = int((time.monotonic() - started) * 1000)
        if exchange.report is None and exchange.runner_log:
            # The runner's own stderr is for the operator; it never reaches the agent.
            log.warning(
                "runner of %s ended without a report: %r", job.run_id, bytes(exchange.runner_log)
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
                lambda: job_outcome(
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


async def _attach_and_start(containers: Containers, container_id: str) -> anyio.abc.SocketStream:
    fd = await containers.call(
        "attaching to the container", lambda: attach(containers.client, container_id)
    )
    try:
        await containers.start(container_id, "starting the container")
    except BaseException:
        os.close(fd)
        raise
    return await stream_of(fd)


async def _send_job(
    stream: anyio.abc.SocketStream, job: JobSpec, input_bytes: int, inputs: IO[bytes]
) -> None:
    try:
        await stream.send(encode_job(job_payload(job), input_bytes))
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
    stream: anyio.abc.SocketStream,
    exchange: Exchange,
    intake: Intake,
    watch: UsageWatch,
    run_id: str,
    received: MutableMapping[str, int],
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
        received[run_id] = len(exchange.stdout) + len(exchange.stderr)


async def _final_state(
    containers: Containers, watch: UsageWatch, *, died: bool, memory_mb: int
) -> tuple[Usage, bool]:
    verdict = cgroup_verdict(watch, died=died, memory_mb=memory_mb)
    container_id = watch.container_id
    if verdict is not None and died and not verdict[1]:
        oom_killed = await containers.call(
            "reading the container's end",
            lambda: engine_oom_killed(containers.client, container_id),
        )
        return verdict[0], oom_killed
    if verdict is not None:
        return verdict
    return await containers.call(
        "reading usage", lambda: engine_state(containers.client, container_id)
    )


def job_payload(job: JobSpec) -> dict[str, Any]:
    """What the runner is told of `job` (its files follow as a tar)."""
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
