"""A passthrough tunnel's bytes: carried as they are, counted and capped, never read.

The layer under `egress.conversation` for a CONNECT a rule allows as an opaque tunnel
(`passthrough`): each piece goes on within the run's byte caps and counts on the tunnel's
leg; a piece past a cap is cut where the cap falls, and the tunnel with it. Not here:
opening the tunnel, its record, or closing the connection (the conversation's).
"""

from __future__ import annotations

from .ledger import RunLedger
from .legs import Leg, count
from .steps import Action, SendClient, SendUpstream


class Splice:
    """The bytes of one opaque tunnel, whose leg is `tunnel`."""

    def __init__(self, ledger: RunLedger, tunnel: Leg) -> None:
        self._ledger = ledger
        self._tunnel = tunnel

    def carry(self, data: bytes, *, outbound: bool) -> tuple[list[Action], str | None]:
        """What to send of `data` (from the sandbox when `outbound`), and why the tunnel
        must be cut when a cap stops part of it (else None)."""
        room = self._ledger.out_room() if outbound else self._ledger.in_room()
        part = data[:room]
        actions: list[Action] = []
        if part:
            if outbound:
                count(self._ledger, self._tunnel, None, out=len(part))
                actions.append(SendUpstream(part))
            else:
                count(self._ledger, self._tunnel, None, back=len(part))
                actions.append(SendClient(part))
        if len(data) <= room:
            return actions, None
        limits = self._ledger.limits
        which = "sent upstream" if outbound else "received from upstream"
        cap = limits.max_request_bytes if outbound else limits.max_response_bytes
        return actions, f"the run's cap of {cap} bytes {which} is reached; the tunnel was cut"
