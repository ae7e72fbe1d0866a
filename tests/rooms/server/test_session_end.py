"""One owner for a session's end: every way a session ends here goes through the leases'
`_end`, which runs the one list of what an end stops (`tools.session_end.STOPS`).

A probe entry added to the list, as a kept browser or a task will add theirs, must run once
for each way a session ends: `end_session`, the sweep (idle expiry; an end another server
recorded, found on re-reading), a call's touch that finds its session ended, the server's
shutdown and a fleet replica leaving; and only a session that ends here is recorded as
ended. No container is involved: the real store and broker, an engine never started, a
clock the test moves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support import T0, clocked_services, make_grant

from airlock.errors import NotFound
from airlock.policies import Policy
from airlock.server.sessions import Leases
from airlock.store.fleet.claims import FileClaim, claim
from airlock.tools import STOPS, Services, Stop
from airlock.tools import session_end as session_end_module

pytestmark = pytest.mark.anyio

NOW = [T0]


class Probe:
    """A new thing a session's end must stop: one coroutine, one entry."""

    def __init__(self) -> None:
        self.stopped: list[str] = []

    async def stop(self, services: Services, tenant: str, session_id: str) -> int:
        self.stopped.append(session_id)
        return 1


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[Services]:
    """The real store, broker and an engine that is never started, on the clock `NOW`."""
    async with clocked_services(tmp_path, NOW) as services:
        yield services


@pytest.fixture
async def leases(services: Services, tmp_path: Path) -> AsyncIterator[Leases]:
    mine = FileClaim(
        claim(tmp_path / "instances", services.instance_id), services.db, services.blobs
    )
    try:
        yield Leases(services, mine)
    finally:
        await mine.release()


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> Probe:
    probe = Probe()
    monkeypatch.setattr(session_end_module, "STOPS", (*STOPS, Stop("probes", probe.stop)))
    return probe


async def started(leases: Leases, tenant: str = "t1") -> str:
    session, created = await leases.resolve(None, tenant, connection=None)
    assert created
    return session.id


def live_grants(services: Services, session_id: str) -> list[str]:
    return [g.id for g in services.grants.live_for_session("t1", session_id, NOW[0])]


async def ended_elsewhere(services: Services, session_id: str) -> None:
    """Another server of the fleet records the session's end (its notice never comes)."""
    await services.db.end_session(
        session_id, ended_at=NOW[0], reason="elsewhere", containers_removed=0
    )


async def ended_reason(services: Services, session_id: str) -> str | None:
    record = await services.db.get_session(session_id)
    assert record is not None
    return record.end_reason if record.ended_at is not None else None


async def test_end_session_stops_every_entry_and_records_the_end(
    services: Services, leases: Leases, probe: Probe
) -> None:
    session_id = await started(leases)
    grant = make_grant(services.grants, session_id=session_id, ttl_s=600, now=T0)
    assert grant.id in live_grants(services, session_id)
    result = await leases.end(session_id, "t1", connection=None, reason="end_session")
    assert result.ended and probe.stopped == [session_id]
    assert grant.id not in live_grants(services, session_id)
    assert await ended_reason(services, session_id) == "end_session"
    assert session_id not in leases.live_ids()


async def test_idle_expiry_in_the_sweep_goes_through_the_one_end(
    services: Services, leases: Leases, probe: Probe
) -> None:
    session_id = await started(leases)
    NOW[0] += Policy().sessions.idle_ttl_s + 1
    assert await leases.sweep() == 1
    assert probe.stopped == [session_id]
    assert await ended_reason(services, session_id) == "expired"


async def test_an_end_found_on_re_reading_lets_go_without_recording_again(
    services: Services, leases: Leases, probe: Probe
) -> None:
    session_id = await started(leases)
    await ended_elsewhere(services, session_id)
    assert await leases.sweep() == 0
    assert probe.stopped == [session_id]
    assert await ended_reason(services, session_id) == "elsewhere"
    assert session_id not in leases.live_ids()


async def test_a_call_whose_session_ended_elsewhere_lets_it_go_here(
    services: Services, leases: Leases, probe: Probe
) -> None:
    session_id = await started(leases)
    await ended_elsewhere(services, session_id)
    with pytest.raises(NotFound, match="unknown session"):
        await leases.resolve(session_id, "t1", connection=None)
    assert probe.stopped == [session_id]


async def test_shutdown_ends_every_session_and_a_replica_leaving_only_lets_go(
    services: Services, leases: Leases, probe: Probe
) -> None:
    first, second = await started(leases), await started(leases)
    await leases.end_all(reason="server shutdown")
    assert sorted(probe.stopped) == sorted([first, second])
    assert await ended_reason(services, first) == "server shutdown"
    third = await started(leases)
    await leases.leave_all()
    assert probe.stopped[-1] == third
    # Its session lives on at the fleet's other servers.
    assert await ended_reason(services, third) is None


async def test_a_failing_entry_stops_the_rest_and_is_reported(
    services: Services, leases: Leases, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = Probe()

    async def broken(services: Services, tenant: str, session_id: str) -> int:
        raise RuntimeError("the kept browser would not stop")

    monkeypatch.setattr(
        session_end_module, "STOPS", (Stop("broken", broken), *STOPS, Stop("probes", probe.stop))
    )
    session_id = await started(leases)
    grant = make_grant(services.grants, session_id=session_id, ttl_s=600, now=T0)
    assert grant.id in live_grants(services, session_id)
    with pytest.raises(RuntimeError, match="would not stop"):
        await leases.end(session_id, "t1", connection=None, reason="end_session")
    assert probe.stopped == [session_id]
    assert grant.id not in live_grants(services, session_id)
