"""A request head read and decided: the first stage of every leg, and the check that an
allowed leg may go on flowing. Pure: no sockets, no records.

Belongs here: turning the sandbox's `h11.Request` (a CONNECT, a plaintext absolute-form
request, or an inner request of a terminated tunnel) into a `Leg` with its facts and its
`Decision` from `egress.decision`, or the refusal its head earns (too large, a bad target,
bad framing); the two later decisions of an allowed leg (the secret the vault gave, bound
to its hosts, injected; the resolved address checked, the one to dial); and `cut_reason`,
why an allowed leg must stop now. Not here: what the
conversation does with the verdict (answer, look a secret up, dial, start TLS) or the
record it keeps (`egress.conversation`).
"""

from __future__ import annotations

from dataclasses import dataclass

import h11

from airlock.policies.hosts import host_matches

from .addresses import check_addresses
from .decision import (
    Decision,
    RequestFacts,
    decide,
    deny_address,
    deny_missing_secret,
    deny_secret_host,
)
from .heads import (
    MAX_HEAD_BYTES,
    TOKEN_REFUSED,
    framing_problem,
    header,
    parse_absolute_http,
    proxy_token,
)
from .legs import Leg, RunContext, new_leg
from .steps import IPAddress, SecretFound
from .targets import TargetRejected, normalize_path, origin_form, parse_authority, path_for_log

_EVERYWHERE = ("0.0.0.0/0", "::/0")


@dataclass(frozen=True)
class Admission:
    """A head read: its leg (decided when `refused` is None), the run token the
    connection now carries, and the refusal (status, reason) its head earned."""

    leg: Leg
    token: str | None
    refused: tuple[int, str] | None = None


def admit(
    run: RunContext, request: h11.Request, *, tunnel: Leg | None, token: str | None, sni: str | None
) -> Admission:
    """Read `request` (inside `tunnel` when one is open, whose token is `token`) and decide it.

    Counts the request against the run's limit first, whatever follows."""
    before = run.ledger.admit()
    past = before >= run.ledger.limits.max_requests
    method = request.method.decode("ascii", "replace")
    raw_target = request.target.decode("latin-1")
    if tunnel is None and request.method == b"CONNECT":
        leg = new_leg(run, "CONNECT", raw_target[:200], 0, "-", past_limit=past)
    elif tunnel is None:
        leg = new_leg(run, method, raw_target[:200], 0, path_for_log(raw_target), past_limit=past)
        leg.scheme = "http"
    else:
        leg = new_leg(run, method, tunnel.host, tunnel.port, path_for_log(raw_target))
        leg.past_limit = past
    size = len(request.target) + sum(len(k) + len(v) + 4 for k, v in request.headers)
    if size > MAX_HEAD_BYTES:
        return Admission(leg, token, (431, f"request head over {MAX_HEAD_BYTES} bytes"))
    if leg.method == "CONNECT" and tunnel is None:
        return _admit_connect(run, leg, request, before, token)
    leg.request = request
    try:
        if tunnel is None:
            leg.host, leg.port, raw_target = parse_absolute_http(raw_target)
            leg.path = path_for_log(raw_target)
            token = proxy_token(request)
        path = normalize_path(raw_target)
        leg.target = origin_form(raw_target)
    except TargetRejected as exc:
        return Admission(leg, token, (400, exc.reason))
    framing = framing_problem(request)
    if framing is not None:
        return Admission(leg, token, (400, framing))
    _decide(
        run,
        leg,
        token,
        before,
        stage="request",
        scheme=leg.scheme,
        host=leg.host,
        port=leg.port,
        method=method,
        path=path,
        host_header=header(request, b"host"),
        sni=sni,
        upgrade=header(request, b"upgrade") is not None,
    )
    leg.bodyless = header(request, b"content-length") in (None, "0") and (
        header(request, b"transfer-encoding") is None
    )
    return Admission(leg, token)


def _admit_connect(
    run: RunContext, leg: Leg, request: h11.Request, before: int, token: str | None
) -> Admission:
    try:
        leg.host, leg.port = parse_authority(leg.host)
    except TargetRejected as exc:
        return Admission(leg, token, (400, exc.reason))
    token = proxy_token(request)
    _decide(
        run,
        leg,
        token,
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
    return Admission(leg, token)


def _decide(run: RunContext, leg: Leg, token: str | None, before: int, **facts: object) -> None:
    claims = run.authorize(token) if token else None
    leg.facts = RequestFacts(
        run_live=run.live(),
        token_valid=claims is not None,
        token_reason=TOKEN_REFUSED,
        requests_so_far=before,
        max_requests=run.ledger.limits.max_requests,
        **facts,  # type: ignore[arg-type]
    )
    leg.decision = decide(leg.facts, run.rules(claims) if claims is not None else (), run.offers)


def inject_secret(run: RunContext, leg: Leg, found: SecretFound) -> Decision | None:
    """Put the vault's answer for the allowed `leg`'s secret into its header, or the
    denial: no such secret, or one bound to other hosts than the leg's."""
    assert leg.decision is not None and leg.decision.inject is not None
    header, template, name = leg.decision.inject
    if found.value is None:
        return deny_missing_secret(leg.decision.rule_id, name)
    # The vault's own host binding holds even if a capability is too broad.
    if not any(host_matches(pattern, leg.host) for pattern in found.hosts):
        return deny_secret_host(leg.decision.rule_id, name, leg.host)
    value = found.value.reveal()
    leg.header = (header, template.replace("{secret}", value))
    leg.injected = (name,)
    run.ledger.note_injected(value, leg.host)
    return None


def choose_address(run: RunContext, leg: Leg, addresses: tuple[IPAddress, ...]) -> str | Decision:
    """The address of `addresses` the allowed `leg` dials (exactly the one checked), or
    the denial, saying whether an operator's CIDR or an offered capability could lift it."""
    assert leg.decision is not None and leg.facts is not None
    own = run.own_addresses
    found = list(addresses)
    chosen, reason = check_addresses(found, leg.decision.allow_private, own)
    if chosen is not None:
        return str(chosen)
    return deny_address(
        leg.facts,
        reason or f"{leg.host} resolves to a forbidden address",
        leg.decision.rule_id,
        # Whether any operator CIDR could permit these addresses at all.
        liftable=check_addresses(found, _EVERYWHERE, own)[0] is not None,
        lifting_offers=[
            offer
            for offer in run.offers
            if check_addresses(found, offer.allow_private, own)[0] is not None
        ],
    )


def cut_reason(run: RunContext, active: Leg | None, token: str | None) -> str | None:
    """Why the allowed leg `active` may no longer flow, or None: the run ended, its token
    expired or was revoked, or the grant that allowed it is gone."""
    # A denial carries nothing to cut, and its answer may still be on its way.
    if active is None or active.decision is None or not active.decision.allow or token is None:
        return None
    if not run.live():
        return "the run ended"
    claims = run.authorize(token)
    if claims is None:
        return "the run token expired or was revoked, so the connection was cut"
    if active.decision.rule_id not in {r.id for r in run.rules(claims)}:
        return (
            "the capability that allowed this connection was revoked or expired, "
            "so the connection was cut"
        )
    return None
