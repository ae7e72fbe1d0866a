"""`airlock approvals list|approve|deny`: capability requests that wait for a human, decided
in the server's database (`server/approvals.py` holds the decision)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..config import Config

if TYPE_CHECKING:
    from . import Subparsers

NAME = "approvals"


def add_parser(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    approvals = commands.add_parser(
        NAME, help="decide capability requests that wait for a human"
    ).add_subparsers(dest="approvals_command", metavar="ACTION", required=True)
    pending = approvals.add_parser("list", parents=[common], help="pending approvals")
    pending.add_argument("--all", action="store_true", help="also decided and expired ones")
    for action in ("approve", "deny"):
        decided = approvals.add_parser(action, parents=[common], help=f"{action} one request")
        decided.add_argument("approval_id", metavar="ID")


def run(args: argparse.Namespace) -> int:
    import anyio

    from ..approvals import approvals_command

    config = Config.resolve(args.data_dir, args.policy, args.store)
    return anyio.run(approvals_command, config, args.approvals_command, args)
