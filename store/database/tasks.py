"""The tasks' records (the MCP Tasks extension): a durable task written before it answers,
moved to `input_required` and back, cancelled, ended once, and forgotten after its TTL."""

from __future__ import annotations

from typing import Any

from ..queries import tasks
from ..records import TaskRecord, TaskStatus
from ..transactions import Transactions


class Tasks(Transactions):
    """Tasks, each bound to the call that started it."""

    async def create_task(self, rec: TaskRecord) -> None:
        """Insert a new task; an existing id is a `StoreError`. Committed when this returns,
        so a `tasks/get` on any server reading these records finds it."""
        await self._write(lambda conn: tasks.create_task(conn, rec))

    async def get_task(self, task_id: str) -> TaskRecord | None:
        return await self._read(lambda conn: tasks.get_task(conn, task_id))

    async def set_task_run(self, task_id: str, run_id: str) -> None:
        """Name the run a task's call started (what its failure names if its server dies)."""
        await self._write(lambda conn: tasks.set_task_run(conn, task_id, run_id))

    async def set_task_input(
        self,
        task_id: str,
        *,
        at: float,
        requests: dict[str, Any] | None,
        call: dict[str, Any] | None = None,
        message: str | None = None,
        instance_id: str | None = None,
    ) -> bool:
        """Move a task to `input_required` (with `requests` and the `call` to retry), or,
        with None, back to `working` (one caller wins: the one that retries the call on
        `instance_id`); either with `message`. Whether it moved."""
        return await self._write(
            lambda conn: tasks.set_input(
                conn,
                task_id,
                at=at,
                requests=requests,
                call=call,
                message=message,
                instance_id=instance_id,
            )
        )

    async def note_task(self, task_id: str, *, at: float, message: str) -> bool:
        """Set an open task's status message (what `tasks/get` shows of its progress)."""
        return await self._write(lambda conn: tasks.note(conn, task_id, at, message))

    async def request_task_cancel(self, task_id: str, *, at: float) -> bool:
        """Record a caller's cancel of an open task (the server running it stops it when
        told, `TaskCancelRequested`); whether the task was open and not asked before."""
        return await self._write(lambda conn: tasks.request_cancel(conn, task_id, at))

    async def forget_expired_tasks(self, *, now: float) -> int:
        """Delete the tasks that ended more than their `ttl_s` before `now`; how many."""
        return await self._write(lambda conn: tasks.forget_expired(conn, now))

    async def end_task(
        self,
        task_id: str,
        *,
        status: TaskStatus,
        at: float,
        message: str | None = None,
        result: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> bool:
        """End an open task with its outcome; the first end wins. Whether this one did."""
        return await self._write(
            lambda conn: tasks.end_task(
                conn, task_id, status=status, at=at, message=message, result=result, error=error
            )
        )
