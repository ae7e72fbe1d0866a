"""`airlock audit runs|run|egress|drills|capabilities|sessions|versions|browsers`: the records
of past runs, egress decisions, drills, capability grants, sessions (and what each fork
started from), workspace versions (who wrote each: a run, a fork, a restore) and kept
browsers (each with its calls, and when and why it closed), read from the server's
database."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ..config import Config, blob_store
from . import out

if TYPE_CHECKING:
    from airlock.store import Database

    from . import Subparsers

NAME = "audit"


def add_parser(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    audit = commands.add_parser(NAME, help="inspect past runs").add_subparsers(
        dest="audit_command", metavar="WHAT", required=True
    )
    runs = audit.add_parser(
        "runs", parents=[common], help="list runs with status, duration, CPU, memory"
    )
    runs.add_argument("--session", metavar="ID", help="only runs of this session")
    runs.add_argument("--tenant", metavar="NAME", help="only runs of this tenant")
    runs.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    run = audit.add_parser("run", parents=[common], help="one run in full, with its output")
    run.add_argument("run_id", metavar="RUN")
    egress = audit.add_parser(
        "egress", parents=[common], help="egress decisions: where runs tried to go, and why"
    )
    egress.add_argument("--session", metavar="ID", help="only this session")
    egress.add_argument("--run", metavar="RUN", help="only this run")
    egress.add_argument("--limit", type=int, default=200, help="at most this many (default 200)")
    drills = audit.add_parser("drills", parents=[common], help="past drills and what held")
    drills.add_argument("--limit", type=int, default=20, help="at most this many (default 20)")
    grants = audit.add_parser(
        "capabilities", parents=[common], help="capability grants: who asked, who approved"
    )
    grants.add_argument("--session", metavar="ID", help="only this session")
    grants.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    sessions = audit.add_parser(
        "sessions", parents=[common], help="sessions, and what each fork started from"
    )
    sessions.add_argument("--tenant", metavar="NAME", help="only sessions of this tenant")
    sessions.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    versions = audit.add_parser(
        "versions", parents=[common], help="a session's workspace versions and their writers"
    )
    versions.add_argument("session_id", metavar="SESSION")
    browsers = audit.add_parser(
        "browsers", parents=[common], help="kept browsers, their calls, and why each closed"
    )
    browsers.add_argument("--tenant", metavar="NAME", help="only browsers of this tenant")
    browsers.add_argument("--session", metavar="ID", help="only browsers of this session")
    browsers.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    browsers.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args: argparse.Namespace) -> int:
    import anyio

    return anyio.run(_audit, Config.resolve(args.data_dir, args.policy, args.store), args)


async def _audit(config: Config, args: argparse.Namespace) -> int:
    from ..config import open_records

    db = await open_records(config)
    try:
        out(await _REPORTS[args.audit_command](db, config, args))
    finally:
        await db.close()
    return 0


async def _runs(db: Database, config: Config, args: argparse.Namespace) -> str:
    from ..audit import runs_table

    return await runs_table(db, session_id=args.session, tenant=args.tenant, limit=args.limit)


async def _run(db: Database, config: Config, args: argparse.Namespace) -> str:
    from ..audit import run_detail

    return await run_detail(db, blob_store(config, db), args.run_id)


async def _egress(db: Database, config: Config, args: argparse.Namespace) -> str:
    from ..audit import egress_table

    return await egress_table(db, session_id=args.session, run_id=args.run, limit=args.limit)


async def _drills(db: Database, config: Config, args: argparse.Namespace) -> str:
    from ..audit import drills_table

    return await drills_table(db, limit=args.limit)


async def _capabilities(db: Database, config: Config, args: argparse.Namespace) -> str:
    from ..audit import grants_table

    return await grants_table(db, session_id=args.session, limit=args.limit)


async def _sessions(db: Database, config: Config, args: argparse.Namespace) -> str:
    from ..audit import sessions_table

    return await sessions_table(db, tenant=args.tenant, limit=args.limit)


async def _versions(db: Database, config: Config, args: argparse.Namespace) -> str:
    from ..audit import versions_table

    return await versions_table(db, args.session_id)


async def _browsers(db: Database, config: Config, args: argparse.Namespace) -> str:
    from ..audit import browsers_report

    return await browsers_report(
        db, tenant=args.tenant, session_id=args.session, limit=args.limit, as_json=args.json
    )


_REPORTS: dict[str, Callable[[Database, Config, argparse.Namespace], Awaitable[str]]] = {
    "runs": _runs,
    "run": _run,
    "egress": _egress,
    "drills": _drills,
    "capabilities": _capabilities,
    "sessions": _sessions,
    "versions": _versions,
    "browsers": _browsers,
}
