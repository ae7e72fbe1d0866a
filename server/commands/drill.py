"""`airlock drill`: hostile programs run through `run_code` against the live policy, and
what held."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import ENV_AUTH, Config

if TYPE_CHECKING:
    from . import Subparsers

NAME = "drill"


def add_parser(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    drill = commands.add_parser(
        NAME,
        parents=[common],
        help="attack the live configuration with hostile programs and report what held",
        description="Run hostile programs through run_code against the real policy and print "
        "attack, expected, observed and held. Exits 1 when any attack got through.",
    )
    drill.add_argument("--tenant", metavar="T", help="use this tenant's policy (needs --auth)")
    drill.add_argument(
        "--auth",
        metavar="FILE",
        default=os.environ.get(ENV_AUTH),
        help=f"auth file naming tenant policies; default ${ENV_AUTH}",
    )
    drill.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    from ..drill import drill_main

    auth = Path(args.auth) if args.auth else None
    config = Config.resolve(args.data_dir, args.policy, args.store)
    return drill_main(config, tenant=args.tenant, auth=auth, as_json=args.json)
