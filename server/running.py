"""A serving Airlock: what the server's lifespan builds, in order, and takes down in reverse.

`serving` is the composition root. It opens the store and claims this server instance
(ending the runs of instances that died), builds the broker, the egress proxy and the
services, subscribes what fleet notices do here (`tools.fleet`, the leases), starts the
notices, the engine and the housekeeping loop, and yields `Running`: the MCP SDK
hands that to every request as its lifespan context. On the way out it ends every session
(cancelling their runs, removing their containers) before it stops the engine's background
work, removes what containers remain and closes the store; every step of the way out is
shielded, so a cancelled server still takes it. Tools, schemas and the transport are
`app.py`'s; nothing here knows MCP.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import anyio

from airlock.broker import Grants, RunTokens
from airlock.egress import Egress
from airlock.errors import AirlockError
from airlock.policies import Policy
from airlock.sandbox.instance import Instance
from airlock.store import BlobStore, Database, FileClaim, InstanceClaim, Notices
from airlock.tools import Services
from airlock.tools.approvals import expire_pending
from airlock.tools.fleet import subscribe as follow_fleet

from .config import Config, blob_store, open_store, open_vault
from .engine import Engine, EngineFactory, ServerEngine
from .metrics import LiveState
from .secret_check import warn_missing_secrets
from .sessions import Leases
from .tasks.jobs import TaskJobs

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 10.0
REAP_INTERVAL_S = 60.0
ENDED_ORPHANED = (
    "the server running it no longer holds the claim it ran under (it lost it and stopped "
    "its sandboxes, or it stopped); ended by the fleet's sweep"
)


@dataclass(frozen=True)
class Running:
    """What a serving Airlock is made of, for the tools (as the SDK's lifespan context)."""

    services: Services
    leases: Leases
    engine: ServerEngine
    """The same engine as `services.engine`, with what only the server sees (the pool)."""
    claim: InstanceClaim
    """This server's claim on its runs (`/readyz` fails while it is lost)."""
    tasks: TaskJobs
    """The calls of this server that may become MCP tasks (`server/tasks`)."""

    def live_state(self) -> LiveState:
        """The gauges `/metrics` reports."""
        services = self.services
        pool = self.engine.pool()
        now = services.clock()
        grants: dict[str, int] = {}
        for grant in services.grants.all():
            if grant.live(now):
                grants[grant.tenant] = grants.get(grant.tenant, 0) + 1
        return LiveState(
            sessions=len(self.leases.live_ids()),
            runs_in_progress=self.leases.running_by_tenant(),
            live_grants=grants,
            pool_size=services.policy.pool.size,
            pool_ready=pool.ready_count() if pool is not None else 0,
            pool_hits=pool.hits if pool is not None else 0,
            pool_misses=pool.misses if pool is not None else 0,
            kept_browsers=services.browsers.by_tenant(),
        )


@asynccontextmanager
async def serving(
    config: Config,
    policy: Policy,
    *,
    tenant_policies: Mapping[str, Policy],
    clock: Callable[[], float],
    engine_side: EngineFactory = Engine,
) -> AsyncIterator[Running]:
    """Airlock, serving, for the duration of the block, on the engine side `engine_side`
    makes (Docker's `Engine` unless told otherwise)."""
    every_policy = [policy, *tenant_policies.values()]
    instance = Instance.current()
    # Each step registers its own undoing as it succeeds; they run last-in, first-out.
    async with AsyncExitStack() as undo:
        db = await open_store(config, instance.id)
        undo.push_async_callback(_shielded(db.close))
        blobs = blob_store(config, db, owner=instance.id)
        engine = engine_side(policy, instance)
        undo.callback(engine.close)
        claim = await _claim(config, db, blobs, instance.id, clock, lambda: _fence(engine))
        # Runs after every later step's undoing, so after every run of this instance ended.
        undo.push_async_callback(_shielded(claim.release))
        undo.push_async_callback(_shielded(lambda: _remove_remaining(engine)))
        grants = Grants()
        tokens = RunTokens()
        vault = open_vault(config, db, os.environ)
        if config.fleet_url is not None:
            # A replica with another key than the fleet's vault was written with stops here.
            await anyio.to_thread.run_sync(vault.check_key)
        await anyio.to_thread.run_sync(
            warn_missing_secrets, every_policy, config.data_dir, os.environ, vault
        )
        services = Services(
            db=db,
            blobs=blobs,
            engine=engine,
            policy=policy,
            grants=grants,
            tokens=tokens,
            vault=vault,
            egress=Egress(grants=grants, tokens=tokens, vault=vault),
            instance_id=instance.id,
            clock=clock,
            tenant_policies=dict(tenant_policies),
            notices=_notices(config, instance.id),
        )
        follow_fleet(services)
        leases = Leases(services, claim)
        background = await undo.enter_async_context(anyio.create_task_group())
        undo.callback(background.cancel_scope.cancel)
        await background.start(services.notices.serve)
        await background.start(claim.serve)
        # Sessions first (their runs are cancelled, their containers removed), then the
        # engine's background work (pool, pending removals).
        if config.fleet_url is None:
            undo.push_async_callback(_shielded(lambda: leases.end_all(reason="server shutdown")))
        else:
            # A fleet's sessions outlive any one replica: the others serve them on.
            undo.push_async_callback(_shielded(leases.leave_all))
        background.start_soon(engine.serve)
        interval = min(map(_sweep_interval, every_policy))
        background.start_soon(_housekeeping, leases, engine, interval, claim)
        tasks = TaskJobs(
            db,
            background,
            policy.tasks,
            notices=services.notices,
            instance_id=instance.id,
            clock=clock,
        )
        background.start_soon(tasks.serve)
        yield Running(services, leases, engine, claim, tasks)


async def _claim(
    config: Config,
    db: Database,
    blobs: BlobStore,
    instance_id: str,
    clock: Callable[[], float],
    fence: Callable[[], Awaitable[object]],
) -> InstanceClaim:
    """This server's claim on its runs: a flock on one machine, an advisory lock in a fleet
    (which `fence`s this server's sandboxes when it is lost)."""
    if config.fleet_url is None:
        return await FileClaim.take(db, blobs, config.instances_dir, instance_id, now=clock())
    from airlock.store.fleet.pg_claims import ENDED_BY_DEATH, AdvisoryClaim

    async def end_runs(instance_ids: Sequence[str], at: float) -> int:
        return await db.mark_unfinished_runs(
            instance_ids=instance_ids, status="killed", error=ENDED_BY_DEATH, finished_at=at
        )

    return await AdvisoryClaim.take(
        config.fleet_url,
        instance_id,
        end_runs,
        clock=clock,
        fence=fence,
        renew=db.renew_connections,
    )


async def _fence(engine: ServerEngine) -> int:
    """Kill every sandbox of this server: it lost its claim, so its peers will end the runs
    (their ends and commits from here are refused by the records anyway)."""
    backend = engine.connected()
    return await backend.remove_all() if backend is not None else 0


def _notices(config: Config, instance_id: str) -> Notices:
    if config.fleet_url is None:
        return Notices(instance_id)  # one server: its notices reach only itself
    from airlock.store.fleet.pg_notices import PostgresNotices  # psycopg: for a fleet only

    return PostgresNotices(config.fleet_url, instance_id)


def _shielded(step: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[None]]:
    async def shielded() -> None:
        with anyio.CancelScope(shield=True):
            await step()

    return shielded


def _sweep_interval(policy: Policy) -> float:
    # Often enough that a lease (or a kept browser) ends within a fraction of its TTL of
    # expiring.
    shortest = min(
        policy.sessions.idle_ttl_s, policy.sessions.max_lifetime_s, policy.browser.keep_idle_s
    )
    return min(SWEEP_INTERVAL_S, max(0.5, shortest / 4))


async def _housekeeping(
    leases: Leases, engine: ServerEngine, interval: float, claim: InstanceClaim
) -> None:
    """End expired sessions, forget ended grants and expired run tokens (their records
    are in the store), end the runs of server instances that died and, in a fleet, every
    run left open by an owner with no current claim, and reap containers past their
    deadline, until cancelled."""
    services = leases.services
    last_reap = time.monotonic()
    while True:
        await anyio.sleep(interval)
        try:
            await leases.sweep()
            now = services.clock()
            await services.browsers.close_idle(now)
            services.grants.forget_ended(now)
            services.tokens.forget_expired(now)
            await expire_pending(services)
            await claim.end_runs_of_dead(now=now)
            await services.db.end_orphaned_runs(error=ENDED_ORPHANED, finished_at=now)
            backend = engine.connected()
            if backend is not None and time.monotonic() - last_reap >= REAP_INTERVAL_S:
                last_reap = time.monotonic()
                await backend.reap(time.time())
        except AirlockError as exc:
            log.warning("housekeeping failed: %s", exc)


async def _remove_remaining(engine: ServerEngine) -> None:
    backend = engine.connected()
    if backend is not None:
        removed = await backend.remove_all()
        if removed:
            log.info("removed %d remaining container(s) at shutdown", removed)
