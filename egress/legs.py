"""What a conversation knows about its run, one leg of it, and the one record a leg makes.

Belongs here: `RunContext` (what a conversation may consult: all synchronous, none of it
I/O), `Leg` (one request or one tunnel, from its head to its one record), counting a leg's
bytes against the run's totals, and building its `EgressRecord`. Not here: deciding
(`egress.decision`), the HTTP of either side (`egress.conversation`, `egress.upstream`),
or when a record is made (the conversation makes exactly one per leg).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import h11

from airlock.broker import RunClaims
from airlock.store import EgressRecord, EgressVerdict

from .decision import Decision, RequestFacts, Rule
from .ledger import RunLedger
from .steps import IPAddress, Record


@dataclass(frozen=True)
class RunContext:
    """What a conversation may consult about its run; all synchronous, none of it I/O."""

    ledger: RunLedger
    authorize: Callable[[str], RunClaims | None]
    rules: Callable[[RunClaims], Sequence[Rule]]
    offers: Sequence[Rule] = ()
    live: Callable[[], bool] = lambda: True
    own_addresses: Sequence[IPAddress] = ()
    wall_clock: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic


@dataclass
class Leg:
    """One request or one tunnel, from its head to its one record."""

    method: str
    host: str
    port: int
    path: str
    started: float
    past_limit: bool
    scheme: Literal["http", "https"] = "https"
    facts: RequestFacts | None = None
    decision: Decision | None = None
    status: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    address: str | None = None
    injected: tuple[str, ...] = ()
    recorded: bool = False
    # Exchanges only:
    request: h11.Request | None = None
    target: str = "/"
    header: tuple[str, str] | None = None
    bodyless: bool = True
    request_done: bool = False
    retried: bool = False

    @property
    def passthrough(self) -> bool:
        """Whether this leg was allowed as an opaque (spliced) tunnel."""
        return self.decision is not None and self.decision.passthrough


def new_leg(
    run: RunContext,
    method: str,
    host: str,
    port: int,
    path: str,
    started: float | None = None,
    past_limit: bool = False,
) -> Leg:
    return Leg(
        method=method,
        host=host,
        port=port,
        path=path,
        started=run.monotonic() if started is None else started,
        past_limit=past_limit,
    )


def count(ledger: RunLedger, leg: Leg, tunnel: Leg | None, *, out: int = 0, back: int = 0) -> None:
    """Add bytes to the run's totals and the leg's, and to its tunnel's when it is inside one."""
    ledger.bytes_out += out
    ledger.bytes_in += back
    leg.bytes_out += out
    leg.bytes_in += back
    if tunnel is not None and leg is not tunnel:
        tunnel.bytes_out += out
        tunnel.bytes_in += back


def record_of(
    run: RunContext, leg: Leg, status: int, verdict: EgressVerdict, reason: str
) -> Record:
    """The leg's one record (and the leg marked recorded)."""
    leg.recorded = True
    identity = run.ledger.identity
    return Record(
        EgressRecord(
            time=run.wall_clock(),
            tenant=identity.tenant,
            session_id=identity.session_id,
            run_id=identity.run_id,
            capability=leg.decision.rule_id if leg.decision else None,
            method=leg.method,
            host=leg.host,
            port=leg.port,
            path=leg.path,
            status=status,
            bytes_in=leg.bytes_in,
            bytes_out=leg.bytes_out,
            duration_ms=int((run.monotonic() - leg.started) * 1000),
            decision=verdict,
            reason=reason,
            resolved_ip=leg.address,
            injected=leg.injected,
        ),
        past_limit=leg.past_limit,
    )
