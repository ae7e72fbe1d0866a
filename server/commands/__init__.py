"""The `airlock` subcommands, one module per command group, each with its own small parser
and handler; `server/cli.py` lists them in its table and owns `main` and the shared options.

A command module has `NAME`, `add_parser(commands, common)` (its subparser, taking the
shared `--policy`/`--data-dir`/`-v`/`--log-format` options from `common` where they apply)
and `run(args) -> int` (the exit code). At its top a module imports only what building its
parser needs; whatever a handler uses (the MCP SDK, Docker, uvicorn, the egress proxy, the
stores, the policy model) is imported inside that handler, so `airlock --help` and a light
command such as `airlock secrets list` start without loading what they never use.

Every command writes logs and progress to stderr (`serve` speaks MCP on stdout); only the
reports an operator asked for go to stdout, through `out`.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from typing import TypeAlias

    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


class Command(Protocol):
    """What `server/cli.py` needs of a command module."""

    NAME: str

    def add_parser(self, commands: Subparsers, common: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def out(text: str) -> None:
    """One report line (or lines) on stdout."""
    sys.stdout.write(text + "\n")
