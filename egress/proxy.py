"""The per-run egress proxy: a unix-socket HTTP/1.1 forward proxy, default deny.

One `RunProxy` serves one run's socket. It speaks absolute-form `http://` and
`CONNECT`; a CONNECT is either terminated with a leaf of the run's CA (the usual
case, so every inner request is decided and may get a secret injected) or, for
hosts a rule marks passthrough, spliced as an opaque tunnel that never carries a
secret. Every request is decided by `decision.decide` from frozen facts and ends
in exactly one `EgressRecord`.

Names are resolved here, once; every address is checked; the checked address is
the one dialled; upstream TLS is verified against the name. Only then is the
secret injected. `bytes_out` counts what the sandbox sent upstream (request
bodies), `bytes_in` what came back (response bodies).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
import h11
from anyio.streams.buffered import BufferedByteStream
from anyio.streams.tls import TLSAttribute, TLSStream

from broker import RunClaims, Secret
from policies import EgressLimits
from policies.hosts import host_matches
from store import EgressRecord, EgressVerdict

from .addresses import check_addresses
from .decision import Decision, RequestFacts, Rule, decide
from .targets import (
    TargetRejected,
    canonical_target_host,
    normalize_path,
    origin_form,
    parse_authority,
    path_for_log,
)
from .tls import RunCA, sni_of

log = logging.getLogger(__name__)

SOCKET_NAME = "proxy.sock"
MAX_HEAD_BYTES = 16 * 1024
RECEIVE_CHUNK = 65536
PROXY_NAME = "airlock"
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

Resolver = Callable[[str, int], Awaitable[list[ipaddress.IPv4Address | ipaddress.IPv6Address]]]
SecretLookup = Callable[[str], Awaitable[tuple[Secret, tuple[str, ...]] | None]]


async def system_resolver(
    host: str, port: int
) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for _, _, _, _, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in seen:
            seen.append(address)
    return seen


@dataclass(frozen=True)
class RunIdentity:
    tenant: str
    session_id: str
    run_id: str


@dataclass
class _Counters:
    requests: int = 0
    connections: int = 0


class Refused(Exception):
    """A request ends here with an HTTP status and a one-sentence reason."""

    def __init__(self, status: int, reason: str, verdict: EgressVerdict = "deny") -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.verdict = verdict


@dataclass
class _Target:
    scheme: str
    host: str
    port: int
    sni: str | None = None
    rule_decision: Decision | None = None


@dataclass
class _Upstream:
    """The upstream connection of one tunnel; never shared across tunnels or runs."""

    stream: anyio.abc.ByteStream
    conn: h11.Connection = field(default_factory=lambda: h11.Connection(h11.CLIENT))
    address: str = ""


class RunProxy:
    def __init__(
        self,
        identity: RunIdentity,
        *,
        ca: RunCA,
        authorize: Callable[[str], RunClaims | None],
        rules: Callable[[RunClaims], Sequence[Rule]],
        offers: Sequence[Rule] = (),
        lookup_secret: SecretLookup,
        limits: EgressLimits,
        upstream_tls: ssl.SSLContext,
        record: Callable[[EgressRecord], None],
        resolver: Resolver = system_resolver,
        own_addresses: Sequence[ipaddress.IPv4Address | ipaddress.IPv6Address] = (),
    ) -> None:
        self.identity = identity
        self._ca = ca
        self._authorize = authorize
        self._rules = rules
        self._offers = tuple(offers)
        self._lookup_secret = lookup_secret
        self._limits = limits
        self._upstream_tls = upstream_tls
        self._record = record
        self._resolver = resolver
        self._own = tuple(own_addresses)
        self._counters = _Counters()
        self.live = True

    async def serve(self, socket_dir: Path, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Listen on the run's socket until cancelled."""
        path = socket_dir / SOCKET_NAME
        listener = await anyio.create_unix_listener(path)
        # The sandbox user (another uid) must be able to connect.
        path.chmod(0o666)
        async with listener:
            task_status.started()
            await listener.serve(self._handle_connection)

    async def _handle_connection(self, client: anyio.abc.ByteStream) -> None:
        async with client:
            if self._counters.connections >= self._limits.max_connections:
                await _send_refusal(client, h11.Connection(h11.SERVER), 429, "too many connections")
                return
            self._counters.connections += 1
            try:
                await self._serve_client(client)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
            except ssl.SSLError as exc:
                log.debug("tls with the sandbox failed: %s", exc)
            finally:
                self._counters.connections -= 1

    async def _serve_client(self, client: anyio.abc.ByteStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        started = time.monotonic()
        try:
            request = await _next_request(client, conn)
        except Refused as refused:
            self._log_refusal("-", "-", 0, "-", refused, started, None)
            await _send_refusal(client, conn, refused.status, refused.reason)
            return
        if request is None:
            return
        if request.method == b"CONNECT":
            await self._connect(client, conn, request, started)
        else:
            await self._plain_request(client, conn, request, started)

    # ---- CONNECT ----

    async def _connect(
        self,
        client: anyio.abc.ByteStream,
        conn: h11.Connection,
        request: h11.Request,
        started: float,
    ) -> None:
        authority = request.target.decode("latin-1")
        # What the record names: the raw authority until it parses, then host and port.
        host, port = authority[:200], 0
        claims: RunClaims | None = None
        try:
            raw_host, port = parse_authority(authority)
            host = canonical_target_host(raw_host)
            claims, decision = self._decide(
                self._claims(request),
                stage="connect",
                scheme="https",
                host=host,
                port=port,
                method=None,
                path=None,
                host_header=None,
                sni=None,
                upgrade=False,
            )
        except TargetRejected as exc:
            refused = Refused(400, str(exc))
            self._log_refusal("CONNECT", host, port, "-", refused, started, claims)
            await _send_refusal(client, conn, 400, str(exc))
            return
        except Refused as refused:
            self._log_refusal("CONNECT", host, port, "-", refused, started, claims)
            await _send_refusal(client, conn, refused.status, refused.reason)
            return
        target = _Target(scheme="https", host=host, port=port, rule_decision=decision)
        if decision.passthrough:
            await self._passthrough(client, conn, target, claims, started)
            return
        await _send(
            client, conn, h11.Response(status_code=200, headers=[("via", f"1.1 {PROXY_NAME}")])
        )
        buffered = BufferedByteStream(client)
        buffered.feed_data(bytes(conn.trailing_data[0]))
        tls = await TLSStream.wrap(
            buffered,
            server_side=True,
            ssl_context=self._ca.server_context(host),
            standard_compatible=False,
        )
        target.sni = sni_of(tls.extra(TLSAttribute.ssl_object))
        inner = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        upstream: _Upstream | None = None
        try:
            while True:
                started = time.monotonic()
                try:
                    inner_request = await _next_request(tls, inner)
                except Refused as refused:
                    self._log_refusal("-", host, port, "-", refused, started, claims)
                    await _send_refusal(tls, inner, refused.status, refused.reason)
                    return
                if inner_request is None:
                    return
                keep_open, upstream = await self._forward(
                    tls, inner, inner_request, target, claims, upstream, started
                )
                if not keep_open or inner.our_state is not h11.DONE:
                    return
                inner.start_next_cycle()
        finally:
            if upstream is not None:
                await upstream.stream.aclose()

    async def _passthrough(
        self,
        client: anyio.abc.ByteStream,
        conn: h11.Connection,
        target: _Target,
        claims: RunClaims,
        started: float,
    ) -> None:
        decision = target.rule_decision
        assert decision is not None
        try:
            address = await self._resolve(target.host, target.port, decision)
            upstream = await anyio.connect_tcp(address, target.port)
        except Refused as refused:
            self._log_refusal("CONNECT", target.host, target.port, "-", refused, started, claims)
            await _send_refusal(client, conn, refused.status, refused.reason)
            return
        except OSError as exc:
            failure = Refused(
                502, f"cannot connect to {target.host}:{target.port} ({exc.strerror})", "error"
            )
            self._log_refusal("CONNECT", target.host, target.port, "-", failure, started, claims)
            await _send_refusal(client, conn, 502, failure.reason)
            return
        await _send(
            client, conn, h11.Response(status_code=200, headers=[("via", f"1.1 {PROXY_NAME}")])
        )
        leftover = bytes(conn.trailing_data[0])
        sent = received = 0
        async with upstream:
            if leftover:
                await upstream.send(leftover)
                sent += len(leftover)

            async def pump(
                source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream, outbound: bool
            ) -> None:
                nonlocal sent, received
                try:
                    async for chunk in source:
                        await sink.send(chunk)
                        if outbound:
                            sent += len(chunk)
                        else:
                            received += len(chunk)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass
                finally:
                    tg.cancel_scope.cancel()

            async with anyio.create_task_group() as tg:
                tg.start_soon(pump, client, upstream, True)
                tg.start_soon(pump, upstream, client, False)
        self._emit(
            claims,
            decision,
            method="CONNECT",
            host=target.host,
            port=target.port,
            path="-",
            status=200,
            bytes_in=received,
            bytes_out=sent,
            started=started,
            verdict="allow",
            reason="passthrough tunnel closed",
            resolved_ip=address,
        )

    # ---- plaintext absolute-form ----

    async def _plain_request(
        self,
        client: anyio.abc.ByteStream,
        conn: h11.Connection,
        request: h11.Request,
        started: float,
    ) -> None:
        """One plaintext request per connection: the response says `Connection: close`."""
        target_text = request.target.decode("latin-1")
        try:
            url = _parse_absolute_http(target_text)
        except TargetRejected as exc:
            refused = Refused(400, str(exc))
            self._log_refusal(
                request.method.decode(), target_text[:200], 0, "-", refused, started, None
            )
            await _send_refusal(client, conn, 400, str(exc))
            return
        host, port, origin_target = url
        _, upstream = await self._forward(
            client,
            conn,
            request,
            _Target(scheme="http", host=host, port=port),
            None,
            None,
            started,
            origin_target=origin_target,
        )
        if upstream is not None:
            await upstream.stream.aclose()

    # ---- one request, either kind ----

    async def _forward(
        self,
        client: anyio.abc.ByteStream,
        conn: h11.Connection,
        request: h11.Request,
        target: _Target,
        claims: RunClaims | None,
        upstream: _Upstream | None,
        started: float,
        *,
        origin_target: str | None = None,
    ) -> tuple[bool, _Upstream | None]:
        method = request.method.decode("ascii", "replace")
        raw_target = origin_target or request.target.decode("latin-1")
        logged_path = path_for_log(raw_target)
        decision: Decision | None = None
        try:
            path = normalize_path(raw_target)
            forwarded_target = origin_form(raw_target)
            _check_framing(request)
            claims, decision = self._decide(
                claims if claims is not None else self._claims(request),
                stage="request",
                scheme=target.scheme,
                host=target.host,
                port=target.port,
                method=method,
                path=path,
                host_header=_header(request, b"host"),
                sni=target.sni,
                upgrade=_header(request, b"upgrade") is not None,
            )
            self._counters.requests += 1
            secret_header = await self._secret_header(decision, target.host)
            if upstream is None:
                upstream = await self._open_upstream(target, decision)
        except TargetRejected as exc:
            refused = Refused(400, str(exc))
            self._log_refusal(
                method, target.host, target.port, logged_path, refused, started, claims
            )
            await _send_refusal(client, conn, 400, str(exc))
            return False, upstream
        except Refused as refused:
            self._log_refusal(
                method, target.host, target.port, logged_path, refused, started, claims, decision
            )
            await _send_refusal(client, conn, refused.status, refused.reason)
            return False, upstream
        return await self._relay(
            client,
            conn,
            request,
            target,
            claims,
            decision,
            upstream,
            secret_header,
            forwarded_target,
            logged_path,
            started,
        )

    async def _relay(
        self,
        client: anyio.abc.ByteStream,
        conn: h11.Connection,
        request: h11.Request,
        target: _Target,
        claims: RunClaims,
        decision: Decision,
        upstream: _Upstream,
        secret_header: tuple[str, str] | None,
        forwarded_target: str,
        logged_path: str,
        started: float,
    ) -> tuple[bool, _Upstream | None]:
        method = request.method.decode("ascii", "replace")
        headers = _forwarded_headers(request, target, secret_header)
        sent = received = 0
        status = 502
        try:
            await _send(
                upstream.stream,
                upstream.conn,
                h11.Request(method=request.method, target=forwarded_target, headers=headers),
            )
            while True:
                event = await _next_event(client, conn)
                if isinstance(event, h11.Data):
                    sent += len(event.data)
                    if sent > self._limits.max_request_bytes:
                        raise Refused(
                            413, f"request body over {self._limits.max_request_bytes} bytes"
                        )
                    await _send(upstream.stream, upstream.conn, h11.Data(data=event.data))
                elif isinstance(event, h11.EndOfMessage):
                    await _send(upstream.stream, upstream.conn, h11.EndOfMessage())
                    break
            response = await _next_response(upstream.stream, upstream.conn)
            status = response.status_code
            await _send(
                client,
                conn,
                h11.Response(
                    status_code=response.status_code,
                    headers=_response_headers(response, close=target.scheme == "http"),
                    reason=response.reason,
                ),
            )
            while True:
                event = await _next_event(upstream.stream, upstream.conn)
                if isinstance(event, h11.Data):
                    received += len(event.data)
                    if received > self._limits.max_response_bytes:
                        raise Refused(
                            502, f"response body over {self._limits.max_response_bytes} bytes"
                        )
                    await _send(client, conn, h11.Data(data=event.data))
                elif isinstance(event, h11.EndOfMessage):
                    await _send(client, conn, h11.EndOfMessage())
                    break
        except Refused as refused:
            self._emit(
                claims,
                decision,
                method=method,
                host=target.host,
                port=target.port,
                path=logged_path,
                status=refused.status,
                bytes_in=received,
                bytes_out=sent,
                started=started,
                verdict="deny",
                reason=refused.reason,
                resolved_ip=upstream.address,
            )
            await upstream.stream.aclose()
            return False, None
        except (
            h11.ProtocolError,
            anyio.EndOfStream,
            anyio.BrokenResourceError,
            ssl.SSLError,
            OSError,
        ) as exc:
            self._emit(
                claims,
                decision,
                method=method,
                host=target.host,
                port=target.port,
                path=logged_path,
                status=502,
                bytes_in=received,
                bytes_out=sent,
                started=started,
                verdict="error",
                reason=f"upstream failed: {type(exc).__name__}",
                resolved_ip=upstream.address,
            )
            await upstream.stream.aclose()
            return False, None
        self._emit(
            claims,
            decision,
            method=method,
            host=target.host,
            port=target.port,
            path=logged_path,
            status=status,
            bytes_in=received,
            bytes_out=sent,
            started=started,
            verdict="allow",
            reason=decision.reason,
            resolved_ip=upstream.address,
            injected=(decision.inject[2],) if decision.inject and secret_header else (),
        )
        reusable = upstream.conn.our_state is h11.DONE and upstream.conn.their_state is h11.DONE
        if reusable:
            upstream.conn.start_next_cycle()
            return True, upstream
        await upstream.stream.aclose()
        return True, None

    # ---- decisions and helpers ----

    def _claims(self, request: h11.Request) -> RunClaims | None:
        token = _proxy_token(request)
        return self._authorize(token) if token is not None else None

    def _decide(self, claims: RunClaims | None, **facts: object) -> tuple[RunClaims, Decision]:
        decision = decide(
            RequestFacts(
                run_live=self.live,
                token_valid=claims is not None,
                token_reason=TOKEN_REFUSED,
                requests_so_far=self._counters.requests,
                max_requests=self._limits.max_requests,
                **facts,  # type: ignore[arg-type]
            ),
            self._rules(claims) if claims is not None else (),
            self._offers,
        )
        if not decision.allow or claims is None:
            raise Refused(decision.status, decision.reason)
        return claims, decision

    async def _secret_header(self, decision: Decision, host: str) -> tuple[str, str] | None:
        if decision.inject is None:
            return None
        header, template, name = decision.inject
        found = await self._lookup_secret(name)
        if found is None:
            raise Refused(
                403,
                f"the secret {name!r} of this capability is not in the vault; ask the operator",
            )
        value, hosts = found
        # The vault's own host binding holds even if a capability is too broad.
        if not any(host_matches(pattern, host) for pattern in hosts):
            raise Refused(403, f"the secret {name!r} may not be sent to {host}")
        return header, template.replace("{secret}", value.reveal())

    async def _resolve(self, host: str, port: int, decision: Decision) -> str:
        try:
            addresses = await self._resolver(host, port)
        except OSError as exc:
            raise Refused(502, f"cannot resolve {host}", "error") from exc
        chosen, reason = check_addresses(addresses, decision.allow_private, self._own)
        if chosen is None:
            raise Refused(403, reason or f"{host} resolves to a forbidden address")
        return str(chosen)

    async def _open_upstream(self, target: _Target, decision: Decision) -> _Upstream:
        address = await self._resolve(target.host, target.port, decision)
        try:
            stream: anyio.abc.ByteStream = await anyio.connect_tcp(address, target.port)
            if target.scheme == "https":
                stream = await TLSStream.wrap(
                    stream,
                    hostname=target.host,
                    ssl_context=self._upstream_tls,
                    standard_compatible=False,
                )
        except ssl.SSLError as exc:
            raise Refused(
                502, f"TLS verification of {target.host} failed ({exc.reason})", "error"
            ) from exc
        except OSError as exc:
            raise Refused(
                502,
                f"cannot connect to {target.host}:{target.port} ({exc.strerror or exc})",
                "error",
            ) from exc
        return _Upstream(stream=stream, address=address)

    def _emit(
        self,
        claims: RunClaims | None,
        decision: Decision | None,
        *,
        method: str,
        host: str,
        port: int,
        path: str,
        status: int,
        bytes_in: int,
        bytes_out: int,
        started: float,
        verdict: EgressVerdict,
        reason: str,
        resolved_ip: str | None = None,
        injected: tuple[str, ...] = (),
    ) -> None:
        self._record(
            EgressRecord(
                time=time.time(),
                tenant=self.identity.tenant,
                session_id=self.identity.session_id,
                run_id=self.identity.run_id,
                capability=decision.rule_id if decision else None,
                method=method,
                host=host,
                port=port,
                path=path,
                status=status,
                bytes_in=bytes_in,
                bytes_out=bytes_out,
                duration_ms=int((time.monotonic() - started) * 1000),
                decision=verdict,
                reason=reason,
                resolved_ip=resolved_ip or None,
                injected=injected,
            )
        )

    def _log_refusal(
        self,
        method: str,
        host: str,
        port: int,
        path: str,
        refused: Refused,
        started: float,
        claims: RunClaims | None,
        decision: Decision | None = None,
    ) -> None:
        self._emit(
            claims,
            decision,
            method=method,
            host=host,
            port=port,
            path=path,
            status=refused.status,
            bytes_in=0,
            bytes_out=0,
            started=started,
            verdict=refused.verdict,
            reason=refused.reason,
        )


def _proxy_token(request: h11.Request) -> str | None:
    value = _header(request, b"proxy-authorization")
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


def _header(request: h11.Request, name: bytes) -> str | None:
    for key, value in request.headers:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _check_framing(request: h11.Request) -> None:
    names = [key for key, _ in request.headers]
    has_length = b"content-length" in names
    has_chunked = b"transfer-encoding" in names
    if has_length and has_chunked:
        raise Refused(400, "both Content-Length and Transfer-Encoding are set; send one")
    if request.method in (b"GET", b"HEAD") and (has_chunked or _content_length(request) > 0):
        raise Refused(400, f"{request.method.decode()} requests may not carry a body")


def _content_length(request: h11.Request) -> int:
    value = _header(request, b"content-length")
    return int(value) if value and value.isdigit() else 0


def _forwarded_headers(
    request: h11.Request, target: _Target, secret_header: tuple[str, str] | None
) -> list[tuple[bytes, bytes]]:
    injected = secret_header[0].lower().encode() if secret_header else None
    listed = _connection_listed(request.headers)
    headers: list[tuple[bytes, bytes]] = []
    for key, value in request.headers:
        if key in HOP_BY_HOP or key in listed or key == b"host" or key == injected:
            continue
        # A client-supplied Authorization must not ride along with an injected one.
        if secret_header is not None and key == b"authorization":
            continue
        headers.append((key, value))
    default_port = 443 if target.scheme == "https" else 80
    host = f"[{target.host}]" if ":" in target.host else target.host
    authority = host if target.port == default_port else f"{host}:{target.port}"
    headers.insert(0, (b"host", authority.encode()))
    length = _header(request, b"content-length")
    if length is not None:
        headers.append((b"content-length", length.encode()))
    elif _header(request, b"transfer-encoding") is not None:
        headers.append((b"transfer-encoding", b"chunked"))
    if secret_header is not None:
        headers.append((secret_header[0].encode(), secret_header[1].encode()))
    return headers


def _connection_listed(headers: Sequence[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """Headers a `Connection` header names: hop-by-hop too (RFC 9110 7.6.1)."""
    return frozenset(
        token.strip().lower()
        for key, value in headers
        if key == b"connection"
        for token in value.split(b",")
    )


def _response_headers(response: h11.Response, *, close: bool) -> list[tuple[bytes, bytes]]:
    listed = _connection_listed(response.headers)
    headers = [(k, v) for k, v in response.headers if k not in HOP_BY_HOP and k not in listed]
    length = next((v for k, v in response.headers if k == b"content-length"), None)
    if length is not None:
        headers.append((b"content-length", length))
    elif any(k == b"transfer-encoding" for k, _ in response.headers):
        headers.append((b"transfer-encoding", b"chunked"))
    headers.append((b"via", f"1.1 {PROXY_NAME}".encode()))
    if close:
        headers.append((b"connection", b"close"))
    return headers


def _parse_absolute_http(target: str) -> tuple[str, int, str]:
    if not target.lower().startswith("http://"):
        raise TargetRejected(
            "only absolute http:// URLs and CONNECT are accepted; for https use CONNECT "
            "(standard clients do so when HTTPS_PROXY is set)"
        )
    rest = target[len("http://") :]
    authority, slash, tail = rest.partition("/")
    raw_host, port = parse_authority(
        authority if ":" in authority.rsplit("]", 1)[-1] else f"{authority}:80"
    )
    return canonical_target_host(raw_host), port, slash + tail if slash else "/"


async def _receive(stream: anyio.abc.ByteStream) -> bytes:
    try:
        return await stream.receive(RECEIVE_CHUNK)
    except anyio.EndOfStream:
        return b""


async def _next_event(stream: anyio.abc.ByteStream, conn: h11.Connection) -> h11.Event:
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise Refused(exc.error_status_hint, f"malformed HTTP: {exc}") from exc
        if event is h11.NEED_DATA:
            conn.receive_data(await _receive(stream))
            continue
        if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            raise anyio.EndOfStream
        assert isinstance(event, h11.Event)
        return event


async def _next_request(stream: anyio.abc.ByteStream, conn: h11.Connection) -> h11.Request | None:
    try:
        event = await _next_event(stream, conn)
    except anyio.EndOfStream:
        return None
    if isinstance(event, h11.Request):
        # h11 bounds only a head still arriving; one that came whole in a single read
        # is measured here.
        size = len(event.target) + sum(len(k) + len(v) + 4 for k, v in event.headers)
        if size > MAX_HEAD_BYTES:
            raise Refused(431, f"request head over {MAX_HEAD_BYTES} bytes")
        return event
    raise Refused(400, "expected an HTTP request")


async def _next_response(stream: anyio.abc.ByteStream, conn: h11.Connection) -> h11.Response:
    while True:
        event = await _next_event(stream, conn)
        if isinstance(event, h11.Response):
            return event
        if isinstance(event, h11.InformationalResponse):
            continue
        raise h11.RemoteProtocolError("upstream sent no response")


async def _send(stream: anyio.abc.ByteStream, conn: h11.Connection, event: h11.Event) -> None:
    data = conn.send(event)
    if data:
        await stream.send(data)


async def _send_refusal(
    stream: anyio.abc.ByteStream, conn: h11.Connection, status: int, reason: str
) -> None:
    body = f"Airlock egress proxy: {reason}\n".encode()
    headers = [
        ("content-type", "text/plain; charset=utf-8"),
        ("content-length", str(len(body))),
        ("connection", "close"),
        ("via", f"1.1 {PROXY_NAME}"),
        ("x-airlock-reason", reason.encode("ascii", "replace").decode()),
    ]
    if status == 407:
        headers.append(("proxy-authenticate", f'Basic realm="{PROXY_NAME}"'))
    try:
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            await _send(stream, conn, h11.Response(status_code=status, headers=headers))
            await _send(stream, conn, h11.Data(data=body))
            await _send(stream, conn, h11.EndOfMessage())
    except (h11.LocalProtocolError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass
