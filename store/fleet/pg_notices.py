"""Fleet notices over PostgreSQL: LISTEN/NOTIFY on one channel, with psycopg 3.

`PostgresNotices.serve` keeps one connection LISTENing on `CHANNEL` for the server's life.
When that connection drops (the database restarted, the backend was terminated, the
network failed) it reconnects (`retry.backoff`: at once, then a growing, jittered wait),
and on every connect, after LISTEN is in place, runs the resync hooks: a notice sent while
nobody listened is then found in the records, so a missed notice is a delay, never a lost
effect. `publish` delivers to this process at once and NOTIFYs on a second connection of
its own (a connection blocked reading notices cannot also send one).

Anyone who may connect may NOTIFY on the channel, as fast as they like (100 000 in under
a second). So the listener only decodes and queues: what it hears waits in a `Backlog`
(bounded, duplicates coalesced) for `WORKERS` tasks that hand it to the subscribers, off
the listener and off the calls' path; what a full backlog drops is left to one re-read of
the records (the resync hooks, at most once a `RESYNC_PAUSE_S`), and malformed payloads
and drops are each said in a line now and then with their count (`Sampled`).

Only the PostgreSQL modules import psycopg (the SQLite default never loads it); its errors
leave as `StoreError`, whose text names the database without its password
(`connection.shown_url`).
"""

from __future__ import annotations

import logging

import anyio
import anyio.abc
import anyio.lowlevel
import psycopg

from airlock.errors import StoreError

from ..connection import shown_url
from ..postgres.connections import Connection, connect
from ..retry import backoff, first_pause
from .notices import AnyNotice, Backlog, Notices, Sampled, decode, encode

log = logging.getLogger(__name__)

CHANNEL = "airlock_notices"
BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 5.0
BACKLOG = 1000
"""Notices heard and not yet handled, at most; past it they are dropped and the records
re-read instead (a payload is at most 8000 bytes: a few MiB at worst)."""
WORKERS = 8
"""Notices handled at once: a slow effect (removing containers) holds one worker, not all."""
RESYNC_PAUSE_S = 1.0
"""After notices were dropped, the wait before re-reading the records: one re-read then
covers every notice a flood drops meanwhile."""
WARN_EVERY_S = 10.0


class PostgresNotices(Notices):
    """The notices of one server of a fleet on the PostgreSQL database at `url`."""

    def __init__(self, url: str, origin: str) -> None:
        super().__init__(origin)
        self._url = url
        self._sender: Connection | None = None
        self._send_lock = anyio.Lock()
        self.listener_pid: int | None = None
        """The backend of the LISTENing connection while it is up (tests terminate it)."""
        self.connects = 0
        """How many times the listener connected (1 + reconnects)."""
        self.backlog = Backlog(BACKLOG)
        self.malformed = Sampled("ignored a malformed notice", every_s=WARN_EVERY_S)
        self.overflowed = Sampled(
            f"more than {BACKLOG} notices waiting: dropped one, the records will be re-read",
            every_s=WARN_EVERY_S,
        )
        self._missed = anyio.Event()

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Listen until cancelled; started once LISTEN first holds. A database unreachable
        at that first try is a `StoreError` (the server must not start deaf); later losses
        reconnect forever."""
        try:
            first = await connect(self._url, self.origin)
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot listen for notices on {shown_url(self._url)}: {type(exc).__name__}; "
                "check the --store URL and that the database accepts connections"
            ) from exc
        try:
            async with anyio.create_task_group() as tg:
                # Notices are read by the listener only, and handled by these: a flood
                # waits in the bounded backlog, never in a task per notice.
                for _ in range(WORKERS):
                    tg.start_soon(self._work)
                tg.start_soon(self._catch_up)
                conn = first
                started = False
                while True:
                    try:
                        await self._listen(conn, tg)
                        if not started:
                            task_status.started()
                            started = True
                        await self._read(conn)
                    except psycopg.Error as exc:
                        log.warning(
                            "lost the notice connection to %s (%s); reconnecting",
                            shown_url(self._url),
                            type(exc).__name__,
                        )
                    finally:
                        # Shielded: a server stopping mid-flood still closes it.
                        with anyio.CancelScope(shield=True):
                            await conn.close()
                    self.listener_pid = None
                    conn = await self._reconnect()
        finally:
            with anyio.CancelScope(shield=True):
                await self.aclose()

    async def aclose(self) -> None:
        """Close the sending connection (the listener closes with `serve`)."""
        async with self._send_lock:
            if self._sender is not None:
                sender, self._sender = self._sender, None
                await sender.close()

    async def _reconnect(self) -> Connection:
        """A new listening connection, tried again with a growing, jittered backoff."""

        def down(exc: BaseException) -> None:
            log.info("notice connection to %s still down (%s)", shown_url(self._url), type(exc))

        reconnect = backoff(
            on=psycopg.Error, first_s=BACKOFF_MIN_S, max_s=BACKOFF_MAX_S, failed=down
        )
        await first_pause(BACKOFF_MIN_S)
        return await reconnect(connect, self._url, self.origin)

    async def _listen(self, conn: Connection, tg: anyio.abc.TaskGroup) -> None:
        await conn.execute(f"LISTEN {CHANNEL}")
        self.listener_pid = conn.info.backend_pid
        self.connects += 1
        # After LISTEN holds, so a change made from now on is either notified or re-read;
        # in a task, so notices keep being read meanwhile.
        tg.start_soon(self._resync)

    async def _read(self, conn: Connection) -> None:
        async for notify in conn.notifies():
            notice = decode(notify.payload)
            if notice is None:
                self.malformed.warn()
            # Ours was delivered here when it was published.
            elif notice.origin != self.origin and not self.backlog.put(notice):
                self.overflowed.warn()
                self._missed.set()
            # Buffered notices come without waiting: let the calls run between them.
            await anyio.lowlevel.checkpoint()

    async def _work(self) -> None:
        while True:
            await self.receive(await self.backlog.get())

    async def _catch_up(self) -> None:
        """Re-read the records after notices were dropped (at most once a
        `RESYNC_PAUSE_S`), and say the warnings a flood held back."""
        while True:
            with anyio.move_on_after(WARN_EVERY_S) as quiet:
                await self._missed.wait()
            if quiet.cancelled_caught:
                self.malformed.flush()
                self.overflowed.flush()
            else:
                await anyio.sleep(RESYNC_PAUSE_S)
                self._missed = anyio.Event()
                await self._resync()

    async def _send(self, notice: AnyNotice) -> None:
        payload = encode(notice)
        async with self._send_lock:
            try:
                # Once more on a new connection: the kept one may have died idle.
                await backoff(on=psycopg.Error, tries=2)(self._notify, payload)
            except psycopg.Error as exc:
                # The records hold the change already: peers find it when they next
                # re-read, and refuse a revoked grant from the records.
                log.error(
                    "could not send a %s notice to %s: %s",
                    notice.kind,
                    shown_url(self._url),
                    type(exc).__name__,
                )

    async def _notify(self, payload: str) -> None:
        try:
            if self._sender is None or self._sender.closed:
                self._sender = await connect(self._url, self.origin)
            await self._sender.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
        except psycopg.Error:
            if self._sender is not None:
                await self._sender.close()
                self._sender = None
            raise
