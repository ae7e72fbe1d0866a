"""The layers under the proxy's conversation, each driven alone: bytes in, bytes and an
ending out, no sockets.

`egress.upstream` (one exchange's upstream HTTP), `egress.splice` (an opaque tunnel's
counted bytes), `egress.link` (the conversation's one upstream connection),
`egress.admission` (every decision about a leg) and `egress.exchange` (one allowed
request, from its secret to its answer's end). `test_egress_conversation` replays whole
conversations through all of them.
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import replace
from ipaddress import IPv4Address
from typing import Any

import h11
import pytest

from airlock.broker import RunClaims, Secret
from airlock.egress.admission import admit, choose_address, cut_reason, inject_secret
from airlock.egress.decision import Decision, Rule
from airlock.egress.exchange import Exchange, Failed, Refused
from airlock.egress.ledger import RunIdentity, RunLedger
from airlock.egress.legs import Leg, RunContext, new_leg
from airlock.egress.link import UpstreamLink
from airlock.egress.scrub import Scrubber
from airlock.egress.splice import Splice
from airlock.egress.steps import (
    CloseUpstream,
    PoolKey,
    ReleaseUpstream,
    Resolve,
    SecretFound,
    SendClient,
    SendUpstream,
)
from airlock.egress.upstream import Answered, Broken, Upstream
from airlock.policies import EgressLimits

TOKEN = "tok-" + secrets.token_hex(8)
SECRET = "sk-live-" + secrets.token_urlsafe(24)
API = Rule(
    id="grant_api",
    kind="capability",
    hosts=("api.example.com",),
    ports=(80, 443),
    methods=("GET",),
    paths=("/api/**",),
)
KEY: PoolKey = ("https", "api.example.com", 443, ())


def context(rules: list[Rule] | None = None, **limits: Any) -> RunContext:
    ledger = RunLedger(RunIdentity("t1", "ses_1", "run_1"), EgressLimits(**limits), [])
    claims = RunClaims("t1", "ses_1", "run_1", ("grant_api",), 2e9)
    live = [API] if rules is None else rules
    return RunContext(
        ledger=ledger,
        authorize=lambda token: claims if token == TOKEN else None,
        rules=lambda _: tuple(live),
    )


def request(target: bytes, *headers: tuple[bytes, bytes], method: bytes = b"GET") -> h11.Request:
    return h11.Request(
        method=method, target=target, headers=[(b"host", b"api.example.com"), *headers]
    )


def exchange(secret_values: tuple[str, ...] = ()) -> tuple[Leg, Upstream]:
    """An allowed inner request of a tunnel, the sandbox's side waiting for its answer."""
    client = h11.Connection(h11.SERVER)
    client.receive_data(b"GET /api/x HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
    inner = client.next_event()
    assert isinstance(inner, h11.Request)
    assert isinstance(client.next_event(), h11.EndOfMessage)
    leg = new_leg(context(), "GET", "api.example.com", 443, "/api/x")
    leg.request, leg.target = inner, "/api/x"
    upstream = Upstream(leg, client, Scrubber(secret_values))
    return leg, upstream


def sent(actions: list[Any]) -> bytes:
    assert all(isinstance(a, SendClient) for a in actions), actions
    return b"".join(a.data for a in actions)


# ---- egress.upstream ----


def test_upstream_frames_the_request_in_origin_form() -> None:
    _, upstream = exchange()
    assert upstream.head.startswith(b"GET /api/x HTTP/1.1\r\n")
    assert b"host: api.example.com" in upstream.head.lower()
    assert upstream.end() == b""


def test_upstream_passes_a_content_length_answer_in_pieces_and_may_be_reused() -> None:
    leg, upstream = exchange()
    upstream.end()
    actions, ending = upstream.receive(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123")
    assert ending is None and leg.status == 200
    assert sent(actions).endswith(b"0123")
    actions, ending = upstream.receive(b"456789")
    assert ending == Answered(reusable=True)
    assert sent(actions).startswith(b"456789")


def test_upstream_bytes_past_the_body_make_it_unfit_for_reuse() -> None:
    _, upstream = exchange()
    upstream.end()
    upstream.receive(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n")
    actions, ending = upstream.receive(b"0123EXTRA")
    assert ending == Answered(reusable=False)
    assert b"EXTRA" not in sent(actions)


def test_upstream_closing_mid_body_is_broken_with_the_counts() -> None:
    _, upstream = exchange()
    upstream.end()
    upstream.receive(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n012")
    _, ending = upstream.closed()
    assert isinstance(ending, Broken)
    assert "received 3 bytes, expected 10" in ending.reason


def test_upstream_a_close_delimited_body_ends_at_the_close() -> None:
    _, upstream = exchange()
    upstream.end()
    actions, ending = upstream.receive(b"HTTP/1.1 200 OK\r\n\r\nall of it")
    assert ending is None
    assert b"all of it" in sent(actions)
    _, ending = upstream.closed()
    # Answered in full; the conversation has already let the closed upstream go.
    assert isinstance(ending, Answered)


def test_upstream_closing_before_a_head_is_broken() -> None:
    _, upstream = exchange()
    assert upstream.closed() == (
        [],
        Broken("the upstream closed the connection before answering in full"),
    )


def test_upstream_malformed_answer_is_broken() -> None:
    _, upstream = exchange()
    _, ending = upstream.receive(b"NOT HTTP AT ALL\r\n\r\n")
    assert isinstance(ending, Broken)
    assert ending.reason.startswith("the upstream sent malformed HTTP")


def test_upstream_scrubs_a_secret_the_run_injected_from_the_answer() -> None:
    _, upstream = exchange((SECRET,))
    upstream.end()
    body = f"echo {SECRET}".encode()
    actions, ending = upstream.receive(
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    )
    assert isinstance(ending, Answered)
    assert SECRET.encode() not in sent(actions)


def test_upstream_without_read_holds_the_bytes_until_asked() -> None:
    _, upstream = exchange()
    upstream.end()
    assert upstream.receive(b"HTTP/1.1 204 No Content\r\n\r\n", read=False) == ([], None)
    _, ending = upstream.receive(b"")
    assert ending == Answered(reusable=True)


# ---- egress.splice ----


def test_splice_counts_both_ways_on_the_tunnel_and_the_run() -> None:
    run = context()
    tunnel = new_leg(run, "CONNECT", "pinned.example.com", 443, "-")
    splice = Splice(run.ledger, tunnel)
    assert splice.carry(b"hello", outbound=True) == ([SendUpstream(b"hello")], None)
    assert splice.carry(b"world!", outbound=False) == ([SendClient(b"world!")], None)
    assert (tunnel.bytes_out, tunnel.bytes_in) == (5, 6)
    assert (run.ledger.bytes_out, run.ledger.bytes_in) == (5, 6)


@pytest.mark.parametrize("outbound", [True, False])
def test_splice_cuts_where_the_runs_cap_falls(outbound: bool) -> None:
    run = context(max_request_bytes=4, max_response_bytes=4)
    splice = Splice(run.ledger, new_leg(run, "CONNECT", "pinned.example.com", 443, "-"))
    actions, cut = splice.carry(b"123456", outbound=outbound)
    assert actions == [SendUpstream(b"1234") if outbound else SendClient(b"1234")]
    which = "sent upstream" if outbound else "received from upstream"
    assert cut == f"the run's cap of 4 bytes {which} is reached; the tunnel was cut"
    assert splice.carry(b"7", outbound=outbound) == ([], cut)


# ---- egress.link ----


def test_link_reuses_only_an_idle_upstream_under_the_same_key() -> None:
    link = UpstreamLink()
    assert link.aim(KEY) == [] and not link.serves(KEY)
    link.opened()
    assert not link.serves(KEY)  # busy
    assert link.answered(reusable=True) == []
    assert link.serves(KEY)
    assert not link.serves(("http", "api.example.com", 80, ()))
    link.taken()
    assert link.state == "busy"


def test_link_closes_what_it_cannot_pool() -> None:
    link = UpstreamLink()
    link.aim(KEY)
    link.opened()
    assert link.answered(reusable=False) == [CloseUpstream()]
    assert link.state == "none" and link.end(poolable=True) == []
    link.opened()
    link.answered(reusable=True)
    assert link.end(poolable=False) == [CloseUpstream()]
    link.opened()
    link.answered(reusable=True)
    assert link.end(poolable=True) == [ReleaseUpstream(KEY)]


def test_link_a_lost_upstream_is_neither_pooled_nor_closed_again() -> None:
    link = UpstreamLink()
    link.aim(KEY)
    link.opened()
    link.lost()
    assert link.answered(reusable=True) == [] and link.end(poolable=True) == []
    assert link.aim(KEY) == []


# ---- egress.admission ----


def test_admission_refuses_an_oversized_head_and_still_counts_it() -> None:
    run = context()
    big = request(b"http://api.example.com/api/x", (b"x-pad", b"a" * 40_000))
    admission = admit(run, big, tunnel=None, token=None, sni=None)
    assert admission.refused is not None and admission.refused[0] == 431
    assert run.ledger.requests == 1


def test_admission_reads_a_plaintext_request_and_its_token() -> None:
    auth = "Basic " + base64.b64encode(f"airlock:{TOKEN}".encode()).decode()
    run = context()
    head = request(b"http://api.example.com/api/x?q=1", (b"proxy-authorization", auth.encode()))
    admission = admit(run, head, tunnel=None, token=None, sni=None)
    leg = admission.leg
    assert admission.refused is None and admission.token == TOKEN
    assert (leg.scheme, leg.host, leg.port, leg.target) == (
        "http",
        "api.example.com",
        80,
        "/api/x?q=1",
    )
    assert leg.decision is not None and leg.decision.allow and leg.decision.rule_id == "grant_api"
    assert leg.bodyless


def test_admission_refuses_a_connect_to_no_authority() -> None:
    head = request(b"api.example.com:https", method=b"CONNECT")
    admission = admit(context(), head, tunnel=None, token=None, sni=None)
    assert admission.refused is not None and admission.refused[0] == 400
    assert admission.leg.method == "CONNECT"


def test_admission_an_inner_request_keeps_the_tunnels_token_and_host() -> None:
    run = context()
    tunnel = new_leg(run, "CONNECT", "api.example.com", 443, "-")
    admission = admit(run, request(b"/api/x"), tunnel=tunnel, token=TOKEN, sni="api.example.com")
    assert admission.token == TOKEN
    assert (admission.leg.host, admission.leg.port, admission.leg.scheme) == (
        "api.example.com",
        443,
        "https",
    )
    assert admission.leg.decision is not None and admission.leg.decision.allow


def test_cut_reason_names_a_revoked_grant_and_spares_a_denial() -> None:
    rules = [API]
    run = context(rules)
    tunnel = new_leg(run, "CONNECT", "api.example.com", 443, "-")
    leg = admit(run, request(b"/api/x"), tunnel=tunnel, token=TOKEN, sni=None).leg
    assert cut_reason(run, leg, TOKEN) is None
    rules.clear()
    assert cut_reason(run, leg, TOKEN) == (
        "the capability that allowed this connection was revoked or expired, "
        "so the connection was cut"
    )
    assert cut_reason(run, leg, "not-the-token") == (
        "the run token expired or was revoked, so the connection was cut"
    )
    denied = admit(run, request(b"/api/x"), tunnel=tunnel, token=TOKEN, sni=None).leg
    assert denied.decision is not None and not denied.decision.allow
    assert cut_reason(run, denied, TOKEN) is None


def _allowed(run: RunContext, rule: Rule) -> Leg:
    tunnel = new_leg(run, "CONNECT", "api.example.com", 443, "-")
    leg = admit(run, request(b"/api/x"), tunnel=tunnel, token=TOKEN, sni=None).leg
    assert leg.decision is not None and leg.decision.allow, leg.decision
    return leg


def test_admission_injects_a_secret_only_for_the_hosts_the_vault_binds_it_to() -> None:
    secret_rule = replace(
        API, secret="api_token", inject_header="Authorization", inject_format="Bearer {secret}"
    )
    run = context([secret_rule])
    leg = _allowed(run, secret_rule)
    elsewhere = inject_secret(run, leg, SecretFound(Secret(SECRET), ("other.example.com",)))
    assert elsewhere is not None and not elsewhere.allow and leg.header is None
    missing = inject_secret(run, leg, SecretFound(None))
    assert missing is not None and not missing.allow
    assert inject_secret(run, leg, SecretFound(Secret(SECRET), ("api.example.com",))) is None
    assert leg.header == ("Authorization", f"Bearer {SECRET}") and leg.injected == ("api_token",)


def test_admission_dials_only_a_checked_address() -> None:
    run = context()
    leg = _allowed(run, API)
    loopback = choose_address(run, leg, (IPv4Address("127.0.0.1"),))
    assert isinstance(loopback, Decision) and not loopback.allow
    # One forbidden address refuses the name: the resolver could hand out either.
    mixed = choose_address(run, leg, (IPv4Address("93.184.216.34"), IPv4Address("10.0.0.1")))
    assert isinstance(mixed, Decision) and "refused if any of its addresses" in mixed.reason
    assert choose_address(run, leg, (IPv4Address("93.184.216.34"),)) == "93.184.216.34"


# ---- egress.exchange ----


def _exchange_of(run: RunContext, link: UpstreamLink) -> Exchange:
    """An allowed inner request of a tunnel, the sandbox's side having read it."""
    client = h11.Connection(h11.SERVER)
    client.receive_data(b"GET /api/x HTTP/1.1\r\nHost: api.example.com\r\n\r\n")
    head = client.next_event()
    assert isinstance(head, h11.Request)
    tunnel = new_leg(run, "CONNECT", "api.example.com", 443, "-")
    leg = admit(run, head, tunnel=tunnel, token=TOKEN, sni=None).leg
    assert leg.decision is not None and leg.decision.allow
    return Exchange(run, leg, client, link, tunnel)


def need(exchange: Exchange) -> str:
    return exchange.need


def test_exchange_goes_from_resolve_to_an_answer() -> None:
    run, link = context(), UpstreamLink()
    exchange = _exchange_of(run, link)
    assert exchange.begin() == [Resolve("api.example.com", 443, KEY)]
    assert need(exchange) == "wait"
    link.opened()  # the conversation's part: it dialled
    sent_head = exchange.connected(reused=False)
    assert isinstance(sent_head[0], SendUpstream) and sent_head[0].data.startswith(b"GET /api/x")
    assert need(exchange) == "client"
    # A bodyless request ends with nothing more to frame.
    assert exchange.end_of_request() == [SendUpstream(b"")] and need(exchange) == "upstream"
    answer = exchange.upstream_data(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    assert sent(answer).endswith(b"ok")
    assert exchange.ending == Answered(reusable=True)
    assert exchange.leg.bytes_out == len(sent_head[0].data) == run.ledger.bytes_out


def test_exchange_takes_the_idle_upstream_under_its_key() -> None:
    link = UpstreamLink()
    link.aim(KEY)
    link.opened()
    link.answered(reusable=True)
    exchange = _exchange_of(context(), link)
    actions = exchange.begin()
    assert [type(a) for a in actions] == [SendUpstream] and link.state == "busy"


def test_exchange_refuses_past_the_runs_upstream_cap() -> None:
    exchange = _exchange_of(context(max_request_bytes=10), UpstreamLink())
    exchange.begin()
    assert exchange.connected(reused=False) == []
    assert isinstance(exchange.ending, Refused) and exchange.ending.status == 413


def test_exchange_retries_a_closed_kept_alive_upstream_once() -> None:
    link = UpstreamLink()
    link.aim(KEY)
    link.opened()
    link.answered(reusable=True)
    exchange = _exchange_of(context(), link)
    exchange.begin()
    exchange.end_of_request()
    link.lost()
    assert exchange.upstream_closed() == [Resolve("api.example.com", 443, KEY, fresh=True)]
    link.opened()
    exchange.connected(reused=False)
    assert need(exchange) == "upstream"  # the request was read already
    link.lost()
    assert exchange.upstream_closed() == []
    assert exchange.ending == Refused(
        502, "the upstream closed the connection before answering in full", "error"
    )


def test_exchange_an_answer_cut_after_its_head_fails_the_connection() -> None:
    link = UpstreamLink()
    exchange = _exchange_of(context(), link)
    exchange.begin()
    link.opened()
    exchange.connected(reused=False)
    exchange.end_of_request()
    exchange.upstream_data(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123")
    link.lost()
    exchange.upstream_closed()
    assert isinstance(exchange.ending, Failed)
    assert "received 4 bytes, expected 10" in exchange.ending.reason
