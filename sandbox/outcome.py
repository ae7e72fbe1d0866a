"""What a run's report becomes: its `JobOutcome`, from what the host read and measured.

Belongs here: putting together the outcome of a job whose runner spoke the wire protocol
(`inside/wire.py`): the status (from the runner's report, the OOM killer's verdict and
whether the host's deadline struck), the streams with their full sizes and hashes, the
kept files (only drafts the listing names, and none at all when the run overflowed a cap
or its processes could not be stopped), the listing, and the notes, each list capped.
Does not belong here: reading the stream (`exchange.py`), writing drafts (`intake.py`),
or anything of an engine. Pure but for matching drafts, which touches their files: call
`job_outcome` in a worker thread.
"""

from __future__ import annotations

import hashlib

from .exchange import Exchange, RunnerReport
from .file_transfer import read_listing
from .intake import Intake
from .spec import JobOutcome, JobSpec, OutputFile, Status, StreamCapture, Usage, WorkspaceEntry

MAX_LISTED_NOTES = 100
"""The most notes each source (the listing, the intake) adds; a last note counts the rest."""


def job_outcome(
    job: JobSpec,
    exchange: Exchange,
    intake: Intake,
    usage: Usage,
    *,
    oom_killed: bool,
    host_timeout: bool,
    elapsed_ms: int,
) -> JobOutcome:
    """The outcome of `job`, once its exchange is over; `usage` is the host's own figures
    (the runner's fill in only what the host could not read)."""
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
        notes.extend(_at_most(listing_notes, MAX_LISTED_NOTES))
        notes.extend(_at_most(intake.notes, MAX_LISTED_NOTES))
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
