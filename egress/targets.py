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

from airlock.policies.hosts import canonical_host

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


def canonical_target_host(raw: str) -> str:
    """Return the canonical form of a host from a CONNECT authority or an absolute URL.

    The one canonicalizer is `policies.hosts.canonical_host`, which the policy model uses
    for the hosts an operator writes, so both sides compare the same strings; this only
    turns its ValueError into `TargetRejected`.
    """
    try:
        return canonical_host(raw)
    except ValueError as exc:
        raise TargetRejected(str(exc)) from None


def parse_authority(authority: str) -> tuple[str, int]:
    """Split "host:port" or "[v6]:port" into (canonical host, port).

    The port is required and must be a plain decimal number from 1 to 65535. Raises
    `TargetRejected` otherwise, and for everything `canonical_target_host` refuses.
    """
    if "@" in authority:
        raise TargetRejected("the target must not contain userinfo (user@host); remove it")
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


def origin_form(raw_target: str) -> str:
    """Return the target to forward upstream: the normalized path decided on, and the query.

    The fragment is dropped, never forwarded: what follows "#" was not part of the path
    that was matched ("/allowed/x#/../../denied" must not reach a server that reads it).
    Raises `TargetRejected` for every path `normalize_path` refuses.
    """
    path = normalize_path(raw_target)
    _, query = _strip_query(raw_target)
    return path if query is None else f"{path}?{query}"


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
