"""What one run has used of its egress allowance, and the run's records.

Belongs here: the per-run totals every connection of a run draws on (requests and
refusals counted alike, bytes each way, connections open), the records of the run with
their cap, and the values of the secrets injected so far, by host (so that host's
responses can be scrubbed of them). Does not belong here: deciding (`egress.decision`),
HTTP, sockets or the clock. One ledger is shared by every conversation of one run and by
nothing else.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from airlock.policies import EgressLimits
from airlock.store import EgressRecord

RECORDS_PAST_LIMIT = 10
"""Records kept one by one after the request limit is reached; the rest are summarized."""


@dataclass(frozen=True)
class RunIdentity:
    tenant: str
    session_id: str
    run_id: str


class RunLedger:
    """The run's counters, its byte totals and its records.

    `records` is the list the run's result and the database receive. Every request
    admitted within `max_requests` keeps its record; of those admitted past it (all
    refused), only the first `RECORDS_PAST_LIMIT` are kept one by one, the rest are
    tallied and `close` appends one summary record for them. So a run holds at most
    `max_requests + RECORDS_PAST_LIMIT + 1` records, however hard it floods.
    """

    def __init__(
        self, identity: RunIdentity, limits: EgressLimits, records: list[EgressRecord]
    ) -> None:
        self.identity = identity
        self.limits = limits
        self.records = records
        self.requests = 0
        self.bytes_out = 0
        self.bytes_in = 0
        self.connections = 0
        self._past_limit_kept = 0
        self._overflow = 0
        self._secrets: dict[str, list[str]] = {}

    def __repr__(self) -> str:
        # Never the injected values.
        return f"RunLedger(run={self.identity.run_id!r}, requests={self.requests})"

    @property
    def exhausted(self) -> bool:
        return self.requests >= self.limits.max_requests

    def admit(self) -> int:
        """Count one request, CONNECT or refusal; return how many came before it."""
        before = self.requests
        self.requests += 1
        return before

    def out_room(self) -> int:
        """Bytes the run may still send upstream."""
        return max(0, self.limits.max_request_bytes - self.bytes_out)

    def in_room(self) -> int:
        """Bytes the run may still receive from upstream."""
        return max(0, self.limits.max_response_bytes - self.bytes_in)

    def note_injected(self, value: str, host: str) -> None:
        sent = self._secrets.setdefault(host, [])
        if value not in sent:
            sent.append(value)

    def injected(self, host: str) -> tuple[str, ...]:
        """The secret values this run has sent to `host` (for scrubbing; never logged).

        Only a host that received a value can hand it back: the sandbox never holds it.
        """
        return tuple(self._secrets.get(host, ()))

    def keep(self, record: EgressRecord, *, past_limit: bool) -> None:
        """Keep `record`; one of a request admitted past the limit may only be counted."""
        if past_limit:
            if self._past_limit_kept >= RECORDS_PAST_LIMIT:
                self._overflow += 1
                return
            self._past_limit_kept += 1
        self.records.append(record)

    def close(self) -> None:
        """Append the summary of the records not kept one by one, if any (the run's end)."""
        if not self._overflow:
            return
        self.records.append(
            EgressRecord(
                time=time.time(),
                tenant=self.identity.tenant,
                session_id=self.identity.session_id,
                run_id=self.identity.run_id,
                capability=None,
                method="-",
                host="-",
                port=0,
                path="-",
                status=429,
                bytes_in=0,
                bytes_out=0,
                duration_ms=0,
                decision="deny",
                reason=(
                    f"{self._overflow} more requests past the run's limit of "
                    f"{self.limits.max_requests} were refused and are summarized here, "
                    "not recorded one by one"
                ),
            )
        )
        self._overflow = 0
