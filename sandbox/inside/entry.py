"""The frame every entrypoint of a box runs its work in (the runner, the browser driver):
harden, start the relay, read a job, tell the host of any failure, then linger until the
host removes the container.

The work itself (one job, or a kept browser's jobs) is the entrypoint's; each job's report
is `report.send_result`'s.

Only the standard library of the image's Python (3.11) may be used here.
"""

from __future__ import annotations

import json
import sys

from .privileges import harden
from .relay import start_relay
from .report import READ_CHUNK, send_fault
from .wire import LENGTH, MAX_JOB_JSON

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, BinaryIO

    Work = Callable[[BinaryIO, BinaryIO, "int | None"], None]


def serve(argv: list[str], work: Work) -> None:
    """`argv`: empty, or `--egress SOCKET PORT` for a container with an egress mount (the
    relay is started at once, before any job is known); `work(stdin, out, relay)` gets the
    relay's pid (None without egress) and does the rest."""
    stdin = sys.stdin.buffer
    out = sys.stdout.buffer
    try:
        harden()
        relay = start_relay(argv[1], int(argv[2])) if argv[:1] == ["--egress"] else None
        work(stdin, out, relay)
    except Exception as exc:  # the host needs to hear about every failure
        send_fault(exc, out)
    out.flush()
    # Stay alive until the host has read usage and removes the container.
    while stdin.read(READ_CHUNK):
        pass


def read_job(stdin: BinaryIO, head: bytes | None = None) -> tuple[dict[str, Any], bytes]:
    """The next job (its JSON, checked for size) and the tar of its inputs; `head`: its
    length field, when the caller read that already (to tell a hang-up from a job)."""
    (size,) = LENGTH.unpack(head if head is not None else read_exact(stdin, LENGTH.size))
    if size > MAX_JOB_JSON:
        raise ValueError(f"job of {size} bytes exceeds {MAX_JOB_JSON}")
    job = json.loads(read_exact(stdin, size))
    return job, read_exact(stdin, int(job["input_tar_bytes"]))


def read_exact(stream: BinaryIO, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError(f"stdin closed after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)
