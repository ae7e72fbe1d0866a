"""Sans-IO reading of one container's attach stream.

Docker multiplexes the runner's stdout and stderr into one stream of 8-byte
headed chunks; the runner's stdout in turn carries its own frames (see
`inside/wire.py`). `Exchange` takes raw bytes as they arrive and keeps what the run
produced, holding every buffer to a cap, so a hostile stream costs bounded
memory. No single frame limits what a run can report: the listing and the notes
arrive in as many frames as they need, and the RESULT says how many to expect.
The outgoing files' tar is not kept here: its bytes wait in `take_tar` only until the
caller hands them on (to `intake.Intake`, which writes each file to a draft blob), so
what a run leaves costs the server a frame or so of memory, whatever its size.
It never touches sockets, Docker, files or the clock.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from .inside.wire import ENTRIES, FAULT, NOTES, RESULT, STDERR, STDOUT, TAR, FrameDecoder
from .spec import JobSpec, WorkspaceEntry

_DOCKER_HEADER = struct.Struct(">BxxxI")
_DOCKER_STDOUT = 1
_DOCKER_STDERR = 2
RUNNER_LOG_CAP = 16 * 1024
# tar headers and padding on top of the files themselves
TAR_OVERHEAD = 1024 * 1024
# Notes kept from the runner, and the longest kept note; the rest are counted.
MAX_NOTES = 60
MAX_NOTE_CHARS = 1000


class StreamReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    bytes: int
    sha256: str


class ListingCounts(BaseModel):
    """How many ENTRIES and NOTES items the runner sent before its RESULT."""

    model_config = ConfigDict(frozen=True)

    entries: int
    notes: int


class RunnerReport(BaseModel):
    """The runner's last frame, validated: the host assumes nothing of the container."""

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
    listing: ListingCounts | None
    """None when the runner could not stop the code and did not copy /workspace out."""
    listing_complete: bool = True
    """False when the runner left entries of /workspace out of its listing (a cap, an
    unreadable directory): nothing absent from it may be taken as deleted."""
    kept: bool = False
    """The box waits for another job on the same stream (a kept browser's next step)."""

    @property
    def listing_sent(self) -> bool:
        return self.listing is not None


class Exchange:
    """Everything received from one runner, capped."""

    def __init__(self, job: JobSpec) -> None:
        self._stream_cap = job.stream_cap_bytes
        self._tar_cap = job.artifact_caps.max_total_bytes + TAR_OVERHEAD
        self._pending = bytearray()
        self._frames = FrameDecoder()
        self.stdout = bytearray()
        self.stderr = bytearray()
        self._tar = bytearray()
        self.tar_bytes = 0
        self._max_entries = job.artifact_caps.max_entries
        self.entries: list[WorkspaceEntry] = []
        self.notes: list[str] = []
        self._notes_received = 0
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
                if self.tar_bytes + len(body) > self._tar_cap:
                    self.overflow = (
                        f"output files exceed {self._tar_cap} bytes (the policy's [files] "
                        "max_artifact_total_bytes and room for the archive's headers)"
                    )
                    return
                self._tar += body
                self.tar_bytes += len(body)
            elif kind == ENTRIES:
                if not self._take_entries(body):
                    return
            elif kind == NOTES:
                if not self._take_notes(body):
                    return
            elif kind == RESULT:
                report = _parse_report(body)
                if report is None:
                    self.fault = "runner sent an unreadable result"
                elif report.listing is not None and (
                    report.listing.entries != len(self.entries)
                    or report.listing.notes != self._notes_received
                ):
                    self.fault = "runner's listing does not match its result"
                else:
                    self.report = report
                return
            elif kind == FAULT:
                self.fault = _fault_text(body)
                return

    def take_tar(self) -> bytes:
        """The outgoing files' tar bytes received since the last call (they are not kept)."""
        taken = bytes(self._tar)
        self._tar.clear()
        return taken

    def _take_entries(self, body: bytes) -> bool:
        try:
            batch = _ENTRIES.validate_json(body)
        except ValidationError:
            self.fault = "runner sent an unreadable listing"
            return False
        if len(self.entries) + len(batch) > self._max_entries:
            self.fault = f"runner listed more than {self._max_entries} entries"
            return False
        self.entries.extend(batch)
        return True

    def _take_notes(self, body: bytes) -> bool:
        try:
            batch = _NOTES.validate_json(body)
        except ValidationError:
            self.fault = "runner sent unreadable notes"
            return False
        self._notes_received += len(batch)
        room = MAX_NOTES - len(self.notes)
        self.notes.extend(note[:MAX_NOTE_CHARS] for note in batch[: max(room, 0)])
        return True

    @property
    def notes_dropped(self) -> int:
        """Notes received beyond MAX_NOTES."""
        return self._notes_received - len(self.notes)


_ENTRIES = TypeAdapter(list[WorkspaceEntry])
_NOTES = TypeAdapter(list[str])


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
