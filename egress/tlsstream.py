"""A TLS byte stream for the proxy's relaying: every record already received in one read.

anyio's `TLSStream` returns one TLS record (at most 16 KiB) per `receive`, so a 50 MB
body costs some 3,000 trips through the event loop and through the conversation on
each side. `TLSChannel` decrypts everything the socket had ready (up to the size asked
for) in one `receive`, and encrypts a large `send` into many records with one socket
write. It wraps an already connected stream (the sandbox's, after CONNECT, or the
upstream's) with `ssl.SSLObject` over memory BIOs, the way anyio does, and accepts a
TLS session to resume (upstream connections of the same run reuse their sessions).
Records are decrypted into one buffer per channel, and over an upstream `SocketChannel`
the ciphertext goes from that channel's buffer into the TLS object with no bytes object
in between.

Belongs here: the TLS record pump. Does not belong here: certificates (`egress.tls`),
verification policy (the contexts passed in), HTTP.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Callable, Mapping
from typing import Any, cast

import anyio
import anyio.abc
from anyio.streams.tls import TLSAttribute

from .socketchannel import SocketChannel

HANDSHAKE_TIMEOUT = 30.0
TRANSPORT_READ = 256 * 1024


class TLSChannel(anyio.abc.ByteStream):
    """TLS over `transport`; `receive` returns all plaintext available, up to `max_bytes`."""

    def __init__(
        self,
        transport: anyio.abc.ByteStream,
        sslobj: ssl.SSLObject,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
    ) -> None:
        self.transport = transport
        self.ssl_object = sslobj
        self._incoming = incoming
        self._outgoing = outgoing
        self._eof = False
        self._plain = bytearray()

    @classmethod
    async def wrap(
        cls,
        transport: anyio.abc.ByteStream,
        context: ssl.SSLContext,
        *,
        server_side: bool,
        hostname: str | None = None,
        leftover: bytes = b"",
        session: ssl.SSLSession | None = None,
    ) -> TLSChannel:
        """Handshake over `transport` (whose first bytes, already read, are `leftover`).

        Raises ssl.SSLError when the handshake fails, TimeoutError when it stalls, and
        anyio.EndOfStream when the peer goes away during it.
        """
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        sslobj = context.wrap_bio(
            incoming, outgoing, server_side=server_side, server_hostname=hostname, session=session
        )
        channel = cls(transport, sslobj, incoming, outgoing)
        if leftover:
            incoming.write(leftover)
        with anyio.fail_after(HANDSHAKE_TIMEOUT):
            while True:
                try:
                    sslobj.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    await channel._flush()
                    await channel._fill(TRANSPORT_READ)
            await channel._flush()
        return channel

    async def _fill(self, max_bytes: int) -> None:
        """Feed the TLS object the transport's next bytes (a view, where it lends one)."""
        if isinstance(self.transport, SocketChannel):
            self._incoming.write(await self.transport.receive_view(max_bytes))
        else:
            self._incoming.write(await self.transport.receive(max_bytes))

    async def _flush(self) -> None:
        pending = self._outgoing.read()
        if pending:
            await self.transport.send(pending)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if len(self._plain) < max_bytes:
            self._plain = bytearray(max_bytes)
        view = memoryview(self._plain)
        try:
            while True:
                size = 0
                try:
                    # Each read decrypts one record straight into the channel's buffer:
                    # no bytes object per record, one copy out at the end.
                    while size < max_bytes:
                        got = _read_into(self.ssl_object, view[size:max_bytes])
                        if not got:
                            self._eof = True
                            break
                        size += got
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLZeroReturnError:
                    self._eof = True
                if self._outgoing.pending:
                    # Post-handshake messages (session tickets, key updates) go out too.
                    await self._flush()
                if size:
                    return view[:size].tobytes()
                if self._eof:
                    raise anyio.EndOfStream
                await self._fill(max(max_bytes, TRANSPORT_READ))
        finally:
            view.release()

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        while view:
            written = self.ssl_object.write(view)
            view = view[written:]
        await self._flush()

    async def send_eof(self) -> None:
        raise NotImplementedError("TLS half-close is not used by the proxy")

    async def aclose(self) -> None:
        try:
            with anyio.move_on_after(1, shield=True):
                with contextlib.suppress(ssl.SSLError):
                    # Sends our close_notify; the peer's is not waited for.
                    self.ssl_object.unwrap()
                await self._flush()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            await self.transport.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return {
            **self.transport.extra_attributes,
            TLSAttribute.ssl_object: lambda: self.ssl_object,
            TLSAttribute.server_side: lambda: self.ssl_object.server_side,
        }


def _read_into(sslobj: ssl.SSLObject, view: memoryview) -> int:
    """Decrypt at most one record into `view`; the number of bytes, 0 at the TLS end."""
    # typeshed says read() returns bytes; given a buffer it fills that and returns a count.
    return cast(int, sslobj.read(len(view), view))
