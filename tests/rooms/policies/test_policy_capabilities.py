"""Tests of capabilities and egress rules in policies: validation, host and path
matching, scope resolution and durations."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

import pytest

from airlock.errors import PolicyInvalid
from airlock.policies import (
    BrokerSettings,
    Capability,
    EgressLimits,
    EgressRule,
    EgressSettings,
    InjectSpec,
    Policy,
    Scope,
    canonical_host,
    canonical_host_pattern,
    format_duration,
    host_matches,
    load_policy,
    parse_duration,
    parse_ip_literal,
    path_matches,
    policy_json_schema,
    resolve_scope,
)

FULL_EXAMPLE = """
[capabilities.github-read]
description = "Read repositories of one GitHub org"
params = { org = "^[A-Za-z0-9-]{1,39}$" }
hosts = ["api.github.com"]
ports = [443]
methods = ["GET", "HEAD"]
paths = ["/repos/{org}/**", "/orgs/{org}/**"]
secret = "github_token"
inject = { header = "Authorization", format = "Bearer {secret}" }
ttl = "15m"
max_ttl = "1h"
approval = "ask"
allow_private = ["127.0.0.0/8"]
tls = "terminate"

[egress]
[[egress.allow]]
name = "pypi"
hosts = ["pypi.org", "files.pythonhosted.org"]
ports = [443]
methods = ["GET", "HEAD"]
paths = ["/**"]
tls = "terminate"
allow_private = []
[egress.limits]
max_requests = 1000
max_request_bytes = 10485760
max_response_bytes = 104857600
max_connections = 16
[broker]
max_capabilities_per_session = 32
max_live_grants_per_tenant = 256
"""

# A valid capability; tests override or drop (None) single keys of it.
_BASE_CAPABILITY = {
    "hosts": '["api.example.com"]',
    "methods": '["GET"]',
    "paths": '["/**"]',
}


def _capability(name: str = "c", **fields: str | None) -> str:
    return _capability_entry(name, fields)


def _capability_entry(name: str, fields: Mapping[str, str | None]) -> str:
    merged = {**_BASE_CAPABILITY, **fields}
    lines = [f"{key} = {value}" for key, value in merged.items() if value is not None]
    return f"[capabilities.{name}]\n" + "\n".join(lines) + "\n"


def _rule(**fields: str | None) -> str:
    merged = {"name": '"r"', **_BASE_CAPABILITY, **fields}
    lines = [f"{key} = {value}" for key, value in merged.items() if value is not None]
    return "[[egress.allow]]\n" + "\n".join(lines) + "\n"


def _load(tmp_path: Path, text: str) -> Policy:
    path = tmp_path / "policy.toml"
    path.write_text(text, encoding="utf-8")
    return load_policy(path)


def _problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(PolicyInvalid) as caught:
        _load(tmp_path, text)
    return caught.value.problems


def _only_problem(tmp_path: Path, text: str, where: str) -> str:
    [problem] = _problems(tmp_path, text)
    assert problem.startswith(f"{where}: "), problem
    return problem


def _capability_of(tmp_path: Path, **fields: str | None) -> Capability:
    return _load(tmp_path, _capability_entry("c", fields)).capabilities["c"]


# --- the full example -------------------------------------------------------------


def test_full_example_loads_with_every_value(tmp_path: Path) -> None:
    policy = _load(tmp_path, FULL_EXAMPLE)

    assert policy.capabilities == {
        "github-read": Capability(
            description="Read repositories of one GitHub org",
            params={"org": "^[A-Za-z0-9-]{1,39}$"},
            hosts=("api.github.com",),
            ports=(443,),
            methods=("GET", "HEAD"),
            paths=("/repos/{org}/**", "/orgs/{org}/**"),
            secret="github_token",
            inject=InjectSpec(header="Authorization", format="Bearer {secret}"),
            ttl=900,
            max_ttl=3600,
            approval="ask",
            allow_private=("127.0.0.0/8",),
            tls="terminate",
        )
    }
    assert policy.egress == EgressSettings(
        allow=(
            EgressRule(
                name="pypi",
                hosts=("pypi.org", "files.pythonhosted.org"),
                methods=("GET", "HEAD"),
                paths=("/**",),
            ),
        ),
        limits=EgressLimits(),
    )
    assert policy.broker == BrokerSettings()


def test_capability_defaults_are_bounded(tmp_path: Path) -> None:
    capability = _capability_of(tmp_path)

    assert capability.ports == (443,)
    assert capability.ttl == 15 * 60
    assert capability.max_ttl == 60 * 60
    assert capability.approval == "ask"
    assert capability.tls == "terminate"
    assert capability.secret is None
    assert capability.inject is None
    assert capability.params == {}
    assert capability.allow_private == ()


def test_policy_without_new_sections_has_no_capabilities_and_no_egress() -> None:
    policy = Policy()

    assert policy.capabilities == {}
    assert policy.egress.allow == ()
    assert policy.egress.limits == EgressLimits(
        max_requests=1000,
        max_request_bytes=10485760,
        max_response_bytes=104857600,
        max_connections=16,
    )
    assert policy.broker == BrokerSettings(
        max_capabilities_per_session=32, max_live_grants_per_tenant=256
    )


def test_capability_is_frozen_with_tuples(tmp_path: Path) -> None:
    capability = _capability_of(tmp_path)

    assert isinstance(capability.hosts, tuple)
    with pytest.raises(ValueError, match="frozen"):
        capability.ttl = 5


def test_passthrough_capability_without_methods_or_paths_loads(tmp_path: Path) -> None:
    capability = _capability_of(tmp_path, methods=None, paths=None, tls='"passthrough"')

    assert capability.methods == ()
    assert capability.paths == ()
    # Its tunnels are opaque: the scope a grant holds (and the agent is shown) is any
    # method and any path of its hosts.
    assert resolve_scope(capability, {}) == Scope(
        hosts=("api.example.com",), ports=(443,), methods=("*",), paths=("/**",)
    )


@pytest.mark.parametrize(
    ("fields", "attribute", "expected"),
    [
        (
            {"hosts": '["API.Example.COM.", "bücher.example", "[::1]", "*.Example.com"]'},
            "hosts",
            ("api.example.com", "xn--bcher-kva.example", "::1", "*.example.com"),
        ),
        (
            {"allow_private": '["10.1.2.3/8", "::1", "FD00::/8"]'},
            "allow_private",
            ("10.0.0.0/8", "::1/128", "fd00::/8"),
        ),
        ({"ttl": "60"}, "ttl", 60),
        ({"ttl": '"2h30m"', "max_ttl": '"1d"'}, "ttl", 9000),
        ({"max_ttl": '"7d"'}, "max_ttl", 7 * 86400),
        ({"ports": "[80, 443, 8443]"}, "ports", (80, 443, 8443)),
        ({"methods": '["GET", "OPTIONS", "DELETE"]'}, "methods", ("GET", "OPTIONS", "DELETE")),
    ],
)
def test_capability_normalizes_what_is_written(
    tmp_path: Path, fields: dict[str, str], attribute: str, expected: object
) -> None:
    assert getattr(_capability_of(tmp_path, **fields), attribute) == expected


# --- capability validation ----------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "where", "fragment"),
    [
        # hosts
        ({"hosts": '["*"]'}, "hosts[0]", '"*" would allow every host'),
        ({"hosts": '["*.com"]'}, "hosts[0]", 'at least two labels after "*."'),
        ({"hosts": '["api.*.example.com"]'}, "hosts[0]", 'whole first label, as in "*.example'),
        ({"hosts": '["**.example.com"]'}, "hosts[0]", "wildcard in the wrong place"),
        ({"hosts": '["*.10.0.0.1"]'}, "hosts[0]", "wildcard over an IP address"),
        (
            {"hosts": '["https://x.com"]'},
            "hosts[0]",
            'has a scheme; write only the host name, such as "x.com"',
        ),
        (
            {"hosts": '["x.com:443"]'},
            "hosts[0]",
            'includes a port; write only the host, such as "x.com"',
        ),
        ({"hosts": '["[::1]:443"]'}, "hosts[0]", "includes a port"),
        (
            {"hosts": '["x.com/a"]'},
            "hosts[0]",
            'has a path; write only the host name, such as "x.com"',
        ),
        ({"hosts": '["user@x.com"]'}, "hosts[0]", "cannot contain user info"),
        ({"hosts": '[""]'}, "hosts[0]", "a host cannot be empty"),
        ({"hosts": "[]"}, "hosts", "list at least one host"),
        ({"hosts": None}, "hosts", "required but missing"),
        ({"hosts": '["127.1"]'}, "hosts[0]", 'such as "127.0.0.1"'),
        ({"hosts": '["0x7f.0.0.1"]'}, "hosts[0]", "not an IPv4 address in canonical form"),
        ({"hosts": '["2130706433"]'}, "hosts[0]", "not an IPv4 address in canonical form"),
        ({"hosts": '["0177.0.0.1"]'}, "hosts[0]", "not an IPv4 address in canonical form"),
        ({"hosts": '["a..example.com"]'}, "hosts[0]", "has an empty label"),
        ({"hosts": '["a b.com"]'}, "hosts[0]", "contains spaces or control characters"),
        ({"hosts": '["-a.example.com"]'}, "hosts[0]", "is not a valid host name"),
        ({"hosts": '["fe80::1%eth0"]'}, "hosts[0]", "IPv6 zone id"),
        # ports
        ({"ports": "[0]"}, "ports[0]", "port 0 is out of range; write a port from 1 to 65535"),
        ({"ports": "[65536]"}, "ports[0]", "port 65536 is out of range"),
        ({"ports": "[]"}, "ports", "list at least one port, or leave ports out for [443]"),
        ({"ports": '["443"]'}, "ports[0]", "must be a whole number"),
        # methods
        ({"methods": '["get"]'}, "methods[0]", 'methods are case-sensitive; write "GET"'),
        ({"methods": '["CONNECT"]'}, "methods[0]", "CONNECT is how the proxy opens tunnels"),
        ({"methods": '["TRACE"]'}, "methods[0]", "TRACE is refused"),
        (
            {"methods": '["FETCH"]'},
            "methods[0]",
            "use GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS",
        ),
        ({"methods": None}, "", "methods is missing; list the methods allowed"),
        ({"methods": "[]"}, "", "methods is missing"),
        # paths
        ({"paths": '["repos/x"]'}, "paths[0]", 'must start with "/"; write "/repos/x"'),
        ({"paths": '["/a?b=1"]'}, "paths[0]", "has a query or fragment"),
        ({"paths": '["/a#top"]'}, "paths[0]", "has a query or fragment"),
        ({"paths": '["/a/../b"]'}, "paths[0]", 'has a ".." segment'),
        ({"paths": '["/a/./b"]'}, "paths[0]", 'has a "." segment'),
        ({"paths": '["/a/%2e"]'}, "paths[0]", "percent-escape"),
        ({"paths": '["/a\\\\b"]'}, "paths[0]", "backslash"),
        ({"paths": '["/a*"]'}, "paths[0]", 'partial wildcard "a*"'),
        ({"paths": '["/a/b**"]'}, "paths[0]", "must be whole segments"),
        ({"paths": '["/a/x{org}"]'}, "paths[0]", "a placeholder is a whole segment"),
        ({"paths": '["/a/{org"]'}, "paths[0]", "a placeholder is a whole segment"),
        ({"paths": '["/a/{other}"]'}, "paths", "uses {other}, which params does not declare"),
        ({"paths": None, "params": None}, "", "paths is missing"),
        # params
        ({"params": '{ org = "(" }'}, "params.org", "is not a valid regular expression"),
        ({"params": '{ org = "" }'}, "params.org", "an empty regex"),
        ({"params": '{ "1org" = "a" }'}, "params.1org.[key]", "is not a valid param name"),
        ({"params": '{ org = "a", team = "b" }'}, "", 'param "team" is declared but no path'),
        # secret and inject
        ({"secret": '"tok"'}, "", "secret is set but inject is missing"),
        (
            {"inject": '{ header = "Authorization", format = "Bearer {secret}" }'},
            "",
            "inject is set but secret is missing",
        ),
        ({"secret": '"ghp abc"'}, "secret", "secret is the name of a vault entry, never its value"),
        (
            {"inject": '{ header = "Authorization", format = "Bearer" }'},
            "inject.format",
            '"{secret}" exactly once',
        ),
        (
            {"inject": '{ header = "X", format = "{secret}{secret}" }'},
            "inject.format",
            "exactly once",
        ),
        ({"inject": '{ header = "X", format = "{user}:{secret}" }'}, "inject.format", "no braces"),
        (
            {"inject": '{ header = "X", format = "{secret}\\r\\nX-Evil: 1" }'},
            "inject.format",
            "printable ASCII",
        ),
        (
            {"inject": '{ header = "Host", format = "{secret}" }'},
            "inject.header",
            "managed by the proxy",
        ),
        (
            {"inject": '{ header = "content-length", format = "{secret}" }'},
            "inject.header",
            "managed by the proxy",
        ),
        (
            {"inject": '{ header = "PROXY-AUTHORIZATION", format = "{secret}" }'},
            "inject.header",
            "managed by the proxy",
        ),
        (
            {"inject": '{ header = "Te", format = "{secret}" }'},
            "inject.header",
            "managed by the proxy",
        ),
        (
            {"inject": '{ header = "Bad Header", format = "{secret}" }'},
            "inject.header",
            "not a valid HTTP header name",
        ),
        ({"inject": '{ header = "X" }'}, "inject.format", "required but missing"),
        # tls
        (
            {
                "tls": '"passthrough"',
                "methods": None,
                "paths": None,
                "params": None,
                "secret": '"tok"',
                "inject": '{ header = "X", format = "{secret}" }',
            },
            "",
            "passthrough tunnels are opaque and never carry injected secrets; "
            'remove secret/inject or use tls = "terminate"',
        ),
        ({"tls": '"passthrough"'}, "", "cannot check methods or paths"),
        ({"tls": '"mitm"'}, "tls", "must be 'terminate' or 'passthrough'"),
        # durations
        ({"ttl": '"2h"'}, "", "ttl (2h) is longer than max_ttl (1h); shorten ttl or raise max_ttl"),
        (
            {"max_ttl": '"8d"'},
            "max_ttl",
            'longer than 7 days, the longest a grant may live; write at most "7d"',
        ),
        ({"ttl": '"0s"'}, "ttl", "at least 1 second"),
        ({"ttl": "0"}, "ttl", "at least 1 second"),
        ({"ttl": "-5"}, "ttl", "cannot be negative"),
        ({"ttl": '"15"'}, "ttl", 'write "15s" for seconds'),
        ({"ttl": '"15 minutes"'}, "ttl", "is not a duration"),
        ({"ttl": "true"}, "ttl", "a duration is a string"),
        ({"ttl": "1.5"}, "ttl", "a duration is a string"),
        # approval, allow_private, unknown keys
        ({"approval": '"maybe"'}, "approval", "must be 'auto', 'ask' or 'deny'"),
        ({"allow_private": '["nope"]'}, "allow_private[0]", "is not an IP network"),
        ({"allow_private": '["127.1/8"]'}, "allow_private[0]", "is not an IP network"),
        ({"allow_private": '["fe80::1%eth0/64"]'}, "allow_private[0]", "is not an IP network"),
        ({"allow_private": '["0.0.0.0/0"]'}, "allow_private[0]", "would switch the SSRF guard off"),
        ({"allow_private": '["::/0"]'}, "allow_private[0]", "would switch the SSRF guard off"),
        ({"bogus": "1"}, "bogus", "unknown key; remove it or check its spelling"),
    ],
)
def test_rejects_invalid_capability_saying_what_to_write(
    tmp_path: Path, fields: dict[str, str | None], where: str, fragment: str
) -> None:
    defaults = {"params": '{ org = "[a-z]+" }', "paths": '["/repos/{org}/**"]'}
    text = _capability_entry("c", {**defaults, **fields})

    problem = _only_problem(tmp_path, text, f"capabilities.c.{where}".rstrip("."))

    assert fragment in problem


@pytest.mark.parametrize("name", ["Bad_Name", "-lead", "a" * 64, "has.dot"])
def test_rejects_capability_name_that_is_not_a_slug(tmp_path: Path, name: str) -> None:
    problem = _only_problem(tmp_path, _capability(name=f'"{name}"'), f"capabilities.{name}.[key]")

    assert (
        "lower-case letters, digits and hyphens, starting with a letter or digit, "
        'such as "github-read"' in problem
    )


def test_user_info_is_not_echoed_in_the_message(tmp_path: Path) -> None:
    problem = _only_problem(
        tmp_path, _capability(hosts='["admin:hunter2@x.com"]'), "capabilities.c.hosts[0]"
    )

    assert "hunter2" not in problem


# --- egress rules and limits --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "where", "fragment"),
    [
        (_rule(hosts='["*"]'), "egress.allow[0].hosts[0]", "would allow every host"),
        (_rule(name=None), "egress.allow[0].name", "required but missing"),
        (_rule(name='"PyPI"'), "egress.allow[0].name", "is not a valid name"),
        (_rule(paths='["/{x}"]'), "egress.allow[0].paths", "egress rules take no params"),
        (_rule(methods=None), "egress.allow[0]", "methods is missing"),
        (_rule(tls='"passthrough"'), "egress.allow[0]", "cannot check methods or paths"),
        (_rule(secret='"tok"'), "egress.allow[0].secret", "unknown key"),
        (_rule() + _rule(), "egress.allow", 'two rules are named "r"'),
        ("[egress.limits]\nmax_requests = 0", "egress.limits.max_requests", "must be at least 1"),
        (
            "[egress.limits]\nmax_connections = -1",
            "egress.limits.max_connections",
            "must be at least 1",
        ),
        (
            "[broker]\nmax_live_grants_per_tenant = 0",
            "broker.max_live_grants_per_tenant",
            "must be at least 1",
        ),
        ("[broker]\nbogus = 1", "broker.bogus", "unknown key"),
    ],
)
def test_rejects_invalid_egress_settings_naming_the_key(
    tmp_path: Path, text: str, where: str, fragment: str
) -> None:
    assert fragment in _only_problem(tmp_path, text, where)


def test_passthrough_rule_without_methods_or_paths_loads(tmp_path: Path) -> None:
    policy = _load(tmp_path, _rule(methods=None, paths=None, tls='"passthrough"', ports="[22]"))

    assert policy.egress.allow == (
        EgressRule(name="r", hosts=("api.example.com",), ports=(22,), tls="passthrough"),
    )


def test_reports_every_problem_of_a_file(tmp_path: Path) -> None:
    text = (
        _capability("a", hosts='["*.com"]', methods='["TRACE"]')
        + _capability("b", ttl='"2h"')
        + _capability("c", ports="[0]", approval='"yes"')
        + "[egress]\n"
        + _rule(hosts='["x.com:80"]')
        + "[egress.limits]\nmax_requests = 0\n"
        + "[broker]\nmax_capabilities_per_session = 0\n"
    )

    problems = _problems(tmp_path, text)

    assert [p.split(": ")[0] for p in problems] == [
        "capabilities.a.hosts[0]",
        "capabilities.a.methods[0]",
        "capabilities.b",
        "capabilities.c.ports[0]",
        "capabilities.c.approval",
        "egress.allow[0].hosts[0]",
        "egress.limits.max_requests",
        "broker.max_capabilities_per_session",
    ]


def test_default_file_examples_load_when_uncommented(tmp_path: Path) -> None:
    # The commented examples are documentation; they must stay valid.
    text = resources.files("airlock.policies").joinpath("default.toml").read_text(encoding="utf-8")
    examples = re.findall(r"For example:\n#\n((?:#.*\n)+)", text)
    assert len(examples) == 2

    uncommented = "".join(
        re.sub(r"^# ?", "", line) + "\n" for e in examples for line in e.splitlines()
    )
    policy = _load(tmp_path, uncommented)

    assert set(policy.capabilities) == {"github-read"}
    assert [rule.name for rule in policy.egress.allow] == ["pypi"]


def test_json_schema_describes_capabilities_and_durations() -> None:
    schema = policy_json_schema()

    capability = schema["$defs"]["Capability"]
    assert capability["additionalProperties"] is False
    assert set(capability["required"]) == {"hosts"}
    assert capability["properties"]["ttl"]["default"] == 900
    assert {"type": "integer", "minimum": 1} in capability["properties"]["ttl"]["anyOf"]
    assert "description" in capability["properties"]["allow_private"]
    assert "patternProperties" in schema["properties"]["capabilities"]
    assert "EgressRule" in schema["$defs"]


# --- hosts --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("api.example.com", "api.example.com"),
        ("API.Example.COM", "api.example.com"),
        ("example.com.", "example.com"),
        ("bücher.example", "xn--bcher-kva.example"),
        ("BÜCHER.example.", "xn--bcher-kva.example"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
        ("straße.de", "xn--strae-oqa.de"),
        ("localhost", "localhost"),
        ("_dmarc.example.com", "_dmarc.example.com"),
        ("127.0.0.1", "127.0.0.1"),
        ("255.255.255.255", "255.255.255.255"),
        ("::1", "::1"),
        ("[::1]", "::1"),
        ("0:0:0:0:0:0:0:1", "::1"),
        ("2001:DB8::1", "2001:db8::1"),
        ("::ffff:127.0.0.1", "::ffff:7f00:1"),
    ],
)
def test_canonical_host_normalizes_case_dots_idna_and_ipv6(raw: str, expected: str) -> None:
    assert canonical_host(raw) == expected


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("", "cannot be empty"),
        (".", "cannot be empty"),
        ("*", "contains a wildcard"),
        ("*.example.com", "contains a wildcard"),
        ("https://x.com", "has a scheme"),
        ("x.com:443", "includes a port"),
        ("x.com:", "includes a port"),
        ("[::1]:443", "includes a port"),
        ("x.com/a", "has a path"),
        ("x.com?a", "has a path"),
        ("user@x.com", "user info"),
        ("127.1", "canonical form"),
        ("0x7f.0.0.1", "canonical form"),
        ("0X7F.0.0.1", "canonical form"),
        ("2130706433", "canonical form"),
        ("0177.0.0.1", "canonical form"),
        ("127.0.0.01", "canonical form"),
        ("127.0.0.1.", "canonical form"),
        ("1.2.3.4.5", "canonical form"),
        ("256.0.0.1", "canonical form"),
        ("\uff11\uff12\uff17.\uff10.\uff10.\uff11", "canonical form"),
        ("a..b.com", "empty label"),
        (".x.com", "empty label"),
        ("x.com..", "empty label"),
        ("-x.com", "not a valid host name"),
        ("x-.com", "not a valid host name"),
        ("a" * 64 + ".com", "not a valid host name"),
        ("a." * 127 + "com", "longer than 253 characters"),
        ("a b.com", "spaces or control characters"),
        ("x.com\n", "spaces or control characters"),
        ("x!.com", "not a valid host name"),
        ("fe80::1%eth0", "zone id"),
        ("1:2:3", "not a valid IPv6 address"),
        ("[::1", "not a valid IPv6 address"),
        ("[example.com]", "not a valid IPv6 address"),
    ],
)
def test_canonical_host_rejects_with_reason(raw: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        canonical_host(raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("*.example.com", "*.example.com"),
        ("*.Example.COM.", "*.example.com"),
        ("*.co.uk", "*.co.uk"),
        ("*.bücher.example", "*.xn--bcher-kva.example"),
        ("api.example.com", "api.example.com"),
        ("10.0.0.1", "10.0.0.1"),
    ],
)
def test_canonical_host_pattern_normalizes(raw: str, expected: str) -> None:
    assert canonical_host_pattern(raw) == expected


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("*", "would allow every host"),
        ("*.", "would allow every host"),
        ("*.com", 'at least two labels after "*."'),
        ("*.com.", 'at least two labels after "*."'),
        ("api.*.example.com", "whole first label"),
        ("*.*.example.com", "whole first label"),
        ("*example.com", "whole first label"),
        ("a*.example.com", "whole first label"),
        ("*.1.2.3.4", "wildcard over an IP address"),
        ("*.x.com:443", "includes a port"),
    ],
)
def test_canonical_host_pattern_rejects_with_reason(raw: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        canonical_host_pattern(raw)


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", ipaddress.IPv4Address("127.0.0.1")),
        ("0.0.0.0", ipaddress.IPv4Address("0.0.0.0")),
        ("::1", ipaddress.IPv6Address("::1")),
        ("[::1]", ipaddress.IPv6Address("::1")),
        ("::ffff:127.0.0.1", ipaddress.IPv6Address("::ffff:7f00:1")),
        ("[127.0.0.1]", None),
        ("127.1", None),
        ("0x7f.0.0.1", None),
        ("2130706433", None),
        ("0177.0.0.1", None),
        ("256.0.0.1", None),
        ("fe80::1%eth0", None),
        ("[::1", None),
        ("example.com", None),
        ("", None),
    ],
)
def test_parse_ip_literal_accepts_only_standard_forms(
    host: str, expected: ipaddress.IPv4Address | ipaddress.IPv6Address | None
) -> None:
    assert parse_ip_literal(host) == expected


@pytest.mark.parametrize(
    ("pattern", "host", "expected"),
    [
        ("*.example.com", "example.com", False),
        ("*.example.com", "a.example.com", True),
        ("*.example.com", "a.b.example.com", True),
        ("*.example.com", "badexample.com", False),
        ("*.example.com", "a.badexample.com", False),
        ("*.example.com", "example.com.evil.net", False),
        ("*.example.com", ".example.com", False),
        ("*.example.com", "1.2.3.4", False),
        ("api.example.com", "api.example.com", True),
        ("api.example.com", "a.api.example.com", False),
        ("api.example.com", "example.com", False),
        ("example.com", "api.example.com", False),
        ("127.0.0.1", "127.0.0.1", True),
        ("127.0.0.1", "127.0.0.2", False),
        ("127.0.0.1", "localhost", False),
        ("::1", "::1", True),
        ("::1", "[::1]", True),
        ("::1", "127.0.0.1", False),
        ("::ffff:7f00:1", "127.0.0.1", False),
    ],
)
def test_host_pattern_matches_exact_names_and_strict_subdomains(
    pattern: str, host: str, expected: bool
) -> None:
    assert host_matches(pattern, host) is expected


# --- paths --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("/repos/*/issues", "/repos/x/issues", True),
        ("/repos/*/issues", "/repos//issues", False),
        ("/repos/*/issues", "/repos/x/y/issues", False),
        ("/repos/*/issues", "/repos/x/issues/", False),
        ("/a/**", "/a", True),
        ("/a/**", "/a/", True),
        ("/a/**", "/a/b/c", True),
        ("/a/**", "/ab", False),
        ("/a/**", "/b/a", False),
        ("/a/**/z", "/a/z", True),
        ("/a/**/z", "/a/b/c/z", True),
        ("/a/**/z", "/a/b/c", False),
        ("/a/**/b/**", "/a/x/b/y/z", True),
        ("/**", "/", True),
        ("/**", "/any/thing/at/all", True),
        ("/", "/", True),
        ("/", "/a", False),
        ("/a", "/a", True),
        ("/a", "/A", False),
        ("/a", "/a/", False),
        ("/a/", "/a", False),
        ("/a/*", "/a/", False),
        ("/a/*", "/a/b", True),
        ("/a/*/*", "/a/b", False),
        ("/a", "a", False),
        ("/**", "", False),
    ],
)
def test_path_pattern_matches_whole_segments_only(pattern: str, path: str, expected: bool) -> None:
    assert path_matches(pattern, path) is expected


# --- scope resolution ---------------------------------------------------------------


def _github(tmp_path: Path) -> Capability:
    return _load(tmp_path, FULL_EXAMPLE).capabilities["github-read"]


def test_resolve_scope_substitutes_params(tmp_path: Path) -> None:
    scope = resolve_scope(_github(tmp_path), {"org": "acme-corp"})

    assert scope == Scope(
        hosts=("api.github.com",),
        ports=(443,),
        methods=("GET", "HEAD"),
        paths=("/repos/acme-corp/**", "/orgs/acme-corp/**"),
    )
    assert path_matches(scope.paths[0], "/repos/acme-corp/widgets/issues")
    assert not path_matches(scope.paths[0], "/repos/other/widgets/issues")


def test_resolved_scope_is_frozen(tmp_path: Path) -> None:
    scope = resolve_scope(_github(tmp_path), {"org": "acme"})

    with pytest.raises(ValueError, match="frozen"):
        scope.paths = ("/**",)


def test_resolve_scope_without_params_keeps_paths_as_written(tmp_path: Path) -> None:
    scope = resolve_scope(_capability_of(tmp_path, paths='["/a/*", "/b"]'), {})

    assert scope.paths == ("/a/*", "/b")


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({}, 'param "org" is missing; give a value matching .+'),
        ({"org": "a", "team": "b"}, '"team" is not a param of this capability'),
        ({"org": "../x"}, "contains a slash"),
        ({"org": "a/b"}, "contains a slash"),
        ({"org": "%2e%2e"}, "contains a percent sign"),
        ({"org": "*"}, "contains an asterisk"),
        ({"org": "a?b"}, "contains a question mark"),
        ({"org": "a#b"}, "contains a hash sign"),
        ({"org": "a\\b"}, "contains a backslash"),
        ({"org": "a b"}, "whitespace or control characters"),
        ({"org": "a\tb"}, "whitespace or control characters"),
        ({"org": "a\x00b"}, "whitespace or control characters"),
        ({"org": ".."}, 'cannot be "." or ".."'),
        ({"org": "."}, 'cannot be "." or ".."'),
        ({"org": ""}, "is empty"),
        ({"org": "x" * 257}, "longer than 256 characters"),
    ],
)
def test_resolve_scope_rejects_hostile_params_even_when_the_regex_allows_them(
    tmp_path: Path, params: dict[str, str], fragment: str
) -> None:
    capability = _capability_of(tmp_path, params='{ org = ".+" }', paths='["/repos/{org}/**"]')

    with pytest.raises(ValueError, match=re.escape(fragment)):
        resolve_scope(capability, params)


@pytest.mark.parametrize("value", ["acme!", "acme_corp", "x" * 40, "-"])
def test_resolve_scope_requires_a_full_regex_match(tmp_path: Path, value: str) -> None:
    capability = _capability_of(
        tmp_path, params='{ org = "[a-z-]{2,39}" }', paths='["/repos/{org}/**"]'
    )

    with pytest.raises(ValueError, match="does not match"):
        resolve_scope(capability, {"org": value})


def test_resolve_scope_of_a_capability_without_params_rejects_any_param(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="the params it takes are: none"):
        resolve_scope(_capability_of(tmp_path), {"org": "acme"})


# --- durations ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("15m", 900),
        ("1h", 3600),
        ("2h30m", 9000),
        ("1d", 86400),
        ("1d2h3m4s", 93784),
        ("90m", 5400),
        ("0s", 0),
        (45, 45),
        (0, 0),
    ],
)
def test_parse_duration_reads_units_into_seconds(text: str | int, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "is not a duration"),
        ("15", 'write "15s" for seconds'),
        ("15M", "is not a duration"),
        ("1m1h", "largest first"),
        ("1h1h", "is not a duration"),
        (" 15m", "is not a duration"),
        ("15 m", "is not a duration"),
        ("-5m", "is not a duration"),
        ("1.5h", "is not a duration"),
        ("1w", "is not a duration"),
        ("\uff11\uff15m", "is not a duration"),
        (-1, "cannot be negative"),
        (True, "a duration is a string"),
        (1.5, "a duration is a string"),
        (None, "a duration is a string"),
    ],
)
def test_parse_duration_rejects_with_reason(text: object, fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        parse_duration(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (61, "1m1s"), (9000, "2h30m"), (86400, "1d"), (93784, "1d2h3m4s")],
)
def test_format_duration_round_trips(seconds: int, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds
