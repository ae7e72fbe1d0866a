"""A replica whose network to PostgreSQL is cut without a close (a partition that swallows
every byte, as a lost route or a dropped NAT entry does) and then healed serves again within
10 s: PostgreSQL still keeps the replica's old backend, and with it the claim's advisory
lock, but the replica knows that backend by its `application_name` and ends it.

The cut is real: the replica reaches the real PostgreSQL through a TCP relay in this test
that, once cut, keeps every socket open and drops what arrives (never a FIN, never a RST),
and after the heal forwards new connections only; the old ones stay black holes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import anyio
import anyio.abc
import postgres
import psycopg
import pytest
from relay import relayed
from support import wait_until

from airlock.store import Database
from airlock.store.connection import application_name
from airlock.store.fleet.locks import lock_key
from airlock.store.fleet.pg_claims import AdvisoryClaim
from airlock.store.postgres.connections import connect

pytestmark = pytest.mark.anyio

HEALED_WITHIN_S = 10.0


async def lock_holders(url: str, instance_id: str) -> list[tuple[int, str]]:
    """(pid, application_name) of the backends holding `instance_id`'s claim, read directly."""
    key = lock_key(instance_id)
    out = await anyio.to_thread.run_sync(
        postgres.psql,
        url,
        "SELECT l.pid || ' ' || a.application_name FROM pg_locks l JOIN pg_stat_activity a"
        " ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted"
        f" AND l.classid = (({key}::bigint >> 32) & 4294967295)::oid"
        f" AND l.objid = ({key}::bigint & 4294967295)::oid",
    )
    rows = [line.split(" ", 1) for line in out.splitlines() if line.strip()]
    return [(int(pid), name) for pid, name in rows]


async def no_runs_ended(_ids: Sequence[str], _at: float) -> int:
    return 0


@pytest.fixture(autouse=True)
async def _migrated(postgres_url: str) -> None:
    db = await Database.open(postgres_url)
    await db.close()


async def test_a_replica_cut_off_by_a_swallowing_partition_serves_again_within_10s_of_the_heal(
    postgres_url: str,
) -> None:
    async with relayed(postgres_url) as (relay, through):
        claim = await AdvisoryClaim.take(through, "inst_cut", no_runs_ended)
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(claim.serve)
                before = await lock_holders(postgres_url, "inst_cut")
                assert [name for _, name in before] == [application_name("inst_cut")]
                await relay.cut()
                await wait_until(lambda: claim.lost, within=15)
                # The partition swallowed the close: PostgreSQL still keeps the old backend
                # and its lock (the half-open connection of the issue).
                assert await lock_holders(postgres_url, "inst_cut") == before
                await anyio.sleep(2)  # reconnects meanwhile go into the black hole
                relay.heal()
                healed = time.monotonic()
                await wait_until(lambda: not claim.lost, within=HEALED_WITHIN_S, interval=0.02)
                took = time.monotonic() - healed
                claim.check()
                after = await lock_holders(postgres_url, "inst_cut")
                assert len(after) == 1 and after[0][0] != before[0][0], (before, after)
                assert after[0][0] == claim.backend_pid
                assert took < HEALED_WITHIN_S  # measured here: about 3 s
                tg.cancel_scope.cancel()
        finally:
            with anyio.move_on_after(10):
                await claim.release()


async def test_a_replica_never_ends_the_backend_of_a_peer_holding_its_lock(
    postgres_url: str,
) -> None:
    """A peer holding a lost replica's lock (ending its runs) is another instance's backend:
    the replica waits for it to let go instead of ending it."""
    claim = await AdvisoryClaim.take(postgres_url, "inst_x", no_runs_ended)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(claim.serve)
            peer = await connect(postgres_url, "inst_peer")
            async with peer:
                old = claim.backend_pid
                await peer.execute("SELECT pg_terminate_backend(%s)", (old,))
                await peer.execute("SELECT pg_advisory_lock(%s)", (lock_key("inst_x"),))
                await wait_until(lambda: claim.lost, within=10)
                await anyio.sleep(3)  # several tries of the replica meanwhile
                assert claim.lost
                assert [pid for pid, _ in await lock_holders(postgres_url, "inst_x")] == [
                    peer.info.backend_pid
                ]
                await peer.execute("SELECT pg_advisory_unlock(%s)", (lock_key("inst_x"),))
                await wait_until(lambda: not claim.lost, within=HEALED_WITHIN_S)
            tg.cancel_scope.cancel()
    finally:
        await claim.release()


async def test_every_connection_of_a_replica_is_named_for_it_and_keeps_alive(
    postgres_url: str,
) -> None:
    """The pool, the claim and the notices: each connection carries the instance id as its
    `application_name` and TCP keepalives with `tcp_user_timeout` (a cut is found in seconds,
    not the kernel's two hours)."""
    db = await Database.open(postgres_url, instance_id="inst_named")
    claim = await AdvisoryClaim.take(postgres_url, "inst_named", no_runs_ended)
    direct = await connect(postgres_url, "inst_named")
    try:
        with db.engine.connect() as pooled:
            raw = pooled.connection.dbapi_connection
            assert isinstance(raw, psycopg.Connection)
            dsns = [raw.info.dsn, direct.info.dsn]
            names = await anyio.to_thread.run_sync(
                postgres.psql,
                postgres_url,
                "SELECT application_name FROM pg_stat_activity"
                f" WHERE pid IN ({raw.info.backend_pid}, {claim.backend_pid},"
                f" {direct.info.backend_pid})",
            )
        assert names.split() == [application_name("inst_named")] * 3
        for dsn in dsns:
            options = dict(part.split("=", 1) for part in dsn.split())
            assert options["keepalives"] == "1"
            assert int(options["keepalives_idle"]) <= 5
            assert int(options["tcp_user_timeout"]) <= 10_000
    finally:
        await direct.close()
        await claim.release()
        await db.close()
