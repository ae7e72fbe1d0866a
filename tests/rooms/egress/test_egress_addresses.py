"""Tests of where egress may go: the SSRF address guard and target canonicalization.

Covers `egress.addresses` (denied ranges, embedded IPv4 forms, operator CIDRs, the
rebinding rule) and `egress.targets` (hosts, authorities, paths, loggable paths).
All pure: no sockets, no DNS.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address

import pytest

from airlock.egress.addresses import check_addresses, forbidden_reason, permitted
from airlock.egress.targets import (
    TargetRejected,
    canonical_target_host,
    normalize_path,
    parse_authority,
    path_for_log,
)

# (address, fragment of the reason)
DENIED = [
    ("0.0.0.0", "0.0.0.0/8"),
    ("0.1.2.3", "0.0.0.0/8"),
    ("10.0.0.1", "private"),
    ("100.64.0.1", "carrier-grade NAT"),
    ("100.127.255.254", "100.64.0.0/10"),
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "127.0.0.0/8"),
    ("169.254.169.254", "cloud metadata"),
    ("169.254.1.1", "link-local"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "172.16.0.0/12"),
    ("192.0.0.1", "192.0.0.0/24"),
    ("192.0.2.1", "documentation"),
    ("192.88.99.1", "6to4 relay"),
    ("192.168.1.1", "private"),
    ("198.18.0.1", "benchmarking"),
    ("198.19.255.255", "198.18.0.0/15"),
    ("198.51.100.7", "documentation"),
    ("203.0.113.9", "documentation"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "broadcast"),
    ("::", "unspecified"),
    ("::1", "loopback"),
    ("::ffff:127.0.0.1", "IPv4-mapped 127.0.0.1, which is a loopback"),
    ("::ffff:10.0.0.1", "IPv4-mapped 10.0.0.1, which is a private"),
    ("::ffff:169.254.169.254", "cloud metadata"),
    ("::1.2.3.4", "IPv4-compatible"),
    ("::127.0.0.1", "IPv4-compatible"),
    ("64:ff9b::a00:1", "NAT64 address (64:ff9b::/96) embedding 10.0.0.1, which is a private"),
    ("64:ff9b::5db8:d822", "NAT64"),  # embeds a public address: denied anyway
    ("64:ff9b:1::7f00:1", "NAT64 address (64:ff9b:1::/48)"),
    ("100::1", "discard-only"),
    ("2001:0::1", "Teredo"),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
    ("2001:db8::1", "documentation"),
    ("2002:7f00:1::", "6to4 address (2002::/16) embedding 127.0.0.1, which is a loopback"),
    ("2002:5db8:d822::1", "6to4"),  # embeds a public address: denied anyway
    ("fc00::1", "unique-local"),
    ("fd12:3456::1", "unique-local"),
    ("fd00:ec2::254", "cloud metadata"),
    ("fe80::1", "link-local"),
    ("fe80::1%eth0", "link-local"),
    ("febf::1", "link-local"),
    ("ff02::1", "multicast"),
    ("ff0e::1", "multicast"),
    ("2001:2::1", "not a globally routable"),  # benchmarking, caught by the backstop
]

ALLOWED = ["93.184.216.34", "1.1.1.1", "8.8.8.8", "2606:4700::1111", "::ffff:93.184.216.34"]


@pytest.mark.parametrize(("address", "fragment"), DENIED)
def test_forbidden_reason_names_every_denied_range(address: str, fragment: str) -> None:
    reason = forbidden_reason(ip_address(address))
    assert reason is not None
    assert fragment in reason
    assert not permitted(ip_address(address), [])


@pytest.mark.parametrize("address", ALLOWED)
def test_public_addresses_are_permitted(address: str) -> None:
    assert forbidden_reason(ip_address(address)) is None
    assert permitted(ip_address(address), [])


def test_operator_cidr_permits_a_private_address() -> None:
    assert permitted(IPv4Address("127.0.0.1"), ["127.0.0.0/8"])
    assert permitted(IPv4Address("10.1.2.3"), ["10.1.0.0/16"])
    assert not permitted(IPv4Address("10.2.0.1"), ["10.1.0.0/16"])
    # A mapped address dials the IPv4 address inside it, so the IPv4 CIDR covers it.
    assert permitted(IPv6Address("::ffff:127.0.0.1"), ["127.0.0.0/8"])
    # NAT64 reaches some other machine's view of that address: the IPv4 CIDR does not cover it.
    assert not permitted(IPv6Address("64:ff9b::7f00:1"), ["127.0.0.0/8"])
    assert permitted(IPv6Address("fd00::5"), ["fd00::/8"])


def test_malformed_operator_cidr_permits_nothing() -> None:
    assert not permitted(IPv4Address("127.0.0.1"), ["not-a-cidr", "127.0.0.0/33"])


def test_check_addresses_returns_the_first_address_to_dial() -> None:
    ips: list[IPv4Address | IPv6Address] = [
        IPv4Address("93.184.216.34"),
        IPv6Address("2606:4700::1111"),
    ]
    assert check_addresses(ips, []) == (IPv4Address("93.184.216.34"), None)


def test_check_addresses_allows_private_with_an_operator_cidr() -> None:
    assert check_addresses([IPv4Address("127.0.0.1")], ["127.0.0.0/8"]) == (
        IPv4Address("127.0.0.1"),
        None,
    )


@pytest.mark.parametrize(
    "ips",
    [
        [IPv4Address("93.184.216.34"), IPv4Address("127.0.0.1")],
        [IPv4Address("127.0.0.1"), IPv4Address("93.184.216.34")],
        [IPv4Address("93.184.216.34"), IPv6Address("::ffff:10.0.0.1")],
    ],
)
def test_check_addresses_denies_a_mixed_public_and_private_resolution(
    ips: list[IPv4Address | IPv6Address],
) -> None:
    chosen, reason = check_addresses(ips, [])
    assert chosen is None
    assert reason is not None
    assert "any of its addresses is forbidden" in reason


def test_check_addresses_mixed_resolution_denies_even_with_a_partial_operator_cidr() -> None:
    ips = [IPv4Address("127.0.0.1"), IPv4Address("10.0.0.1")]
    chosen, reason = check_addresses(ips, ["127.0.0.0/8"])
    assert chosen is None
    assert reason is not None
    assert "10.0.0.1" in reason


def test_check_addresses_denies_an_empty_resolution() -> None:
    assert check_addresses([], []) == (None, "the name resolved to no addresses")


@pytest.mark.parametrize(
    ("resolved", "own"),
    [
        (IPv4Address("93.184.216.34"), IPv4Address("93.184.216.34")),
        (IPv6Address("::ffff:93.184.216.34"), IPv4Address("93.184.216.34")),
        (IPv4Address("10.0.0.5"), IPv4Address("10.0.0.5")),
    ],
)
def test_check_addresses_never_dials_the_proxys_own_address(
    resolved: IPv4Address | IPv6Address, own: IPv4Address | IPv6Address
) -> None:
    # Even an operator CIDR covering everything does not open the proxy's own address.
    chosen, reason = check_addresses([resolved], ["0.0.0.0/0", "::/0"], [own])
    assert chosen is None
    assert reason is not None
    assert "proxy's own address" in reason


# ---- target hosts ----

GOOD_HOSTS = [
    ("example.com", "example.com"),
    ("API.Example.COM", "api.example.com"),
    ("example.com.", "example.com"),
    ("Bücher.de", "xn--bcher-kva.de"),
    ("xn--bcher-kva.de", "xn--bcher-kva.de"),
    ("my_host.example.com", "my_host.example.com"),
    ("93.184.216.34", "93.184.216.34"),
    ("0.0.0.0", "0.0.0.0"),
    ("127.0.0.1", "127.0.0.1"),
    ("[::1]", "::1"),
    ("::1", "::1"),
    ("[2606:4700:0:0:0:0:0:1111]", "2606:4700::1111"),
    ("[::FFFF:127.0.0.1]", "::ffff:7f00:1"),
]

BAD_HOSTS = [
    ("", "empty"),
    ("user@example.com", "user info"),
    ("user:pw@example.com", "user info"),
    ("127.1", "not an IPv4 address in canonical form"),
    ("127.0.1", "not an IPv4 address in canonical form"),
    ("0x7f.0.0.1", "not an IPv4 address in canonical form"),
    ("0X7F.0.0.1", "not an IPv4 address in canonical form"),
    ("0x7f000001", "not an IPv4 address in canonical form"),
    ("2130706433", "not an IPv4 address in canonical form"),
    ("0177.0.0.1", "not an IPv4 address in canonical form"),
    ("127.0.0.01", "not an IPv4 address in canonical form"),
    ("127.0.0.1.", "not an IPv4 address in canonical form"),
    ("127.0.0x1", "not an IPv4 address in canonical form"),
    ("127.0.0.256", "not an IPv4 address in canonical form"),
    ("1.2.3.4.5", "not an IPv4 address in canonical form"),
    ("example.123", "not an IPv4 address in canonical form"),
    ("127\u30020\u30020\u30021", "not an IPv4 address in canonical form"),  # ideographic full stops
    ("\uff11\uff12\uff17.0.0.1", "not an IPv4 address in canonical form"),  # full-width digits
    ("[::1", "not a valid IPv6 address"),
    ("[fe80::1%25eth0]", "zone id"),
    ("[1.2.3.4]", "IPv6"),
    ("example.com:443", "includes a port"),
    ("a..b", "empty label"),
    ("example.com..", "empty label"),
    (".", "cannot be empty"),
    ("-a.example.com", "not a valid host name"),
    ("*.example.com", "contains a wildcard"),
    ("exa mple.com", "spaces or control characters"),
    ("exa\x00mple.com", "spaces or control characters"),
    ("a/b", "has a path"),
    ("xn--zz", "internationalized"),
    ("a" * 64 + ".com", "not a valid host name"),
]


@pytest.mark.parametrize(("raw", "expected"), GOOD_HOSTS)
def test_canonical_target_host_accepts_standard_forms(raw: str, expected: str) -> None:
    assert canonical_target_host(raw) == expected
    # Canonical output is a fixed point, so callers may canonicalize twice.
    assert canonical_target_host(expected) == expected


@pytest.mark.parametrize(("raw", "fragment"), BAD_HOSTS)
def test_canonical_target_host_rejects_odd_forms(raw: str, fragment: str) -> None:
    with pytest.raises(TargetRejected) as caught:
        canonical_target_host(raw)
    assert fragment in caught.value.reason


@pytest.mark.parametrize(
    ("authority", "expected"),
    [
        ("example.com:443", ("example.com", 443)),
        ("EXAMPLE.com.:8443", ("example.com", 8443)),
        ("[::1]:443", ("::1", 443)),
        ("93.184.216.34:1", ("93.184.216.34", 1)),
        ("example.com:65535", ("example.com", 65535)),
    ],
)
def test_parse_authority_accepts_host_and_port(authority: str, expected: tuple[str, int]) -> None:
    assert parse_authority(authority) == expected


@pytest.mark.parametrize(
    ("authority", "fragment"),
    [
        ("example.com", "needs a port"),
        ("[::1]", "needs a port"),
        ("[::1]x:443", "needs a port"),
        ("::1:443", "without brackets"),
        ("example.com:", "not a decimal number"),
        ("example.com:0", "not a decimal number"),
        ("example.com:65536", "not a decimal number"),
        ("example.com:0443", "not a decimal number"),
        ("example.com:+443", "not a decimal number"),
        ("example.com:https", "not a decimal number"),
        ("example.com:\u0664\u0664\u0663", "not a decimal number"),
        ("user@example.com:443", "userinfo"),
        ("127.1:443", "not an IPv4 address in canonical form"),
        (":443", "empty"),
    ],
)
def test_parse_authority_rejects_bad_authorities(authority: str, fragment: str) -> None:
    with pytest.raises(TargetRejected) as caught:
        parse_authority(authority)
    assert fragment in caught.value.reason


# ---- paths ----


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("/", "/"),
        ("/a/b", "/a/b"),
        ("/a/b?x=1&y=2", "/a/b"),
        ("/a/b#frag", "/a/b"),
        ("/a/b?x=1#frag", "/a/b"),
        ("/a/%41", "/a/A"),
        ("/%7Euser/%2d%5f%2E%7e", "/~user/-_.~"),
        ("/a/%c3%a9", "/a/%C3%A9"),
        ("/a%3Bb", "/a%3Bb"),
        ("/a/%20b", "/a/%20b"),
        ("//a//b/", "//a//b/"),
        ("/a/.b/..c/...", "/a/.b/..c/..."),
        ("/a;b=1", "/a;b=1"),
    ],
)
def test_normalize_path_keeps_one_canonical_form(raw: str, expected: str) -> None:
    assert normalize_path(raw) == expected


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("", "starting with '/'"),
        ("*", "starting with '/'"),
        ("a/b", "starting with '/'"),
        ("http://example.com/a", "starting with '/'"),
        ("/a/../b", "'..' segment"),
        ("/..", "'..' segment"),
        ("/a/./b", "'..' segment"),
        ("/a/.", "'..' segment"),
        ("/%2e%2e/etc/passwd", "'..' segment"),
        ("/a/%2E%2e/", "'..' segment"),
        ("/a/.%2e/b", "'..' segment"),
        ("/a/%2e/b", "'..' segment"),
        ("/a/..;/b", "'..' segment"),
        ("/a/..;x=1/b", "'..' segment"),
        ("/a/..%3b/b", "'..' segment"),
        ("/a/%252e%252e/b", "'..' segment"),
        ("/a/%2f/b", "encoded '/'"),
        ("/a%2Fb", "encoded '/'"),
        ("/a%5cb", "encoded '\\'"),
        ("/a%00b", "NUL"),
        ("/a\\b", "backslash"),
        ("/a\x00b", "control character"),
        ("/a b", "control character"),
        ("/a\tb", "control character"),
        ("/caf\u00e9", "non-ASCII"),
        ("/a%zz", "malformed"),
        ("/a%4", "malformed"),
        ("/a%", "malformed"),
    ],
)
def test_normalize_path_rejects_ambiguous_paths(raw: str, fragment: str) -> None:
    with pytest.raises(TargetRejected) as caught:
        normalize_path(raw)
    assert fragment in caught.value.reason


def test_normalize_path_reason_never_quotes_the_query() -> None:
    with pytest.raises(TargetRejected) as caught:
        normalize_path("/a/../b?token=hunter2")
    assert "hunter2" not in caught.value.reason


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("/a", "/a"),
        ("/a?x=1&y=2", "/a?x=&y="),
        ("/a?token=s3cret&page=2#frag", "/a?token=&page="),
        ("/a?x=1=2", "/a?x="),
        ("/a?s3cret", "/a?"),
        ("/a?x=1&s3cret", "/a?x=&"),
        ("/a?", "/a?"),
        ("/a\nb?x=1", "/a%0Ab?x="),
        ("/caf\u00e9", "/caf%C3%A9"),
        ("/../x?x=1", "/../x?x="),
    ],
)
def test_path_for_log_hides_query_values(raw: str, expected: str) -> None:
    assert path_for_log(raw) == expected


def test_path_for_log_caps_its_length() -> None:
    logged = path_for_log("/" + "a" * 10_000)
    assert len(logged) < 2100
    assert logged.endswith("...")
