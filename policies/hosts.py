"""Host names and host patterns: canonical forms and matching.

Pure functions shared by the policy model (which canonicalizes the hosts an operator
writes) and the egress proxy (which canonicalizes the host a request names), so both
sides compare the same strings. Nothing here resolves names, opens sockets or decides
whether an address is private; that is the proxy's SSRF guard.

Canonical form: lowercase; one trailing dot removed; internationalized names as
IDNA 2008 punycode (with the UTS 46 mapping browsers use); IPv4 only as four decimal
parts without leading zeros or a trailing dot; IPv6 compressed, without brackets.
Odd IPv4 spellings (`127.1`, `0x7f.0.0.1`, `2130706433`, `0177.0.0.1`, `127.0.0.1.`)
are rejected rather than normalized: parsers and resolvers disagree about them, which
is how allowlists are bypassed.
"""

from __future__ import annotations

import ipaddress
import json
import re

import idna

_MAX_NAME = 253
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_V4_PART = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_CANONICAL_V4 = re.compile(rf"{_V4_PART}(?:\.{_V4_PART}){{3}}")
# WHATWG URL rule: a name whose last label is a number (decimal, octal or hex) is an
# IPv4 address to many parsers, so such names must be canonical dotted quads.
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")


def canonical_host(raw: str) -> str:
    """The canonical form of one concrete host (a name or an IP literal).

    Raises ValueError with a one-sentence reason saying what to write instead when
    `raw` is empty, has a scheme, user info, a port or a path, contains a wildcard
    or characters no host name has, or is an IP address in a non-canonical form.
    """
    if not raw:
        raise ValueError('a host cannot be empty; write a name such as "api.example.com"')
    if "@" in raw:
        # The part before "@" may be a credential, so it is not echoed back.
        raise ValueError(
            "a host cannot contain user info (user@...); write only the host name "
            "and keep credentials in the secret vault"
        )
    if "://" in raw:
        raise ValueError(
            f"{_q(raw)} has a scheme; write only the host name, such as {_q(_bare(raw))}"
        )
    if any(ch in raw for ch in "/?#\\"):
        raise ValueError(
            f"{_q(raw)} has a path; write only the host name, such as {_q(_bare(raw))}, "
            "and give paths separately"
        )
    if any(ch.isspace() or not ch.isprintable() for ch in raw):
        raise ValueError(f"{_q(raw)} contains spaces or control characters; remove them")
    if raw.startswith("[") or ":" in raw:
        return _canonical_ipv6(raw)
    if "*" in raw:
        raise ValueError(
            f"{_q(raw)} contains a wildcard; a concrete host is needed here, such as "
            '"api.example.com"'
        )
    name = raw.lower()
    if not name.isascii() or "xn--" in name:
        try:
            name = idna.encode(name, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError) as exc:
            raise ValueError(
                f"{_q(raw)} is not a valid internationalized domain name ({exc}); "
                "write its punycode (xn--) form"
            ) from None
    if name.endswith("."):
        name = name[:-1]
    if not name:
        raise ValueError('a host cannot be empty; write a name such as "api.example.com"')
    labels = name.split(".")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        # Only the exact canonical spelling: no trailing dot, no full-width digits.
        if raw == name and _CANONICAL_V4.fullmatch(name):
            return name
        raise ValueError(
            f"{_q(raw)} is not an IPv4 address in canonical form; write four decimal "
            'parts without leading zeros, such as "127.0.0.1"'
        )
    if len(name) > _MAX_NAME:
        raise ValueError(f"{_q(raw)} is longer than {_MAX_NAME} characters; no host name is")
    for label in labels:
        if not label:
            raise ValueError(
                f"{_q(raw)} has an empty label (a leading dot or two dots in a row); "
                "remove the extra dot"
            )
        if not _LABEL.fullmatch(label):
            raise ValueError(
                f"{_q(raw)} is not a valid host name; each dot-separated label is 1 to 63 "
                "letters, digits, hyphens or underscores and does not start or end "
                "with a hyphen"
            )
    return name


def canonical_host_pattern(raw: str) -> str:
    """The canonical form of a policy host pattern: a host, or `*.` and a domain.

    `*.example.com` stands for the subdomains of example.com (not example.com itself)
    and needs at least two labels after `*.`. Raises ValueError with a one-sentence
    reason for `*`, `*.com`, wildcards anywhere but the whole first label, wildcards
    over IP addresses, and everything `canonical_host` rejects.
    """
    if raw in ("*", "*."):
        raise ValueError(
            f"{_q(raw)} would allow every host; list host names, or use "
            '"*.example.com" for the subdomains of one domain'
        )
    if raw.startswith("*."):
        rest = raw[2:]
        if "*" in rest:
            raise _misplaced_wildcard(raw)
        domain = canonical_host(rest)
        if parse_ip_literal(domain) is not None:
            raise ValueError(
                f"{_q(raw)} puts a wildcard over an IP address; list each address instead"
            )
        if "." not in domain:
            raise ValueError(
                f"{_q(raw)} spans a whole top-level domain; name at least two labels "
                'after "*.", such as "*.example.com"'
            )
        return f"*.{domain}"
    if "*" in raw:
        raise _misplaced_wildcard(raw)
    return canonical_host(raw)


def parse_ip_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address `host` spells, or None when it is not an IP literal.

    Strict: only canonical dotted-quad IPv4 and standard IPv6 notation (with or
    without brackets, no zone id) count. Odd IPv4 forms such as `127.1` give None
    here; `canonical_host` rejects them, so call it first on untrusted input.
    """
    text = host
    bracketed = text.startswith("[") and text.endswith("]")
    if bracketed:
        text = text[1:-1]
    if ":" in text:
        if "%" in text:
            return None
        try:
            return ipaddress.IPv6Address(text)
        except ValueError:
            return None
    if not bracketed and _CANONICAL_V4.fullmatch(text):
        return ipaddress.IPv4Address(text)
    return None


def host_matches(pattern: str, host: str) -> bool:
    """Whether canonical `host` falls under canonical `pattern`.

    A name pattern matches only the same name. `*.x.y` matches every name ending in
    `.x.y` with at least one more label, never `x.y` itself and never an IP address.
    An IP pattern matches only the same address. Both arguments must already be
    canonical (`canonical_host_pattern`, `canonical_host`); nothing is normalized here.
    """
    pattern_ip = parse_ip_literal(pattern)
    if pattern_ip is not None:
        return parse_ip_literal(host) == pattern_ip
    if pattern.startswith("*."):
        suffix = pattern[1:]
        # Validation refuses "*.com"; refusing it here too keeps a pattern that slipped
        # past validation from opening a whole top-level domain.
        if suffix.count(".") < 2 or not host.endswith(suffix) or parse_ip_literal(host) is not None:
            return False
        prefix = host[: -len(suffix)]
        return bool(prefix) and all(prefix.split("."))
    return host == pattern


def _canonical_ipv6(raw: str) -> str:
    text = raw
    if text.startswith("["):
        end = text.find("]")
        if end != -1 and text[end + 1 :].startswith(":"):
            raise _has_port(raw, text[: end + 1])
        if end != len(text) - 1:
            raise _bad_ipv6(raw)
        text = text[1:-1]
    elif text.count(":") == 1:
        raise _has_port(raw, text.partition(":")[0])
    if "%" in text:
        raise ValueError(f"{_q(raw)} has an IPv6 zone id; write the address without %zone")
    address = parse_ip_literal(text)
    if not isinstance(address, ipaddress.IPv6Address):
        raise _bad_ipv6(raw)
    return address.compressed


def _has_port(raw: str, host: str) -> ValueError:
    return ValueError(
        f"{_q(raw)} includes a port; write only the host, such as {_q(host)}, "
        "and give the port separately"
    )


def _bad_ipv6(raw: str) -> ValueError:
    return ValueError(
        f'{_q(raw)} is not a valid IPv6 address; write a standard form such as "2001:db8::1"'
    )


def _misplaced_wildcard(raw: str) -> ValueError:
    return ValueError(
        f"{_q(raw)} has a wildcard in the wrong place; a wildcard may only be the whole "
        'first label, as in "*.example.com"'
    )


def _q(text: str) -> str:
    """`text` quoted as TOML and JSON quote strings, for messages."""
    return json.dumps(text, ensure_ascii=False)


def _bare(raw: str) -> str:
    """A best guess at the host name inside a URL-like string, for suggestions."""
    rest = raw.split("://", 1)[-1]
    for separator in "/?#\\":
        rest = rest.split(separator, 1)[0]
    return rest.rpartition("@")[2] or "api.example.com"
