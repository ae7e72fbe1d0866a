"""What another server of a fleet changes takes effect here: a real server whose notices
travel through the real PostgreSQL, real Docker and the real image, the egress upstream a
local HTTPS server (tests/upstream.py).

In the first tests the other server is played by the test: it writes what that server
would have recorded into the same records (a second `Database` on the server's file) and
announces it on the channel as that server would (`PostgresNotices` with another origin),
or stays silent, to show what holds when a notice is missed: the database check at the
next run, and the re-read when the listener reconnects. The last ones run two real servers
on one store and one channel, a revoke or an end on one reaching the other's proxy and
containers.
"""

from __future__ import annotations

import logging
import resource
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import docker
import postgres
import pytest
from mcp.client import Client
from mcp.types import CallToolResult
from support import (
    EGRESS_PRELUDE,
    EGRESS_SECRET,
    EGRESS_SECRET_NAME,
    containers,
    egress_policy,
    egress_run,
    grant,
    listening,
    none_left,
    report,
    requests_of,
    running,
    text_of,
    wait_for_containers,
    wait_until,
)
from upstream import Upstream

from airlock.policies import Policy
from airlock.server import Config, build_server
from airlock.server.config import open_vault
from airlock.store import Database, GrantRevoked, SessionEnded
from airlock.store.fleet.pg_notices import PostgresNotices

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

PEER = "inst_peer"
LONG_RUN = "import time; print('x', flush=True); time.sleep(60)"
WITHIN_S = 60


@pytest.fixture
def fleet_server(
    data_dir: Path,
    sandbox_image: str,
    sandbox_runtime: str,
    upstream: Upstream,
    upstream_ca_file: Path,
    postgres_url: str,
) -> Callable[[], Any]:
    """A server on this test's data dir whose records, notices, blobs and vault are in
    `postgres_url` (the secret set in that vault beforehand, as `airlock secrets set
    --store` would)."""

    async def set_secret() -> None:
        db = await Database.open(postgres_url)
        try:
            vault = open_vault(Config(data_dir=data_dir, store_url=postgres_url), db, {})
            vault.set(EGRESS_SECRET_NAME, EGRESS_SECRET, ["localhost"])
        finally:
            await db.close()

    anyio.run(set_secret)

    def make() -> Any:
        policy = egress_policy(upstream.port, upstream_ca_file)
        policy["sandbox"] = {"runtime": sandbox_runtime}
        policy["pool"] = {"size": 0}
        config = Config(data_dir=data_dir, store_url=postgres_url)
        return build_server(config, Policy.model_validate(policy))

    return make


@asynccontextmanager
async def peer(data_dir: Path, url: str) -> AsyncIterator[tuple[Database, PostgresNotices]]:
    """The other server: the same records, the same channel, another origin."""
    db = await Database.open(url)
    try:
        async with listening(url, PEER) as notices:
            yield db, notices
    finally:
        await db.close()


async def terminate_listeners(url: str) -> None:
    """Kill the backend of every LISTENing connection on the database (the server's)."""
    killed = await anyio.to_thread.run_sync(
        postgres.psql,
        url,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE datname = current_database() AND query LIKE 'LISTEN %'",
    )
    assert int(killed) >= 1


HOLD = """
report(one=fetch("{url}/api/one")["status"], hold=fetch("{url}/api/hold")["status"],
       two=fetch("{url}/api/two"))
"""


async def held_then_cut(c: Client, upstream: Upstream, cut: Callable[[str], Any]) -> dict[str, Any]:
    """Run code that holds `/api/hold` open with a fresh grant, `cut(grant id)` while it
    holds, and return the run's result."""
    cap = (await grant(c))["capability_id"]
    done: dict[str, Any] = {}

    async def the_run() -> None:
        done.update(
            await egress_run(c, HOLD.format(url=f"https://localhost:{upstream.port}"), [cap])
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(the_run)
        await wait_until(lambda: "/api/hold" in upstream.paths(), within=WITHIN_S)
        await cut(cap)
    return done


def assert_cut_by_revocation(done: dict[str, Any], upstream: Upstream) -> None:
    out = report(done)
    assert (out["one"], out["hold"]) == (200, None)
    assert out["two"]["status"] is None and "403" in out["two"]["error"]
    records = requests_of(done["egress"])
    assert [r["status"] for r in records] == [200, 502, 403]
    assert records[1]["path"] == "/api/hold" and "revoked or expired" in records[1]["reason"]
    assert "/api/two" not in upstream.paths()


async def test_a_revocation_another_server_announces_cuts_the_tunnel_held_here(
    fleet_server: Callable[[], Any], data_dir: Path, postgres_url: str, upstream: Upstream
) -> None:
    async with Client(fleet_server()) as c, peer(data_dir, postgres_url) as (db, notices):

        async def revoke_there(cap: str) -> None:
            await db.mark_grants_revoked([cap], at=time.time())
            await notices.publish(GrantRevoked(tenant="local", grant_ids=(cap,)))

        done = await held_then_cut(c, upstream, revoke_there)
    assert_cut_by_revocation(done, upstream)


async def test_a_revocation_whose_notice_was_missed_is_refused_at_the_next_run(
    fleet_server: Callable[[], Any], data_dir: Path, postgres_url: str
) -> None:
    async with Client(fleet_server()) as c, peer(data_dir, postgres_url) as (db, _):
        cap = (await grant(c))["capability_id"]
        # Recorded by the other server, its notice lost: the records still say no.
        await db.mark_grants_revoked([cap], at=time.time())
        with anyio.fail_after(WITHIN_S):
            refused = await c.call_tool("run_code", {"code": EGRESS_PRELUDE, "capabilities": [cap]})
        assert refused.is_error and "unknown, expired or revoked" in text_of(refused)
        # And it is revoked here now: a later run is refused without the records' help.
        again = await c.call_tool("run_code", {"code": EGRESS_PRELUDE, "capabilities": [cap]})
        assert again.is_error and "unknown, expired or revoked" in text_of(again)


async def test_a_listener_that_reconnects_rereads_a_missed_revocation_and_cuts_the_tunnel(
    fleet_server: Callable[[], Any], data_dir: Path, postgres_url: str, upstream: Upstream
) -> None:
    async with Client(fleet_server()) as c, peer(data_dir, postgres_url) as (db, _):

        async def revoke_silently_then_drop_the_listener(cap: str) -> None:
            await db.mark_grants_revoked([cap], at=time.time())
            # Only the server's listener: the peer's own is the test's and comes back too.
            await terminate_listeners(postgres_url)

        done = await held_then_cut(c, upstream, revoke_silently_then_drop_the_listener)
    assert_cut_by_revocation(done, upstream)


async def long_call(c: Client, session_id: str, into: list[CallToolResult]) -> None:
    with anyio.fail_after(WITHIN_S):
        into.append(await c.call_tool("run_code", {"code": LONG_RUN, "session_id": session_id}))


async def test_a_session_end_another_server_announces_kills_its_containers_here(
    fleet_server: Callable[[], Any],
    data_dir: Path,
    postgres_url: str,
    docker_client: docker.DockerClient,
) -> None:
    async with Client(fleet_server()) as c, peer(data_dir, postgres_url) as (db, notices):
        first = await egress_run(c, "print(1)")
        session_id = first["session_id"]
        label = f"airlock.session={session_id}"
        results: list[CallToolResult] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(long_call, c, session_id, results)
            tg.start_soon(long_call, c, session_id, results)
            await wait_for_containers(docker_client, label, running(2), within=WITHIN_S)
            await db.end_session(
                session_id, ended_at=time.time(), reason="end_session", containers_removed=0
            )
            await notices.publish(SessionEnded(tenant="local", session_id=session_id))
        await wait_for_containers(docker_client, label, none_left, within=20)
        assert len(results) == 2
        for result in results:
            assert result.is_error and "ended while the call was running" in text_of(result)
        # The lease is gone here too.
        after = await c.call_tool("run_code", {"code": "print(1)", "session_id": session_id})
        assert after.is_error and "unknown session" in text_of(after)
    assert await containers(docker_client, label) == []


async def test_a_listener_that_reconnects_rereads_a_missed_session_end(
    fleet_server: Callable[[], Any],
    data_dir: Path,
    postgres_url: str,
    docker_client: docker.DockerClient,
) -> None:
    async with Client(fleet_server()) as c, peer(data_dir, postgres_url) as (db, _):
        session_id = (await egress_run(c, "print(1)"))["session_id"]
        label = f"airlock.session={session_id}"
        results: list[CallToolResult] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(long_call, c, session_id, results)
            await wait_for_containers(docker_client, label, running(1), within=WITHIN_S)
            await db.end_session(
                session_id, ended_at=time.time(), reason="end_session", containers_removed=0
            )
            await terminate_listeners(postgres_url)
        await wait_for_containers(docker_client, label, none_left, within=20)
        (result,) = results
        assert result.is_error and "ended while the call was running" in text_of(result)


async def call_until(c: Client, ok: bool, *, within: float) -> CallToolResult:
    """Call list_workspace until it succeeds (`ok`) or fails (not `ok`); bounded."""
    with anyio.fail_after(within):
        while True:
            result = await c.call_tool("list_workspace", {})
            if result.is_error != ok:
                return result
            await anyio.sleep(0.05)


async def test_a_server_that_loses_its_database_refuses_calls_until_it_is_back(
    fleet_server: Callable[[], Any], postgres_url: str
) -> None:
    name = postgres_url.rsplit("/", 1)[1]
    admin = postgres.with_database(postgres_url, "postgres")

    async def psql(url: str, sql: str) -> str:
        return await anyio.to_thread.run_sync(postgres.psql, url, sql)

    async with Client(fleet_server()) as c:
        assert report(await egress_run(c, "report(up=1)")) == {"up": 1}
        # Nobody may connect again, and the server's claim connection is cut.
        await psql(admin, f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
        try:
            # Every connection but the notice listener's: the claim's among them, whatever
            # it last ran (its heartbeat, or a look for dead instances).
            await psql(
                admin,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                f" WHERE datname = '{name}' AND query NOT LIKE 'LISTEN %'",
            )
            # The records fail first (a store error); within the claim's heartbeat limit
            # every call is refused as the claim's, and none succeeds meanwhile.
            with anyio.fail_after(10):
                while True:
                    refused = await call_until(c, ok=False, within=10)
                    message = text_of(refused)
                    assert postgres_url.split(":")[2].split("@")[0] not in message  # no password
                    if "lost its connection to the database" in message:
                        break
                    assert "could not read or write its records" in message, message
                    await anyio.sleep(0.1)
            assert "retry" in message
        finally:
            await psql(admin, f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
        await call_until(c, ok=True, within=20)
        assert report(await egress_run(c, "report(up=2)")) == {"up": 2}


# ---- two real servers on one store and one channel -----------------------------------------


async def test_a_revoke_on_one_server_cuts_a_tunnel_held_open_through_another(
    fleet_server: Callable[[], Any], upstream: Upstream
) -> None:
    async with Client(fleet_server()) as on_a, Client(fleet_server()) as on_b:
        granted = await grant(on_a, session_id="new")
        session, cap = granted["session_id"], granted["capability_id"]
        done: dict[str, Any] = {}
        code = HOLD.format(url=f"https://localhost:{upstream.port}")

        async def the_run() -> None:
            done.update(await egress_run(on_b, code, [cap], session_id=session))

        async with anyio.create_task_group() as tg:
            tg.start_soon(the_run)
            await wait_until(lambda: "/api/hold" in upstream.paths(), within=WITHIN_S)
            with anyio.fail_after(WITHIN_S):
                revoked = await on_a.call_tool(
                    "revoke_capability", {"capability_id": cap, "session_id": session}
                )
            assert not revoked.is_error, text_of(revoked)
    assert_cut_by_revocation(done, upstream)


async def test_end_session_on_one_server_kills_its_calls_containers_on_another(
    fleet_server: Callable[[], Any], docker_client: docker.DockerClient
) -> None:
    async with Client(fleet_server()) as on_a, Client(fleet_server()) as on_b:
        with anyio.fail_after(WITHIN_S):
            started = await on_a.call_tool("list_workspace", {"session_id": "new"})
        assert started.structured_content is not None, text_of(started)
        session_id = started.structured_content["session_id"]
        label = f"airlock.session={session_id}"
        results: list[CallToolResult] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(long_call, on_b, session_id, results)
            await wait_for_containers(docker_client, label, running(1), within=WITHIN_S)
            with anyio.fail_after(WITHIN_S):
                ended = await on_a.call_tool("end_session", {"session_id": session_id})
            assert not ended.is_error, text_of(ended)
            # Well before B's own sweep (every 10 s) would find the end in the records.
            await wait_for_containers(docker_client, label, none_left, within=5)
        (result,) = results
        assert result.is_error and "ended while the call was running" in text_of(result)


# ---- notices are hints: forged ones change nothing, a flood stalls nothing --------------

FLOOD_HEARD_S = 5.0
"""How long a flood is given to reach a server after its call answered (it took 4 s on the
code before issue 28.6)."""
FORGED_MARGIN_S = 1.0
"""How long a forged notice is given to take an effect it must not take (on the code before
issue 28.7 it took it at once, before any await)."""


async def test_a_forged_revocation_neither_of_another_tenant_nor_unrecorded_cuts_a_grant(
    fleet_server: Callable[[], Any], data_dir: Path, postgres_url: str, upstream: Upstream
) -> None:
    async with Client(fleet_server()) as c, peer(data_dir, postgres_url) as (db, notices):
        cap = (await grant(c))["capability_id"]
        # Another tenant's notice naming this tenant's grant, then one of the right tenant
        # that no record backs: the records say not revoked, so nothing is.
        await notices.publish(GrantRevoked(tenant="beta", grant_ids=(cap,)))
        await notices.publish(GrantRevoked(tenant="local", grant_ids=(cap,)))
        await anyio.sleep(FORGED_MARGIN_S)
        url = f"https://localhost:{upstream.port}/api/one"
        done = await egress_run(c, f'report(one=fetch("{url}")["status"])', [cap])
        assert report(done) == {"one": 200}
        record = await db.get_grant(cap)
        assert record is not None and record.revoked_at is None


async def test_a_forged_session_end_cancels_no_call_of_a_session_whose_record_goes_on(
    fleet_server: Callable[[], Any], data_dir: Path, postgres_url: str
) -> None:
    async with Client(fleet_server()) as c, peer(data_dir, postgres_url) as (db, notices):
        session_id = (await egress_run(c, "print(1)"))["session_id"]
        results: list[CallToolResult] = []

        async def short_call() -> None:
            code = "import time; time.sleep(4); print('finished')"
            with anyio.fail_after(WITHIN_S):
                results.append(
                    await c.call_tool("run_code", {"code": code, "session_id": session_id})
                )

        async with anyio.create_task_group() as tg:
            tg.start_soon(short_call)
            await anyio.sleep(1.5)  # the run has started
            await notices.publish(SessionEnded(tenant="local", session_id=session_id))
        (result,) = results
        assert not result.is_error, text_of(result)
        assert result.structured_content is not None
        assert result.structured_content["stdout"]["text"] == "finished\n"
        record = await db.get_session(session_id)
        assert record is not None and record.ended_at is None


async def test_a_notice_flood_stalls_no_call_and_writes_a_few_warning_lines(
    fleet_server: Callable[[], Any], postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """100 000 NOTIFYs at once (half junk, half well-formed session ends for sessions nobody
    has), sent by a stranger on another connection while a server serves."""
    flood = (
        "SELECT count(pg_notify('airlock_notices', CASE WHEN i % 2 = 0 THEN 'junk ' || i"
        " ELSE json_build_object('kind', 'session_ended', 'tenant', 'local',"
        " 'session_id', 'ses_' || i, 'origin', 'inst_flood')::text END))"
        " FROM generate_series(1, 100000) AS i"
    )
    async with Client(fleet_server()) as c:
        assert report(await egress_run(c, "report(up=1)")) == {"up": 1}
        caplog.clear()
        peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        sent = await anyio.to_thread.run_sync(postgres.psql, postgres_url, flood)
        assert int(sent) == 100_000
        # The review measured 40 s on two replicas writing each warning to stderr; in this
        # process (warnings captured, not written) the code before took about 2 s too, so
        # the counts below are what tell the two apart.
        with anyio.fail_after(15):
            assert report(await egress_run(c, "report(up=2)")) == {"up": 2}
        # Whatever of the flood is still to come is heard while the server serves on.
        await anyio.sleep(FLOOD_HEARD_S)
        grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) / 1024
        # Peak RSS: +125 MiB on the code before issue 28.6 (a task per notice), +1.4 after
        # (a peak: growth below an earlier test's peak would not show, never a false alarm).
        assert grown_mib < 48, grown_mib
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) <= 10, [r.getMessage() for r in warned]
