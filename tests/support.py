"""Helpers shared by the tests (imported as `support`; pytest puts tests/ on sys.path)."""

from __future__ import annotations

import base64
import contextlib
import functools
import io
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import zipfile
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import docker
import httpx
import httpx2
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from docker.models.containers import Container
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ReadResourceResult,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from airlock.broker import Grant, Grants, RunTokens, Vault, load_key, vault_path
from airlock.egress import Egress
from airlock.policies import Capability, Policy, resolve_scope
from airlock.sandbox.instance import Instance
from airlock.sandbox.runtime import GVISOR, REGISTER_GVISOR
from airlock.server.auth import generate_api_key
from airlock.server.cli import main
from airlock.server.engine import Engine
from airlock.store import BlobStore, Database, RunRecord, SessionRecord, WorkspaceFile
from airlock.store.fleet.pg_notices import PostgresNotices
from airlock.tools import Services

T = TypeVar("T")

REQUIRE_DOCKER = os.environ.get("AIRLOCK_REQUIRE_DOCKER") == "1"
"""Set by .ci/run: a missing engine (or gVisor) fails the tests that need it."""

# Tests that watch a session's containers by their `airlock.session` label run without
# the warm pool: pooled containers are created before any session and carry no session
# label. tests/rooms/sandbox/test_backend_contract.py covers pooled containers' teardown
# (tests/rooms/sandbox/test_browser_pool.py the warm browser boxes', off here too).
NO_POOL: dict[str, Any] = {"pool": {"size": 0}, "browser": {"pool": 0}}
NO_POOL_TOML = "[pool]\nsize = 0\n[browser]\npool = 0\n"

AIRLOCK = str(Path(sys.executable).with_name("airlock"))
TESTS = Path(__file__).resolve().parent
"""The tests' top folder: conftest.py and the shared modules stay here, the tests sit in
a folder for their room."""
ROOT = TESTS.parent
"""The repository: README.md, pyproject.toml and the rooms."""
CALL_TIMEOUT_S = 120
"""How long one tool call may take: a cold gVisor start on a loaded two-core machine."""


def require_runtime(runtime: str, registered: frozenset[str]) -> None:
    """Fail (in CI) or skip (locally) a test that asks for gVisor on an engine without it."""
    if runtime == GVISOR and GVISOR not in registered:
        message = f"gVisor (runsc) is not registered with the Docker engine; {REGISTER_GVISOR}"
        if REQUIRE_DOCKER:
            pytest.fail(f"{message} (required: AIRLOCK_REQUIRE_DOCKER=1)")
        pytest.skip(message)


async def wait_until(
    check: Callable[[], T | None], *, within: float = 30, interval: float = 0.05
) -> T:
    """Poll `check` until it returns something truthy; fail after `within` seconds.

    For conditions with no event to wait on, such as a container appearing in the engine.
    """
    with anyio.fail_after(within):
        while True:
            value = check()
            if value:
                return value
            await anyio.sleep(interval)


def make_wheel(
    directory: Path, name: str = "airlock_probe", version: str = "1.0", requires: str = ""
) -> Path:
    """A minimal valid pure-Python wheel (depending on `requires`, if named)."""
    dist_info = f"{name}-{version}.dist-info"
    depends = f"Requires-Dist: {requires}\n" if requires else ""
    files = {
        f"{name}/__init__.py": b"VALUE = 1\n",
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{depends}".encode()
        ),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in [*files, f"{dist_info}/RECORD"])
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, data in files.items():
            wheel.writestr(member, data)
        wheel.writestr(f"{dist_info}/RECORD", record)
    return path


def text_of(result: CallToolResult) -> str:
    """The text of a tool result: its text blocks joined (pictures are not text)."""
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


def block_text(result: CallToolResult, index: int = 0) -> str:
    """The text of a result's block `index`, which must be a text block."""
    block = result.content[index]
    assert isinstance(block, TextContent), block
    return block.text


def resource_links(result: CallToolResult) -> list[ResourceLink]:
    """A result's blocks after the first, which must all be resource links."""
    links = result.content[1:]
    assert all(isinstance(link, ResourceLink) for link in links), links
    return [link for link in links if isinstance(link, ResourceLink)]


def embedded_blob(result: CallToolResult, index: int = 0) -> str:
    """The base64 of a result's block `index`, which must embed a binary resource."""
    block = result.content[index]
    assert isinstance(block, EmbeddedResource), block
    assert isinstance(block.resource, BlobResourceContents), block.resource
    return block.resource.blob


def contents_text(read: ReadResourceResult, index: int = 0) -> str:
    """The text of a read resource's contents `index`, which must be text."""
    contents = read.contents[index]
    assert isinstance(contents, TextResourceContents), contents
    return contents.text


def free_port() -> int:
    """A loopback TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Serving:
    """A running `airlock serve --http`: its base URL and its process."""

    base: str
    process: Process


@asynccontextmanager
async def serving_http(*args: str, log: Path | None = None) -> AsyncIterator[Serving]:
    """`airlock serve --http` on a free loopback port with `args` added, once its
    /healthz answers; stops the server with SIGTERM unless the test already did.
    With `log`, the server's stderr goes to that file."""
    port = free_port()
    command = [AIRLOCK, "serve", "--http", "--port", str(port), *args]
    with contextlib.ExitStack() as files:
        stderr = files.enter_context(log.open("wb")) if log is not None else None
        process = await anyio.open_process(command, stdin=None, stdout=None, stderr=stderr)
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as probe:
            with anyio.fail_after(60):
                while True:
                    assert process.returncode is None, "server exited during startup"
                    try:
                        if (await probe.get(f"{base}/healthz")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    await anyio.sleep(0.1)
        yield Serving(base, process)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(60):
                await process.wait()
        await process.aclose()


# ---- watching the containers of a server ---------------------------------------------


async def containers(client: docker.DockerClient, label: str) -> list[Container]:
    """The containers carrying `label` ("key=value"), stopped ones included."""
    return await anyio.to_thread.run_sync(
        lambda: client.containers.list(all=True, filters={"label": label}, ignore_removed=True)
    )


async def poll_containers(
    client: docker.DockerClient,
    label: str,
    done: Callable[[list[Container]], bool],
    *,
    within: float,
) -> list[Container]:
    """Poll the engine until the containers carrying `label` satisfy `done`, at most
    `within` seconds; returns the last listing either way."""
    found: list[Container] = []
    with anyio.move_on_after(within):
        while True:
            found = await containers(client, label)
            if done(found):
                break
            await anyio.sleep(0.1)
    return found


async def wait_for_containers(
    client: docker.DockerClient,
    label: str,
    done: Callable[[list[Container]], bool],
    *,
    within: float,
    log: Callable[[], str] | None = None,
) -> list[Container]:
    """Like `poll_containers`, failing the test (with the states seen and, given `log`,
    the server's log) when `done` never holds."""
    found = await poll_containers(client, label, done, within=within)
    if not done(found):
        states = [(c.short_id, c.status) for c in found]
        server_log = f"\nserver log:\n{log()}" if log is not None else ""
        pytest.fail(f"containers {label}: still {states} after {within}s{server_log}")
    return found


def running(count: int) -> Callable[[list[Container]], bool]:
    return lambda found: len(found) == count and all(c.status == "running" for c in found)


def none_left(found: list[Container]) -> bool:
    return not found


# ---- the `airlock` command -------------------------------------------------------------


def airlock(
    *args: str, stdin: str = "", env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`airlock ARGS` through the installed entry point, its output as text; `env`, if
    given, is the child's whole environment."""
    return subprocess.run(
        [AIRLOCK, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=dict(env) if env is not None else None,
    )


async def airlock_async(
    *args: str, env: Mapping[str, str] | None = None, within: float = 60
) -> subprocess.CompletedProcess[str]:
    """`airlock` in a worker thread: an in-memory server on this event loop keeps serving
    while the command runs (killed after `within` seconds)."""
    return await anyio.to_thread.run_sync(
        functools.partial(airlock, *args, env=env, timeout=within)
    )


def airlock_main(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """`airlock ARGS` run by the CLI's `main` in this process, answered as `airlock` would
    be: for what a command says and returns, in milliseconds where a child process takes
    about a second (`airlock` keeps a few end to end). Only for commands that neither
    serve nor run an event loop. The root logger is set back afterwards: the CLI's
    logging setup replaces its handlers, pytest's own among them."""
    out, err = io.StringIO(), io.StringIO()
    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in CLI_LOGGERS)]
    saved = [(logger, logger.handlers[:], logger.level) for logger in loggers]
    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            _stdin(io.StringIO(stdin)),
        ):
            code = _exit_code(main, list(args))
    finally:
        for logger, handlers, level in saved:
            logger.handlers[:] = handlers
            logger.setLevel(level)
    return subprocess.CompletedProcess([AIRLOCK, *args], code, out.getvalue(), err.getvalue())


CLI_LOGGERS = ("mcp", "httpx", "docker", "urllib3")
"""The loggers whose level the CLI's logging setup changes (server/logs.py)."""


def _exit_code(entry: Callable[[list[str]], None], argv: list[str]) -> int:
    """The exit status a process would have after `entry(argv)`, as sys.exit decides it."""
    try:
        entry(argv)
    except SystemExit as exited:
        if exited.code is None or isinstance(exited.code, int):
            return exited.code or 0
        sys.stderr.write(f"{exited.code}\n")
        return 1
    return 0


@contextlib.contextmanager
def _stdin(stream: io.StringIO) -> Iterator[None]:
    saved, sys.stdin = sys.stdin, stream
    try:
        yield
    finally:
        sys.stdin = saved


def without_airlock_settings() -> dict[str, str]:
    """This process's environment without the AIRLOCK_* variables a developer may have
    set, so that a command sees only the options the test gives it."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}


# ---- driving a server's tools ----------------------------------------------------------


async def call(
    c: Client, tool: str, args: dict[str, Any], *, within: float = CALL_TIMEOUT_S
) -> CallToolResult:
    """One tool call, failing the test after `within` seconds."""
    with anyio.fail_after(within):
        return await c.call_tool(tool, args)


def structured(result: CallToolResult) -> dict[str, Any]:
    """A result's structured content; it must be a result, not a tool error."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    content: dict[str, Any] = result.structured_content
    return content


def error_text(result: CallToolResult) -> str:
    """A tool error's text; the result must be a tool error."""
    assert result.is_error, f"expected a tool error, got {result.structured_content}"
    return text_of(result)


async def ok(
    c: Client, tool: str, args: dict[str, Any], *, within: float = CALL_TIMEOUT_S
) -> dict[str, Any]:
    """A tool call that must succeed; its structured content."""
    return structured(await call(c, tool, args, within=within))


async def run_result(
    c: Client, code: str, *, within: float = CALL_TIMEOUT_S, **args: Any
) -> CallToolResult:
    """run_code that must come back as a result (not a tool error) with structured content."""
    result = await call(c, "run_code", {"code": code, **args}, within=within)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result


async def run(
    c: Client, code: str, *, within: float = CALL_TIMEOUT_S, **args: Any
) -> dict[str, Any]:
    """run_code that must come back as a result; its structured content."""
    content: dict[str, Any] = (await run_result(c, code, within=within, **args)).structured_content
    return content


async def ask(c: Client, capability: str, **args: Any) -> CallToolResult:
    """request_capability for `capability` with the parameter org=acme."""
    return await call(
        c,
        "request_capability",
        {"capability": capability, "reason": "read acme", "params": {"org": "acme"}, **args},
        within=30,
    )


def vault_key_file(path: Path) -> Path:
    """A new vault key (32 random bytes, base64) at `path`, mode 0600: what every replica
    of a test fleet is given (`AIRLOCK_VAULT_KEY_FILE`)."""
    path.write_bytes(base64.b64encode(os.urandom(32)) + b"\n")
    path.chmod(0o600)
    return path


# ---- `airlock serve --http` with API keys ----------------------------------------------


@dataclass
class HttpServer:
    url: str
    base: str
    keys: dict[str, str]
    process: Process
    data_dir: Path


@asynccontextmanager
async def http_server(
    tmp_path: Path,
    *extra: str,
    tenant_policies: dict[str, str] | None = None,
    pool: bool = True,
) -> AsyncIterator[HttpServer]:
    """A server with a key for each of the tenants acme and globex; `pool=False`: the
    server runs without the warm pool (see NO_POOL)."""
    keys: dict[str, str] = {}
    lines = []
    for tenant in ("acme", "globex"):
        key, digest = generate_api_key()
        keys[tenant] = key
        entry = f'[[keys]]\nid = "{tenant}-ci"\ntenant = "{tenant}"\nhash = "{digest}"\n'
        if tenant_policies and tenant in tenant_policies:
            policy_file = tmp_path / f"{tenant}.toml"
            policy_file.write_text(tenant_policies[tenant])
            entry += f'policy = "{policy_file}"\n'
        lines.append(entry)
    auth = tmp_path / "auth.toml"
    auth.write_text("\n".join(lines))
    data_dir = tmp_path / "data"
    args = ["--auth", str(auth), "--data-dir", str(data_dir), *extra]
    if not pool:
        policy = tmp_path / "no-pool.toml"
        policy.write_text(NO_POOL_TOML)
        args += ["--policy", str(policy)]
    async with serving_http(*args) as serving:
        yield HttpServer(f"{serving.base}/mcp", serving.base, keys, serving.process, data_dir)


@asynccontextmanager
async def client(server: HttpServer, tenant: str, mode: str) -> AsyncIterator[Client]:
    """An MCP client of `server` with `tenant`'s key."""
    headers = {"Authorization": f"Bearer {server.keys[tenant]}"}
    # A first call may wait for the engine and a cold gVisor start on a loaded machine:
    # more than httpx's default 5 s.
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        transport = streamable_http_client(server.url, http_client=http)
        async with Client(transport, mode=mode) as connected:
            yield connected


# ---- the room's own objects, built without a server --------------------------------------


def services_on(
    directory: Path, policy: Policy, db: Database, *, clock: Callable[[], float] | None = None
) -> Services:
    """The real store, broker and vault in `directory` and an engine that is never
    started; the clock is `clock` if given."""
    grants, tokens = Grants(), RunTokens()
    vault = Vault(vault_path(directory), load_key(directory, {}))
    timing: dict[str, Any] = {"clock": clock} if clock is not None else {}
    return Services(
        db=db,
        blobs=BlobStore(directory / "blobs"),
        engine=Engine(policy, Instance.current()),
        policy=policy,
        grants=grants,
        tokens=tokens,
        vault=vault,
        egress=Egress(grants=grants, tokens=tokens, vault=vault),
        instance_id="test",
        **timing,
    )


@asynccontextmanager
async def clocked_services(directory: Path, now: list[float]) -> AsyncIterator[Services]:
    """`services_on` the default policy and a fresh database in `directory`, on the clock
    `now[0]` (set to `T0` first), which the test moves."""
    db = await Database.open(directory / "airlock.db")
    now[0] = T0
    try:
        yield services_on(directory, Policy(), db, clock=lambda: now[0])
    finally:
        await db.close()


T0 = 1_000_000.0
"""The broker tests' "now"."""
GITHUB = Capability.model_validate(
    {
        "hosts": ["api.github.com"],
        "params": {"org": "[a-z]+"},
        "methods": ["GET", "HEAD"],
        "paths": ["/repos/{org}/**"],
        "secret": "github_token",
        "inject": {"header": "Authorization", "format": "Bearer {secret}"},
    }
)


def make_grant(
    grants: Grants,
    tenant: str = "t1",
    session_id: str = "s1",
    capability: Capability = GITHUB,
    **overrides: Any,
) -> Grant:
    """A policy-approved grant of `capability` (github-read for org acme, 900 s at T0, under
    the quotas of a tenant allowing 3 per session and 5 live, unless `overrides` say
    otherwise)."""
    args: dict[str, Any] = {
        "name": "github-read",
        "params": {"org": "acme"},
        "tenant": tenant,
        "session_id": session_id,
        "approved_by": "policy",
        "reason": "read the issues",
        "ttl_s": 900,
        "now": T0,
        # The quotas a tenant's policy names; the store has none of its own.
        "max_per_session": 3,
        "max_live_per_tenant": 5,
    }
    args.update(overrides)
    return grants.grant(capability, resolve_scope(capability, args["params"]), **args)


def session_record(
    id: str = "s1", *, tenant: str = "t1", created_at: float = 100.0
) -> SessionRecord:
    return SessionRecord(
        id=id,
        tenant=tenant,
        created_at=created_at,
        last_used_at=created_at,
        expires_at=created_at + 600,
    )


def ws_file(path: str, content: str = "1", **fields: Any) -> WorkspaceFile:
    """A workspace entry of one byte whose sha256 is `content` repeated."""
    return WorkspaceFile(path=path, sha256=content * 64, size=1, **fields)


def run_record(
    id: str = "r1",
    *,
    session_id: str = "s1",
    tenant: str = "t1",
    created_at: float = 200.0,
    instance: str = "i1",
) -> RunRecord:
    """A running run's record."""
    return RunRecord(
        id=id,
        session_id=session_id,
        tenant=tenant,
        language="python",
        status="running",
        created_at=created_at,
        timeout_s=30,
        limits={"memory_bytes": 256 << 20, "pids": 64, "egress": ["api.example.com"]},
        code_sha256="c" * 64,
        instance_id=instance,
    )


# Claims the instance named by argv[2] in the directory argv[1], says so, then waits.
HOLDER = """
import sys
from pathlib import Path
from airlock.store.fleet.claims import claim
claim(Path(sys.argv[1]), sys.argv[2])
print("claimed", flush=True)
sys.stdin.read()
"""


@asynccontextmanager
async def holder(directory: Path, instance_id: str) -> AsyncIterator[Process]:
    """A process holding `instance_id`'s claim until it is killed or the block ends."""
    process = await anyio.open_process([sys.executable, "-c", HOLDER, str(directory), instance_id])
    try:
        assert process.stdout is not None
        with anyio.fail_after(60):
            said = await BufferedByteReceiveStream(process.stdout).receive_until(b"\n", 100)
        assert said == b"claimed"
        yield process
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.fail_after(60):
            await process.wait()
        await process.aclose()


# ---- trees, patches and path spellings ------------------------------------------------


Tree = dict[str, tuple[bytes, int]]
"""Files by relative path: their bytes and mode (0o644 or 0o755)."""


def write_tree(root: Path, tree: Tree) -> None:
    for path, (data, mode) in tree.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(mode)


def read_tree(root: Path) -> Tree:
    found: Tree = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            full = Path(dirpath) / name
            mode = 0o755 if full.stat().st_mode & 0o111 else 0o644
            found[str(full.relative_to(root))] = (full.read_bytes(), mode)
    return found


def git_apply(root: Path, patch: bytes) -> subprocess.CompletedProcess[bytes]:
    env = {"PATH": os.environ["PATH"], "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(root.parent)}
    env["GIT_CEILING_DIRECTORIES"] = str(root.parent)
    return subprocess.run(
        ["git", "apply", "--whitespace=nowarn", "-"],
        input=patch,
        cwd=root,
        env=env,
        capture_output=True,
        check=False,
        timeout=60,
    )


LOCK_BLOCK = (
    b'[[package]]\nname = "dep"\nversion = "1.0.0"\n'
    b'source = "registry+https://github.com/rust-lang/crates.io-index"\n\n'
)


def lock_files() -> tuple[bytes, bytes]:
    """A 125 KB lock-style file of one repeated block, and it with 25 KB of blocks edited
    (every fifth version bumped): difflib.SequenceMatcher(autojunk=False) spent 49 s of
    CPU on it."""
    count = 125_000 // len(LOCK_BLOCK)
    blocks = [LOCK_BLOCK] * count
    bumped = LOCK_BLOCK.replace(b"1.0.0", b"1.0.1")
    for i in range(0, 230 * 5, 5):  # 230 bumps: 229 cost difflib 0.8 s, 230 cost it 49 s
        blocks[i] = bumped
    return LOCK_BLOCK * count, b"".join(blocks)


def sample_paths(glob: str) -> list[str]:
    """Paths under `glob`: each `**` as no segment and as one more (a trailing one as a
    file), `*` and `?` as letters."""
    found = []
    for deep in (False, True):
        segments: list[str] = []
        parts = glob.split("/")
        for i, part in enumerate(parts):
            if part == "**":
                last = i == len(parts) - 1
                segments += (["d", "ci.yml"] if deep else ["ci.yml"]) if last else (["d"] * deep)
            else:
                segments.append(part.replace("*", "x").replace("?", "q"))
        found.append("/".join(segments))
    return found


def short_name(segment: str) -> str:
    """The 8.3 short name Windows gives `segment` first (`.github` -> `GITHUB~1`)."""
    base, dot, ext = segment.lstrip(".").rpartition(".")
    if not dot:
        base, ext = ext, ""
    letters = "".join(ch for ch in base.upper() if ch.isalnum())
    return f"{letters[:6]}~1" + (f".{ext.upper()[:3]}" if ext else "")


def windows_spellings(path: str) -> list[str]:
    """`path` as Windows (and macOS, for case) would also write it."""
    segments = path.split("/")
    return [
        path.upper(),
        "/".join(s + "." for s in segments),
        "/".join(s + " " for s in segments),
        "/".join(s + ". ." for s in segments),
        path + "::$DATA",
        path + ":hidden:$DATA",
        "/".join([short_name(segments[0]), *segments[1:]]),
        "/".join([*segments[:-1], short_name(segments[-1])]),
    ]


# ---- egress: the upstream's capability and the programs that report on it -------------------
# Shared by tests/rooms/egress/test_egress.py and the fleet tests that revoke or end what it grants.

EGRESS_SECRET_NAME = "test_token"
EGRESS_SECRET = "sk-e2e-" + secrets.token_urlsafe(24)

LOOPBACK = ["127.0.0.0/8", "::1/128"]
EGRESS_CAP = "local-api"

# Helpers every sandbox program starts with; each program prints one JSON line (report).
EGRESS_PRELUDE = r"""
import base64, json, os, socket, subprocess, urllib.error, urllib.request

def fetch(url, method="GET", data=None, headers=None):
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return {"status": response.status, "body": response.read().decode()}
    except urllib.error.HTTPError as exc:
        return {"status": exc.code, "reason": exc.headers.get("X-Airlock-Reason")}
    except OSError as exc:
        return {"status": None, "error": str(exc)}

def curl(url, *args):
    done = subprocess.run(
        ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %{http_connect}",
         "--max-time", "20", *args, url],
        capture_output=True, text=True,
    )
    code, connect = done.stdout.split()
    return {"exit": done.returncode, "code": code, "connect": connect,
            "stderr": done.stderr.strip()}

def raw_connect(authority, token=None):
    token = os.environ.get("AIRLOCK_TOKEN", "") if token is None else token
    auth = base64.b64encode(f"airlock:{token}".encode()).decode()
    head = (f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"
            f"Proxy-Authorization: Basic {auth}\r\n\r\n")
    with socket.create_connection(("127.0.0.1", 3128), timeout=20) as s:
        s.sendall(head.encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    lines = data.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    fields = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return {"status": int(lines[0].split()[1]), "reason": fields.get("x-airlock-reason")}

def report(**facts):
    print(json.dumps(facts))
"""


def egress_policy(
    port: int,
    ca_file: Path,
    *,
    allow_private: bool = True,
    hosts: tuple[str, ...] = ("localhost",),
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    local_api: dict[str, Any] = {
        "description": "the test upstream",
        "hosts": list(hosts),
        "ports": [port],
        "methods": ["GET"],
        "paths": ["/api/**"],
        "secret": EGRESS_SECRET_NAME,
        "inject": {"header": "Authorization", "format": "Bearer {secret}"},
        "approval": "auto",
        "ttl": "5m",
        "max_ttl": "10m",
    }
    if allow_private:
        local_api["allow_private"] = LOOPBACK
    return {
        "capabilities": {EGRESS_CAP: local_api, **(extra or {})},
        "egress": {"upstream_ca_file": str(ca_file)},
        "limits": {"timeout_s": 40, "memory_mb": 256},
    }


async def grant(c: Client, capability: str = EGRESS_CAP, **args: Any) -> dict[str, Any]:
    """request_capability that must succeed (`EGRESS_CAP` unless told); the grant."""
    return await ok(c, "request_capability", {"capability": capability, "reason": "test", **args})


async def egress_run(
    c: Client, code: str, capabilities: list[str] | None = None, **args: Any
) -> dict[str, Any]:
    """run_code with the prelude; the structured result (it must not be a tool error)."""
    return await run(c, EGRESS_PRELUDE + code, capabilities=capabilities or [], **args)


def report(result: dict[str, Any]) -> Any:
    """The one JSON line an `EGRESS_PRELUDE` program printed last (its `report`)."""
    assert result["status"] == "ok", (result["stdout"], result["stderr"])
    return json.loads(result["stdout"]["text"].strip().splitlines()[-1])


def is_tunnel(record: dict[str, Any]) -> bool:
    """A tunnel's own record, written when it ends (the requests inside have their own)."""
    return record["method"] == "CONNECT" and "ended: " in record["reason"]


def requests_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's egress records without its tunnels' own."""
    return [r for r in records if not is_tunnel(r)]


@asynccontextmanager
async def listening(url: str, origin: str) -> AsyncIterator[PostgresNotices]:
    """Notices on the PostgreSQL at `url` as the server `origin`, listening until the block ends."""
    notices = PostgresNotices(url, origin)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(10):
            await tg.start(notices.serve)
        yield notices
        tg.cancel_scope.cancel()
