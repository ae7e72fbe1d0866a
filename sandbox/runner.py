"""The in-container runner: the entrypoint of every sandbox container.

It starts before any job is known (so a container can wait in a warm pool), reads
exactly one job from stdin, runs it as the container's unprivileged user, streams
the output back, sends the changed files of /workspace, reports, and then waits for
the host to remove the container. It is never given a second job.

Everything it reports is as trustworthy as the code it ran: user code shares its
uid and can kill it. The host therefore enforces deadlines, byte caps and file
validation on its own; the runner only makes the honest case fast and complete.

Wire format (the host imports the framing part of this module):
- host -> runner: a 4-byte big-endian length, that many bytes of JSON job, then
  `input_tar_bytes` bytes of an uncompressed tar to unpack into /workspace.
- runner -> host, on stdout: frames of one kind byte, a 4-byte big-endian length,
  and the payload. Kinds: STDOUT and STDERR (the code's output, each capped),
  TAR (chunks of the outgoing workspace tar), RESULT (JSON, last frame), FAULT
  (JSON, the runner itself failed).

Only the standard library of the image's Python (3.11) may be used here.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import io
import json
import os
import resource
import selectors
import signal
import socket
import stat
import struct
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

STDOUT = b"o"
STDERR = b"e"
TAR = b"t"
RESULT = b"r"
FAULT = b"x"
FRAME_KINDS = frozenset({STDOUT, STDERR, TAR, RESULT, FAULT})
HEADER = struct.Struct(">cI")
LENGTH = struct.Struct(">I")
MAX_FRAME = 1 << 20
MAX_JOB_JSON = 4 << 20

WORKSPACE = "/workspace"
CODE_DIR = "/tmp/.airlock"
READ_CHUNK = 65536
POLL_S = 0.05
DRAIN_AFTER_EXIT_S = 0.25


def encode_frame(kind: bytes, payload: bytes) -> bytes:
    return HEADER.pack(kind, len(payload)) + payload


class FrameDecoder:
    """Sans-IO decoder: feed bytes, take complete frames.

    Raises ValueError on an unknown kind or an oversized frame, so a confused or
    hostile stream fails fast instead of making the host buffer without bound.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        self._buffer += data
        frames: list[tuple[bytes, bytes]] = []
        while len(self._buffer) >= HEADER.size:
            kind, length = HEADER.unpack_from(self._buffer)
            if kind not in FRAME_KINDS:
                raise ValueError(f"unknown frame kind {kind!r}")
            if length > MAX_FRAME:
                raise ValueError(f"frame of {length} bytes exceeds {MAX_FRAME}")
            end = HEADER.size + length
            if len(self._buffer) < end:
                break
            frames.append((kind, bytes(self._buffer[HEADER.size : end])))
            del self._buffer[:end]
        return frames

    @property
    def pending(self) -> int:
        return len(self._buffer)


def encode_job(job: dict[str, Any], input_tar: bytes) -> bytes:
    body = json.dumps(dict(job, input_tar_bytes=len(input_tar))).encode()
    return LENGTH.pack(len(body)) + body + input_tar


# ---- everything below runs inside the container ----


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


@dataclass
class _Stream:
    kind: bytes
    cap: int
    total: int = 0
    digest: Any = field(default_factory=hashlib.sha256)

    def take(self, chunk: bytes, out: BinaryIO) -> None:
        room = self.cap - self.total
        self.total += len(chunk)
        self.digest.update(chunk)
        if room > 0:
            out.write(encode_frame(self.kind, chunk[:room]))
            out.flush()


def _read_exact(stream: BinaryIO, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError(f"stdin closed after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)


def _make_undumpable() -> None:
    # A non-dumpable process cannot be ptraced and its /proc/<pid>/fd is not
    # reachable by other processes of the same uid, so the user's code cannot
    # write forged frames into our stdout.
    pr_set_dumpable = 4
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_dumpable, 0, 0, 0, 0)


def _child_setup() -> None:
    # Make the user's code the OOM killer's first choice, so the runner survives
    # to report what happened. Raising the score needs no privilege.
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")


def _command(language: str) -> tuple[list[str], str]:
    if language == "python":
        return ["/usr/bin/python3", "-u", f"{CODE_DIR}/main.py"], "main.py"
    if language == "bash":
        return ["/bin/bash", f"{CODE_DIR}/main.sh"], "main.sh"
    raise ValueError(f"unsupported language {language!r}")


def _snapshot() -> dict[str, str]:
    """sha256 of every regular file under /workspace, by relative path."""
    hashes: dict[str, str] = {}
    for path, st in _entries():
        if stat.S_ISREG(st.st_mode):
            with contextlib.suppress(OSError):
                hashes[path] = _hash_file(os.path.join(WORKSPACE, path))
    return hashes


def _hash_file(full: str) -> str:
    digest = hashlib.sha256()
    fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        for chunk in iter(lambda: f.read(READ_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _entries(unlisted: list[str] | None = None) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under /workspace (never following a symlink), parents before children.

    A directory that cannot be read is added to `unlisted`: its contents are unknown.
    """

    def unreadable(exc: OSError) -> None:
        if unlisted is not None:
            unlisted.append(os.path.relpath(str(exc.filename), WORKSPACE))

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


def _kill_everything(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    # Daemonized leftovers escaped the process group; -1 reaches every process
    # of our uid except init and ourselves, so nothing can touch /workspace
    # while it is being packed.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(-1, signal.SIGKILL)


SYSTEM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def _start_egress(egress: dict[str, Any]) -> subprocess.Popen[bytes]:
    """Write the CA bundle and start the relay from 127.0.0.1:<port> to the proxy socket.

    The bundle holds the system roots too, for hosts a policy passes through untouched.
    """
    bundle = egress["ca_pem"]
    with contextlib.suppress(OSError), open(SYSTEM_CA_BUNDLE, encoding="utf-8") as f:
        bundle = f.read() + "\n" + bundle
    os.makedirs(os.path.dirname(egress["ca_bundle"]), mode=0o700, exist_ok=True)
    with open(egress["ca_bundle"], "w", encoding="utf-8") as f:
        f.write(bundle)
    relay = subprocess.Popen(
        [
            sys.executable,
            "-I",
            os.path.abspath(__file__),
            "--relay",
            egress["socket"],
            str(egress["port"]),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
    )
    assert relay.stdout is not None
    if relay.stdout.readline() != b"ready\n":
        raise RuntimeError("the egress relay did not start")
    return relay


def _relay(socket_path: str, port: int) -> None:
    """Accept TCP on loopback and bridge each connection to the proxy's unix socket."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        client, _ = server.accept()
        threading.Thread(target=_bridge, args=(client, socket_path), daemon=True).start()


def _bridge(client: socket.socket, socket_path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(socket_path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(READ_CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def _run(job: dict[str, Any], out: BinaryIO) -> dict[str, Any]:
    argv, filename = _command(job["language"])
    os.makedirs(CODE_DIR, mode=0o700, exist_ok=True)
    if job.get("egress"):
        _start_egress(job["egress"])
    with open(os.path.join(CODE_DIR, filename), "w", encoding="utf-8") as f:
        f.write(job["code"])
    streams = {
        "stdout": _Stream(STDOUT, int(job["stream_cap_bytes"])),
        "stderr": _Stream(STDERR, int(job["stream_cap_bytes"])),
    }
    oom_before = _oom_kills()
    started = time.monotonic()
    deadline = started + float(job["timeout_s"])
    proc = subprocess.Popen(
        argv,
        cwd=WORKSPACE,
        env=job["env"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_child_setup,  # safe: the runner has no threads
    )
    assert proc.stdout is not None and proc.stderr is not None
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
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    duration_ms = int((time.monotonic() - started) * 1000)
    _kill_everything(proc)
    returncode = proc.wait()
    selector.close()
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
    }


# The RESULT frame carries the listing and must stay under MAX_FRAME.
LISTING_BUDGET = MAX_FRAME - 64 * 1024
MAX_SKIPPED = 100


def _pack_workspace(
    before: dict[str, str], caps: dict[str, int], out: BinaryIO
) -> tuple[list[dict[str, Any]], bool, list[str]]:
    """List every entry of /workspace; send the content of new or changed regular files.

    Returns the listing, whether it is complete, and notes on files whose content
    was not sent (they stay listed, so the host does not take them as deleted).
    """
    skipped: list[str] = []
    listing: list[dict[str, Any]] = []
    listing_bytes = 0
    complete = True
    sent_files = 0
    sent_bytes = 0
    unlisted: list[str] = []
    writer = _FrameWriter(out, TAR)
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        for rel, st in _entries(unlisted):
            entry = _listed(rel, st)
            if entry["kind"] == "file":
                full = os.path.join(WORKSPACE, rel)
                try:
                    entry["sha256"] = _hash_file(full)
                except OSError as exc:
                    # Still listed (it exists), with no hash: the host keeps what it had.
                    skipped.append(f"{rel}: unreadable ({exc.strerror}); its content was not sent")
            listing_bytes += len(json.dumps(entry)) + 2
            if listing_bytes > LISTING_BUDGET:
                complete = False
                break
            listing.append(entry)
            if entry["kind"] != "file" or entry["sha256"] in ("", before.get(rel)):
                continue
            refusal = _send_refusal(rel, st.st_size, caps, sent_files, sent_bytes)
            if refusal:
                skipped.append(refusal)
                continue
            info = tarfile.TarInfo(rel)
            info.size = st.st_size
            info.mode = entry["mode"] & 0o777
            info.mtime = entry["mtime"]
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as f:
                tar.addfile(info, f)
            sent_files += 1
            sent_bytes += st.st_size
    by_path = {entry["path"]: entry for entry in listing}
    for rel in unlisted:
        skipped.append(f"{rel}: unreadable directory; its contents are not listed")
        if rel in by_path:
            by_path[rel]["contents_listed"] = False
        else:
            complete = False
    if len(skipped) > MAX_SKIPPED:
        skipped[MAX_SKIPPED:] = [f"... and {len(skipped) - MAX_SKIPPED} more files not sent"]
    return listing, complete, skipped


def _send_refusal(
    rel: str, size: int, caps: dict[str, int], sent_files: int, sent_bytes: int
) -> str | None:
    if sent_files >= caps["max_files"]:
        return f"{rel}: over the limit of {caps['max_files']} files"
    if size > caps["max_file_bytes"]:
        return f"{rel}: {size} bytes is over the per-file limit of {caps['max_file_bytes']}"
    if sent_bytes + size > caps["max_total_bytes"]:
        return f"{rel}: would exceed the total limit of {caps['max_total_bytes']} bytes"
    return None


def main() -> None:
    _make_undumpable()
    stdin = sys.stdin.buffer
    out = sys.stdout.buffer
    try:
        (size,) = LENGTH.unpack(_read_exact(stdin, LENGTH.size))
        if size > MAX_JOB_JSON:
            raise ValueError(f"job of {size} bytes exceeds {MAX_JOB_JSON}")
        job = json.loads(_read_exact(stdin, size))
        input_tar = _read_exact(stdin, int(job["input_tar_bytes"]))
        if input_tar:
            with tarfile.open(fileobj=io.BytesIO(input_tar), mode="r:") as tar:
                # The host wrote it from validated paths: directories and regular files
                # only. extractall restores their modes and mtimes (directories last).
                tar.extractall(WORKSPACE)
        before = _snapshot()
        report = _run(job, out)
        listing, complete, skipped = _pack_workspace(before, job["artifact_caps"], out)
        report["workspace"] = listing
        report["listing_complete"] = complete
        report["skipped"] = skipped
        out.write(encode_frame(RESULT, json.dumps(report).encode()))
    except Exception as exc:  # the host needs to hear about every failure
        out.write(
            encode_frame(FAULT, json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
        )
    out.flush()
    # Stay alive until the host has read usage and removes the container.
    while stdin.read(READ_CHUNK):
        pass


if __name__ == "__main__":
    if sys.argv[1:2] == ["--relay"]:
        _relay(sys.argv[2], int(sys.argv[3]))
    else:
        main()
