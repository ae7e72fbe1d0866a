"""One connection to a run's proxy as a conversation: events in, actions out, no I/O.

Belongs here: everything the proxy decides about a connection. h11 turns the sandbox's
and the upstream's bytes into HTTP events; this module turns them, with the answers to
the actions it asked for (a secret looked up, a name resolved, an upstream dialled, TLS
started), into actions for `egress.proxy`'s loop to perform: send these bytes, start TLS
as this host, resolve, dial this checked address, pool or close the upstream, keep this
record, close. The run's counters, byte totals and records live in the shared
`RunLedger`; every record is made in `_record`, exactly one per request and one per
tunnel. Does not belong here: sockets, TLS objects, DNS, the vault, the clock's sleep,
logging; the events and actions themselves (`egress.steps`) and how heads are rewritten
(`egress.heads`). Tests replay transcripts through `Conversation.handle` without sockets.

A conversation is one of: a CONNECT that becomes a terminated tunnel (its inner
requests are exchanges, one at a time, kept alive), a CONNECT that becomes a
passthrough tunnel (spliced bytes, counted), or one plaintext absolute-form request
(answered with `Connection: close`). Every refusal closes the connection.

This module is the sandbox's side and the router: the client's HTTP (requests, CONNECT,
the decision, the secret, the pool) and the endings. Two sans-IO layers sit under it, each
with its own state and tests: `egress.upstream` (one exchange's upstream HTTP: the request
framed out, the response parsed, scrubbed and framed back) and `egress.splice` (an opaque
tunnel's counted bytes); `egress.legs` holds the run's context, a leg and its record.
"""

from __future__ import annotations

import h11

from airlock.store import EgressVerdict

from .admission import admit, choose_address, cut_reason, inject_secret
from .decision import (
    Decision,
)
from .heads import (
    MAX_HEAD_BYTES,
    PROXY_NAME,
    refusal,
)
from .legs import Leg, RunContext, count, new_leg, record_of
from .link import UpstreamLink
from .scrub import Scrubber
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
    LookupSecret,
    Need,
    PoolKey,
    Resolve,
    Resolved,
    ResolveFailed,
    Reused,
    SecretFound,
    SendClient,
    SendUpstream,
    StartTLS,
    TLSFailed,
    TLSStarted,
    UpstreamClosed,
    UpstreamData,
)
from .upstream import Answered, Broken, Ending, Upstream

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
        self._upstream: Upstream | None = None
        """The upstream HTTP of the exchange in progress, once its head went out."""
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
                actions += self._body_out(event.data)
            elif isinstance(event, h11.EndOfMessage):
                actions += self._end_of_request()
            elif isinstance(event, h11.ConnectionClosed):
                actions += self._client_closed()
            else:
                # PAUSED: the sandbox sent more before its last request was answered.
                break
        return actions

    def _request(self, request: h11.Request) -> list[Action]:
        admission = admit(self._run, request, tunnel=self._tunnel, token=self._token, sni=self._sni)
        leg, self._token = admission.leg, admission.token
        self._exchange, self._upstream = leg, None
        if admission.refused is not None:
            return self._refuse(*admission.refused)
        decision = leg.decision
        assert decision is not None
        if not decision.allow:
            return self._deny(decision)
        if self._tunnel is None and leg.method == "CONNECT":
            return self._tunnel_allowed(leg)
        if decision.inject is not None:
            self.need = "wait"
            return [LookupSecret(decision.inject[2])]
        return self._upstream_for(leg)

    def _tunnel_allowed(self, leg: Leg) -> list[Action]:
        """A CONNECT was allowed: dial for an opaque tunnel, or terminate TLS for one."""
        leg.status = 200
        self.need = "wait"
        if leg.passthrough:
            return [Resolve(leg.host, leg.port, None)]
        self._tunnel, self._exchange = leg, None
        opened = self._client.send(
            h11.Response(status_code=200, headers=[("via", f"1.1 {PROXY_NAME}")])
        )
        leftover = bytes(self._client.trailing_data[0])
        return [SendClient(opened or b""), StartTLS(leg.host, leftover)]

    def _tls_started(self, sni: str | None) -> list[Action]:
        self._sni = sni
        self._client = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.need = "client"
        return []

    def _secret_found(self, found: SecretFound) -> list[Action]:
        leg = self._exchange
        assert leg is not None
        denial = inject_secret(self._run, leg, found)
        return self._deny(denial) if denial is not None else self._upstream_for(leg)

    # ---- the upstream ----

    def _upstream_for(self, leg: Leg) -> list[Action]:
        assert leg.decision is not None
        key: PoolKey = (leg.scheme, leg.host, leg.port, leg.decision.allow_private)
        if self._link.serves(key):
            return self._send_head(leg)
        actions = self._link.aim(key)
        self.need = "wait"
        return [*actions, Resolve(leg.host, leg.port, key)]

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
        leg.retried = leg.retried or not reused
        return self._send_head(leg)

    def _send_head(self, leg: Leg) -> list[Action]:
        self._link.taken()
        upstream = Upstream(leg, self._client, Scrubber(self._ledger.injected(leg.host)))
        self._upstream = upstream
        if leg.request_done:
            # A retry on a fresh upstream: the request (bodyless) was read already.
            upstream.end()
            self.need = "upstream"
            return self._out(leg, upstream.head)
        self.need = "client"
        return [*self._out(leg, upstream.head), *self._pump()]

    def _out(self, leg: Leg, data: bytes) -> list[Action]:
        """Count `data` against the run's upstream byte cap, then send it."""
        if len(data) > self._ledger.out_room():
            return self._refuse(
                413,
                f"the run's cap of {self._ledger.limits.max_request_bytes} bytes sent upstream "
                "is reached; no more may be sent in this run",
            )
        count(self._ledger, leg, self._tunnel, out=len(data))
        return [SendUpstream(data)]

    def _body_out(self, data: bytes) -> list[Action]:
        leg = self._exchange
        assert leg is not None and self._upstream is not None
        return self._out(leg, self._upstream.body(data))

    def _end_of_request(self) -> list[Action]:
        leg = self._exchange
        assert leg is not None and self._upstream is not None
        leg.request_done = True
        actions = self._out(leg, self._upstream.end())
        if self.need == "client":
            self.need = "upstream"
        return actions

    def _upstream_data(self, data: bytes) -> list[Action]:
        if self._splice is not None:
            return self._carry(data, outbound=False)
        leg = self._exchange
        assert leg is not None and self._upstream is not None
        room = self._ledger.in_room()
        count(self._ledger, leg, self._tunnel, back=min(len(data), room))
        actions, ending = self._upstream.receive(data[:room], read=self.need == "upstream")
        actions += self._ended(leg, ending)
        if len(data) > room:
            # What fits under the run's cap was passed on; the rest never is.
            actions += self._close(
                f"the run's cap of {self._ledger.limits.max_response_bytes} bytes received "
                "from upstream is reached; the response was cut",
                "deny",
                status=502,
            )
        return actions

    def _ended(self, leg: Leg, ending: Ending | None) -> list[Action]:
        """What the end of the upstream's answer (if it ended) means for the connection."""
        if ending is None:
            return []
        if isinstance(ending, Broken):
            return self._fail_upstream(ending.reason)
        return self._answered(leg, ending)

    def _answered(self, leg: Leg, answered: Answered) -> list[Action]:
        assert leg.decision is not None
        actions: list[Action] = [
            record_of(self._run, leg, leg.status, "allow", leg.decision.reason)
        ]
        actions += self._link.answered(reusable=answered.reusable)
        self._exchange = None
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
        leg = self._exchange
        self._link.lost()
        closed: list[Action] = [CloseUpstream()]
        if leg is None or self._upstream is None:
            return closed
        if leg.status == 0 and not leg.retried and leg.bodyless:
            # A kept-alive upstream the server had closed meanwhile: one fresh dial, since
            # nothing of the request was taken and it carried no body.
            leg.retried = True
            count(self._ledger, leg, self._tunnel, out=-len(self._upstream.head))
            self.need = "wait"
            assert self._link.key is not None
            return [*closed, Resolve(leg.host, leg.port, self._link.key, fresh=True)]
        actions, ending = self._upstream.closed()
        return [*closed, *actions, *self._ended(leg, ending)]

    def _fail_upstream(self, reason: str) -> list[Action]:
        leg = self._exchange
        if leg is not None and leg.status == 0:
            return self._refuse(502, reason, "error")
        return self._close(reason, "error", status=502)

    # ---- passthrough ----

    def _open_splice(self, leg: Leg) -> list[Action]:
        self._tunnel, self._exchange = leg, None
        self._splice = Splice(self._ledger, leg)
        opened = self._client.send(
            h11.Response(status_code=200, headers=[("via", f"1.1 {PROXY_NAME}")])
        )
        leftover = bytes(self._client.trailing_data[0])
        self.need = "splice"
        actions: list[Action] = [SendClient(opened or b"")]
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
