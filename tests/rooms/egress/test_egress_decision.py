"""Tests of `egress.decision.decide`: one table row per branch of its rule order.

Each row is (name, facts, rules, expected allow, fragment of the reason). The facts of a
row are a plain allowed request changed in the fields that matter to it.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from airlock.egress.decision import (
    Decision,
    RequestFacts,
    Rule,
    decide,
    deny_address,
    deny_missing_secret,
    deny_secret_host,
)

API = Rule(
    id="cap_api",
    kind="capability",
    hosts=("api.example.com",),
    ports=(443,),
    methods=("GET", "HEAD"),
    paths=("/repos/acme/**", "/users/*"),
    secret="api_token",
    inject_header="Authorization",
    inject_format="Bearer {secret}",
)
PUBLIC = Rule(
    id="policy:pypi",
    kind="policy",
    hosts=("pypi.org", "*.pythonhosted.org"),
    ports=(443, 80),
    methods=("*",),
    paths=("/**",),
)
PASS = Rule(
    id="policy:pinned",
    kind="policy",
    hosts=("pinned.example.net",),
    ports=(443,),
    methods=("*",),
    paths=("/**",),
    tls="passthrough",
)
LOCAL = Rule(
    id="policy:local",
    kind="policy",
    hosts=("127.0.0.1", "::1"),
    ports=(8080,),
    methods=("GET",),
    paths=("/health",),
    allow_private=("127.0.0.0/8", "::1/128"),
)

REQUEST = RequestFacts(
    run_live=True,
    token_valid=True,
    token_reason=None,
    stage="request",
    scheme="https",
    host="api.example.com",
    port=443,
    method="GET",
    path="/repos/acme/widgets",
    host_header="api.example.com",
    sni="api.example.com",
    upgrade=False,
    requests_so_far=0,
    max_requests=100,
)
CONNECT = replace(REQUEST, stage="connect", method=None, path=None, host_header=None, sni=None)
PLAIN = replace(REQUEST, scheme="http", port=80, host="pypi.org", host_header="pypi.org", sni=None)


def facts(base: RequestFacts = REQUEST, **changes: Any) -> RequestFacts:
    return replace(base, **changes)


Row = tuple[str, RequestFacts, tuple[Rule, ...], bool, str]

ROWS: list[Row] = [
    # 1-3: run, token, limit come before anything else, whatever the rules say.
    ("denies_ended_run", facts(run_live=False), (API,), False, "run has ended"),
    (
        "denies_invalid_token_with_its_reason",
        facts(token_valid=False, token_reason="the run token was revoked"),
        (API,),
        False,
        "the run token was revoked",
    ),
    (
        "denies_invalid_token_without_a_reason",
        facts(token_valid=False),
        (API,),
        False,
        "proxy token is missing or not valid",
    ),
    (
        "denies_over_request_limit",
        facts(requests_so_far=100, max_requests=100),
        (API,),
        False,
        "limit of 100 requests",
    ),
    (
        "allows_last_request_under_limit",
        facts(requests_so_far=99, max_requests=100),
        (API,),
        True,
        "capability cap_api",
    ),
    (
        "denies_limit_before_connect_matching",
        facts(CONNECT, requests_so_far=5, max_requests=5),
        (API,),
        False,
        "limit of 5",
    ),
    # 4: connect stage.
    ("connect_allows_host_and_port", CONNECT, (API,), True, "TLS-terminated tunnel"),
    (
        "connect_denies_unknown_host",
        facts(CONNECT, host="evil.example.org"),
        (API,),
        False,
        "no granted capability or allow rule permits connections to evil.example.org:443",
    ),
    (
        "connect_denies_wrong_port",
        facts(CONNECT, port=8443),
        (API,),
        False,
        "api.example.com:8443",
    ),
    ("connect_denies_with_no_rules", CONNECT, (), False, "ask the operator"),
    (
        "connect_allows_wildcard_subdomain",
        facts(CONNECT, host="files.pythonhosted.org"),
        (PUBLIC,),
        True,
        "policy allow rule pypi",
    ),
    (
        "connect_allows_deep_wildcard_subdomain",
        facts(CONNECT, host="a.b.pythonhosted.org"),
        (PUBLIC,),
        True,
        "pypi",
    ),
    (
        "connect_wildcard_excludes_apex",
        facts(CONNECT, host="pythonhosted.org"),
        (PUBLIC,),
        False,
        "no granted capability or allow rule",
    ),
    (
        "connect_wildcard_excludes_lookalike",
        facts(CONNECT, host="evilpythonhosted.org"),
        (PUBLIC,),
        False,
        "no granted capability or allow rule",
    ),
    (
        "connect_wildcard_over_a_tld_matches_nothing",
        facts(CONNECT, host="example.com"),
        (replace(PUBLIC, hosts=("*.com",)),),
        False,
        "no granted capability or allow rule",
    ),
    (
        "connect_wildcard_never_matches_ip_literal",
        facts(CONNECT, host="127.0.0.1"),
        (replace(PUBLIC, hosts=("*.0.0.1",)),),
        False,
        "no granted capability or allow rule",
    ),
    (
        "connect_star_pattern_matches_nothing",
        facts(CONNECT, host="example.com"),
        (replace(PUBLIC, hosts=("*",)),),
        False,
        "no granted capability or allow rule",
    ),
    (
        "connect_allows_ipv6_literal_in_any_spelling",
        facts(CONNECT, host="::1", port=8080),
        (replace(LOCAL, hosts=("[0:0:0:0:0:0:0:1]",)),),
        True,
        "policy allow rule local",
    ),
    (
        "connect_names_bracketed_ipv6_target",
        facts(CONNECT, host="::2", port=8080),
        (LOCAL,),
        False,
        "[::2]:8080",
    ),
    (
        "connect_allows_passthrough",
        facts(CONNECT, host="pinned.example.net"),
        (PASS,),
        True,
        "opaque tunnel",
    ),
    (
        "connect_prefers_termination_over_passthrough",
        facts(CONNECT, host="pinned.example.net"),
        (PASS, replace(PUBLIC, hosts=("pinned.example.net",))),
        True,
        "TLS-terminated",
    ),
    (
        "connect_denies_passthrough_with_secret",
        facts(CONNECT, host="pinned.example.net"),
        (replace(PASS, secret="tok", inject_header="Authorization", inject_format="{secret}"),),
        False,
        "opaque (passthrough) tunnel",
    ),
    # 5a: Host header and SNI.
    ("allows_matching_host_and_sni", REQUEST, (API,), True, "with its secret injected"),
    (
        "allows_host_header_with_port_and_case",
        facts(host_header="API.Example.com.:443"),
        (API,),
        True,
        "cap_api",
    ),
    ("allows_absent_host_and_sni", facts(host_header=None, sni=None), (API,), True, "cap_api"),
    (
        "denies_host_header_mismatch",
        facts(host_header="evil.example.org"),
        (API,),
        False,
        "Host header/SNI does not match the CONNECT target api.example.com:443",
    ),
    (
        "denies_host_header_mismatch_even_when_that_host_is_allowed",
        facts(host_header="pypi.org"),
        (API, PUBLIC),
        False,
        "does not match the CONNECT target",
    ),
    (
        "denies_sni_mismatch",
        facts(sni="pypi.org"),
        (API, PUBLIC),
        False,
        "does not match the CONNECT target",
    ),
    (
        "denies_malformed_host_header",
        facts(host_header="api.example.com:x"),
        (API,),
        False,
        "does not match the CONNECT target",
    ),
    (
        "denies_odd_ip_in_host_header",
        facts(host="127.0.0.1", port=8080, path="/health", sni=None, host_header="127.1"),
        (LOCAL,),
        False,
        "does not match",
    ),
    (
        "allows_bracketed_ipv6_host_header",
        facts(host="::1", port=8080, path="/health", sni=None, host_header="[::1]:8080"),
        (LOCAL,),
        True,
        "policy allow rule local",
    ),
    (
        "plaintext_denies_host_header_mismatch",
        facts(PLAIN, host_header="evil.example.org"),
        (PUBLIC,),
        False,
        "Host header does not match the URL's host pypi.org",
    ),
    ("plaintext_allows_matching_host", facts(PLAIN, path="/simple/"), (PUBLIC,), True, "pypi"),
    # 5b: upgrades.
    (
        "denies_websocket_upgrade",
        facts(upgrade=True),
        (API,),
        False,
        "no capability allows WebSocket upgrades",
    ),
    # 5c: method and path.
    (
        "denies_unlisted_method",
        facts(method="POST"),
        (API,),
        False,
        "no granted capability or allow rule permits POST api.example.com:443/repos/acme/widgets "
        "(rules for this host allow other methods or paths); no capability of this",
    ),
    ("denies_lowercase_method", facts(method="get"), (API,), False, "permits get"),
    (
        "denies_path_outside_globs",
        facts(path="/repos/other/widgets"),
        (API,),
        False,
        "permits GET api.example.com:443/repos/other/widgets",
    ),
    (
        "denies_unknown_host_without_hint",
        facts(host="other.example.com", host_header=None, sni=None),
        (API,),
        False,
        "permits GET other.example.com:443/repos/acme/widgets; no capability of this",
    ),
    ("double_star_matches_zero_segments", facts(path="/repos/acme"), (API,), True, "cap_api"),
    ("double_star_matches_trailing_slash", facts(path="/repos/acme/"), (API,), True, "cap_api"),
    ("double_star_matches_deep_path", facts(path="/repos/acme/a/b/c"), (API,), True, "cap_api"),
    ("single_star_matches_one_segment", facts(path="/users/octocat"), (API,), True, "cap_api"),
    (
        "single_star_rejects_two_segments",
        facts(path="/users/a/b"),
        (API,),
        False,
        "no granted capability",
    ),
    (
        "single_star_rejects_empty_segment",
        facts(path="/users/"),
        (API,),
        False,
        "no granted capability",
    ),
    (
        "double_slash_matches_no_glob",
        facts(path="/users//x"),
        (API,),
        False,
        "no granted capability",
    ),
    (
        "glob_is_not_a_prefix_match",
        facts(path="/repos/acmecorp/x"),
        (API,),
        False,
        "no granted capability",
    ),
    # Validation refuses partial-segment wildcards; one that slipped past it is literal.
    (
        "star_inside_a_segment_is_literal",
        facts(path="/files/a.json"),
        (replace(API, paths=("/files/*.json",)),),
        False,
        "no granted capability",
    ),
    (
        "star_inside_a_segment_matches_only_itself",
        facts(path="/files/*.json"),
        (replace(API, paths=("/files/*.json",)),),
        True,
        "cap_api",
    ),
    (
        "star_inside_a_segment_does_not_cross_slashes",
        facts(path="/files/a/b.json"),
        (replace(API, paths=("/files/*.json",)),),
        False,
        "no granted capability",
    ),
    (
        "glob_specials_other_than_star_are_literal",
        facts(path="/a/x"),
        (replace(API, paths=("/a/?",)),),
        False,
        "no granted capability",
    ),
    (
        "empty_methods_match_nothing",
        REQUEST,
        (replace(API, methods=()),),
        False,
        "no granted capability",
    ),
    (
        "empty_paths_match_nothing",
        REQUEST,
        (replace(API, paths=()),),
        False,
        "no granted capability",
    ),
    (
        "relative_glob_matches_nothing",
        REQUEST,
        (replace(API, paths=("**",)),),
        False,
        "no granted capability",
    ),
    # 5d: choosing among matches, and secrets.
    (
        "prefers_capability_with_secret_over_policy_without",
        REQUEST,
        (replace(PUBLIC, hosts=("api.example.com",)), API),
        True,
        "capability cap_api",
    ),
    (
        "prefers_capability_over_policy_among_equals",
        REQUEST,
        (
            replace(PUBLIC, hosts=("api.example.com",)),
            replace(API, secret=None, id="cap_plain"),
        ),
        True,
        "capability cap_plain",
    ),
    (
        "keeps_first_among_equals",
        REQUEST,
        (replace(API, id="cap_one"), replace(API, id="cap_two")),
        True,
        "capability cap_one",
    ),
    (
        "denies_secret_over_plaintext",
        facts(scheme="http", port=80, sni=None),
        (replace(API, ports=(80,)),),
        False,
        "capability cap_api allows this only over TLS, since it sends a secret; use "
        "https://api.example.com",
    ),
    (
        "denies_passthrough_rule_with_secret_at_request_stage",
        REQUEST,
        (replace(API, tls="passthrough"),),
        False,
        "passthrough tunnel",
    ),
    (
        "denies_secret_without_header",
        REQUEST,
        (replace(API, inject_header=None),),
        False,
        "no header to inject it into",
    ),
    (
        "denies_secret_without_format",
        REQUEST,
        (replace(API, inject_format=""),),
        False,
        "no header to inject it into",
    ),
    # Unexpected errors are denials.
    (
        "denies_on_internal_error",
        REQUEST,
        (replace(API, ports=None),),  # type: ignore[arg-type]  # broken on purpose
        False,
        "internal error, so no capability would allow the request",
    ),
    ("denies_request_without_path", facts(path=None), (API,), False, "no method or path"),
    (
        "denies_unknown_stage",
        facts(stage="handshake"),
        (API,),
        False,
        "internal error, so no capability would allow the request",
    ),
]


@pytest.mark.parametrize(
    ("facts_", "rules", "allow", "fragment"),
    [pytest.param(*row[1:], id=row[0]) for row in ROWS],
)
def test_decide(facts_: RequestFacts, rules: tuple[Rule, ...], allow: bool, fragment: str) -> None:
    decision = decide(facts_, rules)
    assert decision.allow is allow
    assert fragment in decision.reason
    # One sentence: no line breaks, nothing after a final full stop.
    assert "\n" not in decision.reason
    assert not decision.reason.endswith(".")


def test_allow_carries_rule_injection_and_private_ranges() -> None:
    assert decide(REQUEST, (API,)) == Decision(
        allow=True,
        reason="capability cap_api permits GET api.example.com:443/repos/acme/widgets "
        "with its secret injected",
        status=200,
        rule_id="cap_api",
        inject=("Authorization", "Bearer {secret}", "api_token"),
    )
    local = facts(
        host="127.0.0.1", port=8080, path="/health", host_header="127.0.0.1:8080", sni=None
    )
    decision = decide(local, (LOCAL,))
    assert decision.allow
    assert decision.rule_id == "policy:local"
    assert decision.inject is None
    assert decision.allow_private == ("127.0.0.0/8", "::1/128")


def test_a_withheld_secret_allows_without_injection_and_says_so() -> None:
    withheld = replace(
        API, secret=None, inject_header=None, inject_format=None, secret_withheld=True
    )
    decision = decide(REQUEST, (withheld,))
    assert decision.allow and decision.inject is None
    assert decision.reason == (
        "capability cap_api permits GET api.example.com:443/repos/acme/widgets without its "
        "secret (this run injects none)"
    )


def test_connect_decisions_never_inject() -> None:
    terminated = decide(CONNECT, (API,))
    assert terminated.allow and not terminated.passthrough and terminated.inject is None
    passthrough = decide(facts(CONNECT, host="pinned.example.net"), (PASS,))
    assert passthrough.allow and passthrough.passthrough and passthrough.inject is None
    assert passthrough.rule_id == "policy:pinned"


# Everything a rule says about its secret, spelled so that any echo of it in a reason shows.
CANARY_SECRET = "canary_vault_name"
CANARY_FORMAT = "Canary-Scheme {secret}"


def with_canary(rule: Rule) -> Rule:
    if rule.secret is None:
        return rule
    return replace(rule, secret=CANARY_SECRET, inject_format=rule.inject_format and CANARY_FORMAT)


def test_denials_name_no_secret_and_carry_no_injection() -> None:
    denied = []
    for name, facts_, rules, _, _ in ROWS:
        canaried = tuple(with_canary(rule) for rule in rules)
        decision = decide(facts_, canaried)
        if decision.allow or not any(rule.secret for rule in canaried):
            continue
        denied.append(name)
        assert decision.inject is None, name
        assert CANARY_SECRET not in decision.reason, (name, decision.reason)
        assert "Canary-Scheme" not in decision.reason, (name, decision.reason)
    # The table denies many requests under rules that carry a secret; all were looked at.
    assert len(denied) >= 10, denied


@pytest.mark.parametrize(
    ("facts_", "status"),
    [
        pytest.param(facts(token_valid=False), 407, id="token"),
        pytest.param(facts(requests_so_far=100, max_requests=100), 429, id="limit"),
        pytest.param(facts(host="evil.example.org", host_header=None, sni=None), 403, id="rule"),
        pytest.param(REQUEST, 200, id="allowed"),
    ],
)
def test_status_follows_the_rule_that_decided(facts_: RequestFacts, status: int) -> None:
    assert decide(facts_, (API,)).status == status


def test_an_invalid_token_is_denied_before_any_rule_is_looked_at() -> None:
    # The token is a real input: even a rule set that would allow the request does not.
    decision = decide(facts(token_valid=False, token_reason="run token expired"), (API, PUBLIC))
    assert (decision.allow, decision.status, decision.reason) == (False, 407, "run token expired")


# Offers: what the tenant's policy would let the run ask for (finding 7).
OFFER_ISSUES = Rule(
    id="github-issues",
    kind="capability",
    hosts=("api.example.com",),
    ports=(443,),
    methods=("GET", "POST"),
    paths=("/repos/*/issues/**",),
)
OFFER_PINNED = Rule(
    id="pinned-mirror",
    kind="capability",
    hosts=("pinned.example.net",),
    ports=(443,),
    methods=(),
    paths=(),
    tls="passthrough",
)


@pytest.mark.parametrize(
    ("facts_", "fragment"),
    [
        pytest.param(
            facts(method="POST", path="/repos/acme/issues/7"),
            'request_capability "github-issues" would allow it',
            id="request-matching-an-offer",
        ),
        pytest.param(
            facts(CONNECT, host="pinned.example.net"),
            'request_capability "pinned-mirror" would allow it',
            id="connect-matching-an-offer",
        ),
        pytest.param(
            facts(method="DELETE", path="/repos/acme/issues/7"),
            "no capability of this tenant's policy would allow it, so ask the operator",
            id="no-offer-allows-the-method",
        ),
        pytest.param(
            facts(CONNECT, host="evil.example.org"),
            "no capability of this tenant's policy would allow it, so ask the operator",
            id="no-offer-for-the-host",
        ),
    ],
)
def test_denials_name_the_capability_that_would_allow_the_request(
    facts_: RequestFacts, fragment: str
) -> None:
    decision = decide(facts_, (), (OFFER_ISSUES, OFFER_PINNED))
    assert not decision.allow
    assert decision.reason.endswith(fragment), decision.reason
    # One sentence.
    assert ". " not in decision.reason and "\n" not in decision.reason


def test_offers_never_allow_a_request() -> None:
    # An offer is a hint, not a grant.
    assert not decide(facts(method="POST", path="/repos/acme/issues/7"), (), (OFFER_ISSUES,)).allow
    assert not decide(facts(CONNECT, host="pinned.example.net"), (), (OFFER_PINNED,)).allow


# Finding 7: every 403 says which capability would allow the request, or that none would.
ACTIONABLE = re.compile(
    r'request_capability "[^"]+" would allow it'
    r"|no capability (of this tenant's policy )?(would allow|allows)"
    r"|capability \S+ allows this only over TLS"
)


@pytest.mark.parametrize("row", [pytest.param(row, id=row[0]) for row in ROWS])
def test_every_403_of_decide_names_a_capability_or_says_none_would(row: Row) -> None:
    _, facts_, rules, _, _ = row
    for offers in ((), (OFFER_ISSUES, OFFER_PINNED)):
        decision = decide(facts_, rules, offers)
        if decision.status == 403:
            assert ACTIONABLE.search(decision.reason), decision.reason
            assert ". " not in decision.reason and "\n" not in decision.reason


PRIVATE = "10.0.0.1 is a private address (10.0.0.0/8)"
OFFER_INTRANET = replace(OFFER_ISSUES, id="intranet-issues", allow_private=("10.0.0.0/8",))


@pytest.mark.parametrize(
    ("decision", "fragment"),
    [
        pytest.param(
            deny_address(REQUEST, PRIVATE, "cap_api", liftable=True, lifting_offers=()),
            f"{PRIVATE}; no capability allows such addresses unless the operator lists the "
            "range in a capability's allow_private",
            id="address-no-offer-lifts-it",
        ),
        pytest.param(
            deny_address(
                facts(method="POST", path="/repos/acme/issues/7"),
                PRIVATE,
                "cap_api",
                liftable=True,
                lifting_offers=(OFFER_INTRANET,),
            ),
            f'{PRIVATE}; request_capability "intranet-issues" would allow it',
            id="address-an-offer-lifts-it",
        ),
        pytest.param(
            # The offer's range would permit the address, but not this method and path.
            deny_address(
                facts(method="DELETE", path="/repos/acme/issues/7"),
                PRIVATE,
                "cap_api",
                liftable=True,
                lifting_offers=(OFFER_INTRANET,),
            ),
            "unless the operator lists the range in a capability's allow_private",
            id="address-lifting-offer-for-another-request",
        ),
        pytest.param(
            deny_address(
                REQUEST,
                "10.0.0.9 is the proxy's own address and is never dialed",
                "cap_api",
                liftable=False,
                lifting_offers=(OFFER_INTRANET,),
            ),
            "10.0.0.9 is the proxy's own address and is never dialed, so no capability "
            "would allow it",
            id="address-never-liftable",
        ),
        pytest.param(
            deny_missing_secret("cap_api", "api_token"),
            "the secret 'api_token' is not in the vault, so no capability would allow this "
            "request until the operator stores it",
            id="secret-not-in-vault",
        ),
        pytest.param(
            deny_secret_host("cap_api", "api_token", "evil.example.org"),
            "the vault binds the secret 'api_token' to other hosts, so no capability would "
            "allow sending it to evil.example.org until the operator adds evil.example.org "
            "to that secret's hosts",
            id="secret-bound-to-other-hosts",
        ),
    ],
)
def test_guard_denials_after_the_decision_say_what_would_allow_it(
    decision: Decision, fragment: str
) -> None:
    assert (decision.allow, decision.status, decision.rule_id) == (False, 403, "cap_api")
    assert decision.reason.endswith(fragment), decision.reason
    assert ACTIONABLE.search(decision.reason)
    assert ". " not in decision.reason and "\n" not in decision.reason
