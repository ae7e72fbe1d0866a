"""A TCP byte stream for the proxy's upstream connections, read into one reused buffer.

anyio's TCP stream on asyncio goes through asyncio's transport: each `receive` resumes
the transport's reading, waits for one `data_received`, pauses it again (two epoll
changes and a trip through the event loop every time) and hands over a fresh bytes
object. `SocketChannel` reads the nonblocking socket itself: it waits only when nothing
is there, and `receive_view` hands out a view of its own buffer, which `TLSChannel`
copies straight into its TLS object, so a body's ciphertext is never a bytes object.

Belongs here: connecting to an already checked address, and moving bytes on that socket.
Does not belong here: which address (`egress.addresses`), TLS (`egress.tlsstream`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
from anyio.abc import SocketAttribute

READ_BYTES = 256 * 1024


class SocketChannel(anyio.abc.ByteStream):
    """A connected nonblocking TCP socket as an anyio byte stream."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._buffer = bytearray(READ_BYTES)

    @classmethod
    async def connect(cls, address: str, port: int) -> SocketChannel:
        """Connect to `address` (an IP address, never a name) and `port`; OSError if not."""
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            # As anyio's streams do: a request's head is not held back for the next write.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                sock.connect((address, port))
            except BlockingIOError:
                await anyio.wait_writable(sock)
                error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if error:
                    raise OSError(error, os.strerror(error)) from None
        except BaseException:
            sock.close()
            raise
        return cls(sock)

    async def receive_view(self, max_bytes: int = READ_BYTES) -> memoryview:
        """The next bytes, in this channel's own buffer: valid until the next receive.

        Raises anyio.EndOfStream when the peer has closed, BrokenResourceError when the
        connection failed, ClosedResourceError once this side closed it.
        """
        await anyio.lowlevel.checkpoint_if_cancelled()
        if self._sock.fileno() < 0:
            raise anyio.ClosedResourceError
        view = memoryview(self._buffer)[: min(max_bytes, READ_BYTES)]
        waited = False
        while True:
            try:
                got = self._sock.recv_into(view)
                break
            except BlockingIOError:
                waited = True
                await anyio.wait_readable(self._sock)
            except OSError as exc:
                if self._sock.fileno() < 0:
                    raise anyio.ClosedResourceError from exc
                raise anyio.BrokenResourceError from exc
        if not waited:
            # Data was there at once: still let the other connections have the loop
            # between two pieces, without losing what was read to a cancellation.
            await anyio.lowlevel.cancel_shielded_checkpoint()
        if not got:
            raise anyio.EndOfStream
        return view[:got]

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return (await self.receive_view(max_bytes)).tobytes()

    async def send(self, item: bytes) -> None:
        await anyio.lowlevel.checkpoint_if_cancelled()
        view = memoryview(item)
        while view:
            try:
                sent = self._sock.send(view)
            except BlockingIOError:
                await anyio.wait_writable(self._sock)
                continue
            except OSError as exc:
                if self._sock.fileno() < 0:
                    raise anyio.ClosedResourceError from exc
                raise anyio.BrokenResourceError from exc
            view = view[sent:]

    async def send_eof(self) -> None:
        self._sock.shutdown(socket.SHUT_WR)

    async def aclose(self) -> None:
        if self._sock.fileno() >= 0:
            anyio.notify_closing(self._sock)
            self._sock.close()
        await anyio.lowlevel.checkpoint()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return {
            SocketAttribute.raw_socket: lambda: self._sock,
            SocketAttribute.family: lambda: self._sock.family,
            SocketAttribute.local_address: lambda: self._sock.getsockname(),
            SocketAttribute.remote_address: lambda: self._sock.getpeername(),
        }
