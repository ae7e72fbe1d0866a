"""`airlock patch list|show|apply`: review and apply the patches agents made to
copied-in repositories."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Config, blob_store
from . import out

if TYPE_CHECKING:
    from airlock.store import BlobStore, Database

    from . import Subparsers

NAME = "patch"


def add_parser(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    patch = commands.add_parser(
        NAME, help="review and apply patches agents made to copied-in repositories"
    ).add_subparsers(dest="patch_command", metavar="ACTION", required=True)
    listing = patch.add_parser("list", parents=[common], help="patches agents made, newest first")
    listing.add_argument("--session", metavar="ID", help="only patches of this session")
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    listing.add_argument(
        "--drill", action="store_true", help="also the patches of airlock drill's own sessions"
    )
    show = patch.add_parser("show", parents=[common], help="what a patch changes, then the patch")
    show.add_argument("patch_id", metavar="ID")
    show.add_argument(
        "--raw", action="store_true", help="only the exact patch bytes (for piping), no header"
    )
    put_patch = patch.add_parser(
        "apply",
        parents=[common],
        help="apply a patch to a directory (refuses protected paths and hunks that no longer fit)",
    )
    put_patch.add_argument("patch_id", metavar="ID")
    put_patch.add_argument(
        "--to", required=True, type=Path, metavar="DIR", help="the checkout to change"
    )
    put_patch.add_argument(
        "--check", action="store_true", help="only say whether it applies; write nothing"
    )


def run(args: argparse.Namespace) -> int:
    import anyio

    return anyio.run(_patch, Config.resolve(args.data_dir, args.policy, args.store), args)


async def _patch(config: Config, args: argparse.Namespace) -> int:
    from airlock.errors import NotFound
    from airlock.store.connection import shown_url

    from ..config import open_records

    db = await open_records(config)
    try:
        return await _ACTIONS[args.patch_command](db, blob_store(config, db), config, args)
    except NotFound as exc:
        # A patch is in the records of the server that made it: say whose were read.
        where = (
            f"the store {shown_url(config.store_url)}"
            if config.store_url
            else f"the data dir {config.data_dir}"
        )
        raise NotFound(
            f"{exc} (looked in {where}: give the --data-dir or --store of the agent's server)"
        ) from exc
    finally:
        await db.close()


async def _list(db: Database, blobs: BlobStore, config: Config, args: argparse.Namespace) -> int:
    from ..patches import patches_table

    out(await patches_table(db, session_id=args.session, limit=args.limit, drill=args.drill))
    return 0


async def _show(db: Database, blobs: BlobStore, config: Config, args: argparse.Namespace) -> int:
    import anyio.to_thread

    from ..patches import describe, load_patch, write_patch

    record, copy = await load_patch(db, args.patch_id)
    if not args.raw:
        out(describe(record, copy) + "\n")
    sys.stdout.flush()
    await anyio.to_thread.run_sync(
        lambda: write_patch(blobs, record, sys.stdout.buffer, raw=args.raw)
    )
    return 0


async def _apply(db: Database, blobs: BlobStore, config: Config, args: argparse.Namespace) -> int:
    from airlock.policies import load_policy

    from ..patches import apply

    policy = load_policy(config.policy_path)
    report, code = await apply(db, blobs, policy, args.patch_id, args.to, check=args.check)
    out(report)
    return code


_ACTIONS: dict[str, Callable[[Database, BlobStore, Config, argparse.Namespace], Awaitable[int]]] = {
    "list": _list,
    "show": _show,
    "apply": _apply,
}
