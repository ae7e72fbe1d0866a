"""The per-run egress proxy: the only way out of a sandbox, default deny, logged.

`Egress.open` gives a run its own unix socket, CA and run token; `RunProxy`
decides every request (`decision.decide`), guards against SSRF
(`addresses`), terminates TLS (`tls`) and injects secrets only on the way out.
"""

from .decision import Decision, RequestFacts, Rule, decide
from .proxy import SOCKET_NAME, RunProxy
from .runs import Egress, EgressPlan, RunEgress

__all__ = [
    "SOCKET_NAME",
    "Decision",
    "Egress",
    "EgressPlan",
    "RequestFacts",
    "Rule",
    "RunEgress",
    "RunProxy",
    "decide",
]
