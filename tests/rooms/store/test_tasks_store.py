"""The tasks table (`server/tasks`'s records), on SQLite and PostgreSQL: a task ends once,
its cancel is recorded once, a dead instance's open tasks fail with their runs in one
transaction, expired tasks are forgotten, and a waiting task moves on once."""

from __future__ import annotations

import pytest
from support import run_record, session_record

from airlock.store import Database, TaskRecord

pytestmark = pytest.mark.anyio


def task(task_id: str, *, instance: str = "i1", run_id: str | None = None) -> TaskRecord:
    return TaskRecord(
        id=task_id,
        tenant="t1",
        principal="key-1",
        tool="run_code",
        status="working",
        created_at=100.0,
        updated_at=100.0,
        ttl_s=60,
        instance_id=instance,
        run_id=run_id,
    )


async def test_a_task_ends_once_and_its_cancel_is_recorded_once(db: Database) -> None:
    await db.create_task(task("task_a"))
    first = await db.request_task_cancel("task_a", at=101.0)
    again = await db.request_task_cancel("task_a", at=102.0)
    ended = await db.end_task("task_a", status="cancelled", at=103.0)
    later = await db.end_task("task_a", status="completed", at=104.0, result={"content": []})
    after = await db.request_task_cancel("task_a", at=105.0)
    record = await db.get_task("task_a")
    assert (first, again, ended, later, after) == (True, False, True, False, False)
    assert record is not None
    assert (record.status, record.ended_at, record.result) == ("cancelled", 103.0, None)
    assert record.cancel_requested_at == 101.0
    assert await db.get_task("task_never") is None


async def test_a_dead_instances_open_tasks_fail_naming_their_killed_runs(db: Database) -> None:
    await db.create_session(session_record("s1"))
    await db.create_run(run_record("r1", instance="dead"))
    await db.create_task(task("task_run", instance="dead", run_id="r1"))
    await db.create_task(task("task_none", instance="dead"))
    await db.create_task(task("task_live", instance="alive"))
    waiting = task("task_asks", instance="dead").model_copy(update={"status": "input_required"})
    await db.create_task(waiting)
    await db.create_task(task("task_done", instance="dead"))
    await db.end_task("task_done", status="completed", at=150.0, result={"content": []})
    await db.mark_unfinished_runs(
        instance_ids=["dead"], status="killed", error="its server died", finished_at=200.0
    )
    names = ("run", "none", "live", "done", "asks")
    found = {name: await db.get_task(f"task_{name}") for name in names}
    records = {name: rec for name, rec in found.items() if rec is not None}
    assert records.keys() == found.keys()
    failed = records["run"]
    assert failed.status == "failed" and failed.error is not None
    assert failed.error["data"] == {"run_id": "r1", "run_status": "killed"}
    assert "r1" in failed.error["message"] and "its server died" in failed.error["message"]
    assert records["none"].status == "failed"
    assert records["none"].error is not None and records["none"].error["data"]["run_id"] is None
    assert records["live"].status == "working"
    assert records["done"].status == "completed"
    assert records["asks"].status == "input_required"


async def test_tasks_past_their_ttl_after_their_end_are_forgotten(db: Database) -> None:
    for name in ("task_old", "task_recent", "task_open"):
        await db.create_task(task(name))
    await db.end_task("task_old", status="completed", at=100.0, result={})
    await db.end_task("task_recent", status="completed", at=150.0, result={})
    forgotten = await db.forget_expired_tasks(now=200.0)
    kept = [name for name in ("task_old", "task_recent", "task_open") if await db.get_task(name)]
    assert forgotten == 1
    assert kept == ["task_recent", "task_open"]


async def test_a_waiting_task_moves_on_once_and_its_progress_is_noted_while_open(
    db: Database,
) -> None:
    await db.create_task(task("task_w"))
    waiting = await db.set_task_input(
        "task_w", at=101.0, requests={"q": {}}, call={"name": "x"}, message="waiting"
    )
    # Two servers answering at once: one moves it on, to run on its own instance.
    moved = await db.set_task_input(
        "task_w", at=102.0, requests=None, message="retrying", instance_id="i2"
    )
    again = await db.set_task_input("task_w", at=103.0, requests=None, instance_id="i3")
    noted = await db.note_task("task_w", at=104.0, message="running for 3 s")
    record = await db.get_task("task_w")
    await db.end_task("task_w", status="completed", at=105.0, message="done")
    late = await db.note_task("task_w", at=106.0, message="running for 5 s")
    ended = await db.get_task("task_w")
    assert (waiting, moved, again, noted, late) == (True, True, False, True, False)
    assert record is not None and ended is not None
    assert (record.status, record.instance_id, record.call) == ("working", "i2", None)
    assert (record.status_message, record.updated_at) == ("running for 3 s", 104.0)
    assert ended.status_message == "done"
