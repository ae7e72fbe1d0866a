"""What happened, told once: a finished run and a capability decision.

The tool handlers emit an event here; `Events` writes its one log line and hands it to
the listeners the server subscribed (metrics). This is the one place that reads a run's
egress records for logs and metrics, so nothing else logs per request. Events carry ids,
names, counts and our own reasons: never a token, a secret, code or sandbox output.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from airlock.store import EgressRecord, RunRecord

log = logging.getLogger(__name__)
runs_log = logging.getLogger("airlock.runs")
capabilities_log = logging.getLogger("airlock.capabilities")

CapabilityOutcome = Literal["granted", "denied", "pending"]


@dataclass(frozen=True)
class RunFinished:
    """A run's record as finished, the runtime it ran on and its egress decisions."""

    run: RunRecord
    runtime: str
    egress: Sequence[EgressRecord]

    def egress_count(self, decision: str) -> int:
        return sum(1 for r in self.egress if r.decision == decision)


@dataclass(frozen=True)
class CapabilityDecided:
    """The answer to one request_capability (or an operator's approval decision)."""

    tenant: str
    session_id: str
    capability: str
    outcome: CapabilityOutcome
    approved_by: str | None = None
    capability_id: str | None = None
    approval_id: str | None = None
    reason: str | None = None
    """Airlock's own reason for a denial (never the agent's free text)."""


Event = RunFinished | CapabilityDecided
Listener = Callable[[Event], None]


class Events:
    """Logs each event as one line and passes it to every listener."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def emit(self, event: Event) -> None:
        if isinstance(event, RunFinished):
            _log_run(event)
        else:
            _log_capability(event)
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                # A broken listener (metrics) must never fail the run it reports on.
                log.exception("event listener failed")


def _log_run(event: RunFinished) -> None:
    run = event.run
    runs_log.info(
        "run finished",
        extra={
            "fields": {
                "run": run.id,
                "session": run.session_id,
                "tenant": run.tenant,
                "status": run.status,
                "exit_code": run.exit_code,
                "duration_ms": run.duration_ms,
                "runtime": event.runtime,
                "egress_allowed": event.egress_count("allow"),
                "egress_denied": event.egress_count("deny"),
                "egress_errors": event.egress_count("error"),
            }
        },
    )


def _log_capability(event: CapabilityDecided) -> None:
    capabilities_log.info(
        "capability decision",
        extra={
            "fields": {
                "tenant": event.tenant,
                "session": event.session_id,
                "capability": event.capability,
                "outcome": event.outcome,
                "approved_by": event.approved_by,
                "capability_id": event.capability_id,
                "approval": event.approval_id,
                "reason": event.reason,
            }
        },
    )
