"""The proxy's upstream byte stream on real loopback TCP: connect, move bytes, end.

`SocketChannel` replaces anyio's TCP stream for upstream connections; the proxy maps its
exceptions as it mapped anyio's (EndOfStream, BrokenResourceError, ClosedResourceError,
OSError on connect), so each is checked here against a real peer.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import pytest

from airlock.egress.socketchannel import READ_BYTES, SocketChannel

pytestmark = pytest.mark.anyio
WAIT_S = 10


@asynccontextmanager
async def peer() -> AsyncIterator[tuple[SocketChannel, anyio.abc.SocketStream]]:
    """A channel connected to a loopback listener, and the listener's end of it."""
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        accepted: list[anyio.abc.SocketStream] = []
        ready = anyio.Event()

        async def take(stream: anyio.abc.SocketStream) -> None:
            accepted.append(stream)
            ready.set()
            await anyio.sleep_forever()

        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, take)
            with anyio.fail_after(WAIT_S):
                channel = await SocketChannel.connect("127.0.0.1", port)
                await ready.wait()
            try:
                yield channel, accepted[0]
            finally:
                await channel.aclose()
                await accepted[0].aclose()
                tg.cancel_scope.cancel()


async def test_bytes_cross_both_ways_whole_and_in_order() -> None:
    payload = bytes(range(256)) * 8192  # 2 MiB: larger than one read and the socket buffers
    async with peer() as (channel, other):
        received = bytearray()

        async def read_all() -> None:
            while len(received) < len(payload):
                received.extend(await other.receive(1 << 20))

        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read_all)
                await channel.send(payload)
        assert received == payload

        await other.send(b"answer")
        with anyio.fail_after(WAIT_S):
            view = await channel.receive_view()
        assert bytes(view) == b"answer" and len(view) <= READ_BYTES
        await other.send(b"again")
        with anyio.fail_after(WAIT_S):
            assert await channel.receive() == b"again"


async def test_the_peer_closing_is_the_end_of_the_stream() -> None:
    async with peer() as (channel, other):
        await other.send(b"last")
        await other.aclose()
        with anyio.fail_after(WAIT_S):
            assert await channel.receive() == b"last"
            with pytest.raises(anyio.EndOfStream):
                await channel.receive()


async def test_a_reset_connection_is_broken_and_a_closed_one_is_closed() -> None:
    async with peer() as (channel, other):
        raw = other.extra(anyio.abc.SocketAttribute.raw_socket)
        # SO_LINGER 0: closing sends a reset instead of an orderly end.
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
        await other.aclose()
        with anyio.fail_after(WAIT_S), pytest.raises(anyio.BrokenResourceError):
            while True:
                await channel.send(b"x" * 65536)
        await channel.aclose()
        with pytest.raises(anyio.ClosedResourceError):
            await channel.receive()


async def test_connecting_where_nothing_listens_is_an_oserror_naming_the_cause() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: the connect is refused
        with anyio.fail_after(WAIT_S), pytest.raises(OSError) as raised:
            await SocketChannel.connect("127.0.0.1", port)
    assert raised.value.strerror


async def test_a_receive_waiting_for_data_is_cancelled_by_its_scope() -> None:
    async with peer() as (channel, _):
        with anyio.move_on_after(0.2) as scope:
            await channel.receive()
        assert scope.cancelled_caught
