"""The `airlock` command line.

`serve` speaks MCP on stdout, so every command writes logs and progress to
stderr; only the reports an operator asked for (doctor, audit, policy, patch) go to
stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import logging
import os
import stat
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import anyio
import anyio.to_thread

from airlock import __version__
from airlock.broker import Vault, load_key, vault_path
from airlock.errors import AddressInUse, AirlockError, PolicyInvalid
from airlock.policies import default_policy_toml, load_policy, policy_json_schema
from airlock.sandbox import connect
from airlock.sandbox.image import build_image, image_inputs
from airlock.sandbox.pylock import resolve_lock
from airlock.store import BlobStore

from . import patches
from .approvals import approvals_command
from .audit import drills_table, egress_table, grants_table, run_detail, runs_table
from .auth import load_auth_config
from .config import ENV_AUTH, ENV_DATA_DIR, ENV_POLICY, Config, open_records
from .doctor import run_checks
from .drill import drill_main
from .http import serve_http
from .keys import append_key, new_key
from .logs import LOG_FORMATS, setup_logging
from .metrics import Metrics, serve_metrics
from .secret_check import missing_secrets
from .stdio import serve_stdio
from .terminal import registration_hint, stdin_is_terminal
from .usage import usage_main

log = logging.getLogger("airlock")


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def _parser() -> argparse.ArgumentParser:
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
    common.add_argument("-v", "--verbose", action="store_true", help="log debug details to stderr")
    common.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="stderr log lines as text (default) or one JSON object per line",
    )

    parser = argparse.ArgumentParser(
        prog="airlock",
        description="An MCP server that runs agent-written code in fresh, hardened, "
        "network-less containers.",
    )
    parser.add_argument("--version", action="version", version=f"airlock {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = commands.add_parser(
        "serve",
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

    keys = commands.add_parser("keys", help="API keys for HTTP clients").add_subparsers(
        dest="keys_command", metavar="ACTION", required=True
    )
    create = keys.add_parser(
        "create",
        help="print a new API key (once) and its auth-file entry, or add it with --auth",
    )
    create.add_argument(
        "tenant", metavar="TENANT", help="lowercase letters, digits and '-' (e.g. acme)"
    )
    create.add_argument("--id", help="a label for the key (default: TENANT-<random>)")
    create.add_argument(
        "--auth",
        metavar="FILE",
        type=Path,
        help="append the entry to this auth file (created 0600 if missing; replaced atomically)",
    )

    image = commands.add_parser("image", help="manage the sandbox image").add_subparsers(
        dest="image_command", metavar="ACTION", required=True
    )
    build = image.add_parser(
        "build", parents=[common], help="build the sandbox image (progress on stderr)"
    )
    build.add_argument("--force", action="store_true", help="rebuild even if the image exists")
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

    commands.add_parser("doctor", parents=[common], help="check what is missing and print the fix")

    audit = commands.add_parser("audit", help="inspect past runs").add_subparsers(
        dest="audit_command", metavar="WHAT", required=True
    )
    runs = audit.add_parser(
        "runs", parents=[common], help="list runs with status, duration, CPU, memory"
    )
    runs.add_argument("--session", metavar="ID", help="only runs of this session")
    runs.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    run = audit.add_parser("run", parents=[common], help="one run in full, with its output")
    run.add_argument("run_id", metavar="RUN")
    egress = audit.add_parser(
        "egress", parents=[common], help="egress decisions: where runs tried to go, and why"
    )
    egress.add_argument("--session", metavar="ID", help="only this session")
    egress.add_argument("--run", metavar="RUN", help="only this run")
    egress.add_argument("--limit", type=int, default=200, help="at most this many (default 200)")
    drills = audit.add_parser("drills", parents=[common], help="past drills and what held")
    drills.add_argument("--limit", type=int, default=20, help="at most this many (default 20)")
    grants = audit.add_parser(
        "capabilities", parents=[common], help="capability grants: who asked, who approved"
    )
    grants.add_argument("--session", metavar="ID", help="only this session")
    grants.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")

    drill = commands.add_parser(
        "drill",
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

    approvals = commands.add_parser(
        "approvals", help="decide capability requests that wait for a human"
    ).add_subparsers(dest="approvals_command", metavar="ACTION", required=True)
    pending = approvals.add_parser("list", parents=[common], help="pending approvals")
    pending.add_argument("--all", action="store_true", help="also decided and expired ones")
    for action in ("approve", "deny"):
        decided = approvals.add_parser(action, parents=[common], help=f"{action} one request")
        decided.add_argument("approval_id", metavar="ID")

    secrets = commands.add_parser(
        "secrets", help="manage the encrypted secret vault (values are never shown)"
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

    patch = commands.add_parser(
        "patch", help="review and apply patches agents made to copied-in repositories"
    ).add_subparsers(dest="patch_command", metavar="ACTION", required=True)
    listing = patch.add_parser("list", parents=[common], help="patches agents made, newest first")
    listing.add_argument("--session", metavar="ID", help="only patches of this session")
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    show = patch.add_parser("show", parents=[common], help="what a patch changes, then the patch")
    show.add_argument("patch_id", metavar="ID")
    show.add_argument(
        "--raw", action="store_true", help="only the exact patch bytes (for piping), no header"
    )
    put_patch = patch.add_parser(
        "apply",
        parents=[common],
        help="apply a patch to a directory (refuses protected paths and hunks that no longer fit)",
    )
    put_patch.add_argument("patch_id", metavar="ID")
    put_patch.add_argument(
        "--to", required=True, type=Path, metavar="DIR", help="the checkout to change"
    )
    put_patch.add_argument(
        "--check", action="store_true", help="only say whether it applies; write nothing"
    )

    policy = commands.add_parser("policy", help="write and check policies").add_subparsers(
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
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        sys.exit(2)
    setup_logging(getattr(args, "verbose", False), getattr(args, "log_format", "text"))
    try:
        code = _dispatch(args)
    except AddressInUse as exc:
        _log_error(exc)
        code = 2  # a usage problem: the command line must change
    except AirlockError as exc:
        _log_error(exc)
        code = 1
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


def _log_error(exc: AirlockError) -> None:
    # One record per line: a log line never holds a newline (text logs would show "\n").
    for line in str(exc).splitlines():
        log.error("%s", line)


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "policy" and args.policy_command == "usage":
        auth = Path(args.auth) if args.auth else None
        config = Config.resolve(args.data_dir, args.policy)
        return usage_main(
            config, since=args.since, tenant=args.tenant, auth=auth, as_json=args.json
        )
    if args.command == "policy":
        return _policy(args)
    if args.command == "keys":
        return _create_key(args)
    if args.command == "image" and args.image_command == "lock":
        return _lock(args)
    config = Config.resolve(args.data_dir, args.policy)
    if args.command == "serve":
        return _serve(config, args)
    if args.command == "image":
        inputs = image_inputs(load_policy(config.policy_path).image)
        tag = build_image(connect(), lambda line: log.info("%s", line), inputs, force=args.force)
        log.info("sandbox image ready: %s", tag)
        return 0
    if args.command == "doctor":
        return _doctor(config)
    if args.command == "drill":
        auth = Path(args.auth) if args.auth else None
        return drill_main(config, tenant=args.tenant, auth=auth, as_json=args.json)
    if args.command == "approvals":
        return anyio.run(approvals_command, config, args.approvals_command, args)
    if args.command == "secrets":
        return _secrets(config, args)
    if args.command == "patch":
        return anyio.run(_patch, config, args)
    return anyio.run(_audit, config, args)


def _lock(args: argparse.Namespace) -> int:
    lock = resolve_lock(args.requirements, lambda line: log.info("%s", line))
    if args.output is None:
        _out(lock.rstrip("\n"))
    else:
        args.output.write_text(lock, encoding="utf-8")
        log.info("wrote %s", args.output)
    return 0


def _serve(config: Config, args: argparse.Namespace) -> int:
    policy = load_policy(config.policy_path)
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
    serve_stdio(config, policy, metrics)
    return 0


def _given_locations(args: argparse.Namespace) -> list[str]:
    """The --policy and --data-dir this serve was given, as absolute paths to repeat."""
    given = []
    if args.policy:
        given += ["--policy", os.path.abspath(args.policy)]
    if args.data_dir:
        given += ["--data-dir", os.path.abspath(args.data_dir)]
    return given


def _create_key(args: argparse.Namespace) -> int:
    new = new_key(args.tenant, args.id)
    if args.auth is not None:
        append_key(args.auth, new)
    _private_stdout()
    _out(new.key)
    sys.stderr.write(
        "airlock: this key is shown once; give it to the client (Authorization: Bearer <key>).\n"
    )
    if args.auth is not None:
        entry = new.entry
        sys.stderr.write(f"airlock: added key {entry.id} for {entry.tenant} to {args.auth}\n")
    else:
        sys.stderr.write(
            "airlock: add this to the auth file (only the hash is stored), or rerun with "
            "--auth FILE:\n\n" + new.toml
        )
    return 0


def _private_stdout() -> None:
    """`airlock keys create acme > acme.key`: the shell made the file with its umask (0644
    under 022) before airlock started, so another user may already hold it open, and a
    chmod leaves their descriptor readable. An empty file others could read is therefore
    replaced by a new 0600 file at the same path, which stdout then writes (what they
    opened stays empty); any other regular file is made 0600 before the key is in it."""
    fd = sys.stdout.fileno()
    with contextlib.suppress(OSError):
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return
        if info.st_mode & 0o077 and info.st_size == 0:
            # Without /proc (macOS) or a writable directory, chmod is all there is.
            with contextlib.suppress(OSError):
                fresh = _fresh_file_in_place_of(info, os.readlink(f"/proc/self/fd/{fd}"))
                if fresh is not None:
                    sys.stdout.flush()
                    os.dup2(fresh, fd)
                    os.close(fresh)
                    return
        os.fchmod(fd, 0o600)


def _fresh_file_in_place_of(info: os.stat_result, path: str) -> int | None:
    """A new 0600 file renamed over `path`, opened for writing, if `path` still names the
    file `info` describes; None otherwise (stdout is then only made 0600)."""
    now = os.stat(path, follow_symlinks=False)
    if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
        return None
    fresh, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".airlock-key-")
    try:
        os.rename(tmp, path)
    except OSError:
        os.close(fresh)
        os.unlink(tmp)
        raise
    return fresh


def _doctor(config: Config) -> int:
    failed = 0
    for check in run_checks(config):
        mark = "MISSING" if not check.ok else "WARN" if check.warning else "ok "
        _out(f"[{mark}] {check.name}: {check.detail}")
        if not check.ok:
            failed += 1
        if check.fix and (not check.ok or check.warning):
            _out(f"        fix: {check.fix}")
    _out("all good" if not failed else f"{failed} problem(s) found")
    return 0 if not failed else 1


async def _audit(config: Config, args: argparse.Namespace) -> int:
    db = await open_records(config)
    try:
        if args.audit_command == "runs":
            _out(await runs_table(db, session_id=args.session, limit=args.limit))
        elif args.audit_command == "egress":
            _out(await egress_table(db, session_id=args.session, run_id=args.run, limit=args.limit))
        elif args.audit_command == "drills":
            _out(await drills_table(db, limit=args.limit))
        elif args.audit_command == "capabilities":
            _out(await grants_table(db, session_id=args.session, limit=args.limit))
        else:
            _out(await run_detail(db, BlobStore(config.blobs_dir), args.run_id))
    finally:
        await db.close()
    return 0


async def _patch(config: Config, args: argparse.Namespace) -> int:
    db = await open_records(config)
    blobs = BlobStore(config.blobs_dir)
    try:
        if args.patch_command == "list":
            _out(await patches.patches_table(db, session_id=args.session, limit=args.limit))
            return 0
        if args.patch_command == "show":
            record, copy = await patches.load_patch(db, args.patch_id)
            if not args.raw:
                _out(patches.describe(record, copy) + "\n")
            sys.stdout.flush()
            await anyio.to_thread.run_sync(
                lambda: patches.write_patch(blobs, record, sys.stdout.buffer, raw=args.raw)
            )
            return 0
        policy = load_policy(config.policy_path)
        report, code = await patches.apply(
            db, blobs, policy, args.patch_id, args.to, check=args.check
        )
        _out(report)
        return code
    finally:
        await db.close()


def _secrets(config: Config, args: argparse.Namespace) -> int:
    vault = Vault(vault_path(config.data_dir), load_key(config.data_dir, os.environ))
    if args.secrets_command == "set":
        if sys.stdin.isatty():
            value = getpass.getpass(f"value of {args.name} (not echoed): ")
        else:
            value = sys.stdin.read().rstrip("\r\n")
        hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
        vault.set(args.name, value, hosts)
        log.info("stored secret %s for %s", args.name, ", ".join(hosts))
    elif args.secrets_command == "list":
        stored = vault.list()
        _out("\n".join(f"{s.name}  {', '.join(s.hosts)}" for s in stored) or "no secrets stored")
    elif not vault.remove(args.name):
        log.error("no secret named %s", args.name)
        return 1
    return 0


def _policy(args: argparse.Namespace) -> int:
    if args.policy_command == "init":
        return _policy_init(args.path)
    if args.policy_command == "schema":
        _out(json.dumps(policy_json_schema(), indent=2))
        return 0
    try:
        policy = load_policy(args.path)
    except PolicyInvalid as exc:
        _out(f"{args.path}: {len(exc.problems)} problem(s)")
        _out("\n".join(f"  - {problem}" for problem in exc.problems))
        return 1
    _out(f"{args.path}: valid")
    data_dir = Config.resolve(args.data_dir).data_dir
    try:
        gaps = missing_secrets(policy, data_dir, os.environ)
    except AirlockError as exc:
        _out(f"  warning: cannot check that the vault holds the capabilities' secrets: {exc}")
        return 0
    for gap in gaps:
        _out(f"  warning: {gap}")
    return 0


def _policy_init(path: Path) -> int:
    try:
        with path.open("xb") as handle:
            handle.write(default_policy_toml())
    except FileExistsError:
        log.error("%s exists; edit it, or name another file: airlock policy init PATH", path)
        return 1
    except OSError as exc:
        log.error("cannot write %s: %s", path, exc.strerror or exc)
        return 1
    sys.stderr.write(
        f"airlock: wrote the default policy to {path}; edit it, check it with "
        f"`airlock policy check {path}`, and use it with `airlock serve --policy {path}`\n"
    )
    return 0
