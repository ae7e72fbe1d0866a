"""A run's record from `running` to its end: one owner, one end, on every path.

`recorded_run` creates the record and, however its block ends, keeps the run's egress
decisions, writes the run's end once and emits `RunFinished` once:

- the block completed: what the sandbox reported (`ran`);
- it failed after the sandbox reported (keeping what the run left, or its egress records,
  failed): `error`, with what failed;
- it failed before (the engine failed, the call was cancelled, its session ended):
  `killed`, with why.

The end is written shielded, so a cancelled call still records it. Nothing else writes a
run's end, except another server for the runs of one that died (`store/fleet/claims.py`,
`store/fleet/pg_claims.py`); the end is written only while the record is still open under this
server's claim, so when a peer got there first the call raises `RunEndedByFleet` instead of
answering a result the records do not hold.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import anyio

from airlock.errors import AirlockError, LimitExceeded, RunEndedByFleet, RunnerFailed
from airlock.sandbox import JobOutcome
from airlock.store import EgressRecord, RunRecord

from .context import Services
from .envelope import sanitize
from .events import RunFinished

log = logging.getLogger(__name__)

MAX_ERROR_CHARS = 1000


@dataclass
class OpenRun:
    """A run whose record is still `running`: what its end will be written from."""

    record: RunRecord
    egress: Sequence[EgressRecord] = field(default_factory=list)
    """The run's egress decisions, kept with its end (the proxy appends while it runs)."""
    outcome: JobOutcome | None = None

    def ran(self, outcome: JobOutcome) -> None:
        """The sandbox reported: the run ends with this outcome unless keeping it fails."""
        self.outcome = outcome

    def end(self, failure: BaseException | None, *, at: float) -> RunRecord:
        """The record as finished at `at`, after `failure` (None: the block completed)."""
        outcome = self.outcome
        if outcome is None:
            # A completed block always reports; this stays a guard, not a silent `ok`.
            why = "the sandbox reported no outcome"
            if failure is not None:
                why = _failure_text(failure)
            return self.record.model_copy(
                update={"status": "killed", "finished_at": at, "error": why}
            )
        ended = self.record.model_copy(
            update={
                "status": outcome.status,
                "finished_at": at,
                "duration_ms": outcome.duration_ms,
                "exit_code": outcome.exit_code,
                "cpu_seconds": outcome.usage.cpu_seconds,
                "peak_memory_bytes": outcome.usage.peak_memory_bytes,
                "stdout_bytes": outcome.stdout.total_bytes,
                "stdout_sha256": outcome.stdout.sha256,
                "stderr_bytes": outcome.stderr.total_bytes,
                "stderr_sha256": outcome.stderr.sha256,
            }
        )
        if failure is None:
            return ended
        # The code ran, but what it left could not be kept: the record says so.
        why = f"the run finished, but keeping what it left failed: {_failure_text(failure)}"
        return ended.model_copy(update={"status": "error", "error": why[:MAX_ERROR_CHARS]})


run_started: ContextVar[Callable[[str], Awaitable[None]] | None] = ContextVar(
    "run_started", default=None
)
"""Told each run's id once its record exists, in the call that started it: a call that
became an MCP task (`server/tasks`) keeps it, so the task's failure can name its run."""


@asynccontextmanager
async def recorded_run(services: Services, record: RunRecord) -> AsyncIterator[OpenRun]:
    """Create `record` (status `running`) and end it however the block ends; LimitExceeded
    when its tenant already has as many runs running as its policy allows, counted in the
    records, so on every server of a fleet (each server's leases count only its own)."""
    most = services.policy_for(record.tenant).tenants.max_concurrent_runs
    if not await services.db.create_run(record, max_running=most):
        raise LimitExceeded(
            f"{most} runs of this tenant are already running across the servers sharing "
            "these records; wait for one to finish (the operator sets [tenants] "
            "max_concurrent_runs)"
        )
    told = run_started.get()
    if told is not None:
        await told(record.id)
    run = OpenRun(record)
    try:
        yield run
    except BaseException as exc:
        await _close(services, run, exc)
        raise
    await _close(services, run, None)


async def _close(services: Services, run: OpenRun, failure: BaseException | None) -> None:
    with anyio.CancelScope(shield=True):
        lost: AirlockError | None = None
        try:
            await services.db.add_egress(run.egress)
        except AirlockError as exc:
            log.error("egress records of %s not kept: %s", run.record.id, exc)
            lost = exc
        ended = run.end(failure if failure is not None else lost, at=services.clock())
        try:
            await services.db.finish_run(ended)
        except RunEndedByFleet as fenced:
            # Another replica ended it while this one had lost its claim: the record's
            # end stands and this server's is discarded (the call says so).
            log.warning("run %s: %s", ended.id, fenced)
            stored = await services.db.get_run(ended.id)
            ended = stored if stored is not None else ended
            lost = fenced
        services.events.emit(RunFinished(ended, ended.runtime, tuple(run.egress)))
    if isinstance(lost, RunEndedByFleet) and (failure is None or isinstance(failure, Exception)):
        raise lost  # said instead of the call's own failure; a cancellation stays one
    if failure is None and lost is not None:
        raise lost


def _failure_text(exc: BaseException) -> str:
    """What the run record keeps; `airlock audit` envelopes it (it may quote the sandbox)."""
    if isinstance(exc, anyio.get_cancelled_exc_class()):
        return "the call was cancelled"
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, RunnerFailed) and exc.reported:
        text += f"; the runner reported: {sanitize(exc.reported)}"
    return text[:MAX_ERROR_CHARS]
