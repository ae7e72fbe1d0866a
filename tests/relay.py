"""A TCP relay that can be cut the way a network partition cuts (imported as `relay`): the
replica under test reaches the real PostgreSQL through it.

While forwarding it copies bytes both ways. `cut()` turns every open connection into a
black hole: what arrives is dropped and the socket stays open (no FIN, no RST), as a lost
route or a dropped NAT entry does; with `close_upstream` the database's side of each is
closed at once (PostgreSQL sees the replica go, the replica does not). New connections while
cut are swallowed too. `heal()` forwards new connections again; the old ones stay holes.
`clients_give_up()` closes the replica's side of every cut connection and leaves the
database's open: what the replica's kernel does once its keepalives or `tcp_user_timeout`
give up, while PostgreSQL's kernel, without them, keeps the backend.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.abc

Stream = anyio.abc.SocketStream
_GONE = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError)


@dataclass
class Relay:
    """Forwards TCP to `upstream` until cut."""

    upstream: tuple[str, int]
    is_cut: bool = False
    generation: int = 0
    """Bumped by each cut: a connection from an earlier generation stays swallowed."""
    _upstreams: list[Stream] = field(default_factory=list)
    _clients: list[tuple[int, Stream]] = field(default_factory=list)

    async def serve(self, listener: anyio.abc.Listener[Stream]) -> None:
        await listener.serve(self._handle)

    async def cut(self, *, close_upstream: bool = False) -> None:
        self.is_cut = True
        self.generation += 1
        if close_upstream:
            for stream in self._upstreams:
                await stream.aclose()
        self._upstreams.clear()

    def heal(self) -> None:
        self.is_cut = False

    async def clients_give_up(self) -> None:
        cut = [(born, c) for born, c in self._clients if born != self.generation or self.is_cut]
        for _, client in cut:
            await client.aclose()
        self._clients = [entry for entry in self._clients if entry not in cut]

    async def _handle(self, client: Stream) -> None:
        born = self.generation
        self._clients.append((born, client))
        async with client:
            if self.is_cut:
                await _swallow(client)
                return
            server = await anyio.connect_tcp(*self.upstream)
            self._upstreams.append(server)
            async with server, anyio.create_task_group() as tg:
                tg.start_soon(self._pump, client, server, born)
                await self._pump(server, client, born)
                tg.cancel_scope.cancel()

    async def _pump(self, source: Stream, sink: Stream, born: int) -> None:
        while True:
            try:
                data = await source.receive()
            except _GONE:
                if self.generation != born:
                    await anyio.sleep_forever()  # a partition sends no FIN either
                return
            if self.generation != born:
                continue  # cut: dropped, and the socket stays open
            await sink.send(data)


async def _swallow(stream: Stream) -> None:
    while True:
        try:
            await stream.receive()
        except _GONE:
            await anyio.sleep_forever()


@asynccontextmanager
async def relayed(url: str) -> AsyncIterator[tuple[Relay, str]]:
    """A relay to the database at `url`, and the URL that goes through it."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    relay = Relay((parts.hostname, parts.port))
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    netloc = parts.netloc.rsplit(":", 1)[0] + f":{port}"
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(relay.serve, listener)
        yield relay, urlunsplit(parts._replace(netloc=netloc))
        tg.cancel_scope.cancel()
