"""`airlock image build|push|lock`: build the sandbox image (Docker), publish it or its base
to a registry (Docker), or pin Python requirements into a lock file for it (no Docker)."""

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
    push = image.add_parser(
        "push",
        parents=[common],
        help="push the sandbox image (built first if missing) to a registry; prints its digest",
        description="Push the sandbox image this policy builds (building it first if needed, "
        "progress on stderr) to REGISTRY and print the pushed reference with its digest "
        "(repository@sha256:...): put that in [sandbox] image of every replica's policy. With "
        "--base, push the Debian base instead; put its reference in [image] base, so that other "
        "machines build the image without root or debootstrap.",
    )
    push.add_argument(
        "registry",
        metavar="REGISTRY",
        help="host[:port] (the image keeps its name and tag there), or host[:port]/repository"
        "[:tag], such as 127.0.0.1:5000 or registry.example.com/team/airlock-sandbox",
    )
    push.add_argument(
        "--base", action="store_true", help="push the Debian base the image is built on"
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


def _push(args: argparse.Namespace) -> int:
    from airlock.policies import load_policy
    from airlock.sandbox import connect
    from airlock.sandbox.image import image_inputs
    from airlock.sandbox.image_source import push_base, push_sandbox

    config = Config.resolve(args.data_dir, args.policy)
    inputs = image_inputs(load_policy(config.policy_path).image)
    publish = push_base if args.base else push_sandbox
    pushed = publish(connect(), inputs, args.registry, lambda line: log.info("%s", line))
    log.info(
        "pushed; put this reference in %s:", "[image] base" if args.base else "[sandbox] image"
    )
    out(pushed)
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


_ACTIONS: dict[str, Callable[[argparse.Namespace], int]] = {
    "build": _build,
    "push": _push,
    "lock": _lock,
}
