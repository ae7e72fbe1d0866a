"""The per-run egress proxy: the only way out of a sandbox, default deny, logged.

`Egress.open` gives a run its own unix socket, CA and run token; `RunProxy.serve`
listens in a given directory and drives one `Conversation` per connection (the
sans-IO core: it decides every request with `decision.decide`, guards against SSRF
with `addresses`, injects secrets only on the way out and scrubs them from answers),
drawing on the run's `RunLedger` (limits, totals, records).

May import broker, policies, store and the base modules, never sandbox, tools or server,
and neither docker nor the MCP SDK (pyproject's import contracts, checked by
`lint-imports`).
"""

from __future__ import annotations

from airlock.rooms import only_as_airlock

only_as_airlock(__name__)

from .conversation import Conversation, RunContext
from .decision import Decision, RequestFacts, Rule, decide
from .ledger import RunIdentity, RunLedger
from .proxy import MAX_SOCKET_PATH, SOCKET_NAME, RunProxy
from .runs import Egress, EgressPlan, RunEgress, SecretUse

__all__ = [
    "MAX_SOCKET_PATH",
    "SOCKET_NAME",
    "Conversation",
    "Decision",
    "Egress",
    "EgressPlan",
    "RequestFacts",
    "Rule",
    "RunContext",
    "RunEgress",
    "RunIdentity",
    "RunLedger",
    "RunProxy",
    "SecretUse",
    "decide",
]
