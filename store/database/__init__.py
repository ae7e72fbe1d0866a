"""The database: sessions, runs, artifact metadata, session workspaces, tasks, grants,
approvals and the audit's records, on SQLite (the default, a file in the data dir) or
PostgreSQL (a fleet's).

`Database` is the one way in, a facade over one class per family of records, each in its
module here (`sessions`, `runs`, `workspaces`, `tasks`, `grants`, `approvals`, `audit`,
`browsers`, and the fleet's sweeps in `fleet/records.py`), all standing on
`store/transactions.py`, which opens the store, migrates it, and runs each call's queries
(`queries/`) in one transaction on a worker thread. A new family is a module here and one
base more below. Blob contents live in `blobs.py`; who may see which row (tenants,
sessions) is decided by the callers, which filter by the ids they pass. Database and
OSError failures leave as `StoreError`; a missing row is `None` or an empty list, never an
exception.
"""

from __future__ import annotations

from ..fleet.records import FleetRecords
from ..migrations import HEAD
from ..migrations import SCHEMA_VERSION as SCHEMA_VERSION
from .approvals import Approvals
from .audit import Audit
from .browsers import Browsers
from .grants import Grants
from .runs import ENDED_BY_FENCING as ENDED_BY_FENCING
from .runs import Runs
from .sessions import Sessions
from .tasks import Tasks
from .workspaces import Workspaces

SCHEMA_REVISION = HEAD


class Database(Sessions, Runs, Workspaces, Tasks, Grants, Approvals, Audit, Browsers, FleetRecords):
    """The Airlock database (`Database.open`). On SQLite one connection, used by one thread
    at a time; on PostgreSQL a pool, used concurrently (each call one transaction)."""
