"""One job of the in-memory backend (`memory_backend.py`), run as a plain host process.

What a container's runner does, done here without any containment: the job's files are
unpacked into a scratch directory that stands in for /workspace, the code runs there as
the test's own user with the job's environment (its home and CA bundle moved into the
scratch directory, its proxy variables pointed at a relay of this process), its streams
are read within the job's cap (the full size and hash counted), and afterwards the
workspace is listed and its changed files sent, within the caps, through the host's own
checks (`file_transfer.read_listing`, `intake.Intake`) as a runner's would be. Only for
code a test wrote: nothing stops it from reading or changing anything the test user can.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import signal
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from airlock.egress import SOCKET_NAME
from airlock.sandbox.environment import CA_BUNDLE, CA_VARIABLES, RELAY_PORT
from airlock.sandbox.file_transfer import pack_inputs, read_listing
from airlock.sandbox.intake import Intake
from airlock.sandbox.spec import JobOutcome, JobSpec, StreamCapture, Usage, WorkspaceEntry
from airlock.store import Staging

READ_CHUNK = 65536
MAX_NOTES = 20
"""Notes beyond this many are counted per reason, as the runner counts them."""
SCRATCH = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
"""Where the scratch directories go: in memory where the system has a tmpfs for it (as a
container's /workspace is a tmpfs), else the default temporary directory."""
DRAIN_AFTER_EXIT_S = 0.25
"""How long the streams are read after the code exited (a background child may hold
them open forever), as the runner does."""


@dataclass
class Started:
    """The process a box runs, once started; killing the box kills its group."""

    process: anyio.abc.Process | None = None
    killed: bool = False

    def kill(self) -> None:
        self.killed = True
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)


@dataclass
class _Stream:
    cap: int
    data: bytearray = field(default_factory=bytearray)
    total: int = 0
    digest: Any = field(default_factory=hashlib.sha256)

    def take(self, chunk: bytes) -> None:
        room = self.cap - self.total
        if room > 0:
            self.data += chunk[:room]
        self.total += len(chunk)
        self.digest.update(chunk)

    def capture(self) -> StreamCapture:
        return StreamCapture(
            data=bytes(self.data), total_bytes=self.total, sha256=self.digest.hexdigest()
        )


async def run_here(
    job: JobSpec,
    staging: Staging,
    started: Started,
    egress_dir: Path | None,
    received: MutableMapping[str, int],
) -> JobOutcome:
    """Run `job` as a host process and report it as a runner would have."""
    begun = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="airlock-memory-", dir=SCRATCH) as scratch:
        root = Path(scratch)
        workspace, home, code_dir = root / "workspace", root / "home", root / "code"
        for directory in (workspace, home, code_dir):
            directory.mkdir()
        await anyio.to_thread.run_sync(_unpack, job, staging, workspace)
        program = code_dir / ("main.py" if job.language == "python" else "main.sh")
        program.write_text(job.code, encoding="utf-8")
        env = {**job.env, "HOME": str(home)}
        async with _relay(job, egress_dir, code_dir, env):
            streams, returncode, timed_out = await _run_code(
                job, started, program, workspace, env, received
            )
        elapsed_ms = int((time.monotonic() - begun) * 1000)
        if started.killed:
            return _outcome(job, streams, "killed", None, elapsed_ms)
        status = "timeout" if timed_out else ("ok" if returncode == 0 else "error")
        exit_code = returncode if returncode >= 0 else 128 - returncode
        return await anyio.to_thread.run_sync(
            lambda: _with_files(
                _outcome(job, streams, status, exit_code, elapsed_ms), job, staging, workspace
            )
        )


def _unpack(job: JobSpec, staging: Staging, workspace: Path) -> None:
    """The job's files and directories into `workspace`, as the runner unpacks them."""
    packed = io.BytesIO()
    if not pack_inputs(packed, job.files, job.dirs, staging.store.open_blob):
        return
    packed.seek(0)
    with tarfile.open(fileobj=packed, mode="r:") as tar:
        # The tar is the host's own, built from validated paths (pack_inputs).
        tar.extractall(workspace, filter="fully_trusted")


@contextlib.asynccontextmanager
async def _relay(
    job: JobSpec, egress_dir: Path | None, code_dir: Path, env: dict[str, str]
) -> AsyncIterator[None]:
    """For a job with egress: the run's CA where its environment says, and a relay from a
    loopback port to the egress socket, which the proxy variables then name instead of
    the container's relay port."""
    if job.egress is None or egress_dir is None:
        yield
        return
    bundle = code_dir / "ca-bundle.pem"
    bundle.write_text(job.egress.ca_pem)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    for name, value in list(env.items()):
        if value == CA_BUNDLE and name in CA_VARIABLES:
            env[name] = str(bundle)
        elif value.endswith(f"@127.0.0.1:{RELAY_PORT}"):
            env[name] = value.removesuffix(str(RELAY_PORT)) + str(port)

    async def bridge(client: anyio.abc.SocketStream) -> None:
        async with (
            client,
            await anyio.connect_unix(egress_dir / SOCKET_NAME) as proxy,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(_pump, client, proxy)
            tg.start_soon(_pump, proxy, client)

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, bridge)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()


async def _pump(source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream) -> None:
    with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
        while True:
            await sink.send(await source.receive(READ_CHUNK))
    with contextlib.suppress(anyio.BrokenResourceError, OSError):
        await sink.send_eof()


_DEFAULT_SIGNALS = """import os, signal, sys
for number in signal.valid_signals():
    if number not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(number, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])
"""


async def _run_code(
    job: JobSpec,
    started: Started,
    program: Path,
    workspace: Path,
    env: dict[str, str],
    received: MutableMapping[str, int],
) -> tuple[dict[str, _Stream], int, bool]:
    """The code's streams, its return code and whether it ran out of time."""
    code = ["python3", "-u", str(program)] if job.language == "python" else ["bash", str(program)]
    # Started with every signal at its default, as a container's first process is: this
    # process may ignore some (SIGHUP under nohup), and a child inherits what is ignored.
    argv = [sys.executable, "-c", _DEFAULT_SIGNALS, *code]
    streams = {name: _Stream(job.stream_cap_bytes) for name in ("stdout", "stderr")}
    process = await anyio.open_process(
        argv, cwd=workspace, env=env, stdin=subprocess.DEVNULL, start_new_session=True
    )
    started.process = process
    if started.killed:
        started.kill()
    ended = [anyio.Event(), anyio.Event()]
    async with process, anyio.create_task_group() as readers:
        for (name, pipe), end in zip(
            (("stdout", process.stdout), ("stderr", process.stderr)), ended, strict=True
        ):
            assert pipe is not None
            readers.start_soon(_read, pipe, streams[name], streams, end, (job.run_id, received))
        with anyio.move_on_after(job.timeout_s) as deadline:
            await process.wait()
        timed_out = deadline.cancelled_caught
        with anyio.move_on_after(DRAIN_AFTER_EXIT_S):
            for end in ended:
                await end.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        readers.cancel_scope.cancel()
        returncode = await process.wait()
    received.pop(job.run_id, None)
    return streams, returncode, timed_out


async def _read(
    pipe: anyio.abc.ByteReceiveStream,
    stream: _Stream,
    streams: dict[str, _Stream],
    ended: anyio.Event,
    progress: tuple[str, MutableMapping[str, int]],
) -> None:
    run_id, received = progress
    try:
        while True:
            stream.take(await pipe.receive(READ_CHUNK))
            received[run_id] = sum(len(s.data) for s in streams.values())
    except (anyio.EndOfStream, anyio.ClosedResourceError):
        pass
    finally:
        ended.set()


def _outcome(
    job: JobSpec, streams: dict[str, _Stream], status: Any, exit_code: int | None, ms: int
) -> JobOutcome:
    return JobOutcome(
        status=status,
        exit_code=exit_code,
        duration_ms=ms,
        stdout=streams["stdout"].capture(),
        stderr=streams["stderr"].capture(),
        # Nothing is measured here: no cgroup, and no process of its own to ask.
        usage=Usage(),
    )


def _with_files(outcome: JobOutcome, job: JobSpec, staging: Staging, workspace: Path) -> JobOutcome:
    """`outcome` with the workspace's listing and its changed files, as the host keeps
    them from a runner: through its own checks and caps."""
    before = {f.path: f.sha256 for f in job.files}
    entries, tar, notes, complete = _pack_workspace(workspace, before, job)
    intake = Intake(staging, job.artifact_caps)
    try:
        intake.feed(tar)
        listed = [WorkspaceEntry.model_validate(entry) for entry in entries]
        listing, complete, listing_notes = read_listing(
            listed, complete=complete, caps=job.artifact_caps
        )
        files = tuple(intake.match(listing))
    finally:
        intake.close()
    return outcome.model_copy(
        update={
            "files": files,
            "workspace": tuple(listing),
            "listing_complete": complete,
            "notes": (*notes, *listing_notes, *intake.notes),
        }
    )


def _pack_workspace(
    workspace: Path, before: dict[str, str], job: JobSpec
) -> tuple[list[dict[str, Any]], bytes, list[str], bool]:
    """The runner's listing of `workspace` (parents before children), the tar of its new or
    changed files within the caps, a note for each file whose content was refused, and
    whether the listing is complete (not past the entries' cap)."""
    caps = job.artifact_caps
    entries: list[dict[str, Any]] = []
    notes: list[str] = []
    unnoted: dict[str, int] = {}
    sent_files = sent_bytes = 0
    packed = io.BytesIO()
    unlisted = 0
    with tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, st in _walk(workspace):
            if len(entries) >= caps.max_entries:
                unlisted += 1
                continue
            entry = _entry(rel, st)
            if entry["kind"] == "file":
                entry["sha256"] = hashlib.sha256((workspace / rel).read_bytes()).hexdigest()
                entry["changed"] = entry["sha256"] != before.get(rel)
            entries.append(entry)
            if not entry.get("changed"):
                continue
            refusal = _refusal(st.st_size, job, sent_files, sent_bytes)
            if refusal:
                if len(notes) < MAX_NOTES:
                    notes.append(f"{rel}: {refusal}")
                else:
                    unnoted[refusal] = unnoted.get(refusal, 0) + 1
                continue
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = st.st_size, entry["mode"] & 0o777, entry["mtime"]
            with (workspace / rel).open("rb") as content:
                tar.addfile(info, content)
            sent_files, sent_bytes = sent_files + 1, sent_bytes + st.st_size
    if unlisted:
        notes.append(
            f"/workspace holds more than {caps.max_entries} entries; {unlisted} were not "
            "listed, so this run deleted nothing"
        )
    notes.extend(f"and {count} more: {reason}" for reason, count in unnoted.items())
    return entries, packed.getvalue(), notes, not unlisted


def _walk(workspace: Path) -> Iterator[tuple[str, os.stat_result]]:
    for root, dirs, files in os.walk(workspace, followlinks=False):
        dirs.sort()
        for name in sorted([*files, *dirs]):
            full = os.path.join(root, name)
            yield os.path.relpath(full, workspace), os.lstat(full)


def _entry(rel: str, st: os.stat_result) -> dict[str, Any]:
    kind = "file" if stat.S_ISREG(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "other"
    return {
        "path": rel,
        "kind": kind,
        "size": st.st_size if kind == "file" else 0,
        "sha256": "",
        "mode": stat.S_IMODE(st.st_mode),
        "mtime": int(st.st_mtime),
        "contents_listed": True,
    }


def _refusal(size: int, job: JobSpec, sent_files: int, sent_bytes: int) -> str | None:
    caps = job.artifact_caps
    if sent_files >= caps.max_files:
        return f"content not sent: over the limit of {caps.max_files} files"
    if size > caps.max_file_bytes:
        return f"content not sent: over the per-file limit of {caps.max_file_bytes} bytes"
    if sent_bytes + size > caps.max_total_bytes:
        return f"content not sent: over the total limit of {caps.max_total_bytes} bytes"
    return None
