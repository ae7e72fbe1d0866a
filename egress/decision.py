"""The allow/deny decision: one pure function of frozen request facts and resolved rules.

Belongs here: `Rule` (a granted capability or a policy allow rule, already resolved),
`RequestFacts` (what the proxy learned about one CONNECT or one request), `Decision`,
the matching of host patterns, ports, methods and path globs, and `decide`. Does not
belong here: sockets, TLS, DNS, the SSRF address check (`egress.addresses`, run by the
caller after an allow, with `Decision.allow_private`), canonicalizing raw input
(`egress.targets`), checking tokens with the broker (the caller does that and passes
the outcome in as `token_valid`), logging, or reading the clock. The denials the
caller makes after an allow (the address guard, the vault's answer) are worded here
too (`deny_address`, `deny_missing_secret`, `deny_secret_host`), so every 403 reason
comes from this module and says which capability of the tenant's own policy would allow
the request, or that none would and why.

Matching uses the same functions policy validation is written against:
`policies.hosts.host_matches` and `policies.capabilities.path_matches`. A partial-segment
wildcard such as "/v1/item*" is refused by validation, so it matches only the literal
segment "item*" here rather than widening a rule that slipped past validation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from airlock.egress.targets import TargetRejected, canonical_target_host
from airlock.policies.capabilities import path_matches
from airlock.policies.hosts import host_matches

_INTERNAL_ERROR = "internal error, so no capability would allow the request; it is denied"
_PORT_SUFFIX = re.compile(r"[0-9]*")


@dataclass(frozen=True)
class Rule:
    """A granted capability or a policy allow rule, resolved to plain values.

    An empty `hosts`, `ports`, `methods` or `paths` matches nothing; whoever resolves
    a rule writes `methods=("*",)` for any method and `paths=("/**",)` for any path.
    Host patterns are exact names (or IP literals), or "*.example.com" for subdomains of
    any depth (never example.com itself, never an IP literal). Path globs use "*" for
    exactly one non-empty whole segment and "**" for any number of segments, including
    none. `secret` is a vault name, never a value.
    """

    id: str
    """The grant id of a capability, or "policy:<name>" for a policy allow rule; for an
    offer (a capability the tenant's policy lets the run ask for), the capability name."""
    kind: Literal["capability", "policy"]
    hosts: tuple[str, ...]
    ports: tuple[int, ...]
    methods: tuple[str, ...]
    paths: tuple[str, ...]
    tls: Literal["terminate", "passthrough"] = "terminate"
    allow_private: tuple[str, ...] = ()
    secret: str | None = None
    inject_header: str | None = None
    inject_format: str | None = None
    secret_withheld: bool = False
    """The grant has a secret that this run does not inject (its egress was opened with
    secrets withheld, as a browser box's is): the request goes out without it."""


@dataclass(frozen=True)
class RequestFacts:
    """What the proxy knows about one CONNECT or one HTTP request, already canonical."""

    run_live: bool
    token_valid: bool
    token_reason: str | None
    """Why the token is not valid, in one sentence; set by the caller after asking the broker."""
    stage: Literal["connect", "request"]
    """Either a CONNECT before TLS ("connect"), or a plaintext absolute-form request or a
    request inside a terminated tunnel ("request")."""
    scheme: Literal["http", "https"]
    host: str
    """Canonical host from the CONNECT authority or the absolute URL, never from Host."""
    port: int
    method: str | None
    """None at the connect stage."""
    path: str | None
    """Normalized (`egress.targets.normalize_path`); None at the connect stage."""
    host_header: str | None
    """As received; compared after canonicalization with its port stripped."""
    sni: str | None
    """As received in the TLS ClientHello of the tunnel, if any."""
    upgrade: bool
    requests_so_far: int
    """Requests of this run decided before this one."""
    max_requests: int


@dataclass(frozen=True)
class Decision:
    """The outcome, always with a one-sentence reason an agent can act on.

    `inject` is (header, format, secret name) when the chosen rule carries a secret;
    `allow_private` are the operator CIDRs the SSRF check must honour for this request;
    `passthrough` asks for an opaque tunnel instead of TLS termination. `status` is the
    HTTP status a denial is answered with: 407 for the run token, 429 for the run's
    request limit, 403 for everything else.
    """

    allow: bool
    reason: str
    status: int = 403
    rule_id: str | None = None
    inject: tuple[str, str, str] | None = None
    allow_private: tuple[str, ...] = ()
    passthrough: bool = False


def _deny(reason: str, rule_id: str | None = None, status: int = 403) -> Decision:
    # Every 403 reason says which capability would allow the request or that none would
    # (finding 7); the table tests in tests/rooms/egress/test_egress_decision.py check each branch.
    return Decision(allow=False, reason=reason, rule_id=rule_id, status=status)


def _allow(
    reason: str,
    rule: Rule,
    *,
    inject: tuple[str, str, str] | None = None,
    passthrough: bool = False,
) -> Decision:
    return Decision(
        allow=True,
        reason=reason,
        status=200,
        rule_id=rule.id,
        inject=inject,
        allow_private=rule.allow_private,
        passthrough=passthrough,
    )


def _method_matches(allowed: str, method: str) -> bool:
    # Methods are case-sensitive on the wire; "get" is not GET and matches nothing.
    return allowed == "*" or allowed.upper() == method


def _matches_target(rule: Rule, host: str, port: int) -> bool:
    return port in rule.ports and any(host_matches(p, host) for p in rule.hosts)


def _matches_request(rule: Rule, method: str, path: str) -> bool:
    return any(_method_matches(m, method) for m in rule.methods) and any(
        path_matches(p, path) for p in rule.paths
    )


def _best(rules: Sequence[Rule]) -> Rule:
    # A rule with a secret first, so credentials apply; then capabilities before policy
    # rules; min() keeps the first of equals, which is the caller's order.
    return min(rules, key=lambda r: (r.secret is None, r.kind != "capability"))


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _describe(rule: Rule) -> str:
    if rule.kind == "capability":
        return f"capability {rule.id}"
    return f"policy allow rule {rule.id.removeprefix('policy:')}"


def _host_header_host(value: str) -> str:
    # Host is uri-host [":" port]; only the host part is compared, the port is stripped.
    value = value.strip()
    if value.startswith("["):
        close = value.find("]")
        host, rest = value[: close + 1], value[close + 1 :]
        if close < 0 or (rest and not (rest[0] == ":" and _PORT_SUFFIX.fullmatch(rest[1:]))):
            raise TargetRejected("the Host header is malformed")
        return canonical_target_host(host)
    host, colon, port = value.rpartition(":")
    if not colon:
        return canonical_target_host(value)
    if ":" in host or not _PORT_SUFFIX.fullmatch(port):
        raise TargetRejected("the Host header is malformed")
    return canonical_target_host(host)


def _same_host(received: str | None, expected: str, parse: bool) -> bool:
    if received is None:
        return True
    try:
        host = _host_header_host(received) if parse else canonical_target_host(received)
    except TargetRejected:
        return False
    return host == expected


def _offer_allows(offer: Rule, facts: RequestFacts) -> bool:
    if not _matches_target(offer, facts.host, facts.port):
        return False
    if facts.method is None or facts.path is None:
        return True
    return _matches_request(offer, facts.method, facts.path)


def _offer_hint(offers: Sequence[Rule], facts: RequestFacts) -> str:
    # Only the offers of the tenant's own policy are passed in, so a hint never names
    # another tenant's capability.
    for offer in offers:
        if _offer_allows(offer, facts):
            return f'request_capability "{offer.id}" would allow it'
    return "no capability of this tenant's policy would allow it, so ask the operator"


def deny_missing_secret(rule_id: str | None, name: str) -> Decision:
    """The vault holds no value for the secret the allowing rule injects."""
    return _deny(
        f"the secret {name!r} is not in the vault, so no capability would allow this "
        "request until the operator stores it",
        rule_id,
    )


def deny_secret_host(rule_id: str | None, name: str, host: str) -> Decision:
    """The vault binds the secret to hosts other than `host`; that binding outranks rules."""
    return _deny(
        f"the vault binds the secret {name!r} to other hosts, so no capability would allow "
        f"sending it to {host} until the operator adds {host} to that secret's hosts",
        rule_id,
    )


def deny_address(
    facts: RequestFacts,
    reason: str,
    rule_id: str | None,
    *,
    liftable: bool,
    lifting_offers: Sequence[Rule],
) -> Decision:
    """The address guard refused what `facts` resolved to, for `reason`.

    `liftable` says whether an operator CIDR could permit the addresses at all (the
    proxy's own address, or a name without addresses, never is); `lifting_offers` are
    the tenant's offers whose `allow_private` would permit them, of which the first that
    matches the request is named.
    """
    if not liftable:
        return _deny(f"{reason}, so no capability would allow it", rule_id)
    for offer in lifting_offers:
        if _offer_allows(offer, facts):
            return _deny(f'{reason}; request_capability "{offer.id}" would allow it', rule_id)
    return _deny(
        f"{reason}; no capability allows such addresses unless the operator lists the range "
        "in a capability's allow_private",
        rule_id,
    )


def _decide_connect(facts: RequestFacts, rules: Sequence[Rule], offers: Sequence[Rule]) -> Decision:
    target = _authority(facts.host, facts.port)
    matching = [r for r in rules if _matches_target(r, facts.host, facts.port)]
    if not matching:
        return _deny(
            f"no granted capability or allow rule permits connections to {target}; "
            + _offer_hint(offers, facts)
        )
    # Terminating wins over passthrough when both match: the proxy then sees, checks and
    # logs every inner request instead of trusting an opaque tunnel.
    terminating = [r for r in matching if r.tls == "terminate"]
    if terminating:
        chosen = _best(terminating)
        return _allow(f"{_describe(chosen)} permits a TLS-terminated tunnel to {target}", chosen)
    chosen = _best(matching)
    if chosen.secret is not None:
        # An opaque tunnel cannot carry an injected header; fail closed rather than
        # connect without the credential the rule promises.
        return _deny(
            f"{_describe(chosen)} pairs a secret with an opaque (passthrough) tunnel to "
            f"{target}, so no capability would allow it until the operator fixes that rule",
            chosen.id,
        )
    return _allow(
        f"{_describe(chosen)} permits an opaque tunnel to {target}", chosen, passthrough=True
    )


def _decide_request(facts: RequestFacts, rules: Sequence[Rule], offers: Sequence[Rule]) -> Decision:
    if facts.method is None or facts.path is None:
        return _deny(
            "the request has no method or path, so it cannot be checked and no capability "
            "would allow it"
        )
    consistent = _same_host(facts.host_header, facts.host, parse=True) and _same_host(
        facts.sni, facts.host, parse=False
    )
    if not consistent and facts.scheme == "https":
        # Inside a tunnel the destination is the CONNECT authority; a different Host or
        # SNI is domain fronting, whatever the rules would say about either name.
        return _deny(
            "the Host header/SNI does not match the CONNECT target "
            f"{_authority(facts.host, facts.port)} and no capability allows that; send "
            "requests only for the host you connected to"
        )
    if not consistent:
        return _deny(
            f"the Host header does not match the URL's host {facts.host} and no capability "
            "allows that; send the request with a matching Host header"
        )
    if facts.upgrade:
        return _deny(
            "no capability allows WebSocket upgrades through the proxy; use plain HTTP requests"
        )
    target = f"{facts.method} {_authority(facts.host, facts.port)}{facts.path}"
    at_target = [r for r in rules if _matches_target(r, facts.host, facts.port)]
    matching = [r for r in at_target if _matches_request(r, facts.method, facts.path)]
    if not matching:
        hint = " (rules for this host allow other methods or paths)" if at_target else ""
        return _deny(
            f"no granted capability or allow rule permits {target}{hint}; "
            + _offer_hint(offers, facts)
        )
    chosen = _best(matching)
    if chosen.secret is None:
        withheld = " without its secret (this run injects none)" if chosen.secret_withheld else ""
        return _allow(f"{_describe(chosen)} permits {target}{withheld}", chosen)
    if facts.scheme != "https":
        return _deny(
            f"{_describe(chosen)} allows this only over TLS, since it sends a secret; use "
            f"https://{facts.host} instead",
            chosen.id,
        )
    if chosen.tls == "passthrough":
        return _deny(
            f"{_describe(chosen)} pairs a secret with a passthrough tunnel, so no capability "
            "would allow it until the operator fixes that rule",
            chosen.id,
        )
    if not chosen.inject_header or not chosen.inject_format:
        # Fail closed: a rule promising a credential that cannot be injected must not
        # silently send the request without it.
        return _deny(
            f"{_describe(chosen)} names a secret but no header to inject it into, so no "
            "capability would allow it until the operator fixes that rule",
            chosen.id,
        )
    return _allow(
        f"{_describe(chosen)} permits {target} with its secret injected",
        chosen,
        inject=(chosen.inject_header, chosen.inject_format, chosen.secret),
    )


def _decide(facts: RequestFacts, rules: Sequence[Rule], offers: Sequence[Rule]) -> Decision:
    if not facts.run_live:
        return _deny("this run has ended, so no capability would allow it any more; do not retry")
    if not facts.token_valid:
        return _deny(
            facts.token_reason or "the proxy token is missing or not valid for this run",
            status=407,
        )
    if facts.requests_so_far >= facts.max_requests:
        return _deny(
            f"this run reached its limit of {facts.max_requests} requests (refused ones "
            "count too); no further requests are allowed in this run",
            status=429,
        )
    if facts.stage == "connect":
        return _decide_connect(facts, rules, offers)
    if facts.stage == "request":
        return _decide_request(facts, rules, offers)
    return _deny(_INTERNAL_ERROR)


def decide(facts: RequestFacts, rules: Sequence[Rule], offers: Sequence[Rule] = ()) -> Decision:
    """Decide one CONNECT or one request; deny unless a rule permits it.

    `rules` are what the run holds (its live grants and the policy's allow rules);
    `offers` are the capabilities the tenant's policy lets it ask for, used only to
    say in a denial which one would allow the request.

    Rule order, first hit wins:

    1. The run is not live: deny (403).
    2. The run token is not valid: deny (407) with `token_reason`.
    3. `requests_so_far` (allowed and refused alike) has reached `max_requests`: deny (429).
    4. Connect stage (method and path not yet known): allow when a rule matches host and
       port. A terminating rule wins over a passthrough one; the tunnel is passthrough
       only when every matching rule says so, and a passthrough rule with a secret is
       denied (an opaque tunnel cannot carry the credential). Otherwise deny, naming the
       first offer that would match or saying that none would.
    5. Request stage:
       a. Host header (port stripped) and SNI, when present, must equal the target host
          after canonicalization; over https that is the CONNECT target. Else deny.
       b. An Upgrade (WebSocket) request: deny.
       c. No rule matches host, port, method and path: deny, naming the first offer that
          would match or saying that none would.
       d. Among the matches prefer one with a secret, then a capability over a policy
          rule, then the first. If it carries a secret: deny over plaintext http, deny on
          a passthrough rule, deny when it names no header to inject into.
       e. Allow, with the rule id, the injection (header, format, secret name) and the
          rule's `allow_private` CIDRs for the caller's address check.

    Any unexpected error is a deny: a decision that could not be made is never an allow.
    """
    try:
        return _decide(facts, rules, offers)
    except Exception:
        # Deny is the default value; a bug or a malformed rule must not open the proxy.
        return _deny(_INTERNAL_ERROR)
