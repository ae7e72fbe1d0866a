"""`policies.review`: what a valid policy opens, as the drill and `policy usage` flag it.

Tables: a policy, and the findings expected of it. Every wide domain of the data list is
flagged as a wildcard, and never as an exact name.
"""

from __future__ import annotations

from typing import Any

import pytest

from airlock.policies import Policy
from airlock.policies.review import (
    MAX_DESTINATIONS,
    WIDE_DOMAINS,
    WIDE_WEIGHT,
    WILDCARD_WEIGHT,
    broad_path,
    destinations,
    review,
    wide_domain,
)

# The issue's four: each passed the drill and counted as one destination.
ISSUE_WILDCARDS = [
    "*.amazonaws.com",
    "*.ngrok-free.app",
    "*.blob.core.windows.net",
    "*.githubusercontent.com",
]


def rule(name: str, hosts: list[str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "hosts": hosts, "methods": ["GET"], "paths": ["/**"], **extra}


def allow(*rules: dict[str, Any], **capabilities: dict[str, Any]) -> Policy:
    return Policy.model_validate(
        {"egress": {"allow": list(rules)}, "capabilities": dict(capabilities)}
    )


def kinds(policy: Policy) -> list[tuple[str, str]]:
    return [(f.kind, f.entry) for f in review(policy)]


@pytest.mark.parametrize("wide", WIDE_DOMAINS, ids=lambda w: w.suffix)
def test_a_wildcard_over_each_wide_domain_is_flagged_and_its_exact_name_is_not(wide: Any) -> None:
    assert wide_domain(f"*.{wide.suffix}") == wide
    assert wide_domain(f"www.{wide.suffix}") is None
    # One customer's own names below a suffix that is not nested are theirs alone.
    mine = wide_domain(f"*.mine.{wide.suffix}")
    assert (mine is not None) == wide.nested


@pytest.mark.parametrize("host", ISSUE_WILDCARDS)
def test_the_issues_wildcards_are_each_a_door_of_an_allow_rule(host: str) -> None:
    findings = review(allow(rule("wide", [host])))
    wide = [f for f in findings if f.kind == "wide_wildcard"]
    assert len(wide) == 1 and wide[0].door, findings
    assert wide[0].text.startswith(f"allow rule wide allows {host}: every ")


@pytest.mark.parametrize(
    ("host", "wide"),
    [
        ("*.windows.net", True),  # a parent of a wide suffix covers all of it
        ("*.googleapis.com", True),
        ("*.s3.eu-west-1.amazonaws.com", True),  # nested: buckets sit at any depth
        ("*.example.com", False),
        ("*.internal.example.com", False),
        ("*.mybucket.ngrok-free.app", False),
        ("api.github.com", False),
    ],
)
def test_wide_domains_cover_parents_and_nested_zones(host: str, wide: bool) -> None:
    assert (wide_domain(host) is not None) == wide


@pytest.mark.parametrize(
    ("pattern", "broad"),
    [("/**", True), ("/*", True), ("/*/**", True), ("/", False), ("/api/**", False)],
)
def test_broad_paths_are_all_wildcards_from_the_root(pattern: str, broad: bool) -> None:
    assert broad_path(pattern) is broad


def test_write_methods_on_a_broad_path_are_flagged_and_reads_or_narrow_paths_are_not() -> None:
    policy = allow(
        rule("upload", ["uploads.example.com"], methods=["GET", "PUT", "DELETE"]),
        rule("reads", ["pypi.org"], methods=["GET", "HEAD"]),
        rule("narrow", ["api.example.com"], methods=["POST"], paths=["/v1/issues"]),
        rule("tunnel", ["git.example.com"], ports=[22], tls="passthrough", methods=[], paths=[]),
    )
    found = {f.entry: f.text for f in review(policy) if f.kind == "broad_write"}
    assert found == {
        "allow rule upload": "allow rule upload allows PUT/DELETE on /** of "
        "uploads.example.com: runs can send anything there",
        "allow rule tunnel": "allow rule tunnel opens opaque (passthrough) tunnels to "
        "git.example.com: any method on any path, unchecked",
    }


def test_private_ranges_are_a_door_for_allow_rules_and_automatic_grants_only() -> None:
    def capability(approval: str) -> dict[str, Any]:
        return {
            "hosts": ["db.internal.example"],
            "methods": ["GET"],
            "paths": ["/v1/*"],
            "allow_private": ["10.1.0.0/16"],
            "approval": approval,
        }

    policy = allow(
        rule("local", ["localhost"], ports=[8123], allow_private=["127.0.0.0/8"]),
        auto=capability("auto"),
        asked=capability("ask"),
    )
    found = {f.entry: f.text for f in review(policy) if f.kind == "private_range"}
    assert found == {
        "allow rule local": "allow rule local opens 127.0.0.0/8 to every run "
        "(allow_private, hosts localhost)",
        "capability auto": "capability auto opens 10.1.0.0/16 to every run that asks, "
        "unapproved (allow_private, hosts db.internal.example)",
    }


def test_a_wildcard_weighs_more_than_a_host_and_a_wide_one_alone_passes_the_limit() -> None:
    assert destinations(["a.example.com", "b.example.com"]) == 2
    assert destinations(["*.example.com"]) == WILDCARD_WEIGHT
    assert destinations(["*.ngrok-free.app"]) == WIDE_WEIGHT > MAX_DESTINATIONS
    # The issue's four counted as 4 and never passed 12; weighed, they do.
    assert destinations(ISSUE_WILDCARDS) == 4 * WIDE_WEIGHT
    many = [f for f in review(allow(rule("clouds", ISSUE_WILDCARDS))) if not f.door]
    assert [f.entry for f in many] == ["the allow rules"]
    assert "reach 52 weighted destinations (more than 12" in many[0].text


def test_the_default_policy_and_narrow_rules_have_no_findings() -> None:
    assert review(Policy()) == []
    narrow = allow(rule("pypi", ["pypi.org", "files.pythonhosted.org"]))
    assert review(narrow) == []
    assert kinds(allow(rule("own", ["*.example.com"]))) == []
