"""Which server instance owns a data dir's unfinished runs, and whether it still lives.

Several servers may share one data dir (an editor's and a terminal agent's), so a run that
another live server is running must never be ended by this one. Each server holds an
exclusive `flock` on its own file, `instances/<instance id>.lock`, for its whole life. The
kernel drops the lock when the process ends however it ends (SIGKILL and the OOM killer
included), so a file whose lock can be taken names a server that died, and its runs still
`running` can be ended `killed`: by the next server to start, and by the housekeeping of
every live one.

Why a lock rather than a heartbeat: a heartbeat needs a staleness threshold, and a live
server that is only slow (a loaded machine, a suspended laptop) would miss it and have its
runs ended under it; a lock is never early and never late. Why not the pid the containers
are labelled with (`sandbox/instance.py`): servers in different pid namespaces (containers)
may share a data dir, and a pid means nothing across them, where a lock on a shared file
does. (A data dir is on a local filesystem: SQLite needs that too.)

The lock's descriptor is not inheritable (Python's default, kept here), so a process the
server starts (an image build) cannot keep a dead server's claim alive after it.

A claim's file is locked before it gets its name (made under `.claiming/`, locked, renamed
into place), so a server looking for dead instances never finds a live one's file unlocked.
Only this module touches these files; the runs themselves are the records'
(`records.FleetRecords`).

`InstanceClaim` is what the server holds, whichever way it claims: `FileClaim` (this
flock, one machine's servers on one data dir) or `pg_claims.AdvisoryClaim` (a PostgreSQL
session-level advisory lock, a fleet's replicas on one database).
"""

from __future__ import annotations

import fcntl
import logging
import os
import tempfile
from pathlib import Path
from typing import Protocol

import anyio.abc
import anyio.to_thread

from airlock.errors import StoreError

from ..blobs import BlobStore
from ..private import private_dir
from .records import FleetRecords

log = logging.getLogger(__name__)

SUFFIX = ".lock"
CLAIMING = ".claiming"
ENDED_BY_DEATH = "the server running it stopped before the run ended (found by a later server)"


class InstanceClaim(Protocol):
    """This server's claim on the runs it records, held from start to shutdown."""

    @property
    def instance_id(self) -> str: ...

    def check(self) -> None:
        """Raise `StoreUnavailable` while the claim is lost (this server must take no call whose
        run it could not vouch for); return at once otherwise."""
        ...

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Keep the claim held until cancelled (started once it is)."""
        ...

    async def end_runs_of_dead(self, *, now: float) -> int:
        """End `killed` the unfinished runs of every instance found dead; how many."""
        ...

    async def release(self) -> None:
        """Let the claim go for good (at shutdown, after this server's runs ended)."""
        ...


class InstanceLock:
    """A held lock on one instance's file: this server's own claim, or a dead one's."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    @property
    def instance_id(self) -> str:
        return self.path.name.removesuffix(SUFFIX)

    def release(self, *, forget: bool) -> None:
        """Let go of the lock; with `forget`, delete the file first, so no later server
        looks at this instance again (a dead one's runs are ended by then)."""
        try:
            if forget:
                # Deleted while still locked: nobody can take it for a dead one meanwhile.
                self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def claim(directory: Path, instance_id: str) -> InstanceLock:
    """Hold `instance_id`'s file in `directory` locked until released or this process ends."""
    private_dir(directory)
    staging = private_dir(directory / CLAIMING)
    fd, temporary = tempfile.mkstemp(dir=staging, prefix=f"{instance_id}-")
    try:
        if not _try_lock(fd):
            raise StoreError(f"cannot lock the new instance file {temporary}")
        path = directory / f"{instance_id}{SUFFIX}"
        os.rename(temporary, path)
    except BaseException:
        os.close(fd)
        Path(temporary).unlink(missing_ok=True)
        raise
    return InstanceLock(path, fd)


def dead_instances(directory: Path) -> list[InstanceLock]:
    """The files in `directory` whose owner died, each now locked by this process (so two
    servers starting together do not both take over one)."""
    if not directory.is_dir():
        return []
    found: list[InstanceLock] = []
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            continue  # another server took it over and deleted it meanwhile
        if _try_lock(fd):
            found.append(InstanceLock(path, fd))
        else:
            os.close(fd)  # a live server's
    return found


async def claim_instance(
    db: FleetRecords, blobs: BlobStore, directory: Path, instance_id: str, *, now: float
) -> InstanceLock:
    """Claim `instance_id` for this server, then end the runs of every instance that died,
    and the runs recorded before Airlock recorded owners (only an older, stopped Airlock
    left those), and remove their staging directories."""
    try:
        mine = await anyio.to_thread.run_sync(claim, directory, instance_id)
    except OSError as exc:
        raise StoreError(f"cannot claim a server instance under {directory}: {exc}") from exc
    try:
        await _end_runs_of_dead(db, blobs, directory, now=now, unowned=True)
    except BaseException:
        mine.release(forget=True)
        raise
    return mine


async def end_runs_of_dead_instances(
    db: FleetRecords, blobs: BlobStore, directory: Path, *, now: float
) -> int:
    """End the runs of every instance in `directory` that died since it was last looked at
    and remove its staging directories (a live server's housekeeping calls this, so a dead
    peer's leftovers do not wait for the next start); how many runs it ended."""
    return await _end_runs_of_dead(db, blobs, directory, now=now, unowned=False)


async def _end_runs_of_dead(
    db: FleetRecords, blobs: BlobStore, directory: Path, *, now: float, unowned: bool
) -> int:
    try:
        dead = await anyio.to_thread.run_sync(dead_instances, directory)
    except OSError as exc:
        raise StoreError(f"cannot look for dead server instances in {directory}: {exc}") from exc
    if not dead and not unowned:
        return 0
    owners = [d.instance_id for d in dead]
    try:
        ended = await db.mark_unfinished_runs(
            instance_ids=[*([""] if unowned else []), *owners],
            status="killed",
            error=ENDED_BY_DEATH,
            finished_at=now,
        )
        # Drafts of runs that ended with their server: never kept, only in the way.
        await anyio.to_thread.run_sync(lambda: blobs.sweep_staging(owners, unowned=unowned))
    except BaseException:
        # Not forgotten: the next look tries again.
        for lock in dead:
            lock.release(forget=False)
        raise
    for lock in dead:
        lock.release(forget=True)
    if ended:
        log.warning("ended %d run(s) left running by server(s) that stopped", ended)
    return ended


class FileClaim:
    """The `flock` claim in a data dir's instances directory, as an `InstanceClaim`."""

    def __init__(self, lock: InstanceLock, db: FleetRecords, blobs: BlobStore) -> None:
        self._lock = lock
        self._db = db
        self._blobs = blobs

    @classmethod
    async def take(
        cls, db: FleetRecords, blobs: BlobStore, directory: Path, instance_id: str, *, now: float
    ) -> FileClaim:
        """`claim_instance`, kept with what ending dead instances' runs needs."""
        return cls(await claim_instance(db, blobs, directory, instance_id, now=now), db, blobs)

    @property
    def instance_id(self) -> str:
        return self._lock.instance_id

    def check(self) -> None:
        """Never lost: the kernel holds the lock as long as this process lives."""

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        task_status.started()
        await anyio.sleep_forever()

    async def end_runs_of_dead(self, *, now: float) -> int:
        return await end_runs_of_dead_instances(
            self._db, self._blobs, self._lock.path.parent, now=now
        )

    async def release(self) -> None:
        self._lock.release(forget=True)
