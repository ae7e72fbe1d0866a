"""`airlock serve`: MCP over stdio (default) or Streamable HTTP; the only command that loads
the MCP SDK's server, uvicorn and the sandbox backend."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from ..config import ENV_AUTH, Config

if TYPE_CHECKING:
    from . import Subparsers

NAME = "serve"
log = logging.getLogger("airlock")


def add_parser(commands: Subparsers, common: argparse.ArgumentParser) -> None:
    serve = commands.add_parser(
        NAME,
        parents=[common],
        help="serve MCP over stdio, or over HTTP with --http (builds the image on first use)",
        description="Serve MCP over stdio (default) or Streamable HTTP. Logs and image-build "
        "progress go to stderr.",
    )
    serve.add_argument("--http", action="store_true", help="serve Streamable HTTP on /mcp")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")
    serve.add_argument(
        "--auth",
        metavar="FILE",
        default=os.environ.get(ENV_AUTH),
        help=f"API keys / JWT settings (TOML); default ${ENV_AUTH}; required off loopback",
    )
    serve.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help="also serve Prometheus /metrics, without auth, on this address "
        "(over --http, /metrics next to /mcp takes the same bearer tokens)",
    )
    serve.add_argument(
        "--console-listen",
        metavar="HOST:PORT",
        help="stdio only: also serve the operator console on http://HOST:PORT/console "
        "(over --http it is on /console already); sign in with the operator token",
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="extra Host header value to accept (DNS-rebinding protection stays on)",
    )
    serve.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="extra Origin to accept, e.g. https://orchestrator.example",
    )


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    import anyio

    from airlock import __version__
    from airlock.errors import InvalidRequest
    from airlock.policies import load_policy

    from ..auth import load_auth_config
    from ..http import serve_http
    from ..metrics import Metrics, serve_metrics
    from ..stdio import serve_stdio
    from ..terminal import registration_hint, stdin_is_terminal

    if args.http and args.console_listen:
        raise InvalidRequest(
            "--console-listen is for a stdio server; over --http the console is on /console "
            "of the same address: drop --console-listen"
        )
    config = Config.resolve(args.data_dir, args.policy, args.store)
    policy = load_policy(config.policy_path)
    # A store that cannot be used (a wrong URL, a database down, a newer schema) or a vault
    # key that is not the fleet's stops the start here with its one-line fix, not inside
    # the transport's first lifespan.
    anyio.run(_check_store, config)
    metrics = Metrics()
    if args.metrics_listen:
        serve_metrics(metrics, args.metrics_listen)
    if args.http:
        auth = load_auth_config(Path(args.auth)) if args.auth else None
        serve_http(
            config,
            policy,
            host=args.host,
            port=args.port,
            auth=auth,
            allowed_hosts=args.allowed_host,
            allowed_origins=args.allowed_origin,
            metrics=metrics,
        )
        return 0
    log.info("airlock %s serving MCP on stdio; data in %s", __version__, config.data_dir)
    if stdin_is_terminal():
        sys.stderr.write(registration_hint(sys.argv[0], _given_locations(args)))
    serve_stdio(config, policy, metrics, args.console_listen)
    return 0


def _given_locations(args: argparse.Namespace) -> list[str]:
    """The --policy and --data-dir this serve was given, as absolute paths to repeat."""
    given = []
    if args.policy:
        given += ["--policy", os.path.abspath(args.policy)]
    if args.data_dir:
        given += ["--data-dir", os.path.abspath(args.data_dir)]
    return given


async def _check_store(config: Config) -> None:
    """Open the store, then the vault with this server's key: a replica whose key is not
    the fleet's stops before it says it serves, not in the transport's lifespan."""
    import anyio

    from ..config import open_store, open_vault

    db = await open_store(config)
    try:
        vault = open_vault(config, db, os.environ)
        if config.fleet_url is not None:
            await anyio.to_thread.run_sync(vault.check_key)
    finally:
        await db.close()
