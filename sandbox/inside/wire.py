"""What the host and the box agree on: the frame format of the job and its report, and the
layout of the container (the sandbox user, its home, the workspace).

The one module of `inside` the host imports (sandbox/exchange.py decodes frames with it,
sandbox/docker/run.py encodes the job, the image and the backend take the layout from it). It
runs in the box too, imported by boot.py before the code's process starts, so it imports
nothing but `struct` at load time (json only when a job is encoded, which the box never
does). Only the standard library of the image's Python (3.11) may be used here.

Wire format:
- host -> runner: a 4-byte big-endian length, that many bytes of JSON job, then
  `input_tar_bytes` bytes of an uncompressed tar to unpack into /workspace.
- runner -> host, on stdout: frames of one kind byte, a 4-byte big-endian length,
  and the payload (at most MAX_FRAME bytes). Kinds: STDOUT and STDERR (the code's
  output, each capped), TAR (chunks of the outgoing workspace tar), ENTRIES (a
  JSON list of workspace entries, any number of frames), NOTES (a JSON list of
  notes, capped in count), RESULT (JSON, last frame, says how many entries and
  notes were sent), FAULT (JSON, the runner itself failed). No frame's size grows
  with the number of files.
"""

from __future__ import annotations

import struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SANDBOX_UID = 1000
WORKSPACE = "/workspace"
# The code's home: a tmpfs of its own container, so what programs keep there (caches,
# configuration, Python's user site-packages) neither comes back as artifacts nor reaches
# the session's next run.
SANDBOX_HOME = "/home/sandbox"
# What the image warmed for that home (caches that take seconds to build): prestart.py
# copies it in before the job comes.
HOME_TEMPLATE = "/opt/airlock/home"

STDOUT = b"o"
STDERR = b"e"
TAR = b"t"
ENTRIES = b"f"
NOTES = b"n"
RESULT = b"r"
FAULT = b"x"
FRAME_KINDS = frozenset({STDOUT, STDERR, TAR, ENTRIES, NOTES, RESULT, FAULT})
HEADER = struct.Struct(">cI")
LENGTH = struct.Struct(">I")
MAX_FRAME = 1 << 20
MAX_JOB_JSON = 4 << 20


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


def encode_job(job: dict[str, Any], input_tar_bytes: int) -> bytes:
    """The job's length and JSON; the host then streams `input_tar_bytes` bytes of tar."""
    import json  # only the host encodes a job; the box's boot should not pay for json

    body = json.dumps(dict(job, input_tar_bytes=input_tar_bytes)).encode()
    return LENGTH.pack(len(body)) + body
