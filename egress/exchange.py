"""One forwarded request, from its allowed head to its answer's end. Sans-IO.

The layer under `egress.conversation` for an inner request of a terminated tunnel or a
plaintext request the decision allowed: the vault's secret injected (`egress.admission`),
the upstream taken from the link or resolved and dialled, the request relayed within the
run's cap, the answer relayed back (`egress.upstream`), and one retry on a fresh upstream
when a kept-alive one turned out closed. It says what it needs next (`need`) and, once it
is over, how (`ending`): the conversation acts on that (the record, a refusal, the next
request or the connection's end). Not here: reading the sandbox's HTTP (the conversation
hands its body and end in), checking the resolved address, records, closing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import h11

from airlock.store import EgressVerdict

from .admission import inject_secret
from .legs import Leg, RunContext, count
from .link import UpstreamLink
from .scrub import Scrubber
from .steps import Action, LookupSecret, PoolKey, Resolve, SecretFound, SendUpstream
from .upstream import Answered, Broken, Upstream
from .upstream import Ending as Answer


@dataclass(frozen=True)
class Refused:
    """Nothing of an answer went back: the sandbox is answered `status`, and the
    connection closes."""

    status: int
    reason: str
    verdict: EgressVerdict = "deny"


@dataclass(frozen=True)
class Failed:
    """The answer began and cannot be finished: the connection closes."""

    reason: str


Ending = Refused | Failed | Answered


class Exchange:
    """One allowed request `leg`; `client` is the sandbox's side, which frames the answer,
    and `tunnel` the terminated tunnel it travels in, if any (its bytes count there too)."""

    def __init__(
        self,
        run: RunContext,
        leg: Leg,
        client: h11.Connection,
        link: UpstreamLink,
        tunnel: Leg | None,
    ) -> None:
        self.leg = leg
        self.need: Literal["client", "upstream", "wait"] = "wait"
        self.ending: Ending | None = None
        self._run, self._client, self._link, self._tunnel = run, client, link, tunnel
        self._upstream: Upstream | None = None

    def begin(self) -> list[Action]:
        """The request was allowed: look its secret up, or go upstream."""
        assert self.leg.decision is not None
        if self.leg.decision.inject is not None:
            return [LookupSecret(self.leg.decision.inject[2])]
        return self._upstream_for()

    def secret_found(self, found: SecretFound) -> list[Action]:
        denial = inject_secret(self._run, self.leg, found)
        if denial is not None:
            return self._end(Refused(denial.status, denial.reason))
        return self._upstream_for()

    def connected(self, *, reused: bool) -> list[Action]:
        """An upstream was dialled (or an idle one of the run reused) for this request."""
        self.leg.retried = self.leg.retried or not reused
        return self._send_head()

    def body(self, data: bytes) -> list[Action]:
        assert self._upstream is not None
        return self._out(self._upstream.body(data))

    def end_of_request(self) -> list[Action]:
        assert self._upstream is not None
        self.leg.request_done = True
        actions = self._out(self._upstream.end())
        if self.need == "client":
            self.need = "upstream"
        return actions

    def upstream_data(self, data: bytes) -> list[Action]:
        """Bytes of the answer, already within the run's cap."""
        assert self._upstream is not None
        actions, answer = self._upstream.receive(data, read=self.need == "upstream")
        return [*actions, *self._answered(answer)]

    def upstream_closed(self) -> list[Action]:
        """The upstream closed its connection (the conversation let the link go)."""
        leg, upstream = self.leg, self._upstream
        if upstream is None:
            return []
        if leg.status == 0 and not leg.retried and leg.bodyless:
            # A kept-alive upstream the server had closed meanwhile: one fresh dial, since
            # nothing of the request was taken and it carried no body.
            leg.retried = True
            count(self._run.ledger, leg, self._tunnel, out=-len(upstream.head))
            self.need = "wait"
            assert self._link.key is not None
            return [Resolve(leg.host, leg.port, self._link.key, fresh=True)]
        actions, answer = upstream.closed()
        return [*actions, *self._answered(answer)]

    def _upstream_for(self) -> list[Action]:
        leg = self.leg
        assert leg.decision is not None
        key: PoolKey = (leg.scheme, leg.host, leg.port, leg.decision.allow_private)
        if self._link.serves(key):
            return self._send_head()
        actions = self._link.aim(key)
        self.need = "wait"
        return [*actions, Resolve(leg.host, leg.port, key)]

    def _send_head(self) -> list[Action]:
        self._link.taken()
        leg = self.leg
        upstream = Upstream(leg, self._client, Scrubber(self._run.ledger.injected(leg.host)))
        self._upstream = upstream
        if leg.request_done:
            # A retry on a fresh upstream: the request (bodyless) was read already.
            upstream.end()
            self.need = "upstream"
        else:
            self.need = "client"
        return self._out(upstream.head)

    def _out(self, data: bytes) -> list[Action]:
        """Count `data` against the run's upstream byte cap, then send it."""
        ledger = self._run.ledger
        if len(data) > ledger.out_room():
            return self._end(
                Refused(
                    413,
                    f"the run's cap of {ledger.limits.max_request_bytes} bytes sent upstream "
                    "is reached; no more may be sent in this run",
                )
            )
        count(ledger, self.leg, self._tunnel, out=len(data))
        return [SendUpstream(data)]

    def _answered(self, answer: Answer | None) -> list[Action]:
        if answer is None:
            return []
        if isinstance(answer, Broken):
            if self.leg.status == 0:
                return self._end(Refused(502, answer.reason, "error"))
            return self._end(Failed(answer.reason))
        return self._end(answer)

    def _end(self, ending: Ending) -> list[Action]:
        self.ending = ending
        return []
