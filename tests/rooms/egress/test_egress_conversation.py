"""The proxy's conversation replayed from transcripts: bytes and answers in, actions out.

No sockets, no TLS, no DNS: `Conversation.handle` gets the events the loop would feed
it, and each test reads the actions it returns. The run's `RunLedger` is real; the
broker is replaced by two plain functions (a token check and a rule list), which is
the seam `RunContext` defines.
"""

from __future__ import annotations

import base64
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from ipaddress import IPv4Address
from typing import Any

import pytest

from airlock.broker import RunClaims, Secret
from airlock.egress.conversation import Conversation, RunContext
from airlock.egress.decision import Rule
from airlock.egress.ledger import RECORDS_PAST_LIMIT, RunIdentity, RunLedger
from airlock.egress.scrub import Scrubber
from airlock.egress.steps import (
    Action,
    ClientClosed,
    ClientData,
    Close,
    CloseUpstream,
    Cut,
    Dial,
    Dialed,
    Event,
    LookupSecret,
    Record,
    ReleaseUpstream,
    Resolve,
    Resolved,
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
from airlock.policies import EgressLimits
from airlock.store import EgressRecord

TOKEN = "tok-" + secrets.token_hex(8)
SECRET = "sk-live-" + secrets.token_urlsafe(24)
AUTH = "Basic " + base64.b64encode(f"airlock:{TOKEN}".encode()).decode()
LOCAL = (IPv4Address("127.0.0.1"),)

API = Rule(
    id="grant_api",
    kind="capability",
    hosts=("api.example.com",),
    ports=(443,),
    methods=("GET", "POST"),
    paths=("/api/**",),
    allow_private=("127.0.0.0/8",),
    secret="api_token",
    inject_header="Authorization",
    inject_format="Bearer {secret}",
)
PINNED = Rule(
    id="grant_pinned",
    kind="capability",
    hosts=("pinned.example.com",),
    ports=(443,),
    methods=(),
    paths=(),
    tls="passthrough",
    allow_private=("127.0.0.0/8",),
)
OFFER = Rule(
    id="github",
    kind="capability",
    hosts=("api.github.com",),
    ports=(443,),
    methods=("GET",),
    paths=("/**",),
)


@dataclass
class Run:
    """One run: its ledger and the state the broker would hold (live rules, token)."""

    limits: dict[str, Any] = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=lambda: [API, PINNED])
    token_valid: bool = True
    records: list[EgressRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ledger = RunLedger(
            RunIdentity("t1", "ses_1", "run_1"), EgressLimits(**self.limits), self.records
        )
        claims = RunClaims("t1", "ses_1", "run_1", ("grant_api", "grant_pinned"), 2e9)
        self.context = RunContext(
            ledger=self.ledger,
            authorize=lambda token: claims if token == TOKEN and self.token_valid else None,
            rules=lambda _: tuple(self.rules),
            offers=(OFFER,),
        )

    def talk(self) -> Talk:
        return Talk(self, Conversation(self.context))


@dataclass
class Talk:
    """A transcript: feeds events, keeps records in the ledger as the loop would."""

    run: Run
    conversation: Conversation
    actions: list[Action] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.perform(self.conversation.start())

    def perform(self, actions: Sequence[Action]) -> list[Action]:
        for action in actions:
            if isinstance(action, Record):
                self.run.ledger.keep(action.record, past_limit=action.past_limit)
        self.actions.extend(actions)
        return list(actions)

    def feed(self, *events: Event) -> list[Action]:
        out: list[Action] = []
        for event in events:
            out += self.perform(self.conversation.handle(event))
        return out

    def client(self, data: bytes) -> list[Action]:
        return self.feed(ClientData(data))

    @property
    def need(self) -> str:
        return self.conversation.need


def sent_to_client(actions: Sequence[Action]) -> bytes:
    return b"".join(a.data for a in actions if isinstance(a, SendClient))


def sent_upstream(actions: Sequence[Action]) -> bytes:
    return b"".join(a.data for a in actions if isinstance(a, SendUpstream))


def records_of(actions: Sequence[Action]) -> list[EgressRecord]:
    return [a.record for a in actions if isinstance(a, Record)]


def connect(host: str = "api.example.com", auth: str | None = AUTH) -> bytes:
    lines = [f"CONNECT {host}:443 HTTP/1.1", f"Host: {host}:443"]
    if auth:
        lines.append(f"Proxy-Authorization: {auth}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def get(path: str, host: str = "api.example.com", *extra: str) -> bytes:
    return ("\r\n".join([f"GET {path} HTTP/1.1", f"Host: {host}", *extra]) + "\r\n\r\n").encode()


def response(body: bytes, *headers: str) -> bytes:
    head = ["HTTP/1.1 200 OK", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def open_tunnel(talk: Talk) -> None:
    actions = talk.client(connect())
    assert sent_to_client(actions).startswith(b"HTTP/1.1 200 ")
    assert actions[-1] == StartTLS("api.example.com", b"")
    talk.feed(TLSStarted("api.example.com"))
    assert talk.need == "client"


def first_request(talk: Talk, path: str = "/api/x") -> list[Action]:
    """A request in a fresh tunnel up to its head being sent upstream."""
    open_tunnel(talk)
    assert talk.client(get(path)) == [LookupSecret("api_token")]
    resolve = talk.feed(SecretFound(Secret(SECRET), ("api.example.com",)))
    assert resolve == [
        Resolve("api.example.com", 443, ("https", "api.example.com", 443, ("127.0.0.0/8",)))
    ]
    dial = talk.feed(Resolved(LOCAL))
    assert dial == [Dial("127.0.0.1", "api.example.com", 443, tls=True)]
    return talk.feed(Dialed("127.0.0.1"))


# ---- one record per request and per tunnel ----------------------------------------------


def test_a_denied_connect_is_answered_recorded_once_and_closed() -> None:
    run = Run()
    talk = run.talk()
    actions = talk.client(connect("api.github.com"))
    reply = sent_to_client(actions)
    assert reply.startswith(b"HTTP/1.1 403 ")
    assert b'request_capability "github" would allow it' in reply
    assert isinstance(actions[-1], Close) and talk.need == "done"
    (record,) = run.records
    assert (record.method, record.host, record.port, record.status) == (
        "CONNECT",
        "api.github.com",
        443,
        403,
    )
    assert talk.feed(ClientClosed(), Cut("late")) == []


def test_a_missing_token_is_decided_407_with_no_rule_consulted() -> None:
    run = Run(rules=[])
    talk = run.talk()
    reply = sent_to_client(talk.client(connect(auth=None)))
    assert reply.startswith(b"HTTP/1.1 407 ")
    assert b'proxy-authenticate: Basic realm="airlock"' in reply
    assert [r.status for r in run.records] == [407]


def test_a_terminated_tunnel_records_each_request_and_itself_with_bytes_and_ending() -> None:
    run = Run()
    talk = run.talk()
    head = sent_upstream(first_request(talk))
    assert head.startswith(b"GET /api/x HTTP/1.1\r\nhost: api.example.com\r\n")
    assert f"Authorization: Bearer {SECRET}".encode() in head
    assert b"accept-encoding: identity" in head
    answer = talk.feed(UpstreamData(response(b"hello")))
    assert sent_to_client(answer).endswith(b"\r\n\r\nhello")
    (request,) = records_of(answer)
    assert (request.path, request.status, request.decision, request.injected) == (
        "/api/x",
        200,
        "allow",
        ("api_token",),
    )
    # A second request on the kept-alive tunnel reuses the upstream: no resolve, no dial.
    assert talk.client(get("/api/y")) == [LookupSecret("api_token")]
    second = talk.feed(SecretFound(Secret(SECRET), ("api.example.com",)))
    assert sent_upstream(second).startswith(b"GET /api/y HTTP/1.1")
    talk.feed(UpstreamData(response(b"again")))
    ending = talk.feed(ClientClosed())
    assert ReleaseUpstream(("https", "api.example.com", 443, ("127.0.0.0/8",))) in ending
    tunnel = records_of(ending)[0]
    assert tunnel.method == "CONNECT" and tunnel.status == 200 and tunnel.decision == "allow"
    assert tunnel.reason.endswith("the tunnel ended: the sandbox closed the connection")
    assert tunnel.bytes_out == sum(r.bytes_out for r in run.records[:2]) > 0
    assert tunnel.bytes_in == sum(r.bytes_in for r in run.records[:2]) > 0
    assert len(run.records) == 3
    assert SECRET not in repr(run.records) and SECRET not in repr(run.ledger)


def test_a_failed_tls_handshake_is_the_tunnels_record() -> None:
    run = Run()
    talk = run.talk()
    talk.client(connect())
    ending = talk.feed(TLSFailed("TLSV1_ALERT_UNKNOWN_CA"))
    (record,) = records_of(ending)
    assert record.decision == "error" and record.method == "CONNECT"
    assert "TLS handshake with the sandbox failed (TLSV1_ALERT_UNKNOWN_CA)" in record.reason
    assert isinstance(ending[-1], Close)


def test_too_many_connections_is_a_429_record_and_counts() -> None:
    run = Run(limits={"max_connections": 1})
    first = run.talk()
    second = run.talk()
    reply = sent_to_client(second.actions)
    assert reply.startswith(b"HTTP/1.1 429 ")
    assert [r.status for r in run.records] == [429]
    assert run.ledger.requests == 1 and second.need == "done"
    first.feed(ClientClosed())
    assert run.ledger.connections == 0


def test_a_request_split_byte_by_byte_is_the_same_conversation() -> None:
    run = Run()
    talk = run.talk()
    open_tunnel(talk)
    actions: list[Action] = []
    for byte in get("/api/split"):
        actions += talk.client(bytes([byte]))
    assert actions == [LookupSecret("api_token")]


# ---- finding 1: refusals count, records are capped, and summarized ----------------------


def test_a_flood_of_denials_is_counted_and_its_records_capped() -> None:
    run = Run(limits={"max_requests": 5})
    for _ in range(200):
        talk = run.talk()
        talk.client(connect("evil.example.org"))
        assert talk.need == "done"
    assert run.ledger.requests == 200
    statuses = [r.status for r in run.records]
    assert statuses == [403] * 5 + [429] * RECORDS_PAST_LIMIT
    run.ledger.close()
    summary = run.records[-1]
    assert len(run.records) == 5 + RECORDS_PAST_LIMIT + 1
    assert summary.reason.startswith(f"{200 - 5 - RECORDS_PAST_LIMIT} more requests past")


# ---- finding 3: revocation and expiry cut what flows -------------------------------------


def test_a_passthrough_tunnel_is_cut_when_its_grant_goes() -> None:
    run = Run()
    talk = run.talk()
    assert talk.client(connect("pinned.example.com")) == [Resolve("pinned.example.com", 443, None)]
    assert talk.feed(Resolved(LOCAL)) == [Dial("127.0.0.1", "pinned.example.com", 443, tls=False)]
    opened = talk.feed(Dialed("127.0.0.1"))
    assert sent_to_client(opened).startswith(b"HTTP/1.1 200 ") and talk.need == "splice"
    assert talk.client(b"\x16\x03\x01") == [SendUpstream(b"\x16\x03\x01")]
    assert talk.feed(UpstreamData(b"\x16\x03\x03xx")) == [SendClient(b"\x16\x03\x03xx")]
    assert talk.conversation.still_allowed() is None
    run.rules.remove(PINNED)
    reason = talk.conversation.still_allowed()
    assert reason is not None and "revoked or expired" in reason
    ending = talk.feed(Cut(reason))
    (record,) = records_of(ending)
    assert record.decision == "deny" and (record.bytes_out, record.bytes_in) == (3, 5)
    assert "the opaque tunnel ended: the capability that allowed this" in record.reason
    assert CloseUpstream() in ending


def test_an_expired_token_cuts_an_exchange_in_flight() -> None:
    run = Run()
    talk = run.talk()
    first_request(talk)
    assert talk.need == "upstream"
    run.token_valid = False
    reason = talk.conversation.still_allowed()
    assert reason is not None and "token expired or was revoked" in reason
    records = records_of(talk.feed(Cut(reason)))
    assert [(r.method, r.decision) for r in records] == [("GET", "deny"), ("CONNECT", "deny")]


def test_a_denial_being_answered_is_never_cut() -> None:
    # The proxy asks still_allowed every 0.1 s while a connection is open, also while a
    # denial's 403 is being sent; taking the denial for a revoked grant cut it before
    # the answer went out (a connection closed with no response, seen in CI).
    run = Run()
    talk = run.talk()
    assert sent_to_client(talk.client(connect("api.github.com"))).startswith(b"HTTP/1.1 403 ")
    assert talk.conversation.still_allowed() is None
    tunneled = run.talk()
    open_tunnel(tunneled)
    assert sent_to_client(tunneled.client(get("/admin"))).startswith(b"HTTP/1.1 403 ")
    assert tunneled.conversation.still_allowed() is None


def test_an_idle_terminated_tunnel_is_not_cut_its_next_request_is_decided() -> None:
    run = Run()
    talk = run.talk()
    first_request(talk)
    talk.feed(UpstreamData(response(b"ok")))
    run.rules.remove(API)
    assert talk.conversation.still_allowed() is None
    reply = sent_to_client(talk.client(get("/api/after")))
    assert reply.startswith(b"HTTP/1.1 403 ")


# ---- finding 4: byte caps are totals of the run -------------------------------------------


def test_byte_caps_hold_across_the_connections_of_a_run() -> None:
    run = Run(limits={"max_response_bytes": 300})
    first = run.talk()
    first_request(first)
    first.feed(UpstreamData(response(b"x" * 150)))
    second = run.talk()
    first_request(second, "/api/more")
    cut = second.feed(UpstreamData(response(b"y" * 150)))
    # What fits under the run's total is passed on, then the response is cut.
    assert not sent_to_client(cut).endswith(b"y" * 150)
    assert isinstance(cut[-1], Close)
    record = records_of(cut)[0]
    assert record.status == 502 and "cap of 300 bytes received from upstream" in record.reason
    assert run.ledger.bytes_in <= 300


def test_a_passthrough_tunnel_is_cut_at_the_runs_byte_cap() -> None:
    run = Run(limits={"max_request_bytes": 10})
    talk = run.talk()
    talk.client(connect("pinned.example.com"))
    talk.feed(Resolved(LOCAL), Dialed("127.0.0.1"))
    assert talk.client(b"12345678") == [SendUpstream(b"12345678")]
    ending = talk.client(b"abc")
    assert SendUpstream(b"abc") not in ending and talk.need == "done"
    assert "cap of 10 bytes sent upstream is reached" in records_of(ending)[0].reason


# ---- finding 5: what is forwarded is what was decided on ---------------------------------


@pytest.mark.parametrize(
    ("raw", "forwarded"),
    [
        ("/api/x#/../../denied/secret", b"GET /api/x HTTP/1.1"),
        ("/api/%78?q=1#frag", b"GET /api/x?q=1 HTTP/1.1"),
    ],
)
def test_the_forwarded_target_is_the_canonical_one(raw: str, forwarded: bytes) -> None:
    run = Run()
    talk = run.talk()
    head = sent_upstream(first_request(talk, raw))
    assert head.startswith(forwarded + b"\r\n")
    assert b"#" not in head.split(b"\r\n", 1)[0]


# ---- finding 6: the injected secret does not come back -----------------------------------


def test_the_secret_is_masked_in_headers_and_in_a_body_split_anywhere() -> None:
    encoded = base64.b64encode(f"Bearer {SECRET}".encode())
    body = b'{"auth": "Bearer ' + SECRET.encode() + b'", "b64": "' + encoded + b'"}'
    wire = response(body, f"X-Echo: Bearer {SECRET}")
    for cut in (1, 37, len(wire) - len(body) + 20, len(wire) - 3):
        run = Run()
        talk = run.talk()
        first_request(talk)
        out = talk.feed(UpstreamData(wire[:cut]), UpstreamData(wire[cut:]))
        seen = sent_to_client(out)
        assert SECRET.encode() not in seen, cut
        assert encoded[8:-8] not in seen, cut
        head, _, sent_body = seen.partition(b"\r\n\r\n")
        assert len(sent_body) == len(body)  # masked in place: Content-Length still true
        assert b"x-echo: Bearer ****" in head


# ---- a Content-Length body after its head: relayed without h11, same bytes -------------

POOL_KEY = ("https", "api.example.com", 443, ("127.0.0.0/8",))


def _relayed(pieces: Sequence[bytes], run: Run | None = None) -> tuple[bytes, list[Action]]:
    """What the sandbox receives for an answer arriving in `pieces`, and the tunnel's end."""
    talk = (run or Run()).talk()
    first_request(talk)
    out = talk.feed(*(UpstreamData(piece) for piece in pieces))
    return sent_to_client(out), [*out, *talk.feed(ClientClosed())]


def test_a_body_in_any_pieces_reaches_the_sandbox_alike_masked_and_the_upstream_pooled() -> None:
    encoded = base64.b64encode(f"x{SECRET}".encode())
    body = b"start " + SECRET.encode() + b" middle " + encoded + b" end" + b"z" * 3000
    wire = response(body)
    head_size = len(wire) - len(body)
    whole, _ = _relayed([wire])
    assert SECRET.encode() not in whole and encoded[4:-4] not in whole
    assert whole.endswith(b" end" + b"z" * 3000)
    splits = {
        "byte by byte": [wire[i : i + 1] for i in range(len(wire))],
        "head, then the body": [wire[:head_size], wire[head_size:]],
        "head and a little, then 7-byte pieces": [
            wire[: head_size + 3],
            *(wire[i : i + 7] for i in range(head_size + 3, len(wire), 7)),
        ],
    }
    for name, pieces in splits.items():
        run = Run()
        seen, ending = _relayed(pieces, run)
        assert seen == whole, name
        assert ReleaseUpstream(POOL_KEY) in ending, name
        assert run.records[0].status == 200 and run.records[0].bytes_in == len(wire), name


def test_bytes_past_a_content_length_body_are_dropped_and_the_upstream_is_not_pooled() -> None:
    wire = response(b"hello")
    head_size = len(wire) - 5
    for pieces in ([wire + b"HTTP/1.1 200 extra"], [wire[:head_size], b"hello" + b"junk"]):
        seen, ending = _relayed(pieces)
        assert seen.endswith(b"\r\n\r\nhello"), pieces
        assert CloseUpstream() in ending and not any(isinstance(a, ReleaseUpstream) for a in ending)


def test_a_body_past_the_runs_byte_cap_is_cut_after_its_head() -> None:
    run = Run(limits={"max_response_bytes": 1000})
    wire = response(b"y" * 5000)
    head_size = len(wire) - 5000
    talk = run.talk()
    first_request(talk)
    out = talk.feed(UpstreamData(wire[:head_size]))
    for start in range(head_size, len(wire), 400):
        out += talk.feed(UpstreamData(wire[start : start + 400]))
    sent = sent_to_client(out)
    assert sent.count(b"y") == 1000 - head_size
    assert isinstance(out[-1], Close) and talk.need == "done"
    assert run.ledger.bytes_in == 1000
    record = records_of(out)[0]
    assert record.status == 502 and "cap of 1000 bytes received from upstream" in record.reason


# ---- upstream reuse -----------------------------------------------------------------------


def test_a_pooled_upstream_closed_meanwhile_is_dialled_again_once() -> None:
    run = Run()
    talk = run.talk()
    open_tunnel(talk)
    talk.client(get("/api/x"))
    talk.feed(SecretFound(Secret(SECRET), ("api.example.com",)))
    sent = talk.feed(Reused("127.0.0.1"))
    assert sent_upstream(sent).startswith(b"GET /api/x ")
    retry = talk.feed(UpstreamClosed())
    assert retry[0] == CloseUpstream() and isinstance(retry[1], Resolve) and retry[1].fresh
    talk.feed(Resolved(LOCAL))
    again = talk.feed(Dialed("127.0.0.1"))
    assert sent_upstream(again).startswith(b"GET /api/x ")
    answer = talk.feed(UpstreamData(response(b"ok")))
    assert sent_to_client(answer).endswith(b"ok")
    # A fresh connection closing early is not retried: it is the upstream's answer.
    assert run.records[-1].status == 200


def test_a_body_delimited_by_the_upstreams_close_is_relayed_whole_and_recorded() -> None:
    run = Run()
    talk = run.talk()
    first_request(talk)
    out = talk.feed(UpstreamData(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it"))
    ending = talk.feed(UpstreamClosed())
    assert ending[0] == CloseUpstream()
    relayed = sent_to_client([*out, *ending])
    assert b"all of it" in relayed and relayed.endswith(b"0\r\n\r\n")  # chunked, ended
    assert [(r.status, r.decision) for r in run.records] == [(200, "allow")]
    assert talk.need == "client"  # the tunnel carries on; its next request dials again


def test_an_upstream_closing_mid_body_is_an_error_record() -> None:
    run = Run()
    talk = run.talk()
    first_request(talk)
    talk.feed(UpstreamData(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"))
    ending = talk.feed(UpstreamClosed())
    records = records_of(ending)
    assert [(r.method, r.status, r.decision) for r in records] == [
        ("GET", 502, "error"),
        ("CONNECT", 200, "error"),
    ]
    assert "closed connection without sending complete message body" in records[0].reason


def test_scrubbing_holds_back_only_an_end_that_could_begin_the_secret() -> None:
    scrubber = Scrubber([SECRET])
    # An event that ends elsewhere is passed on whole, at once.
    assert scrubber.feed(b"data: one\n\n") == b"data: one\n\n"
    # One that ends in the secret's first bytes waits for the next chunk to decide.
    assert scrubber.feed(b"data: " + SECRET[:5].encode()) == b"data: "
    assert scrubber.feed(SECRET[5:].encode() + b"\n\n") == b"*" * len(SECRET) + b"\n\n"
    assert scrubber.flush() == b""


# ---- every 403 names what would allow the request (finding 7) ---------------------------

ACTIONABLE = re.compile(
    r'request_capability "[^"]+" would allow it'
    r"|no capability (of this tenant's policy )?(would allow|allows)"
    r"|capability \S+ allows this only over TLS"
)
SECRET_FOUND = SecretFound(Secret(SECRET), ("api.example.com",))


def _in_tunnel(*events: Event | bytes) -> list[Event]:
    return [
        ClientData(connect()),
        TLSStarted("api.example.com"),
        *(ClientData(e) if isinstance(e, bytes) else e for e in events),
    ]


@pytest.mark.parametrize(
    ("rules", "events", "fragment"),
    [
        pytest.param(
            [API, PINNED],
            [ClientData(connect("api.github.com"))],
            'request_capability "github" would allow it',
            id="no-rule-an-offer-would",
        ),
        pytest.param(
            [API, PINNED],
            [ClientData(connect("evil.example.org"))],
            "no capability of this tenant's policy would allow it, so ask the operator",
            id="no-rule-no-offer",
        ),
        pytest.param(
            [API],
            _in_tunnel(get("/api/x", "pinned.example.com")),
            "no capability allows that; send requests only for the host you connected to",
            id="host-header-fronting",
        ),
        pytest.param(
            [API],
            _in_tunnel(
                get("/api/x", "api.example.com", "Upgrade: websocket", "Connection: upgrade")
            ),
            "no capability allows WebSocket upgrades through the proxy; use plain HTTP requests",
            id="websocket-upgrade",
        ),
        pytest.param(
            [API],
            _in_tunnel(get("/api/x"), SecretFound(None)),
            "is not in the vault, so no capability would allow this request until the "
            "operator stores it",
            id="secret-not-in-vault",
        ),
        pytest.param(
            [API],
            _in_tunnel(get("/api/x"), SecretFound(Secret(SECRET), ("other.example.com",))),
            "so no capability would allow sending it to api.example.com until the operator "
            "adds api.example.com to that secret's hosts",
            id="vault-host-binding",
        ),
        pytest.param(
            [API],
            _in_tunnel(get("/api/x"), SECRET_FOUND, Resolved((IPv4Address("10.0.0.1"),))),
            "10.0.0.1 is a private address (10.0.0.0/8); no capability allows such addresses "
            "unless the operator lists the range in a capability's allow_private",
            id="address-guard-private",
        ),
        pytest.param(
            [API],
            _in_tunnel(get("/api/x"), SECRET_FOUND, Resolved(())),
            "the name resolved to no addresses, so no capability would allow it",
            id="address-guard-no-address",
        ),
        pytest.param(
            [replace(API, ports=(80, 443))],
            [
                ClientData(
                    get(
                        "http://api.example.com/api/x",
                        "api.example.com",
                        f"Proxy-Authorization: {AUTH}",
                    )
                )
            ],
            "capability grant_api allows this only over TLS, since it sends a secret; use "
            "https://api.example.com instead",
            id="plaintext-to-a-secrets-host",
        ),
        pytest.param(
            [replace(PINNED, secret="pin_token")],
            [ClientData(connect("pinned.example.com"))],
            "so no capability would allow it until the operator fixes that rule",
            id="passthrough-with-injection",
        ),
    ],
)
def test_every_403_says_which_capability_would_allow_it_in_reply_and_record(
    rules: list[Rule], events: list[Event], fragment: str
) -> None:
    run = Run(rules=rules)
    talk = run.talk()
    reply = sent_to_client(talk.feed(*events))
    assert b"HTTP/1.1 403 " in reply, reply[:200]
    denial = [r for r in run.records if r.status == 403]
    assert len(denial) == 1
    reason = denial[0].reason
    # The agent reads the same one sentence in the 403 body and in the run's egress list.
    assert reason.endswith(fragment), reason
    assert ACTIONABLE.search(reason)
    assert ". " not in reason and "\n" not in reason
    assert f"Airlock egress proxy: {reason}\n".encode() in reply


def test_a_pipelined_request_in_a_tunnel_goes_upstream_once_the_first_is_answered() -> None:
    plain = Rule(
        id="grant_plain",
        kind="capability",
        hosts=("api.example.com",),
        ports=(443,),
        methods=("GET",),
        paths=("/**",),
        allow_private=("127.0.0.0/8",),
    )
    run = Run(rules=[plain])
    talk = run.talk()
    open_tunnel(talk)
    # Both requests in one piece: the second waits in h11 until the first is answered.
    assert isinstance(talk.client(get("/a") + get("/b"))[0], Resolve)
    talk.feed(Resolved(LOCAL))
    assert sent_upstream(talk.feed(Dialed("127.0.0.1"))).startswith(b"GET /a ")
    answer = talk.feed(UpstreamData(response(b"first")))
    # The upstream is reused for the second at once, and nothing is refused.
    assert sent_upstream(answer).startswith(b"GET /b ")
    assert [r.path for r in records_of(answer)] == ["/a"]
    assert talk.need == "upstream"
    second = talk.feed(UpstreamData(response(b"second")))
    assert sent_to_client(second).endswith(b"second")
    assert [(r.path, r.status) for r in run.records] == [("/a", 200), ("/b", 200)]
