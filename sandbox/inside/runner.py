"""The in-container runner, started by boot.py (every sandbox container's entrypoint)
right after that has started the process that will become the code.

It starts before any job is known (so a container can wait in a warm pool; one
created for egress, `--egress SOCKET PORT`, forks its relay to the proxy socket
then too), reads exactly one job from stdin,
runs it as the unprivileged sandbox user, streams the output back, sends the
changed files of /workspace, reports, and then waits for the host to remove the
container. It is never given a second job.

Privilege separation (why the report channel is the runner's alone): init and the
runner run as root with every capability dropped except SETUID, SETGID, SETPCAP
and KILL (no-new-privileges stays on, so nothing can ever gain more). The code
runs as uid 1000 with an empty bounding set and no capabilities at all. Being
another uid, it cannot open /proc/1/fd/* or /proc/<runner>/fd/* (runc denies the
directory; gVisor lists it but the targets are root's 0600 pipes), cannot ptrace
and cannot signal init or the runner. The runner also makes itself undumpable,
so even a same-uid process could not trace it or open its descriptors. Files of
/workspace belong to uid 1000, and root without CAP_DAC_OVERRIDE may not read
them, so for copy-in and copy-out the runner switches its effective ids to uid
1000 (its real and saved ids stay root's, so it stays out of the code's reach)
and back: copy-in before the code starts, copy-out only after the runner (holding
CAP_KILL) has killed every process but init and itself, so nothing of the code's
is left to race it. The host still treats every byte as hostile: a file's content
and name are the code's, and the runner could have bugs.

The job comes and the report goes in the frames of wire.py (which says their kinds).

Its parts, shared with the browser driver: `entry.py` (the frame: hardening, the relay,
reading the job, FAULT, lingering), `privileges.py` (the ids), `relay.py` (the one way out)
and `report.py` (the listing and tar of /workspace, then RESULT).

Only the standard library of the image's Python (3.11) may be used here.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import resource
import select
import selectors
import signal
import time

from .codeproc import PYTHON, CodeProcess, reap_within, start_code_process
from .entry import read_job, serve
from .privileges import as_sandbox_user
from .relay import ready_egress
from .report import READ_CHUNK, send_result
from .wire import STDERR, STDOUT, WORKSPACE, encode_frame

# typing and dataclasses are not imported at run time: under gVisor every module a
# runner imports adds to a cold call (dataclasses pulls in inspect, about 30 ms).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, BinaryIO


CODE_DIR = "/tmp/.airlock"
POLL_S = 0.05
DRAIN_AFTER_EXIT_S = 0.25
# How long the runner keeps killing leftovers of the code before it gives up on
# copying /workspace out (processes in uninterruptible sleep may take a moment).
STOP_CODE_S = 5.0


class _Stream:
    def __init__(self, kind: bytes, cap: int) -> None:
        self.kind = kind
        self.cap = cap
        self.total = 0
        self.digest = hashlib.sha256()

    def take(self, chunk: bytes, out: BinaryIO) -> None:
        room = self.cap - self.total
        self.total += len(chunk)
        self.digest.update(chunk)
        if room > 0:
            out.write(encode_frame(self.kind, chunk[:room]))
            out.flush()


def _extract_inputs(input_tar: bytes) -> None:
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(input_tar), mode="r:") as tar:
        # The host wrote it from validated paths: directories and regular files only.
        # extractall restores their modes and mtimes (directories last).
        tar.extractall(WORKSPACE)


def _input_hashes(input_tar: bytes) -> dict[str, str]:
    """sha256 of every file the host sent, read from the tar in memory (not from disk)."""
    hashes: dict[str, str] = {}
    if not input_tar:
        return hashes
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(input_tar), mode="r:") as tar:
        for member in tar:
            extracted = tar.extractfile(member) if member.isreg() else None
            if extracted is not None:
                hashes[member.name] = hashlib.sha256(extracted.read()).hexdigest()
    return hashes


def _command(language: str) -> tuple[list[str], str]:
    if language == "python":
        return [PYTHON, "-u", f"{CODE_DIR}/main.py"], "main.py"
    if language == "bash":
        return ["/bin/bash", f"{CODE_DIR}/main.sh"], "main.sh"
    raise ValueError(f"unsupported language {language!r}")


def oom_kills() -> int:
    """How often the kernel's OOM killer struck in this container (cgroup v1 or v2)."""
    for path in ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"):
        try:
            with open(path, encoding="ascii") as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return 0


def stop_everything() -> bool:
    """Kill every process but init and the runner; True once none is left.

    kill(-1) with CAP_KILL reaches every process but init and ourselves: the
    code's process group, whatever it daemonized, the relay. It keeps finding
    processes until they are reaped (init reaps orphans, we reap our children),
    so it is repeated until it finds none.
    """
    deadline = time.monotonic() + STOP_CODE_S
    while time.monotonic() < deadline:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            return True
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        time.sleep(0.01)
    return False


def _import_tarfile() -> None:
    """Only the workspace's way in and out needs tarfile, tens of ms to import under
    gVisor: a runner imports it while it waits for its job in a pool, or (a cold call)
    once the code runs on another core, not before it could start the code."""
    import tarfile  # noqa: F401


def _start_code(argv: list[str], env: dict[str, str], first: CodeProcess | None) -> CodeProcess:
    """The code's process: the one boot.py started, given its order or, when that one is
    gone (it could not start, or died waiting in a pool), a new one given it."""
    for candidate in (first, None):
        started = candidate or start_code_process()
        if started is not None and started.give_order(argv, env):
            return started
    raise RuntimeError("the code's process could not be started")


def _run(
    job: dict[str, Any], out: BinaryIO, relay: int | None, first: CodeProcess | None
) -> dict[str, Any]:
    argv, filename = _command(job["language"])
    # Root's directory and files: the code reads its program and CA but cannot change them.
    os.makedirs(CODE_DIR, mode=0o755, exist_ok=True)
    if job.get("egress"):
        ready_egress(job["egress"], relay)
    with open(os.path.join(CODE_DIR, filename), "w", encoding="utf-8") as f:
        f.write(job["code"])
    streams = {
        "stdout": _Stream(STDOUT, int(job["stream_cap_bytes"])),
        "stderr": _Stream(STDERR, int(job["stream_cap_bytes"])),
    }
    oom_before = oom_kills()
    started = time.monotonic()
    deadline = started + float(job["timeout_s"])
    proc = _start_code(argv, job["env"], first)
    _import_tarfile()
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ, streams["stdout"])
    selector.register(proc.stderr, selectors.EVENT_READ, streams["stderr"])
    open_pipes = 2
    drain_until: float | None = None
    # Pipes close when every process holding them exits; a background child can
    # hold them open forever, so after the main process exits we drain briefly
    # and move on (the leftovers are killed below).
    while open_pipes:
        now = time.monotonic()
        if drain_until is None and proc.poll() is not None:
            drain_until = now + DRAIN_AFTER_EXIT_S
        remaining = min(deadline, drain_until or deadline) - now
        if remaining <= 0:
            break
        for key, _ in selector.select(timeout=min(remaining, POLL_S)):
            chunk = os.read(key.fd, READ_CHUNK)
            if chunk:
                key.data.take(chunk, out)
            else:
                selector.unregister(key.fileobj)
                open_pipes -= 1
    timed_out = not proc.ended_within(max(0.0, deadline - time.monotonic()))
    duration_ms = int((time.monotonic() - started) * 1000)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    returncode = proc.wait()
    selector.close()
    os.close(proc.stdout)
    os.close(proc.stderr)
    if relay is not None:
        # Our own child, so it can be waited for; stop_everything would find it dying
        # and pause for it. Still stopped below with everything else if it lingers.
        os.kill(relay, signal.SIGKILL)
        reap_within(relay, STOP_CODE_S)
    stopped = stop_everything()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "exit_code": returncode if returncode >= 0 else 128 - returncode,
        "signal": -returncode if returncode < 0 else None,
        "timed_out": timed_out,
        "oom_kills": oom_kills() - oom_before,
        "duration_ms": duration_ms,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "max_rss_bytes": usage.ru_maxrss * 1024,
        "stdout": {
            "bytes": streams["stdout"].total,
            "sha256": streams["stdout"].digest.hexdigest(),
        },
        "stderr": {
            "bytes": streams["stderr"].total,
            "sha256": streams["stderr"].digest.hexdigest(),
        },
        "stopped": stopped,
    }


def main(argv: list[str], code: CodeProcess | None) -> None:
    """`argv`: empty, or `--egress SOCKET PORT` for a container with an egress mount;
    `code`: the process boot.py started to become the code (None if it could not)."""
    serve(argv, lambda stdin, out, relay: _one_job(stdin, out, relay, code))


def _one_job(stdin: BinaryIO, out: BinaryIO, relay: int | None, code: CodeProcess | None) -> None:
    if not select.select([stdin], [], [], 0)[0]:
        # Waiting in a pool: time to spare for what a cold call imports later.
        _import_tarfile()
    job, input_tar = read_job(stdin)
    if input_tar:
        with as_sandbox_user():
            _extract_inputs(input_tar)
    before = _input_hashes(input_tar)
    report = _run(job, out, relay, code)
    send_result(report, job["artifact_caps"], before, out)
