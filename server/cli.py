"""The `airlock` command line: `main`, the options every command shares, and the table of
commands (`server/commands/`, one module per command group with its parser and handler).

`serve` speaks MCP on stdout, so every command writes logs and progress to
stderr; only the reports an operator asked for (doctor, audit, policy, patch) go to
stdout. Building the parser imports no command's dependencies: each handler imports
what it uses when it runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from airlock.errors import AddressInUse, AirlockError

from .commands import (
    Command,
    approvals,
    audit,
    doctor,
    drill,
    image,
    keys,
    patch,
    policy,
    secrets,
    serve,
)
from .config import ENV_DATA_DIR, ENV_POLICY, ENV_STORE_URL
from .logs import LOG_FORMATS, setup_logging

log = logging.getLogger("airlock")

COMMANDS: dict[str, Command] = {
    command.NAME: command
    for command in (serve, keys, image, doctor, audit, drill, approvals, secrets, patch, policy)
}
"""Every subcommand, in the order `airlock --help` lists them."""


def _common() -> argparse.ArgumentParser:
    """The options of every command that reads a server's data dir or policy."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--policy",
        metavar="PATH",
        help=f"policy file (TOML); default: ${ENV_POLICY}, else the built-in default policy",
    )
    common.add_argument(
        "--data-dir",
        metavar="DIR",
        help=f"where records and artifacts live; default: ${ENV_DATA_DIR}, "
        "else ~/.local/share/airlock (audit, patch and approvals read the records of the "
        "server with this data dir: give the one the agent's server was started with)",
    )
    common.add_argument(
        "--store",
        metavar="URL",
        help=f"where the records live, as a database URL (postgresql://USER@HOST/DB for a "
        f"fleet, or sqlite:///PATH); default: ${ENV_STORE_URL}, else the data dir's SQLite "
        "file. A PostgreSQL store also keeps the blobs and the vault (a fleet). A password "
        "here is refused (the process list shows it): give it by libpq's PGPASSFILE "
        f"(~/.pgpass), PGPASSWORD or a service file (?service=NAME), or set ${ENV_STORE_URL}",
    )
    common.add_argument("-v", "--verbose", action="store_true", help="log debug details to stderr")
    common.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="stderr log lines as text (default) or one JSON object per line",
    )
    return common


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="airlock",
        description="An MCP server that runs agent-written code in fresh, hardened, "
        "network-less containers.",
    )
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = _common()
    for command in COMMANDS.values():
        command.add_parser(commands, common)
    return parser


class _Version(argparse._VersionAction):
    """`--version`, reading the installed version (a metadata scan) only when asked."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        from airlock import __version__

        self.version = f"airlock {__version__}"
        super().__call__(parser, namespace, values, option_string)


def main(argv: Sequence[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        sys.exit(2)
    setup_logging(getattr(args, "verbose", False), getattr(args, "log_format", "text"))
    try:
        code = COMMANDS[args.command].run(args)
    except AddressInUse as exc:
        _log_error(exc)
        code = 2  # a usage problem: the command line must change
    except AirlockError as exc:
        _log_error(exc)
        code = 1
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        # The reader of stdout left (`airlock patch show ID | head`): the rest is not
        # wanted. Point stdout at /dev/null so the interpreter's last flush cannot raise
        # again, and end as a writer killed by SIGPIPE would, with no traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 128 + signal.SIGPIPE
    sys.exit(code)


def _log_error(exc: AirlockError) -> None:
    # One record per line: a log line never holds a newline (text logs would show "\n").
    for line in str(exc).splitlines():
        log.error("%s", line)
