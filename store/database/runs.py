"""The runs' records: a run's row from creation to end, with its artifacts and the files it
started with. A run's end is written only while its record is open to its owner
(`fleet/fencing.py`); otherwise `RunEndedByFleet` says what the record holds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

from sqlalchemy import Connection

from airlock.errors import RunEndedByFleet, StoreError

from ..fleet import fencing
from ..queries import runs, workspace
from ..records import ArtifactRecord, RunRecord, WorkspaceFile
from ..transactions import Transactions, checked_limit
from ..workspace import WorkspaceCommit, WorkspaceDelta

ENDED_BY_FENCING = (
    "its server lost its claim on the fleet's database while it ran and stopped its sandbox"
)


class Runs(Transactions):
    """Runs, their artifacts and their inputs; what a run leaves, kept in one transaction."""

    async def create_run(self, rec: RunRecord, *, max_running: int | None = None) -> bool:
        """Insert a new run, unless its tenant already has `max_running` runs `running`
        (of every server on these records: counted and inserted in one transaction under
        the tenant's quota lock, so concurrent servers cannot overshoot); whether it was
        inserted. Its session must exist and its id must be new (else `StoreError`)."""

        def create(conn: Connection) -> bool:
            if max_running is not None and fencing.over_quota(conn, rec.tenant, max_running):
                return False
            runs.create_run(conn, rec, claim_epoch=fencing.claim_epoch(conn, rec.instance_id))
            return True

        return await self._write(create)

    async def finish_run(self, rec: RunRecord) -> None:
        """Write the outcome fields of the run `rec.id` (status through error), if its record
        is still open: `running` under its owner's current claim, live on PostgreSQL
        (`fleet/fencing.finish_run`). Else nothing of `rec` is written and `RunEndedByFleet`
        names what the record says; a record still `running` under a lapsed claim is ended
        `killed` first (`ENDED_BY_FENCING`).

        The fields fixed at creation (session, tenant, language, limits, code) are kept.
        A run that was never created is a `StoreError`: its outcome would be lost.
        """

        def finish(conn: Connection) -> bool:
            if fencing.finish_run(conn, rec):
                return True
            # Still `running` but no longer under a live claim of its owner: `killed`, since
            # the owner stopped its sandbox when it found the claim lost.
            at = rec.finished_at if rec.finished_at is not None else rec.created_at
            fencing.end_fenced_run(conn, rec.id, error=ENDED_BY_FENCING, finished_at=at)
            return False

        if not await self._write(finish):
            await self._refuse_closed(rec.id)

    async def _refuse_closed(self, run_id: str) -> NoReturn:
        """Raise for a run whose end was not written: `RunEndedByFleet` naming what its
        record says, or `StoreError` for a run that was never created."""
        stored = await self.get_run(run_id)
        if stored is None:
            raise StoreError(f"database {self.shown}: cannot finish unknown run {run_id!r}")
        raise RunEndedByFleet(run_id, stored.status, stored.error)

    async def get_run(self, run_id: str) -> RunRecord | None:
        return await self._read(lambda conn: runs.get_run(conn, run_id))

    async def list_runs(
        self, *, session_id: str | None = None, tenant: str | None = None, limit: int = 50
    ) -> list[RunRecord]:
        """Runs matching every filter given, newest first, at most `limit` of them."""
        limit = checked_limit(limit)
        return await self._read(
            lambda conn: runs.list_runs(conn, session_id=session_id, tenant=tenant, limit=limit)
        )

    async def add_artifacts(self, records: Sequence[ArtifactRecord]) -> None:
        """Insert all of `records` or none; a (run_id, path) already present is a `StoreError`."""
        await self._write(lambda conn: runs.add_artifacts(conn, records))

    async def get_artifact(self, run_id: str, path: str) -> ArtifactRecord | None:
        return await self._read(lambda conn: runs.get_artifact(conn, run_id, path))

    async def list_artifacts(self, run_id: str) -> list[ArtifactRecord]:
        """The artifacts of one run, ordered by path."""
        return await self._read(lambda conn: runs.list_artifacts(conn, run_id))

    async def add_run_inputs(self, run_id: str, files: Sequence[WorkspaceFile]) -> None:
        """Record the files run `run_id` started with (all or none)."""
        if files:
            await self._write(lambda conn: runs.add_run_inputs(conn, run_id, files))

    async def list_run_inputs(self, run_id: str) -> list[WorkspaceFile]:
        """The files a run started with, ordered by path; empty for none or an unknown run."""
        return await self._read(lambda conn: runs.list_run_inputs(conn, run_id))

    async def commit_run(
        self,
        session_id: str,
        run_id: str,
        produced: Sequence[ArtifactRecord],
        delta: WorkspaceDelta,
        *,
        at: float,
    ) -> WorkspaceCommit:
        """Keep what run `run_id` left: its artifacts, and `delta` committed as
        `commit_workspace` does with the run as writer, in one transaction that first holds
        the run's record open (`running`, under its owner's current claim): else nothing is
        written and it raises `RunEndedByFleet`, so a fenced replica's files never land."""

        def commit(conn: Connection) -> WorkspaceCommit | None:
            if not fencing.hold_open_run(conn, run_id):
                return None
            runs.add_artifacts(conn, produced)
            return workspace.commit(conn, session_id, delta, run_id, at)

        done = await self._write(commit)
        if done is None:
            await self._refuse_closed(run_id)
        return done
