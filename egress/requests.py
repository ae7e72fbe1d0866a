"""Canonical forms of what a sandbox asked for: target host, authority, path, loggable path.

Belongs here: turning the raw strings of a CONNECT authority, an absolute URL's host or
an inner request target into the one strict form that decisions compare, and refusing
(`TargetRejected`) anything that has a second reading: odd IP literal spellings, userinfo,
encoded slashes, dot segments. Does not belong here: deciding whether the canonical
target is allowed (`egress.decision`), resolving names or checking addresses
(`egress.addresses`), and HTTP parsing itself (h11 does that before these run).

Everything here is pure string work; nothing touches sockets, DNS, logs or the clock.
"""

from __future__ import annotations

import re
from ipaddress import IPv6Address

import idna

_MAX_HOST = 253
_MAX_LABEL = 63
# Underscore is not valid in host names but appears in real ones; allowing it cannot
# widen a match, because policy patterns are compared literally.
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?")
_DOTTED_QUAD_PART = re.compile(r"0|[1-9][0-9]{0,2}")
_HEX_NUMBER = re.compile(r"0x[0-9a-f]*")
_PORT = re.compile(r"[1-9][0-9]{0,4}")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_HEX = frozenset("0123456789abcdefABCDEF")
# Bytes whose encoded form is refused outright: "/" and "\\" because servers that decode
# before routing would see a different path than the one matched, NUL because it
# truncates paths in C code upstream.
_REFUSED_ENCODED = {0x2F: "an encoded '/' (%2F)", 0x5C: "an encoded '\\' (%5C)", 0x00: "NUL"}
# How many times a segment is decoded while looking for hidden dot segments ("%252e").
_DECODE_ROUNDS = 4
_MAX_LOGGED_PATH = 2048
# Rejection reasons quote the host for the agent; keep the quote short and printable.
_MAX_QUOTED = 80


class TargetRejected(ValueError):
    """A request target with no single safe reading; the message is one sentence saying why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def _quoted(raw: str) -> str:
    shown = raw if len(raw) <= _MAX_QUOTED else raw[:_MAX_QUOTED] + "..."
    # ascii(): the reason may end up in a header-like line or a log field.
    return ascii(shown)


def _is_ipv4_like(host: str) -> bool:
    # The WHATWG URL rule: a host whose last label is a number (decimal or 0x hex) is an
    # IPv4 address to browsers and to many resolvers (inet_aton), whatever else it holds.
    last = host.rsplit(".", 1)[-1]
    if last.isascii() and last.isdigit():
        return True
    return _HEX_NUMBER.fullmatch(last) is not None


def _canonical_ipv4(raw: str, host: str) -> str:
    parts = host.split(".")
    if (
        raw == host
        and len(parts) == 4
        and all(_DOTTED_QUAD_PART.fullmatch(p) and int(p) <= 255 for p in parts)
    ):
        return host
    raise TargetRejected(
        f"the host {_quoted(raw)} is an IP address in an unusual form; "
        "write it as a dotted quad a.b.c.d"
    )


def _canonical_ipv6(raw: str, literal: str) -> str:
    if "%" in literal:
        raise TargetRejected(
            f"the host {_quoted(raw)} carries an IPv6 zone id, which is not allowed"
        )
    try:
        return IPv6Address(literal).compressed
    except ValueError:
        raise TargetRejected(
            f"the host {_quoted(raw)} is neither a host name nor an IPv6 address; "
            "give the port separately and bracket IPv6 addresses"
        ) from None


def canonical_target_host(raw: str) -> str:
    """Return the canonical form of a host from a CONNECT authority or an absolute URL.

    Names are lowercased, lose one trailing dot and are converted to punycode (IDNA 2008
    with UTS 46 mapping). A dotted-quad IPv4 address is returned as is; an IPv6 literal,
    bracketed or not, is returned compressed and without brackets. Raises
    `TargetRejected` for an empty host, userinfo, characters a host name cannot hold, and
    IP addresses written any other way ("127.1", "0x7f.0.0.1", "2130706433",
    "0177.0.0.1", "127.0.0.1.").
    """
    if not raw:
        raise TargetRejected("the target host is empty")
    if "@" in raw:
        raise TargetRejected("the target must not contain userinfo (user@host); remove it")
    if raw.startswith("["):
        if not raw.endswith("]"):
            raise TargetRejected(f"the host {_quoted(raw)} has an unclosed '['")
        return _canonical_ipv6(raw, raw[1:-1])
    if ":" in raw:
        return _canonical_ipv6(raw, raw)
    host = raw
    if not host.isascii() or "xn--" in host.lower():
        try:
            # UTS 46 maps full-width dots and digits to ASCII, so the IPv4 check below
            # runs on the converted form and still sees "127。0。0。1" as an address.
            host = idna.encode(host, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError):
            raise TargetRejected(
                f"the host {_quoted(raw)} is not a valid internationalized name"
            ) from None
    host = host.lower()
    stripped = host[:-1] if host.endswith(".") else host
    if _is_ipv4_like(stripped):
        return _canonical_ipv4(raw, stripped)
    if not stripped or len(stripped) > _MAX_HOST:
        raise TargetRejected(f"the host {_quoted(raw)} is not a valid host name")
    for label in stripped.split("."):
        if len(label) > _MAX_LABEL or not _LABEL.fullmatch(label):
            raise TargetRejected(
                f"the host {_quoted(raw)} is not a valid host name; "
                "use letters, digits, '-' and '.'"
            )
    return stripped


def parse_authority(authority: str) -> tuple[str, int]:
    """Split "host:port" or "[v6]:port" into (canonical host, port).

    The port is required and must be a plain decimal number from 1 to 65535. Raises
    `TargetRejected` otherwise, and for everything `canonical_target_host` refuses.
    """
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            raise TargetRejected(f"the authority {_quoted(authority)} has an unclosed '['")
        host, rest = authority[: close + 1], authority[close + 1 :]
        if not rest.startswith(":"):
            raise TargetRejected(f"the authority {_quoted(authority)} needs a port after the ']'")
        port_text = rest[1:]
    else:
        host, colon, port_text = authority.rpartition(":")
        if not colon:
            raise TargetRejected(f"the authority {_quoted(authority)} needs a port, as host:port")
        if ":" in host:
            raise TargetRejected(
                f"the authority {_quoted(authority)} has an IPv6 address without brackets; "
                "write [address]:port"
            )
    if not _PORT.fullmatch(port_text) or int(port_text) > 65535:
        raise TargetRejected(
            f"the port {_quoted(port_text)} is not a decimal number from 1 to 65535"
        )
    return canonical_target_host(host), int(port_text)


def _strip_query(raw_target: str) -> tuple[str, str | None]:
    # The fragment never reaches a server, but a client may send one; drop it first.
    without_fragment = raw_target.split("#", 1)[0]
    path, question, query = without_fragment.partition("?")
    return path, (query if question else None)


def _check_segment(segment: str) -> None:
    # Decode repeatedly so "%252e%252e" cannot reach a server that decodes twice, and cut
    # at ";" because servlet containers read "..;" as "..".
    text = segment
    for _ in range(_DECODE_ROUNDS):
        if text.split(";", 1)[0] in (".", ".."):
            # The path is not quoted: reasons are logged, and the raw target could carry
            # query values.
            raise TargetRejected("the path contains a '.' or '..' segment; send the resolved path")
        decoded = _percent_decode_all(text)
        if decoded == text:
            break
        text = decoded


def _percent_decode_all(text: str) -> str:
    # Lenient: only for spotting hidden dot segments, never for the returned path.
    return re.sub(
        r"%([0-9a-fA-F]{2})",
        lambda m: chr(int(m.group(1), 16)),
        text,
    )


def normalize_path(raw_target: str) -> str:
    """Return the path of an origin-form request target, in the form rules are matched on.

    The query and fragment are dropped. Percent-encoded unreserved characters are decoded
    ("%41" becomes "A"); every other escape is kept, with upper-case hex. Nothing else is
    collapsed: "//" stays as it is and simply matches no glob. Raises `TargetRejected` when
    the path does not start with "/", holds non-ASCII or control characters, a backslash,
    an encoded "/" or "\\" or NUL, a malformed escape, or a "." or ".." segment in any
    spelling ("%2e%2E", "..;").
    """
    path, _ = _strip_query(raw_target)
    if not path.startswith("/"):
        raise TargetRejected("the request target must be a path starting with '/'")
    if not path.isascii():
        raise TargetRejected("the path contains non-ASCII characters; percent-encode them")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in path):
        raise TargetRejected("the path contains a control character or a space")
    if "\\" in path:
        raise TargetRejected("the path contains a backslash; use '/'")
    out: list[str] = []
    i = 0
    while i < len(path):
        char = path[i]
        if char != "%":
            out.append(char)
            i += 1
            continue
        pair = path[i + 1 : i + 3]
        if len(pair) != 2 or not set(pair) <= _HEX:
            raise TargetRejected("the path contains a malformed percent-escape")
        byte = int(pair, 16)
        if byte in _REFUSED_ENCODED:
            raise TargetRejected(f"the path contains {_REFUSED_ENCODED[byte]}, which is refused")
        out.append(chr(byte) if byte in _UNRESERVED else "%" + pair.upper())
        i += 3
    normalized = "".join(out)
    for segment in normalized.split("/"):
        _check_segment(segment)
    return normalized


def _printable(text: str) -> str:
    # Log fields stay one printable ASCII line whatever the client sent.
    return "".join(
        c if 0x21 <= ord(c) < 0x7F else "".join(f"%{b:02X}" for b in c.encode("utf-8"))
        for c in text
    )


def path_for_log(raw_target: str) -> str:
    """Return the target as it may be logged: path kept, query keys kept, query values removed.

    "/a?x=1&y=2" becomes "/a?x=&y=". An item without "=" could itself be a token, so it is
    treated as a value and logged empty. The fragment is dropped, non-printable characters
    are percent-escaped and the result is capped in length. Never raises: denied requests
    are logged too.
    """
    path, query = _strip_query(raw_target)
    logged = _printable(path)
    if query is not None:
        keys = [item.split("=", 1)[0] + "=" if "=" in item else "" for item in query.split("&")]
        logged += "?" + "&".join(_printable(k) for k in keys)
    if len(logged) > _MAX_LOGGED_PATH:
        logged = logged[:_MAX_LOGGED_PATH] + "..."
    return logged
