"""Fleet notices: in-process delivery, and LISTEN/NOTIFY on the real PostgreSQL
(two listeners on one database, a listener whose backend is terminated, a stranger's
malformed NOTIFY). The effects the notices drive are tested with the tools that cause
them (tests/rooms/egress/test_egress.py, tests/rooms/sandbox/test_teardown.py,
tests/rooms/server/test_approvals.py).
"""

from __future__ import annotations

import logging
import resource
from collections.abc import Callable

import anyio
import postgres
import pytest
from support import listening

from airlock.errors import StoreError
from airlock.store import AnyNotice, ApprovalRecord
from airlock.store.fleet import pg_notices
from airlock.store.fleet.notices import (
    MAX_IDS,
    ApprovalDecided,
    Backlog,
    GrantRevoked,
    Notices,
    Sampled,
    SessionEnded,
    revocations,
)
from airlock.store.fleet.pg_notices import CHANNEL, PostgresNotices
from airlock.tools.fleet import wait_for_decision

pytestmark = pytest.mark.anyio


class Inbox:
    """What one subscriber got, and a way to wait for the next."""

    def __init__(self) -> None:
        self.got: list[AnyNotice] = []
        self._arrived = anyio.Event()

    async def __call__(self, notice: AnyNotice) -> None:
        self.got.append(notice)
        self._arrived.set()

    async def next(self, *, within: float = 1.0) -> AnyNotice:
        with anyio.fail_after(within):
            while not self.got:
                await self._arrived.wait()
                self._arrived = anyio.Event()
        return self.got.pop(0)


async def test_in_process_notices_reach_subscribers_before_publish_returns() -> None:
    notices = Notices("inst_a")
    every, ends = Inbox(), Inbox()
    notices.subscribe(every)
    notices.subscribe(ends, "session_ended")

    async def broken(notice: AnyNotice) -> None:
        raise RuntimeError("a subscriber that fails")

    notices.subscribe(broken)
    await notices.publish(GrantRevoked(tenant="t", grant_ids=("g1",)))
    await notices.publish(SessionEnded(tenant="t", session_id="ses_1"))
    # Delivered already (no waiting), stamped with the publisher, the failure contained.
    assert [n.kind for n in every.got] == ["grant_revoked", "session_ended"]
    assert [n.kind for n in ends.got] == ["session_ended"]
    assert {n.origin for n in every.got} == {"inst_a"}


def test_a_large_revocation_is_split_into_notices_that_each_fit_a_notify() -> None:
    ids = [f"tenant/t/session/ses_{'x' * 30}/cap/{i:026d}" for i in range(MAX_IDS * 2 + 1)]
    notices = list(revocations("t", ids))
    assert [len(n.grant_ids) for n in notices] == [MAX_IDS, MAX_IDS, 1]
    assert [i for n in notices for i in n.grant_ids] == ids
    assert all(len(n.model_dump_json()) < 8000 for n in notices)


async def test_two_listeners_on_one_database_get_each_others_notices(postgres_url: str) -> None:
    async with listening(postgres_url, "inst_a") as a, listening(postgres_url, "inst_b") as b:
        at_a, at_b = Inbox(), Inbox()
        a.subscribe(at_a)
        b.subscribe(at_b)
        await a.publish(SessionEnded(tenant="t", session_id="ses_1"))
        assert await at_a.next(within=0) == SessionEnded(
            tenant="t", session_id="ses_1", origin="inst_a"
        )
        assert await at_b.next() == SessionEnded(tenant="t", session_id="ses_1", origin="inst_a")
        decided = ApprovalDecided(
            approval_id="apr_1", tenant="t", session_id="ses_1", status="approved"
        )
        await b.publish(decided)
        assert await at_a.next() == decided.model_copy(update={"origin": "inst_b"})
        assert await at_b.next(within=0) == decided.model_copy(update={"origin": "inst_b"})
        # Nobody got a second copy: a's own notice came back over PostgreSQL and was skipped.
        await a.publish(GrantRevoked(tenant="t", grant_ids=("g1",)))
        assert (await at_b.next()).kind == "grant_revoked"
        assert (await at_a.next(within=0)).kind == "grant_revoked"
        assert at_a.got == [] and at_b.got == []


async def test_a_listener_whose_backend_is_terminated_reconnects_and_rereads(
    postgres_url: str,
) -> None:
    async with listening(postgres_url, "inst_a") as a, listening(postgres_url, "inst_b") as b:
        reread = anyio.Event()
        resyncs = 0

        async def resync() -> None:
            nonlocal resyncs
            resyncs += 1
            reread.set()

        b.on_resync(resync)
        at_b = Inbox()
        b.subscribe(at_b)
        pid = b.listener_pid
        assert pid is not None and b.connects == 1
        killed = await anyio.to_thread.run_sync(
            postgres.psql, postgres_url, f"SELECT pg_terminate_backend({pid})"
        )
        assert killed.strip() == "t"
        with anyio.fail_after(10):
            await reread.wait()
        assert resyncs == 1 and b.connects == 2 and b.listener_pid not in (None, pid)
        # And it hears again.
        await a.publish(SessionEnded(tenant="t", session_id="ses_2"))
        assert (await at_b.next()).session_id == "ses_2"  # type: ignore[union-attr]


async def test_a_malformed_notify_on_the_channel_is_ignored(postgres_url: str) -> None:
    async with listening(postgres_url, "inst_b") as b:
        at_b = Inbox()
        b.subscribe(at_b)
        # Anyone who may connect may NOTIFY: junk, a wrong kind, an extra field.
        for junk in (
            "not json",
            '{"kind": "grant_revoked", "tenant": "t"}',
            '{"kind": "run_code", "tenant": "t"}',
            '{"kind": "session_ended", "tenant": "t", "session_id": "s", "token": "x"}',
        ):
            await anyio.to_thread.run_sync(
                postgres.psql, postgres_url, f"SELECT pg_notify('{CHANNEL}', $${junk}$$)"
            )
        good = '{"kind": "session_ended", "tenant": "t", "session_id": "ses_3", "origin": "x"}'
        await anyio.to_thread.run_sync(
            postgres.psql, postgres_url, f"SELECT pg_notify('{CHANNEL}', $${good}$$)"
        )
        assert await at_b.next(within=5) == SessionEnded(tenant="t", session_id="ses_3", origin="x")
        assert at_b.got == []


async def test_an_unreachable_database_stops_the_listener_at_start_without_its_password(
    postgres_url: str,
) -> None:
    wrong = postgres_url.rsplit("@", 1)[0] + "@127.0.0.1:1/nothing"
    password = wrong.split(":")[2].split("@")[0]
    notices = PostgresNotices(wrong, "inst_a")
    with pytest.raises(StoreError) as caught:
        await notices.serve(task_status=anyio.TASK_STATUS_IGNORED)
    assert "127.0.0.1:1/nothing" in str(caught.value) and "--store" in str(caught.value)
    assert password not in str(caught.value)


def approval(status: str) -> ApprovalRecord:
    return ApprovalRecord(
        id="apr_1",
        tenant="t",
        session_id="ses_1",
        capability="cap",
        params={},
        ttl_s=60,
        reason="r",
        status=status,  # type: ignore[arg-type]
        created_at=0,
        expires_at=9e9,
    )


class Records:
    """The approval as the records hold it (a stand-in above the seam), and when it is read."""

    def __init__(self) -> None:
        self.record = approval("pending")
        self.reads = 0
        self.read_once = anyio.Event()

    async def read(self) -> ApprovalRecord | None:
        self.reads += 1
        self.read_once.set()
        return self.record


async def test_a_request_waiting_on_an_approval_is_released_by_another_servers_notice(
    postgres_url: str,
) -> None:
    records = Records()
    got: list[ApprovalRecord | None] = []
    async with listening(postgres_url, "inst_a") as a, listening(postgres_url, "inst_b") as b:

        async def wait() -> None:
            # No re-read for a minute: only the notice can release it in time.
            got.append(await wait_for_decision(b, records.read, "apr_1", wait_s=60, reread_s=60))

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            with anyio.fail_after(5):
                await records.read_once.wait()
            records.record = approval("approved")
            await a.publish(
                ApprovalDecided(
                    approval_id="apr_other", tenant="t", session_id="ses_1", status="denied"
                )
            )
            await a.publish(
                ApprovalDecided(
                    approval_id="apr_1", tenant="t", session_id="ses_1", status="approved"
                )
            )
            with anyio.fail_after(1):
                while not got:
                    await records.read_once.wait()
                    records.read_once = anyio.Event()
    assert got == [approval("approved")]
    # Read at the start and on its own notice; another approval's notice read nothing.
    assert records.reads <= 3


async def test_a_request_waiting_on_an_approval_rereads_it_and_gives_up_in_time() -> None:
    records = Records()
    notices = Notices("inst_a")
    async with anyio.create_task_group() as tg:
        got: list[ApprovalRecord | None] = []

        async def wait() -> None:
            got.append(
                await wait_for_decision(notices, records.read, "apr_1", wait_s=60, reread_s=0.05)
            )

        tg.start_soon(wait)
        with anyio.fail_after(5):
            await records.read_once.wait()
        records.record = approval("denied")  # decided by a process with no channel
    assert got == [approval("denied")]
    still = Records()
    with anyio.fail_after(5):
        assert await wait_for_decision(notices, still.read, "apr_1", wait_s=0.2) == approval(
            "pending"
        )
    # Every wait let go of its subscription.
    assert notices._handlers == []


async def until(done: Callable[[], bool], *, within: float) -> None:
    with anyio.fail_after(within):
        while True:
            if done():
                return
            await anyio.sleep(0.05)


FLOOD = 100_000
FLOOD_SQL = f"""SELECT count(pg_notify('{CHANNEL}', CASE WHEN i % 2 = 0 THEN 'junk ' || i ELSE
  json_build_object('kind', 'session_ended', 'tenant', 't', 'session_id', 'ses_' || i,
                    'origin', 'inst_flood')::text END))
FROM generate_series(1, {FLOOD}) AS i"""


async def test_a_notice_flood_is_bounded_coalesced_logged_in_few_lines_and_reread(
    postgres_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """100 000 NOTIFYs from a stranger at once, half junk, half well-formed for sessions
    nobody has, handled by a slow subscriber: the backlog never holds more than its bound,
    the dropped ones are left to one re-read of the records, the junk is said in a few
    lines with its count, and the listener's event loop stays free for the calls."""
    monkeypatch.setattr(pg_notices, "WARN_EVERY_S", 1.0)  # the flood's tail said sooner
    async with listening(postgres_url, "inst_b") as b:
        handled = 0
        resyncs = 0

        async def slow(_: AnyNotice) -> None:
            nonlocal handled
            handled += 1
            await anyio.sleep(0.01)  # an effect that takes a while (removing containers)

        async def resync() -> None:
            nonlocal resyncs
            resyncs += 1

        b.subscribe(slow)
        b.on_resync(resync)
        caplog.clear()
        gaps: list[float] = []
        peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

        async def beat() -> None:
            last = anyio.current_time()
            while True:
                await anyio.sleep(0.01)
                now = anyio.current_time()
                gaps.append(now - last)
                last = now

        started = anyio.current_time()
        async with anyio.create_task_group() as tg:
            tg.start_soon(beat)
            sent = await anyio.to_thread.run_sync(postgres.psql, postgres_url, FLOOD_SQL)
            assert int(sent) == FLOOD
            backlog = b.backlog

            def drained() -> bool:
                heard = b.malformed.total + handled + backlog.dropped + backlog.coalesced
                return heard == FLOOD and not backlog

            await until(drained, within=60)
            # The dropped ones are left to a re-read of the records.
            await until(lambda: resyncs >= 1, within=10)
            # What the flood's warnings held back is said, with its count, within a while.
            await until(lambda: b.malformed.held == 0 and b.overflowed.held == 0, within=10)
            tg.cancel_scope.cancel()
        assert b.malformed.total == FLOOD // 2
        assert backlog.most <= backlog.limit < FLOOD // 2 and backlog.dropped > 0
        assert handled + backlog.dropped + backlog.coalesced == FLOOD // 2
        lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
        # Two kinds, each said at most once per WARN_EVERY_S and once more by a flush: on a
        # loaded machine the flood lasts longer and says a few lines more, never one each.
        periods = (anyio.current_time() - started) / pg_notices.WARN_EVERY_S
        assert 2 <= len(lines) <= 2 * (periods + 2), ([r.getMessage() for r in lines], periods)
        messages = " ".join(r.getMessage() for r in lines)
        assert "more suppressed" in messages
        # Loose: the loop was never held for long (on today's code a call waited 40 s).
        assert max(gaps) < 2.0, max(gaps)
        # Bounded memory: the peak grew by far less than the flood's 100 000 tasks took.
        grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) / 1024
        assert grown_mib < 64, grown_mib


async def test_the_backlog_keeps_each_notice_once_and_at_most_its_limit_in_order() -> None:
    backlog = Backlog(2)
    one, two, three = (SessionEnded(tenant="t", session_id=f"ses_{i}") for i in (1, 2, 3))
    assert backlog.put(one) and backlog.put(one) and backlog.put(two)
    assert not backlog.put(three)  # full: dropped, for a re-read of the records
    assert (len(backlog), backlog.coalesced, backlog.dropped, backlog.most) == (2, 1, 1, 2)
    assert [await backlog.get(), await backlog.get()] == [one, two]
    got: list[AnyNotice] = []

    async def take() -> None:
        got.append(await backlog.get())

    async with anyio.create_task_group() as tg:  # two takers wait: each gets one
        tg.start_soon(take)
        tg.start_soon(take)
        await anyio.sleep(0.05)
        assert backlog.put(three) and backlog.put(one)
    assert sorted(n.session_id for n in got) == ["ses_1", "ses_3"]  # type: ignore[union-attr]


def test_a_sampled_warning_is_said_once_a_period_with_the_count_held_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    sampled = Sampled("ignored a malformed notice", every_s=10, clock=lambda: now[0])
    for _ in range(500):
        sampled.warn()
    now[0] += 10
    sampled.warn()
    for _ in range(7):
        sampled.warn()
    sampled.flush()
    sampled.flush()  # nothing more held: says nothing
    assert [r.getMessage() for r in caplog.records] == [
        "ignored a malformed notice",
        "ignored a malformed notice (499 more suppressed before it)",
        "ignored a malformed notice: 7 more suppressed",
    ]
    assert sampled.total == 508 and sampled.held == 0
