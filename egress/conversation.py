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
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import h11

from airlock.broker import RunClaims
from airlock.policies.hosts import host_matches
from airlock.store import EgressRecord, EgressVerdict

from .addresses import check_addresses
from .decision import (
    Decision,
    RequestFacts,
    Rule,
    decide,
    deny_address,
    deny_missing_secret,
    deny_secret_host,
)
from .heads import (
    MAX_HEAD_BYTES,
    PROXY_NAME,
    TOKEN_REFUSED,
    forwarded_headers,
    framing_problem,
    header,
    parse_absolute_http,
    proxy_token,
    refusal,
    response_headers,
)
from .ledger import RunLedger
from .scrub import Scrubber
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
    Record,
    ReleaseUpstream,
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
from .targets import TargetRejected, normalize_path, origin_form, parse_authority, path_for_log

_EVERYWHERE = ("0.0.0.0/0", "::/0")


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
class _Leg:
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
    upstream: h11.Connection | None = None
    head: bytes = b""
    bodyless: bool = True
    request_done: bool = False
    retried: bool = False
    scrubber: Scrubber = field(default_factory=lambda: Scrubber(()))
    body_length: int | None = None
    """The response's Content-Length, when that frames its body."""
    body_seen: int = 0
    body_left: int | None = None
    """Set once h11 has parsed the head and handed on what it buffered: the rest of a
    Content-Length body, relayed by `_upstream_body` without a copy through h11."""


class Conversation:
    """One connection of a sandbox to its run's proxy; see the module docstring."""

    def __init__(self, run: RunContext) -> None:
        self._run = run
        self._ledger = run.ledger
        self._client = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.need: Need = "client"
        self._token: str | None = None
        self._tunnel: _Leg | None = None
        self._sni: str | None = None
        self._exchange: _Leg | None = None
        self._key: PoolKey | None = None
        self._upstream_open = False
        self._upstream_idle = False
        self._counted = False

    # ---- the loop's entry points ----

    def start(self) -> list[Action]:
        """The connection was accepted: refuse it at once when the run holds too many."""
        limits = self._ledger.limits
        if self._ledger.connections >= limits.max_connections:
            leg = self._leg("-", "-", 0, "-")
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
        # A denial carries nothing to cut, and its answer may still be on its way.
        if (
            active is None
            or active.decision is None
            or not active.decision.allow
            or self._token is None
        ):
            return None
        if not self._run.live():
            return "the run ended"
        claims = self._run.authorize(self._token)
        if claims is None:
            return "the run token expired or was revoked, so the connection was cut"
        if active.decision.rule_id not in {r.id for r in self._run.rules(claims)}:
            return (
                "the capability that allowed this connection was revoked or expired, "
                "so the connection was cut"
            )
        return None

    # ---- reading the sandbox ----

    def _client_data(self, data: bytes) -> list[Action]:
        if self.need == "splice":
            return self._splice(data, outbound=True)
        self._client.receive_data(data)
        return self._pump()

    def _client_closed(self) -> list[Action]:
        if self.need == "splice":
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
        before = self._ledger.admit()
        started = self._run.monotonic()
        past = before >= self._ledger.limits.max_requests
        method = request.method.decode("ascii", "replace")
        raw_target = request.target.decode("latin-1")
        size = len(request.target) + sum(len(k) + len(v) + 4 for k, v in request.headers)
        if self._tunnel is None and request.method == b"CONNECT":
            leg = self._leg("CONNECT", raw_target[:200], 0, "-", started, past)
            self._exchange = leg
            if size > MAX_HEAD_BYTES:
                return self._refuse(431, f"request head over {MAX_HEAD_BYTES} bytes")
            return self._connect(leg, request, before)
        if self._tunnel is None:
            leg = self._leg(method, raw_target[:200], 0, path_for_log(raw_target), started, past)
            leg.scheme = "http"
        else:
            leg = self._leg(
                method, self._tunnel.host, self._tunnel.port, path_for_log(raw_target), started
            )
            leg.past_limit = past
        leg.request = request
        self._exchange = leg
        if size > MAX_HEAD_BYTES:
            return self._refuse(431, f"request head over {MAX_HEAD_BYTES} bytes")
        try:
            if self._tunnel is None:
                leg.host, leg.port, raw_target = parse_absolute_http(raw_target)
                leg.path = path_for_log(raw_target)
                self._token = proxy_token(request)
            path = normalize_path(raw_target)
            leg.target = origin_form(raw_target)
        except TargetRejected as exc:
            return self._refuse(400, exc.reason)
        framing = framing_problem(request)
        if framing is not None:
            return self._refuse(400, framing)
        decision = self._decide(
            leg,
            before,
            stage="request",
            scheme=leg.scheme,
            host=leg.host,
            port=leg.port,
            method=method,
            path=path,
            host_header=header(request, b"host"),
            sni=self._sni,
            upgrade=header(request, b"upgrade") is not None,
        )
        if not decision.allow:
            return self._deny(decision)
        leg.bodyless = header(request, b"content-length") in (None, "0") and (
            header(request, b"transfer-encoding") is None
        )
        if decision.inject is not None:
            self.need = "wait"
            return [LookupSecret(decision.inject[2])]
        return self._upstream_for(leg)

    def _connect(self, leg: _Leg, request: h11.Request, before: int) -> list[Action]:
        try:
            leg.host, leg.port = parse_authority(leg.host)
        except TargetRejected as exc:
            return self._refuse(400, exc.reason)
        self._token = proxy_token(request)
        decision = self._decide(
            leg,
            before,
            stage="connect",
            scheme="https",
            host=leg.host,
            port=leg.port,
            method=None,
            path=None,
            host_header=None,
            sni=None,
            upgrade=False,
        )
        if not decision.allow:
            return self._deny(decision)
        leg.status = 200
        self.need = "wait"
        if decision.passthrough:
            return [Resolve(leg.host, leg.port, None)]
        self._tunnel, self._exchange = leg, None
        opened = self._client.send(
            h11.Response(status_code=200, headers=[("via", f"1.1 {PROXY_NAME}")])
        )
        leftover = bytes(self._client.trailing_data[0])
        return [SendClient(opened or b""), StartTLS(leg.host, leftover)]

    def _decide(self, leg: _Leg, before: int, **facts: object) -> Decision:
        claims = self._run.authorize(self._token) if self._token else None
        leg.facts = RequestFacts(
            run_live=self._run.live(),
            token_valid=claims is not None,
            token_reason=TOKEN_REFUSED,
            requests_so_far=before,
            max_requests=self._ledger.limits.max_requests,
            **facts,  # type: ignore[arg-type]
        )
        leg.decision = decide(
            leg.facts, self._run.rules(claims) if claims is not None else (), self._run.offers
        )
        return leg.decision

    def _tls_started(self, sni: str | None) -> list[Action]:
        self._sni = sni
        self._client = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.need = "client"
        return []

    def _secret_found(self, found: SecretFound) -> list[Action]:
        leg = self._exchange
        assert leg is not None and leg.decision is not None and leg.decision.inject is not None
        header, template, name = leg.decision.inject
        if found.value is None:
            return self._deny(deny_missing_secret(leg.decision.rule_id, name))
        # The vault's own host binding holds even if a capability is too broad.
        if not any(host_matches(pattern, leg.host) for pattern in found.hosts):
            return self._deny(deny_secret_host(leg.decision.rule_id, name, leg.host))
        value = found.value.reveal()
        leg.header = (header, template.replace("{secret}", value))
        leg.injected = (name,)
        self._ledger.note_injected(value, leg.host)
        return self._upstream_for(leg)

    # ---- the upstream ----

    def _upstream_for(self, leg: _Leg) -> list[Action]:
        assert leg.decision is not None
        key: PoolKey = (leg.scheme, leg.host, leg.port, leg.decision.allow_private)
        if self._upstream_open and self._upstream_idle and self._key == key:
            return self._send_head(leg)
        actions: list[Action] = []
        if self._upstream_open:
            actions += self._drop_upstream()
        self._key = key
        self.need = "wait"
        return [*actions, Resolve(leg.host, leg.port, key)]

    def _resolved(self, addresses: tuple[IPAddress, ...]) -> list[Action]:
        leg = self._exchange
        assert leg is not None and leg.decision is not None and leg.facts is not None
        own = self._run.own_addresses
        chosen, reason = check_addresses(list(addresses), leg.decision.allow_private, own)
        if chosen is None:
            return self._deny(
                deny_address(
                    leg.facts,
                    reason or f"{leg.host} resolves to a forbidden address",
                    leg.decision.rule_id,
                    # Whether any operator CIDR could permit these addresses at all.
                    liftable=check_addresses(list(addresses), _EVERYWHERE, own)[0] is not None,
                    lifting_offers=[
                        offer
                        for offer in self._run.offers
                        if check_addresses(list(addresses), offer.allow_private, own)[0] is not None
                    ],
                )
            )
        return [
            Dial(str(chosen), leg.host, leg.port, tls=leg.scheme == "https" and not self._splicing)
        ]

    @property
    def _splicing(self) -> bool:
        leg = self._exchange
        return leg is not None and leg.decision is not None and leg.decision.passthrough

    def _connected(self, address: str, *, reused: bool) -> list[Action]:
        leg = self._exchange
        assert leg is not None
        leg.address = address
        self._upstream_open = True
        self._upstream_idle = False
        if self._splicing:
            return self._open_splice(leg)
        leg.retried = leg.retried or not reused
        return self._send_head(leg)

    def _send_head(self, leg: _Leg) -> list[Action]:
        assert leg.request is not None
        self._upstream_idle = False
        leg.upstream = h11.Connection(h11.CLIENT)
        headers = forwarded_headers(leg.request, leg.scheme, leg.host, leg.port, leg.header)
        leg.head = (
            leg.upstream.send(
                h11.Request(method=leg.request.method, target=leg.target, headers=headers)
            )
            or b""
        )
        leg.scrubber = Scrubber(self._ledger.injected(leg.host))
        if leg.request_done:
            # A retry on a fresh upstream: the request (bodyless) was read already.
            leg.upstream.send(h11.EndOfMessage())
            self.need = "upstream"
            return self._out(leg, leg.head)
        self.need = "client"
        return [*self._out(leg, leg.head), *self._pump()]

    def _out(self, leg: _Leg, data: bytes) -> list[Action]:
        """Count `data` against the run's upstream byte cap, then send it."""
        if len(data) > self._ledger.out_room():
            return self._refuse(
                413,
                f"the run's cap of {self._ledger.limits.max_request_bytes} bytes sent upstream "
                "is reached; no more may be sent in this run",
            )
        self._count(leg, out=len(data))
        return [SendUpstream(data)]

    def _count(self, leg: _Leg, *, out: int = 0, back: int = 0) -> None:
        self._ledger.bytes_out += out
        self._ledger.bytes_in += back
        leg.bytes_out += out
        leg.bytes_in += back
        if self._tunnel is not None and leg is not self._tunnel:
            self._tunnel.bytes_out += out
            self._tunnel.bytes_in += back

    def _body_out(self, data: bytes) -> list[Action]:
        leg = self._exchange
        assert leg is not None and leg.upstream is not None
        return self._out(leg, leg.upstream.send(h11.Data(data=data)) or b"")

    def _end_of_request(self) -> list[Action]:
        leg = self._exchange
        assert leg is not None and leg.upstream is not None
        leg.request_done = True
        actions = self._out(leg, leg.upstream.send(h11.EndOfMessage()) or b"")
        if self.need == "client":
            self.need = "upstream"
        return actions

    def _upstream_data(self, data: bytes) -> list[Action]:
        if self.need == "splice":
            return self._splice(data, outbound=False)
        leg = self._exchange
        assert leg is not None and leg.upstream is not None
        room = self._ledger.in_room()
        self._count(leg, back=min(len(data), room))
        if leg.body_left is None:
            leg.upstream.receive_data(data[:room])
            actions = self._pull_response(leg)
        else:
            actions = self._upstream_body(leg, data[:room])
        if len(data) > room:
            # What fits under the run's cap was passed on; the rest never is.
            actions += self._close(
                f"the run's cap of {self._ledger.limits.max_response_bytes} bytes received "
                "from upstream is reached; the response was cut",
                "deny",
                status=502,
            )
        return actions

    def _pull_response(self, leg: _Leg) -> list[Action]:
        assert leg.upstream is not None
        actions: list[Action] = []
        while self.need == "upstream":
            try:
                event = leg.upstream.next_event()
            except h11.RemoteProtocolError as exc:
                return [*actions, *self._fail_upstream(f"the upstream sent malformed HTTP ({exc})")]
            if event is h11.NEED_DATA:
                if leg.body_length is not None and leg.upstream.their_state is h11.SEND_BODY:
                    # h11 holds nothing more; the rest of the body needs no parsing.
                    leg.body_left = leg.body_length - leg.body_seen
                break
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.Response):
                unreadable = leg.scrubber.unreadable(event.headers)
                if unreadable is not None:
                    return [*actions, *self._fail_upstream(unreadable)]
                leg.status = event.status_code
                if header(event, b"transfer-encoding") is None:
                    length = header(event, b"content-length")
                    leg.body_length = None if length is None else int(length)
                headers = response_headers(
                    event, close=leg.scheme == "http", scrub=leg.scrubber.mask
                )
                actions.append(
                    SendClient(
                        self._client.send(
                            h11.Response(
                                status_code=event.status_code,
                                headers=headers,
                                reason=event.reason,
                            )
                        )
                        or b""
                    )
                )
            elif isinstance(event, h11.Data):
                leg.body_seen += len(event.data)
                actions += self._body_in(leg, bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                actions += self._end_of_response(leg)
            else:
                return [
                    *actions,
                    *self._fail_upstream("the upstream closed the connection mid-answer"),
                ]
        return actions

    def _body_in(self, leg: _Leg, data: bytes) -> list[Action]:
        """Pass a piece of the response body to the sandbox, scrubbed."""
        passed = leg.scrubber.feed(data)
        if not passed:
            return []
        return [SendClient(self._client.send(h11.Data(data=passed)) or b"")]

    def _upstream_body(self, leg: _Leg, data: bytes) -> list[Action]:
        """The rest of a Content-Length body, once its head is parsed: no h11 parsing."""
        assert leg.body_left is not None
        body = data[: leg.body_left]
        leg.body_left -= len(body)
        actions = self._body_in(leg, body)
        if leg.body_left == 0:
            # Bytes past the body are the upstream's mistake: it is not reused.
            actions += self._end_of_response(leg, clean=len(body) == len(data))
        return actions

    def _end_of_response(self, leg: _Leg, *, clean: bool = True) -> list[Action]:
        assert leg.upstream is not None and leg.decision is not None
        actions: list[Action] = []
        rest = leg.scrubber.flush()
        if rest:
            actions.append(SendClient(self._client.send(h11.Data(data=rest)) or b""))
        actions.append(SendClient(self._client.send(h11.EndOfMessage()) or b""))
        actions.append(self._record(leg, leg.status, "allow", leg.decision.reason))
        upstream = leg.upstream
        if leg.body_left is None:
            clean = upstream.their_state is h11.DONE and not upstream.trailing_data[0]
        self._upstream_idle = clean and upstream.our_state is h11.DONE
        if not self._upstream_idle:
            actions += self._drop_upstream()
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
        if self.need == "splice":
            return self._close("the upstream closed the tunnel", "allow")
        leg = self._exchange
        self._upstream_open = self._upstream_idle = False
        closed: list[Action] = [CloseUpstream()]
        if leg is None or leg.upstream is None:
            return closed
        if leg.status == 0 and not leg.retried and leg.bodyless:
            # A kept-alive upstream the server had closed meanwhile: one fresh dial, since
            # nothing of the request was taken and it carried no body.
            leg.retried = True
            self._count(leg, out=-len(leg.head))
            self.need = "wait"
            assert self._key is not None
            return [*closed, Resolve(leg.host, leg.port, self._key, fresh=True)]
        if leg.body_left is not None:
            # Worded as h11 words it when the cut comes in the part it parsed.
            length = leg.body_length or 0
            return [
                *closed,
                *self._fail_upstream(
                    "the upstream sent malformed HTTP (peer closed connection without sending "
                    f"complete message body (received {length - leg.body_left} bytes, "
                    f"expected {length}))"
                ),
            ]
        if leg.status != 0 and leg.upstream.their_state is h11.SEND_BODY:
            # A body delimited by the connection's close ends here (RFC 9112 6.3).
            leg.upstream.receive_data(b"")
            closed += self._pull_response(leg)
            if leg.recorded:
                return closed
        return [
            *closed,
            *self._fail_upstream("the upstream closed the connection before answering in full"),
        ]

    def _fail_upstream(self, reason: str) -> list[Action]:
        leg = self._exchange
        if leg is not None and leg.status == 0:
            return self._refuse(502, reason, "error")
        return self._close(reason, "error", status=502)

    def _drop_upstream(self) -> list[Action]:
        was_open = self._upstream_open
        self._upstream_open = self._upstream_idle = False
        return [CloseUpstream()] if was_open else []

    # ---- passthrough ----

    def _open_splice(self, leg: _Leg) -> list[Action]:
        self._tunnel, self._exchange = leg, None
        opened = self._client.send(
            h11.Response(status_code=200, headers=[("via", f"1.1 {PROXY_NAME}")])
        )
        leftover = bytes(self._client.trailing_data[0])
        self.need = "splice"
        actions: list[Action] = [SendClient(opened or b"")]
        if leftover:
            actions += self._splice(leftover, outbound=True)
        return actions

    def _splice(self, data: bytes, *, outbound: bool) -> list[Action]:
        tunnel = self._tunnel
        assert tunnel is not None
        room = self._ledger.out_room() if outbound else self._ledger.in_room()
        part = data[:room]
        actions: list[Action] = []
        if part:
            self._count(tunnel, out=len(part)) if outbound else self._count(tunnel, back=len(part))
            actions.append(SendUpstream(part) if outbound else SendClient(part))
        if len(data) > room:
            which = "sent upstream" if outbound else "received from upstream"
            cap = (
                self._ledger.limits.max_request_bytes
                if outbound
                else self._ledger.limits.max_response_bytes
            )
            actions += self._close(
                f"the run's cap of {cap} bytes {which} is reached; the tunnel was cut", "deny"
            )
        return actions

    # ---- endings: the one place records are made ----

    def _leg(
        self,
        method: str,
        host: str,
        port: int,
        path: str,
        started: float | None = None,
        past_limit: bool = False,
    ) -> _Leg:
        return _Leg(
            method=method,
            host=host,
            port=port,
            path=path,
            started=self._run.monotonic() if started is None else started,
            past_limit=past_limit,
        )

    def _record(self, leg: _Leg, status: int, verdict: EgressVerdict, reason: str) -> Record:
        leg.recorded = True
        identity = self._ledger.identity
        return Record(
            EgressRecord(
                time=self._run.wall_clock(),
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
                duration_ms=int((self._run.monotonic() - leg.started) * 1000),
                decision=verdict,
                reason=reason,
                resolved_ip=leg.address,
                injected=leg.injected,
            ),
            past_limit=leg.past_limit,
        )

    def _deny(self, decision: Decision) -> list[Action]:
        """Refuse with a denial made in `egress.decision`, which names the capability."""
        return self._refuse(decision.status, decision.reason)

    def _refuse(
        self,
        status: int,
        reason: str,
        verdict: EgressVerdict = "deny",
        *,
        leg: _Leg | None = None,
    ) -> list[Action]:
        """Answer the request in progress with `status` and close the connection."""
        actions: list[Action] = []
        if self._client.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            actions.append(SendClient(refusal(self._client, status, reason)))
        subject = leg or self._exchange
        if subject is None:
            before = self._ledger.admit()
            subject = self._leg("-", "-", 0, "-")
            subject.past_limit = before >= self._ledger.limits.max_requests
        if not subject.recorded:
            actions.append(self._record(subject, status, verdict, reason))
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
                self._record(leg, code, verdict if verdict != "allow" else "error", reason)
            )
        tunnel = self._tunnel
        if tunnel is not None and not tunnel.recorded:
            assert tunnel.decision is not None
            kind = "opaque tunnel" if tunnel.decision.passthrough else "tunnel"
            actions.append(
                self._record(
                    tunnel, 200, verdict, f"{tunnel.decision.reason}; the {kind} ended: {reason}"
                )
            )
        if self._upstream_open:
            if self._upstream_idle and self._key is not None and not self._splicing_tunnel:
                actions.append(ReleaseUpstream(self._key))
            else:
                actions.append(CloseUpstream())
            self._upstream_open = False
        if self._counted:
            self._ledger.connections -= 1
            self._counted = False
        actions.append(Close())
        return actions

    @property
    def _splicing_tunnel(self) -> bool:
        tunnel = self._tunnel
        return tunnel is not None and tunnel.decision is not None and tunnel.decision.passthrough
