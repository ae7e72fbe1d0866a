"""`airlock image build|lock`: build the sandbox image (Docker), or pin Python requirements
into a lock file for it (no Docker)."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Config
from . import out

if TYPE_CHECKING:
    from . import Subparsers

NAME = "image"
log = logging.getLogger("airlock")


def add_parser(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    image = commands.add_parser(NAME, help="manage the sandbox image").add_subparsers(
        dest="image_command", metavar="ACTION", required=True
    )
    build = image.add_parser(
        "build", parents=[common], help="build the sandbox image (progress on stderr)"
    )
    build.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    build.add_argument(
        "--browser",
        action="store_true",
        help="also build the browser image of `browse` (otherwise built on its first use)",
    )
    lock = image.add_parser(
        "lock",
        help="pin Python requirements, with hashes, into a lock file for the sandbox image",
        description="Resolve a requirements file (one package per line, versions optional) "
        "for the sandbox image's Python and print a lock: every package and dependency "
        "pinned to one wheel by its sha256. Point [image] python_lock in the policy at it.",
    )
    lock.add_argument("requirements", type=Path, metavar="REQUIREMENTS")
    lock.add_argument(
        "-o", "--output", type=Path, help="write the lock here instead of standard output"
    )


def run(args: argparse.Namespace) -> int:
    return _ACTIONS[args.image_command](args)


def _build(args: argparse.Namespace) -> int:
    from airlock.policies import load_policy
    from airlock.sandbox import connect
    from airlock.sandbox.image import build_image, image_inputs

    config = Config.resolve(args.data_dir, args.policy)
    inputs = image_inputs(load_policy(config.policy_path).image)
    tag = build_image(connect(), lambda line: log.info("%s", line), inputs, force=args.force)
    log.info("sandbox image ready: %s", tag)
    if args.browser:
        from airlock.sandbox.browser_image import ensure_browser_image

        browser = ensure_browser_image(
            connect(), lambda line: log.info("%s", line), force=args.force
        )
        log.info("browser image ready: %s", browser)
    return 0


def _lock(args: argparse.Namespace) -> int:
    from airlock.sandbox.pylock import resolve_lock

    lock = resolve_lock(args.requirements, lambda line: log.info("%s", line))
    if args.output is None:
        out(lock.rstrip("\n"))
    else:
        args.output.write_text(lock, encoding="utf-8")
        log.info("wrote %s", args.output)
    return 0


_ACTIONS: dict[str, Callable[[argparse.Namespace], int]] = {"build": _build, "lock": _lock}
