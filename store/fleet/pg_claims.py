"""Which replica of a fleet owns its unfinished runs, and whether it still lives: the
PostgreSQL counterpart of `fleet/claims.py`'s `flock`.

Each replica holds, for its whole life, a session-level advisory lock on a key derived
from its instance id (`lock_key`), on a connection of its own, and lists itself in the
`airlock_instances` table (made by the store's migrations: the store is opened, and
migrated, before a replica claims). However a replica dies (SIGKILL, the OOM killer, its machine
lost) its connection ends and PostgreSQL frees the lock: at once when the socket closes,
after the TCP keepalives give up when the network is cut. A live replica that can take a
listed instance's lock, and could for `DEAD_GRACE_S` (`end_runs_of_dead`), knows that
instance is dead: it ends its unfinished runs `killed` (through `end_runs`, the records'),
removes its row and lets the lock go. As with the flock, a lock is never early and never
late, where a heartbeat threshold would end a slow replica's runs under it.

A replica that loses its own claim connection (found by a query every `HEARTBEAT_S`,
bounded by `HEARTBEAT_TIMEOUT_S`) has lost its claim: `check()` then raises `StoreUnavailable`,
so the server takes no call whose run it could not record or vouch for, and `serve`
reconnects with backoff (at most `REGAIN_BACKOFF_MAX_S` apart) and takes the lock again,
once no peer holds it (a peer holding it is ending this replica's runs: they are gone when it
lets go). A cut network that swallowed the close leaves PostgreSQL keeping this replica's
old backend, and the lock with it, for as long as the server's TCP keepalives take (two
hours by default): every connection is named `airlock:<instance id>`
(`connection.application_name`), so the replica ends a holder of its own lock that bears its
own name and another pid (`pg_terminate_backend`), and serves again within seconds of the
heal; a holder of another name (a peer) is waited for.

Fencing: on losing its claim a replica kills its own sandboxes (`fence`, within
`FENCE_DEADLINE_S` of its last good heartbeat), and a peer ends a listed instance's runs
only after its lock stayed free `DEAD_GRACE_S`, longer. Each taking of the claim draws a
new `epoch` (a fencing token): the records write a run's end and its workspace commit only
while the run is `running` under its owner's current epoch (`fencing.py`), so a
cut-off replica's late result is refused (`RunEndedByFleet`).

The table is made by the store's migrations (0003, 0005). psycopg's errors leave as
`StoreError`, naming the database without its password (`connection.shown_url`); a lost
claim is taken again through the store's one retry helper (`retry.backoff`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence

import anyio
import anyio.abc
import psycopg

from airlock.errors import AirlockError, StoreError, StoreUnavailable

from ..connection import application_name, shown_url
from ..postgres.connections import Connection, connect
from ..retry import backoff, first_pause
from .locks import held_lock, lock_key
from .pg_notices import BACKOFF_MIN_S

log = logging.getLogger(__name__)

HEARTBEAT_S = 1.0
HEARTBEAT_TIMEOUT_S = 3.0
FENCE_KILL_S = 3.0
"""How long stopping this replica's own sandboxes may take once it found its claim lost."""
FENCE_DEADLINE_S = HEARTBEAT_S + HEARTBEAT_TIMEOUT_S + FENCE_KILL_S
"""A replica's sandboxes are stopped at most this long after the last heartbeat that found
its claim held (found lost within a beat and its timeout, then stopped)."""
DEAD_GRACE_S = 10.0
"""How long a peer sees an instance's lock free before it ends that instance's runs. Longer
than `FENCE_DEADLINE_S`: the lock is freed after the owner's last good heartbeat, so by the
time a peer may declare its runs dead, a partitioned owner has stopped them itself."""
REGAIN_BACKOFF_MAX_S = 1.0
"""A lost claim is tried again at least this often: one connection a second is nothing to
the database, and a healed replica serves again within a second of its first connect."""
ENDED_BY_DEATH = "the server running it stopped before the run ended (found by a live replica)"

_TERMINATE_OWN = f"""
    SELECT pg_terminate_backend(l.pid, 2000)
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE {held_lock("%(key)s::bigint")}
      AND a.application_name = %(name)s AND l.pid <> pg_backend_pid()
"""

EndRuns = Callable[[Sequence[str], float], Awaitable[int]]
"""End `killed` the unfinished runs of these instances at this time; how many."""
Fence = Callable[[], Awaitable[object]]
"""Stop every sandbox this replica runs: its claim is lost, and its peers will soon end
the runs."""


class _HeldElsewhere(Exception):
    """A peer holds this instance's lock (it is ending this instance's runs): try again.
    Never leaves this module: `_regain` tries until the lock is had."""


async def _no_fence() -> None:
    """A claim without sandboxes to stop or connections to renew (tests of the claim alone)."""


class AdvisoryClaim:
    """This replica's claim on the fleet's database at `url` (an `instances.InstanceClaim`)."""

    def __init__(
        self,
        url: str,
        instance_id: str,
        end_runs: EndRuns,
        conn: Connection,
        clock: Callable[[], float] = time.time,
        *,
        fence: Fence = _no_fence,
        renew: Fence = _no_fence,
        grace_s: float = DEAD_GRACE_S,
    ) -> None:
        self._url = url
        self._clock = clock
        self._id = instance_id
        self._key = lock_key(instance_id)
        self._name = application_name(instance_id)
        self._end_runs = end_runs
        self._conn: Connection | None = conn
        self._fence = fence
        self._renew = renew
        self._grace_s = grace_s
        # (instance, epoch) -> when its lock was first seen free (monotonic), for the grace.
        self._free_since: dict[tuple[str, int], float] = {}
        self.epoch = 0
        """The fencing token of this taking of the claim (0 until held): each taking draws a
        new one, and the records write a run's end only under its run's."""
        # One query at a time on the claim's connection (heartbeat, scan, release).
        self._lock = anyio.Lock()
        self.lost = False

    @classmethod
    async def take(
        cls,
        url: str,
        instance_id: str,
        end_runs: EndRuns,
        *,
        clock: Callable[[], float] = time.time,
        fence: Fence = _no_fence,
        renew: Fence = _no_fence,
        grace_s: float = DEAD_GRACE_S,
    ) -> AdvisoryClaim:
        """Claim `instance_id` on `url`, then look for instances that died (their runs are
        ended once their locks stayed free `grace_s`); `fence` stops this replica's
        sandboxes when it loses the claim, `renew` replaces its other connections before
        it takes calls again (those from before the loss may be dead without knowing)."""
        try:
            conn = await connect(url, instance_id)
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot claim a server instance on {shown_url(url)}: {type(exc).__name__}; check "
                "the --store URL and that the database accepts connections"
            ) from exc
        claim = cls(
            url, instance_id, end_runs, conn, clock, fence=fence, renew=renew, grace_s=grace_s
        )
        now = clock()
        try:
            if not await claim._hold(conn, now):
                raise StoreError(
                    f"instance {instance_id} is already claimed on {shown_url(url)} by a live "
                    "server"
                )
            await claim.end_runs_of_dead(now=now)
        except BaseException:
            await conn.close()
            raise
        return claim

    @property
    def instance_id(self) -> str:
        return self._id

    @property
    def backend_pid(self) -> int | None:
        """The backend holding the lock, while connected (tests terminate it)."""
        return self._conn.info.backend_pid if self._conn is not None else None

    def check(self) -> None:
        if self.lost:
            raise StoreUnavailable(
                f"this server lost its connection to the database {shown_url(self._url)}, so it "
                "takes no calls it could not record; it reconnects by itself: retry in a few "
                "seconds, or through another server of the fleet"
            )

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Query the claim's connection every `HEARTBEAT_S`; when it fails, mark the claim
        lost, and reconnect (with backoff) until the lock is held again. The connection
        stays open when this is cancelled: `release` closes it."""
        task_status.started()
        while True:
            await anyio.sleep(HEARTBEAT_S)
            if not await self._beat():
                await self._stop_own_runs()
                await self._regain()

    async def end_runs_of_dead(self, *, now: float) -> int:
        if self.lost or self._conn is None:
            return 0  # nothing can be known of the others meanwhile
        async with self._lock:
            conn = self._conn
            try:
                dead = await self._dead_past_grace(conn)
                if not dead:
                    return 0
                try:
                    ended = await self._end_runs([i for i, _ in dead], now)
                    await conn.execute(
                        "DELETE FROM airlock_instances WHERE id = ANY(%s)", ([i for i, _ in dead],)
                    )
                finally:
                    for _, key in dead:
                        await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
            except psycopg.Error as exc:
                raise StoreError(
                    f"cannot look for dead server instances on {shown_url(self._url)}: "
                    f"{type(exc).__name__}"
                ) from exc
        if ended:
            log.warning("ended %d run(s) left running by replica(s) that died", ended)
        return ended

    async def _dead_past_grace(self, conn: Connection) -> list[tuple[str, int]]:
        """The listed instances whose lock has been free for `grace_s`, each now locked
        here; a lock seen free for less is let go again and remembered."""
        cursor = await conn.execute(
            "SELECT id, lock_key, epoch FROM airlock_instances WHERE id <> %s", (self._id,)
        )
        listed = [(str(i), int(k), int(e)) for i, k, e in await cursor.fetchall()]
        now = time.monotonic()
        free: dict[tuple[str, int], float] = {}
        dead = []
        for instance_id, key, epoch in listed:
            taken = await conn.execute("SELECT pg_try_advisory_lock(%s)", (key,))
            row = await taken.fetchone()
            if row is None or row[0] is not True:
                continue  # alive: its lock is held
            since = self._free_since.get((instance_id, epoch), now)
            if now - since >= self._grace_s:
                dead.append((instance_id, key))
                continue
            free[(instance_id, epoch)] = since
            await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        # Only what is still free counts on: a lock taken again starts its grace anew.
        self._free_since = free
        return dead

    async def release(self) -> None:
        async with self._lock:
            if self._conn is not None and not self.lost:
                try:
                    await self._conn.execute(
                        "DELETE FROM airlock_instances WHERE id = %s", (self._id,)
                    )
                except psycopg.Error as exc:
                    # The lock goes with the connection anyway; the row is then a dead
                    # instance's, with no runs left, removed by the next scan.
                    log.warning("could not unlist this instance: %s", type(exc).__name__)
        await self._drop()

    async def _hold(self, conn: Connection, now: float) -> bool:
        taken = await conn.execute("SELECT pg_try_advisory_lock(%s)", (self._key,))
        row = await taken.fetchone()
        if row is None or row[0] is not True:
            return False
        # A new epoch at every taking: the runs of an earlier one are no longer this
        # replica's to end (it stopped them when it lost the claim).
        listed = await conn.execute(
            "INSERT INTO airlock_instances (id, lock_key, claimed_at, epoch)"
            " VALUES (%s, %s, %s, nextval('airlock_claim_epochs'))"
            " ON CONFLICT (id) DO UPDATE SET claimed_at = EXCLUDED.claimed_at,"
            " epoch = EXCLUDED.epoch RETURNING epoch",
            (self._id, self._key, now),
        )
        epoch = await listed.fetchone()
        assert epoch is not None  # INSERT ... RETURNING always returns its row
        self.epoch = int(epoch[0])
        return True

    async def _stop_own_runs(self) -> None:
        """Fencing: stop this replica's sandboxes within `FENCE_KILL_S` of finding its claim
        lost, before any peer may end their runs (`DEAD_GRACE_S`)."""
        started = time.monotonic()
        with anyio.move_on_after(FENCE_KILL_S) as scope:
            try:
                await self._fence()
            except AirlockError as exc:
                log.error("could not stop this server's sandboxes (fencing): %s", exc)
                return
        if scope.cancelled_caught:
            log.error("stopping this server's sandboxes took over %.0f s (fencing)", FENCE_KILL_S)
        else:
            log.warning(
                "stopped this server's sandboxes in %.1f s: its claim is lost",
                time.monotonic() - started,
            )

    async def _end_own_stale_backend(self, conn: Connection) -> bool:
        """Terminate the backend holding this instance's lock if it is this server's own
        (its `application_name`, another pid than `conn`'s): a connection this server gave
        up on that PostgreSQL still keeps, because a cut network swallowed the close. Whether
        one was ended (then the lock is free: terminated backends are waited for)."""
        cursor = await conn.execute(_TERMINATE_OWN, {"key": self._key, "name": self._name})
        ended = [bool(row[0]) for row in await cursor.fetchall()]
        if any(ended):
            log.warning(
                "ended this server's own stale claim connection on %s", shown_url(self._url)
            )
        return any(ended)

    async def _beat(self) -> bool:
        async with self._lock:
            if self._conn is None:
                return False
            try:
                with anyio.fail_after(HEARTBEAT_TIMEOUT_S):
                    await self._conn.execute("SELECT 1")
            except (psycopg.Error, TimeoutError) as exc:
                self.lost = True
                log.error(
                    "lost the claim connection to %s (%s): taking no calls until it is back",
                    shown_url(self._url),
                    type(exc).__name__,
                )
                return False
            return True

    async def _regain(self) -> None:
        await self._drop()
        await first_pause(BACKOFF_MIN_S)
        conn: Connection = await backoff(
            on=(psycopg.Error, _HeldElsewhere), first_s=BACKOFF_MIN_S, max_s=REGAIN_BACKOFF_MAX_S
        )(self._take_again)
        try:
            await self._renew()
        except AirlockError as exc:
            log.warning("could not renew this server's database connections: %s", exc)
        async with self._lock:
            self._conn = conn
            self.lost = False
        log.warning("claim regained on %s: taking calls again", shown_url(self._url))

    async def _take_again(self) -> Connection:
        """A new connection holding this instance's lock again, ending first a stale backend
        of this server's own that still holds it."""
        conn = await connect(self._url, self._id)
        try:
            held = await self._hold(conn, self._clock())
            if not held and await self._end_own_stale_backend(conn):
                held = await self._hold(conn, self._clock())
        except BaseException:
            with anyio.CancelScope(shield=True):
                await conn.close()
            raise
        if not held:
            await conn.close()
            raise _HeldElsewhere
        return conn

    async def _drop(self) -> None:
        async with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
