"""The per-run egress proxy's loop: a unix socket, and the actions of its conversations.

`RunProxy.serve` listens on one run's socket in a given directory; each connection
becomes a `Conversation` (egress.conversation), and this module only performs what the
conversation asks for: read and send bytes, terminate TLS with the run's CA, look a
secret up, resolve, take a pooled upstream or dial the checked address (verifying its
TLS as the name), keep records in the run's ledger. No decision is made here.

Around the conversations: the accept loop answers a run past its request limit slowly
(`REFUSAL_PACE`), so one flooding run cannot take the server's event loop from the
others; a watcher cuts, at once, every connection whose grant or token was revoked or
expired (`Conversation.still_allowed`); idle upstream connections are kept per run,
never shared across runs, and closed with the run.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc

from airlock.broker import RunClaims, Secret

from .conversation import Conversation, RunContext
from .decision import Rule
from .ledger import RunLedger
from .socketchannel import SocketChannel
from .steps import (
    Action,
    ClientClosed,
    ClientData,
    Close,
    CloseUpstream,
    Cut,
    Dial,
    Dialed,
    DialFailed,
    Event,
    LookupSecret,
    PoolKey,
    Record,
    ReleaseUpstream,
    Resolve,
    Resolved,
    ResolveFailed,
    Reused,
    SecretFound,
    SendClient,
    SendUpstream,
    StartTLS,
    TLSFailed,
    TLSStarted,
    UpstreamClosed,
    UpstreamData,
)
from .tls import RunCA, sni_of
from .tlsstream import TLSChannel

log = logging.getLogger(__name__)

SOCKET_NAME = "proxy.sock"
# A unix socket path holds at most 107 bytes.
MAX_SOCKET_PATH = 107
RECEIVE_BYTES = 256 * 1024
"""One read: large, so a body moves in few steps once its head is parsed."""
REFUSAL_PACE = 0.05
"""Seconds between connections accepted from a run past its request limit."""
WATCH_INTERVAL = 0.1
"""How often open connections are checked against revocation and expiry."""
IDLE_UPSTREAMS = 8
"""Idle upstream connections one run keeps for reuse."""

Resolver = Callable[[str, int], Awaitable[list[ipaddress.IPv4Address | ipaddress.IPv6Address]]]
SecretLookup = Callable[[str], Awaitable[tuple[Secret, tuple[str, ...]] | None]]
_GONE = (
    anyio.EndOfStream,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    ssl.SSLError,
    OSError,
)


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


@dataclass
class _Upstream:
    stream: anyio.abc.ByteStream
    address: str
    session_key: tuple[str, int] | None = None


@dataclass
class _Link:
    """The streams of one conversation: the sandbox's (plain, then TLS) and the upstream."""

    client: anyio.abc.ByteStream
    upstream: _Upstream | None = None
    cut_reason: str | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


class RunProxy:
    """One run's proxy: its listener, its conversations, its idle upstream connections."""

    def __init__(
        self,
        ledger: RunLedger,
        *,
        ca: RunCA,
        authorize: Callable[[str], RunClaims | None],
        rules: Callable[[RunClaims], Sequence[Rule]],
        lookup_secret: SecretLookup,
        upstream_tls: ssl.SSLContext,
        offers: Sequence[Rule] = (),
        resolver: Resolver = system_resolver,
        own_addresses: Sequence[ipaddress.IPv4Address | ipaddress.IPv6Address] = (),
    ) -> None:
        self.ledger = ledger
        self.live = True
        self._ca = ca
        self._lookup_secret = lookup_secret
        self._upstream_tls = upstream_tls
        self._resolver = resolver
        self._context = RunContext(
            ledger=ledger,
            authorize=authorize,
            rules=rules,
            offers=tuple(offers),
            live=lambda: self.live,
            own_addresses=tuple(own_addresses),
        )
        self._open: dict[Conversation, _Link] = {}
        self._idle: dict[PoolKey, deque[_Upstream]] = {}
        # TLS sessions of this run's upstreams, resumed by its later connections (never
        # by another run's: each RunProxy has its own).
        self._sessions: dict[tuple[str, int], ssl.SSLSession] = {}
        self._secrets: dict[str, tuple[Secret, tuple[str, ...]]] = {}

    async def serve(self, socket_dir: Path, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Listen on `socket_dir`/proxy.sock until cancelled; the run's records stay kept."""
        path = socket_dir / SOCKET_NAME
        listener = await anyio.create_unix_listener(path)
        # The sandbox user (another uid) must be able to connect.
        path.chmod(0o666)
        try:
            async with listener, anyio.create_task_group() as tg:
                tg.start_soon(self._watch)
                task_status.started()
                while True:
                    client = await listener.accept()
                    if self.ledger.exhausted:
                        # Past its limit a run only gets refusals; pacing them keeps a flood
                        # from taking the event loop every other session shares.
                        await anyio.sleep(REFUSAL_PACE)
                    tg.start_soon(self._converse, client)
        finally:
            self.live = False
            with anyio.CancelScope(shield=True):
                for idle in self._idle.values():
                    for upstream in idle:
                        await upstream.stream.aclose()
                self._idle.clear()

    async def _watch(self) -> None:
        while True:
            await anyio.sleep(WATCH_INTERVAL)
            for conversation, link in list(self._open.items()):
                reason = conversation.still_allowed()
                if reason is not None and link.cut_reason is None:
                    link.cut_reason = reason
                    link.scope.cancel()

    async def _converse(self, client: anyio.abc.ByteStream) -> None:
        conversation = Conversation(self._context)
        link = _Link(client)
        self._open[conversation] = link
        try:
            with link.scope:
                await self._perform(conversation, link, conversation.start())
                while conversation.need in ("client", "upstream", "splice"):
                    if conversation.need == "splice":
                        await self._splice(conversation, link)
                    elif conversation.need == "client":
                        event = await _read(link.client, ClientData, ClientClosed())
                        await self._perform(conversation, link, conversation.handle(event))
                    else:
                        assert link.upstream is not None
                        event = await _read(link.upstream.stream, UpstreamData, UpstreamClosed())
                        await self._perform(conversation, link, conversation.handle(event))
        except Exception as exc:
            # One connection's failure ends that connection, never the run's proxy; only
            # the type is logged, since a message could quote what the sandbox sent.
            log.error(
                "egress connection of run %s failed: %s",
                self.ledger.identity.run_id,
                type(exc).__name__,
            )
        finally:
            del self._open[conversation]
            with anyio.CancelScope(shield=True):
                # However the connection ended, its records are kept (a cut, the run's
                # end, an error): the conversation answers a Cut only if it is not done.
                if link.cut_reason is not None:
                    cut = Cut(link.cut_reason)
                elif not self.live:
                    cut = Cut("the run ended")
                else:
                    cut = Cut("the proxy failed", "error")
                self._keep_records(conversation.handle(cut))
                if link.upstream is not None:
                    await link.upstream.stream.aclose()
                await link.client.aclose()

    async def _splice(self, conversation: Conversation, link: _Link) -> None:
        assert link.upstream is not None
        lock = anyio.Lock()

        async def pump(
            source: anyio.abc.ByteStream,
            make: Callable[[bytes], Event],
            closed: Event,
        ) -> None:
            while conversation.need == "splice":
                event = await _read(source, make, closed)
                async with lock:
                    await self._perform(conversation, link, conversation.handle(event))
            tg.cancel_scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump, link.client, ClientData, ClientClosed())
            tg.start_soon(pump, link.upstream.stream, UpstreamData, UpstreamClosed())

    async def _perform(
        self, conversation: Conversation, link: _Link, actions: list[Action]
    ) -> None:
        queue = deque(self._keep_records(actions))
        while queue:
            follow = await self._act(link, queue.popleft())
            if follow is not None:
                queue.extendleft(reversed(self._keep_records(conversation.handle(follow))))

    def _keep_records(self, actions: list[Action]) -> list[Action]:
        # Records are kept before any I/O is awaited, so a cut or the run's end in the
        # middle of sending cannot lose one.
        for action in actions:
            if isinstance(action, Record):
                self.ledger.keep(action.record, past_limit=action.past_limit)
        return [a for a in actions if not isinstance(a, Record)]

    async def _act(self, link: _Link, action: Action) -> Event | None:
        if isinstance(action, SendClient):
            if action.data:
                try:
                    await link.client.send(action.data)
                except _GONE:
                    return ClientClosed()
            return None
        if isinstance(action, SendUpstream):
            if action.data:
                assert link.upstream is not None
                try:
                    await link.upstream.stream.send(action.data)
                except _GONE:
                    return UpstreamClosed()
            return None
        if isinstance(action, StartTLS):
            return await self._start_tls(link, action)
        if isinstance(action, LookupSecret):
            found = self._secrets.get(action.name)
            if found is None:
                found = await self._lookup_secret(action.name)
                if found is not None:
                    # Read once per run: the vault decrypts in a worker thread, too slow
                    # for every request of a kept-alive tunnel.
                    self._secrets[action.name] = found
            return SecretFound(None) if found is None else SecretFound(found[0], found[1])
        if isinstance(action, Resolve):
            return await self._resolve(link, action)
        if isinstance(action, Dial):
            return await self._dial(link, action)
        if isinstance(action, ReleaseUpstream):
            if link.upstream is not None:
                self._remember_session(link.upstream)
                idle = self._idle.setdefault(action.key, deque())
                idle.append(link.upstream)
                link.upstream = None
                while len(idle) > IDLE_UPSTREAMS:
                    await idle.popleft().stream.aclose()
            return None
        if isinstance(action, CloseUpstream):
            if link.upstream is not None:
                self._remember_session(link.upstream)
                await link.upstream.stream.aclose()
                link.upstream = None
            return None
        assert isinstance(action, Close)
        return None

    def _remember_session(self, upstream: _Upstream) -> None:
        stream = upstream.stream
        if isinstance(stream, TLSChannel) and upstream.session_key is not None:
            session = stream.ssl_object.session
            if session is not None:
                self._sessions[upstream.session_key] = session

    async def _start_tls(self, link: _Link, action: StartTLS) -> Event:
        try:
            tls = await TLSChannel.wrap(
                link.client,
                self._ca.server_context(action.host),
                server_side=True,
                leftover=action.leftover,
            )
        except ssl.SSLError as exc:
            return TLSFailed(exc.reason or type(exc).__name__)
        except (TimeoutError, *_GONE) as exc:
            return TLSFailed(type(exc).__name__)
        link.client = tls
        return TLSStarted(sni_of(tls.ssl_object))

    async def _resolve(self, link: _Link, action: Resolve) -> Event:
        idle = self._idle.get(action.key) if action.key is not None and not action.fresh else None
        if idle:
            link.upstream = idle.pop()
            return Reused(link.upstream.address)
        try:
            addresses = await self._resolver(action.host, action.port)
        except OSError:
            return ResolveFailed(f"cannot resolve {action.host}")
        return Resolved(tuple(addresses))

    async def _dial(self, link: _Link, action: Dial) -> Event:
        session_key = (action.host, action.port)
        try:
            stream: anyio.abc.ByteStream = await SocketChannel.connect(action.address, action.port)
            if action.tls:
                connected = stream
                try:
                    stream = await TLSChannel.wrap(
                        connected,
                        self._upstream_tls,
                        server_side=False,
                        hostname=action.host,
                        session=self._sessions.get(session_key),
                    )
                except BaseException:
                    # A failed handshake leaves the socket to whoever connected it.
                    with anyio.CancelScope(shield=True):
                        await connected.aclose()
                    raise
        except ssl.SSLError as exc:
            return DialFailed(
                f"TLS verification of {action.host} failed ({exc.reason}); if it serves a "
                "certificate of a private CA, the operator adds that CA as [egress] "
                "upstream_ca_file"
            )
        except (TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError):
            return DialFailed(f"the TLS handshake with {action.host}:{action.port} failed")
        except OSError as exc:
            return DialFailed(
                f"cannot connect to {action.host}:{action.port} ({exc.strerror or exc})"
            )
        link.upstream = _Upstream(stream, action.address, session_key)
        return Dialed(action.address)


async def _read(
    stream: anyio.abc.ByteStream, make: Callable[[bytes], Event], closed: Event
) -> Event:
    try:
        data = await stream.receive(RECEIVE_BYTES)
    except _GONE:
        return closed
    return make(data) if data else closed
