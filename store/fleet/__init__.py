"""The fleet's coordination: how several Airlock servers sharing records tell the live from
the dead, keep a run to one writer, and tell each other what changed (docs/fleet.md).

- Who owns the unfinished runs, and whether it lives (`claims.InstanceClaim`): one
  machine's servers hold a flock (`claims.FileClaim`); a fleet's replicas an advisory lock,
  with a new epoch at each taking (`pg_claims.AdvisoryClaim`).
- What changed elsewhere (`notices.Notices`): in-process for one server; LISTEN/NOTIFY for
  a fleet (`pg_notices.PostgresNotices`).
- A run written by one owner only (`fencing`): its status, and in a fleet its owner's
  epoch and lock.
- The runs of the dead and the orphans (`records.FleetRecords`: `mark_unfinished_runs`,
  and every housekeeping's `end_orphaned_runs`); the replicas listed (`replicas`, with
  `locks`: a replica's lock as `pg_locks` shows it).

Above the store: `server/running.py` takes the claim and the notices and runs the
housekeeping, `server/sessions.py` ends (and adopts) leases from what the records say, and
`tools/fleet.py` turns a peer's notice into this server's effect (revoking grants).
Imports nothing here: each module is loaded when used (psycopg only for a fleet).
"""
