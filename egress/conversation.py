"""One connection to a run's proxy as a conversation: events in, actions out, no I/O.

Belongs here: the sandbox's side of a connection and what happens to it as a whole. h11
turns the sandbox's bytes into HTTP events; this module turns them, with the answers to
the actions it asked for (a secret looked up, a name resolved, an upstream dialled, TLS
started), into actions for `egress.proxy`'s loop to perform: send these bytes, start TLS
as this host, resolve, dial this checked address, pool or close the upstream, keep this
record, close. Every record is made here (`record_of`), exactly one per request and one
per tunnel. Does not belong here: sockets, TLS objects, DNS, the vault, the clock's sleep,
logging; the events and actions themselves (`egress.steps`) and how heads are rewritten
(`egress.heads`). Tests replay transcripts through `Conversation.handle` without sockets.

A conversation is one of: a CONNECT that becomes a terminated tunnel (its inner
requests are exchanges, one at a time, kept alive), a CONNECT that becomes a
passthrough tunnel (spliced bytes, counted), or one plaintext absolute-form request
(answered with `Connection: close`). Every refusal closes the connection.

The layers under it, each a sans-IO state machine with its own tests
(tests/rooms/egress/test_egress_layers.py): `egress.admission` (every decision about a
leg: its head, its secret, its address, whether it may go on), `egress.exchange` (one
allowed request, from its secret to its answer's end), `egress.upstream` (that request's
upstream HTTP), `egress.link` (the one upstream connection and the pool), `egress.splice`
(an opaque tunnel's counted bytes); `egress.legs` holds the run's context and a leg.
"""

from __future__ import annotations

import h11

from airlock.store import EgressVerdict

from .admission import admit, choose_address, cut_reason
from .decision import (
    Decision,
)
from .exchange import Exchange, Failed, Refused
from .heads import (
    MAX_HEAD_BYTES,
    PROXY_NAME,
    refusal,
)
from .legs import Leg, RunContext, count, new_leg, record_of
from .link import UpstreamLink
from .splice import Splice
from .steps import (
    Action,
    ClientClosed,
    ClientData,
    Close,
    CloseUpstream,
    Dial,
    Dialed,
    DialFailed,
    Event,
    IPAddress,
    Need,
    Resolve,
    Resolved,
    ResolveFailed,
    Reused,
    SecretFound,
    SendClient,
    StartTLS,
    TLSFailed,
    TLSStarted,
    UpstreamClosed,
    UpstreamData,
)
from .upstream import Answered

__all__ = ["Conversation", "RunContext"]


class Conversation:
    """One connection of a sandbox to its run's proxy; see the module docstring."""

    def __init__(self, run: RunContext) -> None:
        self._run = run
        self._ledger = run.ledger
        self._client = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.need: Need = "client"
        self._token: str | None = None
        self._tunnel: Leg | None = None
        self._sni: str | None = None
        self._exchange: Leg | None = None
        self._http: Exchange | None = None
        """The allowed request in progress (`_exchange` is its leg)."""
        self._splice: Splice | None = None
        self._link = UpstreamLink()
        self._counted = False

    # ---- the loop's entry points ----

    def start(self) -> list[Action]:
        """The connection was accepted: refuse it at once when the run holds too many."""
        limits = self._ledger.limits
        if self._ledger.connections >= limits.max_connections:
            leg = new_leg(self._run, "-", "-", 0, "-")
            leg.past_limit = self._ledger.admit() >= limits.max_requests
            return self._refuse(
                429,
                f"this run already holds {limits.max_connections} connections to the proxy, "
                "its limit; close one before opening another",
                leg=leg,
            )
        self._ledger.connections += 1
        self._counted = True
        return []

    def handle(self, event: Event) -> list[Action]:
        if self.need == "done":
            return []
        if isinstance(event, ClientData):
            return self._client_data(event.data)
        if isinstance(event, ClientClosed):
            return self._client_closed()
        if isinstance(event, UpstreamData):
            return self._upstream_data(event.data)
        if isinstance(event, UpstreamClosed):
            return self._upstream_closed()
        if isinstance(event, TLSStarted):
            return self._tls_started(event.sni)
        if isinstance(event, TLSFailed):
            return self._close(
                f"the TLS handshake with the sandbox failed ({event.reason})", "error"
            )
        if isinstance(event, SecretFound):
            return self._secret_found(event)
        if isinstance(event, Reused):
            return self._connected(event.address, reused=True)
        if isinstance(event, Resolved):
            return self._resolved(event.addresses)
        if isinstance(event, ResolveFailed):
            return self._refuse(502, event.reason, "error")
        if isinstance(event, Dialed):
            return self._connected(event.address, reused=False)
        if isinstance(event, DialFailed):
            return self._refuse(502, event.reason, "error")
        return self._close(event.reason, event.verdict)

    def still_allowed(self) -> str | None:
        """Why what this connection is carrying right now may no longer flow, or None.

        Checked by the loop while data flows: a passthrough tunnel, or an exchange in
        flight, whose grant was revoked or expired (or whose run token was) is cut at
        once. An idle terminated tunnel is not cut: its next request is decided anew.
        """
        active = self._tunnel if self.need == "splice" else self._exchange
        return cut_reason(self._run, active, self._token)

    # ---- reading the sandbox ----

    def _client_data(self, data: bytes) -> list[Action]:
        if self._splice is not None:
            return self._carry(data, outbound=True)
        self._client.receive_data(data)
        return self._pump()

    def _client_closed(self) -> list[Action]:
        if self._splice is not None:
            return self._close("the sandbox closed the tunnel", "allow")
        exchange = self._exchange
        if exchange is not None and not exchange.recorded:
            return self._close("the sandbox closed the connection mid-request", "error")
        return self._close("the sandbox closed the connection", "allow")

    def _pump(self) -> list[Action]:
        actions: list[Action] = []
        while self.need == "client":
            try:
                event = self._client.next_event()
            except h11.RemoteProtocolError as exc:
                actions += self._refuse(exc.error_status_hint, f"malformed HTTP ({exc})")
                break
            if event is h11.NEED_DATA:
                break
            if isinstance(event, h11.Request):
                actions += self._request(event)
            elif isinstance(event, h11.Data):
                actions += self._step(self._current().body(event.data))
            elif isinstance(event, h11.EndOfMessage):
                actions += self._step(self._current().end_of_request())
            elif isinstance(event, h11.ConnectionClosed):
                actions += self._client_closed()
            else:
                # PAUSED: the sandbox sent more before its last request was answered.
                break
        return actions

    def _request(self, request: h11.Request) -> list[Action]:
        admission = admit(self._run, request, tunnel=self._tunnel, token=self._token, sni=self._sni)
        leg, self._token = admission.leg, admission.token
        self._exchange, self._http = leg, None
        if admission.refused is not None:
            return self._refuse(*admission.refused)
        decision = leg.decision
        assert decision is not None
        if not decision.allow:
            return self._deny(decision)
        if self._tunnel is None and leg.method == "CONNECT":
            return self._tunnel_allowed(leg)
        self._http = Exchange(self._run, leg, self._client, self._link, self._tunnel)
        return self._step(self._http.begin(), pump=True)

    def _tunnel_allowed(self, leg: Leg) -> list[Action]:
        """A CONNECT was allowed: dial for an opaque tunnel, or terminate TLS for one."""
        leg.status = 200
        self.need = "wait"
        if leg.passthrough:
            return [Resolve(leg.host, leg.port, None)]
        self._tunnel, self._exchange = leg, None
        opened, leftover = self._opened()
        return [opened, StartTLS(leg.host, leftover)]

    def _opened(self) -> tuple[SendClient, bytes]:
        """The CONNECT's 200, and what the sandbox sent past its head already."""
        opened = self._client.send(
            h11.Response(status_code=200, headers=[("via", f"1.1 {PROXY_NAME}")])
        )
        return SendClient(opened or b""), bytes(self._client.trailing_data[0])

    def _tls_started(self, sni: str | None) -> list[Action]:
        self._sni = sni
        self._client = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.need = "client"
        return []

    def _secret_found(self, found: SecretFound) -> list[Action]:
        return self._step(self._current().secret_found(found), pump=True)

    # ---- the upstream ----

    def _resolved(self, addresses: tuple[IPAddress, ...]) -> list[Action]:
        leg = self._exchange
        assert leg is not None
        chosen = choose_address(self._run, leg, addresses)
        if not isinstance(chosen, str):
            return self._deny(chosen)
        return [Dial(chosen, leg.host, leg.port, tls=leg.scheme == "https" and not leg.passthrough)]

    def _connected(self, address: str, *, reused: bool) -> list[Action]:
        leg = self._exchange
        assert leg is not None
        leg.address = address
        self._link.opened()
        if leg.passthrough:
            return self._open_splice(leg)
        return self._step(self._current().connected(reused=reused), pump=True)

    def _current(self) -> Exchange:
        assert self._http is not None
        return self._http

    def _step(self, actions: list[Action], *, pump: bool = False) -> list[Action]:
        """After the exchange took a step: act on how it ended, or on what it needs next
        (with `pump`, reading on what the sandbox already sent, such as a request body)."""
        http = self._current()
        ending = http.ending
        if ending is None:
            self.need = http.need
            return [*actions, *self._pump()] if pump and self.need == "client" else actions
        if isinstance(ending, Refused):
            return [*actions, *self._refuse(ending.status, ending.reason, ending.verdict)]
        if isinstance(ending, Failed):
            return [*actions, *self._close(ending.reason, "error", status=502)]
        return [*actions, *self._answered(http.leg, ending)]

    def _upstream_data(self, data: bytes) -> list[Action]:
        if self._splice is not None:
            return self._carry(data, outbound=False)
        http = self._current()
        room = self._ledger.in_room()
        count(self._ledger, http.leg, self._tunnel, back=min(len(data), room))
        actions = self._step(http.upstream_data(data[:room]))
        if len(data) > room:
            # What fits under the run's cap was passed on; the rest never is.
            actions += self._close(
                f"the run's cap of {self._ledger.limits.max_response_bytes} bytes received "
                "from upstream is reached; the response was cut",
                "deny",
                status=502,
            )
        return actions

    def _answered(self, leg: Leg, answered: Answered) -> list[Action]:
        assert leg.decision is not None
        actions: list[Action] = [
            record_of(self._run, leg, leg.status, "allow", leg.decision.reason)
        ]
        actions += self._link.answered(reusable=answered.reusable)
        self._exchange = self._http = None
        if self._tunnel is None:
            return [*actions, *self._close("answered", "allow")]
        if self._client.our_state is h11.DONE and self._client.their_state is h11.DONE:
            self._client.start_next_cycle()
            self.need = "client"
            return [*actions, *self._pump()]
        return [
            *actions,
            *self._close("the sandbox's connection cannot carry more requests", "allow"),
        ]

    def _upstream_closed(self) -> list[Action]:
        if self._splice is not None:
            return self._close("the upstream closed the tunnel", "allow")
        self._link.lost()
        closed: list[Action] = [CloseUpstream()]
        if self._http is None:
            return closed
        return [*closed, *self._step(self._http.upstream_closed())]

    # ---- passthrough ----

    def _open_splice(self, leg: Leg) -> list[Action]:
        self._tunnel, self._exchange = leg, None
        self._splice = Splice(self._ledger, leg)
        opened, leftover = self._opened()
        self.need = "splice"
        actions: list[Action] = [opened]
        if leftover:
            actions += self._carry(leftover, outbound=True)
        return actions

    def _carry(self, data: bytes, *, outbound: bool) -> list[Action]:
        assert self._splice is not None
        actions, cut = self._splice.carry(data, outbound=outbound)
        return actions if cut is None else [*actions, *self._close(cut, "deny")]

    # ---- endings: the one place records are made ----

    def _deny(self, decision: Decision) -> list[Action]:
        """Refuse with a denial made in `egress.decision`, which names the capability."""
        return self._refuse(decision.status, decision.reason)

    def _refuse(
        self,
        status: int,
        reason: str,
        verdict: EgressVerdict = "deny",
        *,
        leg: Leg | None = None,
    ) -> list[Action]:
        """Answer the request in progress with `status` and close the connection."""
        actions: list[Action] = []
        if self._client.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            actions.append(SendClient(refusal(self._client, status, reason)))
        subject = leg or self._exchange
        if subject is None:
            before = self._ledger.admit()
            subject = new_leg(self._run, "-", "-", 0, "-")
            subject.past_limit = before >= self._ledger.limits.max_requests
        if not subject.recorded:
            actions.append(record_of(self._run, subject, status, verdict, reason))
        return [*actions, *self._close("after a refused request", "allow")]

    def _close(
        self, reason: str, verdict: EgressVerdict, *, status: int | None = None
    ) -> list[Action]:
        """End the conversation: record what is unrecorded, release or close, close."""
        if self.need == "done":
            return []
        self.need = "done"
        actions: list[Action] = []
        leg = self._exchange
        if leg is not None and not leg.recorded:
            code = status if status is not None else (leg.status or 502)
            actions.append(
                record_of(self._run, leg, code, verdict if verdict != "allow" else "error", reason)
            )
        tunnel = self._tunnel
        if tunnel is not None and not tunnel.recorded:
            assert tunnel.decision is not None
            kind = "opaque tunnel" if tunnel.passthrough else "tunnel"
            actions.append(
                record_of(
                    self._run,
                    tunnel,
                    200,
                    verdict,
                    f"{tunnel.decision.reason}; the {kind} ended: {reason}",
                )
            )
        actions += self._link.end(poolable=self._splice is None)
        if self._counted:
            self._ledger.connections -= 1
            self._counted = False
        actions.append(Close())
        return actions
