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

The listing is the whole final /workspace, parents before children, up to the job's
`max_entries` (RESULT's `listing_complete` is false past it, or when a directory or
file could not be read). An entry is a JSON object with `path`, `kind` ("file",
"dir", "other": symlinks, FIFOs, sockets, devices), `size` and `sha256` (files; 0
and "" otherwise), `mode` (`st_mode & 0o7777`), `mtime` (whole seconds) and, for
files, `changed` (content differs from what came in) and, for directories,
`contents_listed` (false: unreadable, nothing under it is known); readers ignore keys they do
not know, so the listing can grow. Content is sent (TAR) for changed files within
the caps, files inside `.git` directories last (a repository's objects never crowd the
work out of the caps); a file listed without content was refused by a cap (a note says
which).

Only the standard library of the image's Python (3.11) may be used here.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import io
import json
import os
import resource
import select
import selectors
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Iterator

from .codeproc import PYTHON, CodeProcess, reap_within, start_code_process
from .wire import (
    ENTRIES,
    FAULT,
    LENGTH,
    MAX_FRAME,
    MAX_JOB_JSON,
    NOTES,
    RESULT,
    SANDBOX_UID,
    STDERR,
    STDOUT,
    TAR,
    WORKSPACE,
    encode_frame,
)

# typing and dataclasses are not imported at run time: under gVisor every module a
# runner imports adds to a cold call (dataclasses pulls in inspect, about 30 ms).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, BinaryIO


CODE_DIR = "/tmp/.airlock"
READ_CHUNK = 65536
POLL_S = 0.05
DRAIN_AFTER_EXIT_S = 0.25
# Notes beyond this many (or this many characters) are counted per reason, not listed
# ("and 24488 more: ..."); small enough that the host's caps keep the summary lines.
MAX_NOTES = 20
MAX_NOTES_CHARS = 8 * 1024
MAX_NOTE_CHARS = 600
# Entries are sent in batches of at most this many JSON bytes (well below MAX_FRAME).
ENTRY_BATCH_BYTES = 256 * 1024
# How long the runner keeps killing leftovers of the code before it gives up on
# copying /workspace out (processes in uninterruptible sleep may take a moment).
STOP_CODE_S = 5.0
# How long the relay keeps trying the proxy's socket when a connection to it fails in
# a way that can pass (gone for a moment, backlog full): a refusal the code can read
# beats a closed connection it cannot explain.
PROXY_CONNECT_PATIENCE_S = 3.0
PROXY_TRANSIENT = frozenset({errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN, errno.EINTR})
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24


class _FrameWriter:
    """A write-only file object that turns writes into frames of one kind."""

    def __init__(self, out: BinaryIO, kind: bytes) -> None:
        self._out = out
        self._kind = kind

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        for start in range(0, len(view), MAX_FRAME):
            self._out.write(encode_frame(self._kind, bytes(view[start : start + MAX_FRAME])))
        return len(data)

    def flush(self) -> None:
        self._out.flush()


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


class _Listing:
    """Sends workspace entries in batches and notes up to MAX_NOTES, then counts."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._batch: list[bytes] = []
        self._batch_bytes = 0
        self.entries = 0
        self.notes = 0
        self.complete = True
        self.unread_dirs: set[str] = set()
        self._chars = 0
        self._unlisted: dict[str, int] = {}

    def entry(self, entry: dict[str, Any]) -> None:
        encoded = json.dumps(entry).encode()
        if self._batch and self._batch_bytes + len(encoded) > ENTRY_BATCH_BYTES:
            self._flush_entries()
        self._batch.append(encoded)
        self._batch_bytes += len(encoded) + 1
        self.entries += 1

    def note(self, reason: str, text: str) -> None:
        text = text[:MAX_NOTE_CHARS]
        if self.notes < MAX_NOTES and self._chars + len(text) <= MAX_NOTES_CHARS:
            self._chars += len(text)
            self._send_notes([text])
        else:
            self._unlisted[reason] = self._unlisted.get(reason, 0) + 1

    def summary(self, text: str) -> None:
        """A note that is always sent, whatever the cap: it stands for many entries."""
        self._send_notes([text])

    def close(self) -> None:
        self._flush_entries()
        self._send_notes([f"and {n} more: {reason}" for reason, n in self._unlisted.items()])

    def _send_notes(self, texts: list[str]) -> None:
        if texts:
            self._out.write(encode_frame(NOTES, json.dumps(texts).encode()))
            self.notes += len(texts)

    def _flush_entries(self) -> None:
        if self._batch:
            self._out.write(encode_frame(ENTRIES, b"[" + b",".join(self._batch) + b"]"))
            self._batch = []
            self._batch_bytes = 0


def _read_exact(stream: BinaryIO, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError(f"stdin closed after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)


def _prctl(option: int, arg: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(option, arg, 0, 0, 0))


def _make_undumpable() -> None:
    # The uid already keeps the code away from our /proc entries and from ptrace;
    # undumpable keeps that true for anything of our own uid too (and no core).
    if _prctl(PR_SET_DUMPABLE, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def _check_privileges() -> None:
    """Refuse to run code that would share our uid: that is what let it forge our frames."""
    if os.geteuid() != 0:
        raise PermissionError(
            f"the runner runs as uid {os.geteuid()}, not root: it could not drop the code "
            "to another uid; start the container as user 0 with CAP_SETUID and CAP_SETGID"
        )


def _become_sandbox_user() -> None:
    """Drop to uid/gid 1000 with no groups, an empty bounding set and no capabilities."""
    for cap in range(64):
        if _prctl(PR_CAPBSET_DROP, cap) != 0:
            # EINVAL past the last capability the kernel knows; anything else is a failure.
            if ctypes.get_errno() != errno.EINVAL:
                raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap}) failed")
            break
    os.setgroups([])
    os.setgid(SANDBOX_UID)
    os.setuid(SANDBOX_UID)
    # setuid from root clears the permitted and effective sets; check, never assume.
    if os.getuid() != SANDBOX_UID or os.geteuid() != SANDBOX_UID or os.getegid() != SANDBOX_UID:
        raise PermissionError("could not drop to the sandbox user")


@contextlib.contextmanager
def _as_sandbox_user() -> Iterator[None]:
    """Act on files as the sandbox user, in this process: only the effective ids change.

    Root without CAP_DAC_OVERRIDE may not read the code's files, and what the runner
    writes in /workspace must be the code's. The real and saved ids stay root's, so no
    process of the sandbox user may signal or trace the runner meanwhile, and on the
    way back the runner's capabilities return with its effective uid. (A child that
    dropped to the sandbox user did this before: a fork costs about 25 ms under gVisor.)
    """
    os.setegid(SANDBOX_UID)
    os.seteuid(SANDBOX_UID)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


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


def _hash_file(full: str) -> str:
    digest = hashlib.sha256()
    fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        for chunk in iter(lambda: f.read(READ_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _entries(listing: _Listing) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under /workspace (never following a symlink), parents before children.

    A directory that cannot be read anyway makes the listing incomplete.
    """

    def unreadable(exc: OSError) -> None:
        # Directories are checked before they are listed (contents_listed); one that
        # still fails here (or /workspace itself) leaves the whole listing incomplete.
        if os.path.relpath(str(exc.filename), WORKSPACE) not in listing.unread_dirs:
            listing.complete = False

    for root, dirs, files in os.walk(WORKSPACE, onerror=unreadable, followlinks=False):
        dirs.sort()
        for name in sorted([*files, *dirs]):
            full = os.path.join(root, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            yield os.path.relpath(full, WORKSPACE), st


def _listed(rel: str, st: os.stat_result) -> dict[str, Any]:
    """One listing entry as the host reads it (see sandbox/spec.py WorkspaceEntry)."""
    if stat.S_ISREG(st.st_mode):
        kind = "file"
    elif stat.S_ISDIR(st.st_mode):
        kind = "dir"
    else:
        kind = "other"
    return {
        "path": rel,
        "kind": kind,
        "size": st.st_size if kind == "file" else 0,
        "sha256": "",
        "mode": stat.S_IMODE(st.st_mode),
        "mtime": int(st.st_mtime),
        "contents_listed": True,
    }


def _oom_kills() -> int:
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


def _stop_everything() -> bool:
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


SYSTEM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def _start_relay(socket_path: str, port: int) -> int:
    """Listen on 127.0.0.1:`port` and fork the relay that serves it; the relay's pid.

    Started with the container, before any job is known, so a warm call waits for
    nothing: the socket listens before the fork returns. Nothing answers on the proxy
    socket until the host has taken the container and bound the run's proxy there.
    A fork, not a new interpreter: under gVisor starting Python and importing this
    module again costs tens of milliseconds of CPU, paid by every container a pool
    starts while a call runs. The relay keeps only its listening socket (never the
    report channel) and drops to the sandbox user: it holds nothing the code does not
    already have, and having changed credentials without exec it is not dumpable, so
    the code cannot trace it either.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    sys.stdout.flush()
    pid = os.fork()  # safe: the runner has no threads
    if pid == 0:
        try:
            _keep_only(listener.fileno())
            _become_sandbox_user()
            _relay(listener, socket_path)
        finally:
            os._exit(1)
    listener.close()
    return pid


def _keep_only(*keep: int) -> None:
    """Close every descriptor but those in `keep`; 0, 1 and 2 become /dev/null."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _ready_egress(egress: dict[str, Any], relay: int | None) -> None:
    """Write the run's CA bundle; refuse the job if the relay is not serving.

    The bundle holds the system roots too, for hosts a policy passes through untouched.
    It is root's, so the code can read it but not change it.
    """
    if relay is None:
        raise RuntimeError("the job has egress but its container was started without it")
    status = reap_within(relay, 0)
    if status is not None:
        raise RuntimeError(f"the egress relay ended before the job (exit status {status})")
    bundle = egress["ca_pem"]
    with contextlib.suppress(OSError), open(SYSTEM_CA_BUNDLE, encoding="utf-8") as f:
        bundle = f.read() + "\n" + bundle
    with open(egress["ca_bundle"], "w", encoding="utf-8") as f:
        f.write(bundle)


def _relay(listener: socket.socket, socket_path: str) -> None:
    """Bridge each TCP connection on `listener` to the proxy's unix socket."""
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_bridge, args=(client, socket_path), daemon=True).start()


def _bridge(client: socket.socket, socket_path: str) -> None:
    try:
        upstream = _connect_proxy(socket_path)
    except OSError as exc:
        _refuse(client, f"the egress relay cannot reach Airlock's proxy ({_reason(exc)})")
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _connect_proxy(socket_path: str) -> socket.socket:
    deadline = time.monotonic() + PROXY_CONNECT_PATIENCE_S
    pause = 0.01
    while True:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(socket_path)
        except OSError as exc:
            upstream.close()
            if exc.errno not in PROXY_TRANSIENT or time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.2)
        else:
            return upstream


def _reason(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, type(exc).__name__)


def _refuse(client: socket.socket, reason: str) -> None:
    """Answer 502 with the reason, the way the proxy answers its own refusals."""
    body = (reason + "\n").encode()
    head = (
        "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with contextlib.suppress(OSError):
        client.sendall(head + body)
        client.shutdown(socket.SHUT_WR)
        # Read what the client sent before closing: closing over unread data resets the
        # connection, and a reset can discard the answer before the client reads it.
        client.settimeout(PROXY_CONNECT_PATIENCE_S)
        while client.recv(READ_CHUNK):
            pass
    client.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(READ_CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


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
        _ready_egress(job["egress"], relay)
    with open(os.path.join(CODE_DIR, filename), "w", encoding="utf-8") as f:
        f.write(job["code"])
    streams = {
        "stdout": _Stream(STDOUT, int(job["stream_cap_bytes"])),
        "stderr": _Stream(STDERR, int(job["stream_cap_bytes"])),
    }
    oom_before = _oom_kills()
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
        # Our own child, so it can be waited for; _stop_everything would find it dying
        # and pause for it. Still stopped below with everything else if it lingers.
        os.kill(relay, signal.SIGKILL)
        reap_within(relay, STOP_CODE_S)
    stopped = _stop_everything()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "exit_code": returncode if returncode >= 0 else 128 - returncode,
        "signal": -returncode if returncode < 0 else None,
        "timed_out": timed_out,
        "oom_kills": _oom_kills() - oom_before,
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


def _pack_workspace(before: dict[str, str], caps: dict[str, int], out: BinaryIO) -> dict[str, Any]:
    """List every entry of /workspace; send the content of new or changed regular files.

    Runs as the sandbox user after every process of the code is gone. A file whose
    content is not sent (a cap) stays listed, so the host does not take it as deleted.
    Returns how many entries and notes were sent and whether the listing is complete,
    for the runner's RESULT.
    """
    import tarfile

    listing = _Listing(out)
    max_entries = int(caps.get("max_entries", 10_000))
    unlisted = 0
    sent = [0, 0]  # files, bytes
    # A repository's internals (git's objects and index) are sent after everything else,
    # so its objects never take the caps' room from the work itself.
    internals: list[tuple[str, os.stat_result, dict[str, Any]]] = []
    writer = _FrameWriter(out, TAR)
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        for rel, st in _entries(listing):
            if listing.entries >= max_entries:
                unlisted += 1
                continue
            entry = _listed(rel, st)
            full = os.path.join(WORKSPACE, rel)
            if entry["kind"] == "file":
                try:
                    entry["sha256"] = _hash_file(full)
                except OSError as exc:
                    # Still listed (it exists), with no hash: the host keeps what it had.
                    listing.note(
                        "unreadable files (content not sent)",
                        f"{rel}: unreadable ({exc.strerror}); its content was not sent",
                    )
                entry["changed"] = entry["sha256"] not in ("", before.get(rel))
            elif entry["kind"] == "dir" and not os.access(full, os.R_OK | os.X_OK):
                # Its contents cannot be listed: the host takes nothing under it as deleted.
                entry["contents_listed"] = False
                listing.unread_dirs.add(rel)
                listing.note(
                    "unreadable directories (contents not listed)",
                    f"{rel}: unreadable directory; its contents are not listed",
                )
            listing.entry(entry)
            if not entry.get("changed"):
                continue
            if ".git" in rel.split("/"):
                internals.append((rel, st, entry))
                continue
            _send_file(tar, listing, rel, st, entry, caps, sent)
        for rel, st, entry in internals:
            _send_file(tar, listing, rel, st, entry, caps, sent)
    if unlisted:
        listing.complete = False
        listing.summary(
            f"/workspace holds more than {max_entries} entries; {unlisted} were not listed, "
            "so this run deleted nothing"
        )
    listing.close()
    out.flush()
    return {"entries": listing.entries, "notes": listing.notes, "complete": listing.complete}


def _send_file(
    tar: Any,
    listing: _Listing,
    rel: str,
    st: os.stat_result,
    entry: dict[str, Any],
    caps: dict[str, int],
    sent: list[int],
) -> None:
    """Add a changed file's content to the outgoing tar, or note the cap that refused it."""
    import tarfile

    refusal = _send_refusal(st.st_size, caps, sent[0], sent[1])
    if refusal:
        listing.note(refusal, f"{rel}: {refusal}")
        return
    info = tarfile.TarInfo(rel)
    info.size = st.st_size
    info.mode = entry["mode"] & 0o777
    info.mtime = entry["mtime"]
    fd = os.open(os.path.join(WORKSPACE, rel), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        tar.addfile(info, f)
    sent[0] += 1
    sent[1] += st.st_size


def _send_refusal(size: int, caps: dict[str, int], sent_files: int, sent_bytes: int) -> str | None:
    """Why a changed file's content is not sent (the reason doubles as its summary line)."""
    if sent_files >= caps["max_files"]:
        return f"content not sent: over the limit of {caps['max_files']} files"
    if size > caps["max_file_bytes"]:
        return f"content not sent: over the per-file limit of {caps['max_file_bytes']} bytes"
    if sent_bytes + size > caps["max_total_bytes"]:
        return f"content not sent: over the total limit of {caps['max_total_bytes']} bytes"
    return None


def main(argv: list[str], code: CodeProcess | None) -> None:
    """`argv`: empty, or `--egress SOCKET PORT` for a container with an egress mount;
    `code`: the process boot.py started to become the code (None if it could not)."""
    stdin = sys.stdin.buffer
    out = sys.stdout.buffer
    try:
        _make_undumpable()
        _check_privileges()
        # Root's supplementary groups would follow it when it acts as the sandbox user.
        os.setgroups([])
        relay = _start_relay(argv[1], int(argv[2])) if argv[:1] == ["--egress"] else None
        if not select.select([stdin], [], [], 0)[0]:
            # Waiting in a pool: time to spare for what a cold call imports later.
            _import_tarfile()
        (size,) = LENGTH.unpack(_read_exact(stdin, LENGTH.size))
        if size > MAX_JOB_JSON:
            raise ValueError(f"job of {size} bytes exceeds {MAX_JOB_JSON}")
        job = json.loads(_read_exact(stdin, size))
        input_tar = _read_exact(stdin, int(job["input_tar_bytes"]))
        if input_tar:
            with _as_sandbox_user():
                _extract_inputs(input_tar)
        before = _input_hashes(input_tar)
        report = _run(job, out, relay, code)
        # Copying out while something of the code's still runs would let it race us,
        # and reach the runner while it acts as the sandbox user; without a clean stop
        # the workspace stays as the host has it.
        listed = None
        if report.pop("stopped"):
            with _as_sandbox_user():
                listed = _pack_workspace(before, job["artifact_caps"], out)
        report["listing_complete"] = bool(listed and listed.pop("complete"))
        report["listing"] = listed
        out.write(encode_frame(RESULT, json.dumps(report).encode()))
    except Exception as exc:  # the host needs to hear about every failure
        out.write(
            encode_frame(FAULT, json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
        )
    out.flush()
    # Stay alive until the host has read usage and removes the container.
    while stdin.read(READ_CHUNK):
        pass
