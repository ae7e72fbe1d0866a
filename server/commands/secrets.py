"""`airlock secrets set|list|rm`: the encrypted secret vault; a value is read from stdin and
never shown."""

from __future__ import annotations

import argparse
import getpass
import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..config import Config, open_store, open_vault
from . import out

if TYPE_CHECKING:
    from airlock.broker import Vault

    from . import Subparsers

NAME = "secrets"
log = logging.getLogger("airlock")


def add_parser(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    secrets = commands.add_parser(
        NAME, help="manage the encrypted secret vault (values are never shown)"
    ).add_subparsers(dest="secrets_command", metavar="ACTION", required=True)
    put = secrets.add_parser(
        "set",
        parents=[common],
        help="store a secret; the value is read from stdin, never from the command line",
    )
    put.add_argument("name", metavar="NAME")
    put.add_argument(
        "--hosts",
        required=True,
        metavar="HOST[,HOST...]",
        help="hosts the secret may be sent to (e.g. api.github.com)",
    )
    secrets.add_parser("list", parents=[common], help="names and hosts of stored secrets")
    remove = secrets.add_parser("rm", parents=[common], help="delete a secret")
    remove.add_argument("name", metavar="NAME")


def run(args: argparse.Namespace) -> int:
    config = Config.resolve(args.data_dir, args.policy, args.store)
    if config.fleet_url is None:
        return _ACTIONS[args.secrets_command](open_vault(config, None, os.environ), args)
    import anyio  # a fleet's vault is in its PostgreSQL: open the store for it

    return anyio.run(_in_fleet, config, args)


async def _in_fleet(config: Config, args: argparse.Namespace) -> int:
    import anyio.to_thread

    db = await open_store(config)
    try:
        vault = open_vault(config, db, os.environ)
        return await anyio.to_thread.run_sync(_ACTIONS[args.secrets_command], vault, args)
    finally:
        await db.close()


def _set(vault: Vault, args: argparse.Namespace) -> int:
    if sys.stdin.isatty():
        value = getpass.getpass(f"value of {args.name} (not echoed): ")
    else:
        value = sys.stdin.read().rstrip("\r\n")
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    vault.set(args.name, value, hosts)
    log.info("stored secret %s for %s", args.name, ", ".join(hosts))
    return 0


def _list(vault: Vault, args: argparse.Namespace) -> int:
    stored = vault.list()
    out("\n".join(f"{s.name}  {', '.join(s.hosts)}" for s in stored) or "no secrets stored")
    return 0


def _remove(vault: Vault, args: argparse.Namespace) -> int:
    if not vault.remove(args.name):
        log.error("no secret named %s", args.name)
        return 1
    return 0


_ACTIONS: dict[str, Callable[[Vault, argparse.Namespace], int]] = {
    "set": _set,
    "list": _list,
    "rm": _remove,
}
