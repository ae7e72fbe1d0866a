"""`airlock doctor`: what is missing (engine, runtime, image, data dir, secrets), each with
its fix."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..config import Config
from . import out

if TYPE_CHECKING:
    from . import Subparsers

NAME = "doctor"


def add_parser(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    commands.add_parser(NAME, parents=[common], help="check what is missing and print the fix")


def run(args: argparse.Namespace) -> int:
    from ..doctor import run_checks

    failed = 0
    for check in run_checks(Config.resolve(args.data_dir, args.policy, args.store)):
        mark = "MISSING" if not check.ok else "WARN" if check.warning else "ok "
        out(f"[{mark}] {check.name}: {check.detail}")
        if not check.ok:
            failed += 1
        if check.fix and (not check.ok or check.warning):
            out(f"        fix: {check.fix}")
    out("all good" if not failed else f"{failed} problem(s) found")
    return 0 if not failed else 1
