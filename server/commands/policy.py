"""`airlock policy check|schema|usage|init`: write and check policies offline, and the
exception review (which allow rules and capabilities were used)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from airlock.errors import AirlockError, PolicyInvalid

from ..config import ENV_AUTH, ENV_DATA_DIR, Config
from . import out

if TYPE_CHECKING:
    from . import Subparsers

NAME = "policy"
log = logging.getLogger("airlock")


def add_parser(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    policy = commands.add_parser(NAME, help="write and check policies").add_subparsers(
        dest="policy_command", metavar="ACTION", required=True
    )
    check = policy.add_parser(
        "check",
        help="validate a policy file offline, listing every problem; warn about secrets "
        "it names that the vault lacks",
    )
    check.add_argument("path", metavar="PATH", type=Path)
    check.add_argument(
        "--data-dir",
        metavar="DIR",
        help=f"whose vault to check secrets against; default: ${ENV_DATA_DIR}, "
        "else ~/.local/share/airlock",
    )
    policy.add_parser("schema", help="print the policy JSON Schema (for editors)")
    usage = policy.add_parser(
        "usage",
        parents=[common],
        help="the exception review: which allow rules and capabilities were used, and when",
    )
    usage.add_argument("--since", default="30d", help="window, e.g. 30d, 12h, 2w (default 30d)")
    usage.add_argument(
        "--tenant", metavar="T", help="only this tenant (its own policy with --auth)"
    )
    usage.add_argument(
        "--auth",
        metavar="FILE",
        default=os.environ.get(ENV_AUTH),
        help=f"auth file naming tenant policies; default ${ENV_AUTH}",
    )
    usage.add_argument("--json", action="store_true", help="print JSON instead of text")
    init = policy.add_parser(
        "init", help="write the default policy, every setting shown and commented, to edit"
    )
    init.add_argument(
        "path",
        metavar="PATH",
        type=Path,
        nargs="?",
        default=Path("airlock.toml"),
        help="where to write it (default: airlock.toml); an existing file is left alone",
    )


def run(args: argparse.Namespace) -> int:
    return _ACTIONS[args.policy_command](args)


def _check(args: argparse.Namespace) -> int:
    from airlock.policies import load_policy

    from ..secret_check import missing_secrets

    try:
        policy = load_policy(args.path)
    except PolicyInvalid as exc:
        out(f"{args.path}: {len(exc.problems)} problem(s)")
        out("\n".join(f"  - {problem}" for problem in exc.problems))
        return 1
    out(f"{args.path}: valid")
    data_dir = Config.resolve(args.data_dir).data_dir
    try:
        gaps = missing_secrets(policy, data_dir, os.environ)
    except AirlockError as exc:
        out(f"  warning: cannot check that the vault holds the capabilities' secrets: {exc}")
        return 0
    for gap in gaps:
        out(f"  warning: {gap}")
    return 0


def _schema(args: argparse.Namespace) -> int:
    from airlock.policies import policy_json_schema

    out(json.dumps(policy_json_schema(), indent=2))
    return 0


def _usage(args: argparse.Namespace) -> int:
    from ..policy_usage import usage_main

    auth = Path(args.auth) if args.auth else None
    config = Config.resolve(args.data_dir, args.policy)
    return usage_main(config, since=args.since, tenant=args.tenant, auth=auth, as_json=args.json)


def _init(args: argparse.Namespace) -> int:
    from airlock.policies import default_policy_toml

    path: Path = args.path
    try:
        with path.open("xb") as handle:
            handle.write(default_policy_toml())
    except FileExistsError:
        log.error("%s exists; edit it, or name another file: airlock policy init PATH", path)
        return 1
    except OSError as exc:
        log.error("cannot write %s: %s", path, exc.strerror or exc)
        return 1
    # An agent starts the server from a directory of its own: the path it needs is absolute.
    absolute = shlex.quote(str(path.resolve()))
    sys.stderr.write(
        f"airlock: wrote the default policy to {path}; edit it, check it with "
        f"`airlock policy check {path}`, and use it with `airlock serve --policy {absolute}`\n"
    )
    return 0


_ACTIONS: dict[str, Callable[[argparse.Namespace], int]] = {
    "check": _check,
    "schema": _schema,
    "usage": _usage,
    "init": _init,
}
