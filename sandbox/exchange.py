"""Sans-IO reading of one container's attach stream.

Docker multiplexes the runner's stdout and stderr into one stream of 8-byte
headed chunks; the runner's stdout in turn carries its own frames (see
`runner.py`). `Exchange` takes raw bytes as they arrive and keeps what the run
produced, holding every buffer to a cap, so a hostile stream costs bounded
memory. It never touches sockets, Docker or the clock.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from .runner import FAULT, RESULT, STDERR, STDOUT, TAR, FrameDecoder
from .spec import JobSpec, WorkspaceEntry

_DOCKER_HEADER = struct.Struct(">BxxxI")
_DOCKER_STDOUT = 1
_DOCKER_STDERR = 2
RUNNER_LOG_CAP = 16 * 1024
# tar headers and padding on top of the files themselves
TAR_OVERHEAD = 1024 * 1024


class StreamReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    bytes: int
    sha256: str


class RunnerReport(BaseModel):
    """The runner's last frame; validated because the user's code can forge it."""

    model_config = ConfigDict(frozen=True)

    exit_code: int
    signal: int | None = None
    timed_out: bool
    oom_kills: int = 0
    duration_ms: int
    cpu_seconds: float | None = None
    max_rss_bytes: int | None = None
    stdout: StreamReport
    stderr: StreamReport
    workspace: list[WorkspaceEntry]
    listing_complete: bool = True
    skipped: list[str] = []


class Exchange:
    """Everything received from one runner, capped."""

    def __init__(self, job: JobSpec) -> None:
        self._stream_cap = job.stream_cap_bytes
        self._tar_cap = job.artifact_caps.max_total_bytes + TAR_OVERHEAD
        self._pending = bytearray()
        self._frames = FrameDecoder()
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.tar = bytearray()
        self.runner_log = bytearray()
        self.report: RunnerReport | None = None
        self.fault: str | None = None
        self.overflow: str | None = None

    @property
    def done(self) -> bool:
        return self.report is not None or self.fault is not None or self.overflow is not None

    def feed(self, data: bytes) -> None:
        self._pending += data
        while len(self._pending) >= _DOCKER_HEADER.size and not self.done:
            stream, length = _DOCKER_HEADER.unpack_from(self._pending)
            end = _DOCKER_HEADER.size + length
            if len(self._pending) < end:
                return
            payload = bytes(self._pending[_DOCKER_HEADER.size : end])
            del self._pending[:end]
            if stream == _DOCKER_STDOUT:
                self._feed_frames(payload)
            elif stream == _DOCKER_STDERR:
                _append_capped(self.runner_log, payload, RUNNER_LOG_CAP)

    def _feed_frames(self, payload: bytes) -> None:
        try:
            frames = self._frames.feed(payload)
        except ValueError as exc:
            self.fault = f"runner stream is corrupt: {exc}"
            return
        for kind, body in frames:
            if kind == STDOUT:
                _append_capped(self.stdout, body, self._stream_cap)
            elif kind == STDERR:
                _append_capped(self.stderr, body, self._stream_cap)
            elif kind == TAR:
                if len(self.tar) + len(body) > self._tar_cap:
                    self.overflow = f"output files exceed {self._tar_cap} bytes"
                    return
                self.tar += body
            elif kind == RESULT:
                self.report = _parse_report(body)
                if self.report is None:
                    self.fault = "runner sent an unreadable result"
                return
            elif kind == FAULT:
                self.fault = _fault_text(body)
                return


def _append_capped(buffer: bytearray, data: bytes, cap: int) -> None:
    room = cap - len(buffer)
    if room > 0:
        buffer += data[:room]


def _parse_report(body: bytes) -> RunnerReport | None:
    try:
        return RunnerReport.model_validate_json(body)
    except ValidationError:
        return None


def _fault_text(body: bytes) -> str:
    try:
        parsed: Any = json.loads(body)
        return str(parsed["error"])[:500]
    except (ValueError, KeyError, TypeError):
        return "runner failed without a readable reason"
