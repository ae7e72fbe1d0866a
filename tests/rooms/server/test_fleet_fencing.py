"""A replica of a fleet that loses its claim fences itself, and one cut off by a partition
serves again within 10 s of the heal: real servers on the real
PostgreSQL, Docker and image, its claim connection terminated while a run of it sleeps.
It kills that run's sandbox within `FENCE_DEADLINE_S` (before any peer may declare the run
dead), the call answers that the fleet ended the run, naming the record, the record says
`killed`, and the server serves again once it holds its claim anew.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import docker
import postgres
import pytest
from mcp.client import Client
from relay import Relay, relayed
from support import none_left, running, text_of, wait_for_containers

from airlock.store import Database
from airlock.store.connection import KEEPALIVES
from airlock.store.database import ENDED_BY_FENCING
from airlock.store.fleet.pg_claims import FENCE_DEADLINE_S, HEARTBEAT_S, HEARTBEAT_TIMEOUT_S

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

LONG_RUN = "import time; print('x', flush=True); time.sleep(60); open('late.txt', 'w')"
HEALED_WITHIN_S = 10.0
# The claim's holder: the backend holding the listed instance's advisory lock.
CLAIM_BACKEND = (
    "SELECT l.pid FROM airlock_instances i JOIN pg_locks l ON l.locktype = 'advisory'"
    " AND l.granted AND l.classid = ((i.lock_key >> 32) & 4294967295)::oid"
    " AND l.objid = (i.lock_key & 4294967295)::oid"
)


async def test_a_replica_that_loses_its_claim_kills_its_runs_and_says_the_fleet_ended_them(
    make_server: Callable[..., Any], postgres_url: str, docker_client: docker.DockerClient
) -> None:
    async with Client(make_server(store=postgres_url)) as client:
        with anyio.fail_after(120):
            warm = await client.call_tool("run_code", {"code": "print(1)"})
        assert warm.structured_content is not None, text_of(warm)
        session_id = warm.structured_content["session_id"]
        label = f"airlock.session={session_id}"
        answers: list[Any] = []

        async def long_call() -> None:
            args = {"code": LONG_RUN, "session_id": session_id, "timeout_s": 90}
            answers.append(await client.call_tool("run_code", args))

        async with anyio.create_task_group() as tg:
            tg.start_soon(long_call)
            await wait_for_containers(docker_client, label, running(1), within=60)
            [pid] = (
                await anyio.to_thread.run_sync(postgres.psql, postgres_url, CLAIM_BACKEND)
            ).split()
            await anyio.to_thread.run_sync(
                postgres.psql, postgres_url, f"SELECT pg_terminate_backend({pid})"
            )
            cut = time.monotonic()
            await wait_for_containers(docker_client, label, none_left, within=30)
            stopped = time.monotonic() - cut
        assert stopped <= FENCE_DEADLINE_S, f"its sandbox was stopped {stopped:.1f} s after"
        [answer] = answers
        assert answer.is_error, text_of(answer)
        message = text_of(answer)
        assert "the fleet ended run run_" in message and "`killed`" in message, message
        assert "nothing of it landed in the workspace" in message
        # Its claim taken anew, it serves again, and the killed run left nothing.
        listing = {"code": "import os; print(sorted(os.listdir()))", "session_id": session_id}
        with anyio.fail_after(60):
            while True:
                after = await client.call_tool("run_code", listing)
                if "lost its connection to the database" not in text_of(after):
                    break
                await anyio.sleep(0.2)
        assert not after.is_error, text_of(after)
        assert "late.txt" not in text_of(after)
    db = await Database.open(postgres_url)
    try:
        [killed] = [r for r in await db.list_runs() if r.status != "ok"]
        assert (killed.status, killed.error) == ("killed", ENDED_BY_FENCING)
        assert killed.id in message
    finally:
        await db.close()


@asynccontextmanager
async def cut_off(
    make_server: Callable[..., Any], postgres_url: str
) -> AsyncIterator[tuple[Relay, Client]]:
    """A served replica whose every connection goes through a relay, cut once the replica
    ran a first call and found its claim lost (it refuses calls)."""
    async with (
        relayed(postgres_url) as (relay, through),
        Client(make_server(store=through)) as client,
    ):
        with anyio.fail_after(120):
            warm = await client.call_tool("run_code", {"code": "print(1)"})
        assert not warm.is_error, text_of(warm)
        await relay.cut()
        await anyio.sleep(HEARTBEAT_S + HEARTBEAT_TIMEOUT_S + 2)
        with anyio.fail_after(10):
            refused = await client.call_tool("run_code", {"code": "print(2)"})
        assert "lost its connection to the database" in text_of(refused), text_of(refused)
        yield relay, client


async def healed_in(relay: Relay, client: Client) -> float:
    """Heal the relay; how long until a call runs again (at most `HEALED_WITHIN_S`)."""
    relay.heal()
    healed = time.monotonic()
    with anyio.fail_after(HEALED_WITHIN_S):
        while True:
            again = await client.call_tool("run_code", {"code": "print(3)"})
            if not again.is_error:
                break
            assert "lost its connection to the database" in text_of(again), text_of(again)
            await anyio.sleep(0.2)
    assert again.structured_content is not None
    assert again.structured_content["stdout"]["text"] == "3\n"
    return time.monotonic() - healed


async def test_a_replica_cut_off_by_a_swallowing_partition_serves_calls_within_10s_of_the_heal(
    make_server: Callable[..., Any], postgres_url: str
) -> None:
    """The whole replica (pool, claim, notices) reaches PostgreSQL through `relay`, which
    swallows everything; the replica's kernel gives up on its sockets after its
    `tcp_user_timeout`, PostgreSQL's keeps the backends, the claim's lock among them. Once the
    network heals, a call runs again within 10 s."""
    async with cut_off(make_server, postgres_url) as (relay, client):
        await anyio.sleep(KEEPALIVES["tcp_user_timeout"] / 1000)
        await relay.clients_give_up()
        assert await healed_in(relay, client) < HEALED_WITHIN_S  # measured here: about 1 s


async def test_a_replica_healed_before_its_sockets_gave_up_serves_within_10s_on_new_ones(
    make_server: Callable[..., Any], postgres_url: str
) -> None:
    """A shorter cut: healed once the claim is lost, before any kernel gave up. The pool's
    connections from before still lead into the partition (they would hang a call until
    `tcp_user_timeout`): the replica renews them when it regains its claim."""
    async with cut_off(make_server, postgres_url) as (relay, client):
        assert await healed_in(relay, client) < HEALED_WITHIN_S  # measured here: about 4 s
        await relay.clients_give_up()  # what is still stuck on the old sockets ends
