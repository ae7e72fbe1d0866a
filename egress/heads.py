"""HTTP heads as the proxy reads and rewrites them; pure functions over h11 values.

Belongs here: which headers are hop-by-hop, the head forwarded upstream (Host from the
decided target, the injected header, no proxy headers) and the head answered to the
sandbox, the refusal answer, the run token in Proxy-Authorization, request framing checks
and the absolute-form target of a plaintext request. Does not belong here: deciding,
sockets, records.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence

import h11

from .targets import TargetRejected, canonical_target_host, parse_authority

MAX_HEAD_BYTES = 16 * 1024
PROXY_NAME = "airlock"
REASON_HEADER = b"x-airlock-reason"
TOKEN_REFUSED = (
    "missing, expired or revoked run token; use the proxy settings Airlock put in "
    "the environment, and only during the run"
)
# Connection-level headers never forwarded in either direction (RFC 9110 7.6.1).
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"content-length",
    }
)


def refusal(conn: h11.Connection, status: int, reason: str) -> bytes:
    body = f"Airlock egress proxy: {reason}\n".encode()
    headers = [
        ("content-type", "text/plain; charset=utf-8"),
        ("content-length", str(len(body))),
        ("connection", "close"),
        ("via", f"1.1 {PROXY_NAME}"),
        (REASON_HEADER.decode(), reason.encode("ascii", "replace").decode()),
    ]
    if status == 407:
        headers.append(("proxy-authenticate", f'Basic realm="{PROXY_NAME}"'))
    try:
        parts = [
            conn.send(h11.Response(status_code=status, headers=headers)),
            conn.send(h11.Data(data=body)),
            conn.send(h11.EndOfMessage()),
        ]
    except h11.LocalProtocolError:
        return b""
    return b"".join(p for p in parts if p)


def proxy_token(request: h11.Request) -> str | None:
    value = header(request, b"proxy-authorization")
    if value is None:
        return None
    scheme, _, credentials = value.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(credentials.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    _, _, token = decoded.partition(":")
    return token or None


def header(message: h11.Request | h11.Response, name: bytes) -> str | None:
    for key, value in message.headers:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def framing_problem(request: h11.Request) -> str | None:
    names = [key for key, _ in request.headers]
    has_length = b"content-length" in names
    has_chunked = b"transfer-encoding" in names
    if has_length and has_chunked:
        return "both Content-Length and Transfer-Encoding are set; send one"
    length = header(request, b"content-length")
    with_body = has_chunked or bool(length and length.isdigit() and int(length) > 0)
    if request.method in (b"GET", b"HEAD") and with_body:
        return f"{request.method.decode()} requests may not carry a body"
    return None


def connection_listed(headers: Sequence[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """Headers a `Connection` header names: hop-by-hop too (RFC 9110 7.6.1)."""
    return frozenset(
        token.strip().lower()
        for key, value in headers
        if key == b"connection"
        for token in value.split(b",")
    )


def forwarded_headers(
    request: h11.Request,
    scheme: str,
    host: str,
    port: int,
    secret_header: tuple[str, str] | None,
) -> list[tuple[bytes, bytes]]:
    injected = secret_header[0].lower().encode() if secret_header else None
    listed = connection_listed(request.headers)
    headers: list[tuple[bytes, bytes]] = []
    for key, value in request.headers:
        if key in HOP_BY_HOP or key in listed or key == b"host" or key == injected:
            continue
        if secret_header is not None and key in (b"authorization", b"accept-encoding"):
            # A client Authorization must not ride along with an injected one, and a
            # compressed answer could carry the secret past the scrubber.
            continue
        headers.append((key, value))
    default_port = 443 if scheme == "https" else 80
    shown = f"[{host}]" if ":" in host else host
    authority = shown if port == default_port else f"{shown}:{port}"
    headers.insert(0, (b"host", authority.encode()))
    length = header(request, b"content-length")
    if length is not None:
        headers.append((b"content-length", length.encode()))
    elif header(request, b"transfer-encoding") is not None:
        headers.append((b"transfer-encoding", b"chunked"))
    if secret_header is not None:
        headers.append((b"accept-encoding", b"identity"))
        headers.append((secret_header[0].encode(), secret_header[1].encode()))
    return headers


def response_headers(
    response: h11.Response, *, close: bool, scrub: Callable[[bytes], bytes]
) -> list[tuple[bytes, bytes]]:
    listed = connection_listed(response.headers)
    # The reason header is the proxy's own (`refusal`): one from upstream is dropped, so a
    # client may read it as the proxy's word.
    headers = [
        (k, scrub(bytes(v)))
        for k, v in response.headers
        if k not in HOP_BY_HOP and k not in listed and k != REASON_HEADER
    ]
    length = next((v for k, v in response.headers if k == b"content-length"), None)
    if length is not None:
        headers.append((b"content-length", length))
    elif any(k == b"transfer-encoding" for k, _ in response.headers):
        headers.append((b"transfer-encoding", b"chunked"))
    headers.append((b"via", f"1.1 {PROXY_NAME}".encode()))
    if close:
        headers.append((b"connection", b"close"))
    return headers


def parse_absolute_http(target: str) -> tuple[str, int, str]:
    if not target.lower().startswith("http://"):
        raise TargetRejected(
            "only absolute http:// URLs and CONNECT are accepted; for https use CONNECT "
            "(standard clients do so when HTTPS_PROXY is set)"
        )
    rest = target[len("http://") :]
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=-1)
    authority, tail = (rest, "") if cut < 0 else (rest[:cut], rest[cut:])
    raw_host, port = parse_authority(
        authority if ":" in authority.rsplit("]", 1)[-1] else f"{authority}:80"
    )
    if not tail.startswith("/"):
        tail = "/" + tail
    return canonical_target_host(raw_host), port, tail
