"""Airlock benchmark: the performance targets of docs/design.md, measured side by side in one run.

Run from the repository root (needs Docker, the sandbox image, which it builds if missing,
and the `dev` extras for the egress section's certificates):

    .venv/bin/python -m bench.run [--quick] [--sections warm,cold,...] [--out FILE]

(`.venv/bin/python bench/run.py ...` works too.) A full run takes about 6 to 10 minutes.

It prints a table (section, metric, value, target, pass/fail) on stdout, progress on
stderr, and writes every raw number plus machine facts to `--out` (default
bench/results/latest.json). It exits 0 when every section ran, whatever the targets say;
1 when a section crashed (its error is in the JSON). Servers' temporary directories (data,
policy, server.log) are removed at the end unless `--keep-temp` is given.

Method
------
The machine is shared and noisy (2 cores, other suites may run), so every target is a
ratio of two things measured in the same run, interleaved:

* Each Docker section starts its own `airlock serve` (the installed CLI) as a subprocess
  on a fresh temporary data directory and policy file, and talks to it with the MCP SDK
  client over stdio (`Client(stdio_client(StdioServerParameters(...)))`; the server's
  stderr goes to a log file in that directory). Timings are taken in this process around
  `call_tool`, so they include JSON-RPC over the pipes, validation, the store, the
  container and the envelope. Warm-up calls (the first ones of every server) are left out.
  The policy sets only the pool size; everything else is the shipped default.
* The baseline is `docker run --rm --network none --entrypoint python3 IMAGE -c
  'print(1)'` with Airlock's own sandbox image (`sandbox.image.image_tag()`), run with the
  Docker CLI, timed around the process. Note that its time includes the container's
  removal (`--rm` waits for it), while Airlock removes a container after replying.
* Runtimes side by side: warm, cold, concurrency and egress-run are measured once per
  runtime (`--runtimes`, default runc and runsc, i.e. gVisor), each server's policy naming
  it with `[sandbox] runtime`; everything else is the shipped default, warm pool included
  (`[pool] size` is set only where a section needs the pool off).
* warm (the default pool) and cold (pool size 0): one Airlock call and one baseline run per
  iteration, in ABBA order (A,B then B,A) so drift in load hits both alike. Before *each*
  timed operation the benchmark waits, untimed, until the engine is quiet: the server's
  pool is back to full (that many running, never-used containers carrying its
  `airlock.pid` label) and no container of an earlier call remains. So the warm figure is
  "a call arriving when the pool has a container", and neither side pays for the other's
  background work (refill, removal). That pacing is reported (the wait before each warm
  call). Then, on the same server, the same number of calls back to back with no pause
  (`unpaced`), where the pool of 4 drains and calls fall back to creating containers:
  shown, not judged against a target.
* egress-run (the default pool): warm calls of a server whose policy has an
  `[[egress.allow]]` rule, so every run gets its proxy, CA and in-sandbox relay (the code
  is `print(1)`; the proxy's own costs are the egress section's), interleaved with the
  baseline like warm.
* concurrency (the default pool): N calls issued at once through one client session; wall time from
  the first request to the last reply. Afterwards: time until no container of a call is
  left (the server removes them in the background after replying; more than 10 s means
  one was left behind), then the server is stopped and any container still carrying its
  pid label is an orphan (and is removed).
* egress: no containers. The real proxy (`egress.Egress` with real Grants, RunTokens and
  Vault) runs in this process's event loop, as in the server; a grant lets the run reach
  localhost:PORT with a secret injected (the usual capability). The HTTPS upstream
  (trustme certificate) and the client run as separate processes (bench/egress_worker.py),
  so neither shares this interpreter. The client alternates direct and proxied GETs in ABBA
  order, twice: first a new connection every time on both paths (direct: TCP + TLS to the
  upstream; proxied: unix socket + CONNECT + TLS to the run's leaf, then an upstream
  connection the proxy kept from an earlier tunnel of the run, or its own TCP + TLS), then
  every request on one kept-alive connection per path. Added latency = p50(proxied) -
  p50(direct) of /small (100 bytes), for a first request and on a kept-alive tunnel, and
  the kept-alive one again while another run (limit 50 requests) floods its own proxy
  with denied CONNECTs from a third process;
  throughput = body bytes / time of /big (50 MB), one fresh run per transfer (the per-run
  response cap is 100 MiB), direct and proxied once per run in ABBA order across the runs,
  median over the repeats (the per-pair ratios are in the JSON), and the CPU seconds one
  50 MB transfer costs the proxy (this process's CPU time, nothing else running in it),
  the client and the upstream (a load-independent view of the relay's cost), with the
  secret injected (so the proxy scrubs the answer for it) and again under a grant without
  a secret. The upstream sets TCP_NODELAY, as production servers do: Python's http.server
  writes the head and the body separately, and with Nagle on, that meets delayed ACKs and
  costs 40 ms a request on either path, depending on the client's socket options (the
  proxy's asyncio sockets and the direct client both set TCP_NODELAY).
* teardown (pool 0, so every container carries the session label): N concurrent
  `time.sleep(60)` calls in one session; once N containers with that session label are
  running, `end_session` is called and the clock runs until the engine lists none of them.
* The warm and cold sections also split each call's time using the server's own run record
  (same wall clock): before the run row, the user's process in the container (the runner's
  `duration_ms`, interpreter start included), the rest of the server's work for the run
  (attach, job in, report out, usage, the store; container creation on the cold path), and
  the reply back to the client.
* rss (the default pool): VmRSS from /proc/<pid>/status of the server (found by its command line)
  once idle (engine ready, pool full, no call yet), then after every block of calls, each
  reading taken once the engine is quiet. Calls are issued 8 at a time to keep the run
  short; the number judged is RSS after the last block against RSS after the first.
* fleet (per runtime, the default pool): two servers side by side for the whole section,
  one on the default SQLite store, one on a throwaway PostgreSQL cluster (`--store`,
  started with tests/postgres.py as .ci/run does); paced warm `print(1)` calls alternate
  between them ABBA, each after its engine is quiet. Judged: PostgreSQL p50 / SQLite p50
  at most 1.3x. Then the concurrency count of calls at once, all on one PostgreSQL replica,
  then split over two (a second replica on the same database and engine, the same vault
  key): wall time, reported. Each replica has its own warm pool, so two replicas hold twice
  the warm containers; on 2 cores no other gain is expected. Last, revocation across
  replicas: a capability granted on one replica, a run of its session on the other
  requesting through it in a loop, and the time from `revoke_capability` on the first to
  the run's first refused request (the container reads the host's clock). Judged: p99 at
  most 1 s. Notice latency alone is bench/fleet.py's.
* browse (per runtime): a one-shot `browse` of a small local HTTPS page (a trustme leaf;
  screenshot, text and snapshot back through the proxy), interleaved ABBA with a
  `docker run --rm --network none` of the browser image's own Chromium screenshotting the
  same page from a `data:` URL (the engine's default runtime, as the other baselines).
  Twice: on a server with `[browser] pool = 1`, each call made once the pool has a box
  whose page is open (a Chromium renderer runs in it; an untimed wait: a call arriving
  after the pool refilled), judged at most 0.5x; and with `pool = 0` (a box started for
  each call), reported. Every other section's servers run with `[browser] pool = 0`.
* patch: no containers. `sandbox.gitdiff.build_patch` in this process, writing to a file,
  on three changes: a 125 KB lock-style file with every fifth version bumped, 1 MiB of
  random two-symbol lines replaced by others (past the diff's budget), and 32 MiB of new
  random binary files. Reported: this process's CPU seconds per MiB changed (old plus new
  bytes), the diff's work units against its budget, and beside them the CPU of `git diff
  --no-index --binary` (git's C implementation, no config) on the same files. Not judged.
"""

from __future__ import annotations

import argparse
import base64
import importlib.metadata
import json
import math
import os
import platform
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

import anyio
import docker
import docker.errors
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from airlock.broker import Grant, Grants, RunTokens, Vault, load_key, vault_path
from airlock.egress import SOCKET_NAME, Egress
from airlock.policies import Capability, EgressSettings, Policy, resolve_scope
from airlock.sandbox import connect
from airlock.sandbox.image import ensure_image

ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().with_name("egress_worker.py")
AIRLOCK = Path(sys.executable).with_name("airlock")
DEFAULT_OUT = ROOT / "bench" / "results" / "latest.json"
SECTIONS = (
    *("warm", "cold", "concurrency", "egress-run", "egress", "teardown", "rss", "patch"),
    "browse",
    "fleet",
)
RUNTIMES = ("runc", "runsc")
# Sections measured once per runtime; the others use the default runtime ("auto").
PER_RUNTIME = ("warm", "cold", "concurrency", "egress-run", "browse", "fleet")
LABEL_PID = "airlock.pid"
LABEL_SESSION = "airlock.session"
DEFAULT_POOL = Policy().pool.size
# Targets of docs/design.md by runtime: warm p50 and p95 ratios, cold p50 ratio.
WARM_TARGETS = {"runc": (0.25, 0.5), "runsc": (0.35, None)}
COLD_TARGETS = {"runc": 1.3, "runsc": 2.0}
EGRESS_RUN_TARGET = 0.35
NO_POOL = "[pool]\nsize = 0\n"
EGRESS_ALLOW = """
[[egress.allow]]
name = "bench"
hosts = ["localhost"]
methods = ["GET"]
paths = ["/**"]
"""
SETTLE_TIMEOUT_S = 60.0
CALL_TIMEOUT_S = 120.0
RSS_CONCURRENCY = 8
# A call's container is removed right after its reply; one still there this long after the
# last reply was left behind (the deadline reaper may get it a minute later).
CLEANUP_LIMIT_S = 10.0


@dataclass(frozen=True)
class Counts:
    warm: int
    unpaced: int
    cold: int
    concurrent: int
    egress_small: int
    egress_big_bytes: int
    egress_big_repeats: int
    teardown: int
    rss_blocks: tuple[int, ...]


FULL = Counts(
    warm=100,
    unpaced=100,
    cold=40,
    concurrent=32,
    egress_small=200,
    egress_big_bytes=50_000_000,
    egress_big_repeats=6,
    teardown=20,
    rss_blocks=(100, 250, 500, 750, 1000),
)
QUICK = Counts(
    warm=10,
    unpaced=10,
    cold=5,
    concurrent=8,
    egress_small=40,
    egress_big_bytes=1_000_000,
    egress_big_repeats=2,
    teardown=5,
    rss_blocks=(20, 60, 100),
)


def _cpu_now(upstream_pid: int) -> tuple[float, float, float]:
    """CPU seconds so far of this process, of its ended children, and of the upstream."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    fields = Path(f"/proc/{upstream_pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (
        time.process_time(),
        children.ru_utime + children.ru_stime,
        (int(fields[11]) + int(fields[12])) / tick,
    )


def progress(text: str) -> None:
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {text}\n")
    sys.stderr.flush()


# ---- statistics and the table -------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile, linear between closest ranks (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    k = (len(ordered) - 1) * q / 100
    low = math.floor(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": pct(values, 50),
        "p95": pct(values, 95),
        "p99": pct(values, 99),
        "mean": statistics.fmean(values) if values else math.nan,
        "min": min(values) if values else math.nan,
        "max": max(values) if values else math.nan,
    }


@dataclass
class Row:
    section: str
    metric: str
    value: str
    target: str = ""
    ok: bool | None = None  # None: reported, not judged

    @property
    def verdict(self) -> str:
        return "" if self.ok is None else ("pass" if self.ok else "FAIL")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds >= 0.1 else f"{seconds * 1000:.1f} ms"


def render(rows: Sequence[Row]) -> str:
    header = ("section", "metric", "value", "target", "result")
    cells = [header, *((r.section, r.metric, r.value, r.target, r.verdict) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    lines = []
    for n, cell in enumerate(cells):
        lines.append("  ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ---- Docker and the server under test ------------------------------------------------------


T = TypeVar("T")


async def poll(check: Callable[[], T | None], interval: float) -> T:
    """Call `check` until it returns something; for states with no event to wait on."""
    while True:
        value = check()
        if value is not None:
            return value
        await anyio.sleep(interval)


async def poll_async(check: Callable[[], Awaitable[bool]], interval: float) -> None:
    """Await `check` until it is true (the engine's state has no event to wait on)."""
    while True:
        if await check():
            return
        await anyio.sleep(interval)


def _open_log(path: Path) -> TextIO:
    return open(path, "w", encoding="utf-8")


async def open_stdio(stack: AsyncExitStack, params: StdioServerParameters, log: Path) -> Client:
    """The MCP SDK client on a server started on `params` (its stderr to `log`), both
    closed with `stack`."""
    errlog = _open_log(log)
    stack.callback(errlog.close)
    return await stack.enter_async_context(Client(stdio_client(params, errlog=errlog)))


def docker_env() -> dict[str, str]:
    """What the server needs beyond the SDK's default environment: the engine's address."""
    return {k: v for k, v in os.environ.items() if k.startswith("DOCKER_")}


def server_pid(data_dir: str) -> int | None:
    """The `airlock serve --data-dir DATA_DIR` process, found by its command line."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in args and data_dir.encode() in args:
            return int(entry)
    return None


def rss_kib(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM", "RssAnon", "Threads"):
            fields[name] = int(value.split()[0])
    return fields


async def docker_run(image: str) -> float:
    """One baseline run, timed around the CLI process."""
    started = time.perf_counter()
    done = await anyio.run_process(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "python3",
            image,
            "-c",
            "print(1)",
        ],
        check=False,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or done.stdout != b"1\n":
        raise RuntimeError(f"baseline docker run failed: {done.returncode} {done.stderr!r}")
    return elapsed


@dataclass(frozen=True)
class Call:
    elapsed: float  # seconds, perf_counter around call_tool
    run_id: str
    sent_at: float  # wall clock, comparable with the server's run records
    received_at: float


BREAKDOWN = ("before_run_record", "code", "rest_of_run", "reply")


class Server:
    """One `airlock serve` subprocess on a fresh data dir, with an MCP client on its stdio."""

    def __init__(
        self,
        name: str,
        engine: docker.DockerClient,
        temp: Path,
        *,
        pooled: bool = True,
        runtime: str | None = None,
        egress: bool = False,
        extra_policy: str = "",
        store: str | None = None,
        env: dict[str, str] | None = None,
        browser_pool: int = 0,
    ) -> None:
        """`browser_pool`: its `[browser] pool`; none but where a section asks, so the warm
        browser boxes are neither counted by `settle` nor load the other sections."""
        self.name = name
        self.store = store
        self.env = env or {}
        self.pool = DEFAULT_POOL if pooled else 0
        self.policy = "version = 1\n" + ("" if pooled else NO_POOL)
        self.policy += f"[browser]\npool = {browser_pool}\n"
        if runtime is not None:
            self.policy += f'[sandbox]\nruntime = "{runtime}"\n'
        if egress:
            self.policy += EGRESS_ALLOW
        self.policy += extra_policy
        self.engine = engine
        self.dir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=temp))
        self.pid = 0
        self.orphans = 0
        self.settle_timeouts = 0
        self._stack = AsyncExitStack()
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        assert self._client is not None
        return self._client

    async def __aenter__(self) -> Server:
        data = self.dir / "data"
        policy = self.dir / "policy.toml"
        policy.write_text(self.policy, encoding="utf-8")
        params = StdioServerParameters(
            command=str(AIRLOCK),
            args=[
                "serve",
                "--data-dir",
                str(data),
                "--policy",
                str(policy),
            ],
            # Through the environment: a URL with a password is refused in --store.
            env=docker_env() | self.env | ({"AIRLOCK_STORE_URL": self.store} if self.store else {}),
        )
        try:
            self._client = await open_stdio(self._stack, params, self.dir / "server.log")
            with anyio.fail_after(10):
                self.pid = await poll(lambda: server_pid(str(data)), 0.05)
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()
        # The server removes its containers on the way out; whatever is still listed a
        # few seconds after it exited is an orphan. Remove it so the next section is clean.
        with anyio.move_on_after(10):
            await poll_async(self._none_left, 0.2)
        left = await self.containers()
        self.orphans = len(left)
        for container in left:
            await anyio.to_thread.run_sync(self._force_remove, container["Id"])

    def _force_remove(self, container_id: str) -> None:
        self.engine.api.remove_container(container_id, force=True)

    async def _none_left(self) -> bool:
        return not await self.containers()

    async def containers(self, **labels: str) -> list[dict[str, Any]]:
        wanted = [f"{LABEL_PID}={self.pid}", *(f"{k}={v}" for k, v in labels.items())]
        return await anyio.to_thread.run_sync(
            lambda: self.engine.api.containers(all=True, filters={"label": wanted})
        )

    def rss(self) -> dict[str, int]:
        return rss_kib(self.pid)

    async def settle(self, limit_s: float = SETTLE_TIMEOUT_S) -> float:
        """Wait until the pool is full and no container of a call is left; seconds waited."""
        started = time.perf_counter()
        with anyio.move_on_after(limit_s) as scope:
            while True:
                found = await self.containers()
                ready = [
                    c
                    for c in found
                    if (c.get("Labels") or {}).get(LABEL_SESSION) == "" and c["State"] == "running"
                ]
                if len(ready) == len(found) == self.pool:
                    break
                await anyio.sleep(0.03)
        if scope.cancelled_caught:
            self.settle_timeouts += 1
            progress(f"{self.name}: engine not quiet after {limit_s:.0f} s; going on")
        # A started container is listed a moment before the pool has put it on its list.
        await anyio.sleep(0.02)
        return time.perf_counter() - started

    async def call(self, name: str, arguments: dict[str, Any]) -> tuple[float, Any]:
        started = time.perf_counter()
        with anyio.fail_after(CALL_TIMEOUT_S):
            result = await self.client.call_tool(name, arguments)
        return time.perf_counter() - started, result

    async def run_print(self) -> Call:
        """One `run_code("print(1)")`, checked."""
        sent_at = time.time()
        elapsed, result = await self.call("run_code", {"code": "print(1)"})
        received_at = time.time()
        data = result.structured_content or {}
        if result.is_error or data.get("status") != "ok" or data["stdout"]["text"] != "1\n":
            raise RuntimeError(f"run_code failed: {result.content!r}")
        return Call(elapsed, data["run_id"], sent_at, received_at)

    def breakdown(self, calls: Sequence[Call]) -> dict[str, dict[str, float]]:
        """Where the time of these calls went, from the server's run records (same clock).

        before_run_record: request in, session, validation, until the run row is written;
        code: the run's duration_ms, which the runner measures around the user's process
        in the container (interpreter start included); rest_of_run: everything else the
        server does for the run: the run row, creating the container (cold path only),
        attach, start (cold), job in, report out, usage, storing output and workspace,
        the finished row; reply: building the result and JSON-RPC back to the client."""
        db = sqlite3.connect(self.dir / "data" / "airlock.db")
        try:
            rows = {
                run_id: (created, finished, duration_ms / 1000)
                for run_id, created, finished, duration_ms in db.execute(
                    "SELECT id, created_at, finished_at, duration_ms FROM runs"
                )
            }
        finally:
            db.close()
        parts: dict[str, list[float]] = {k: [] for k in BREAKDOWN}
        for call in calls:
            created, finished, code = rows[call.run_id]
            parts["before_run_record"].append(created - call.sent_at)
            parts["code"].append(code)
            parts["rest_of_run"].append(finished - created - code)
            parts["reply"].append(call.received_at - finished)
        return {k: summary(v) for k, v in parts.items()}


# ---- sections -----------------------------------------------------------------------------


@dataclass
class Bench:
    counts: Counts
    engine: docker.DockerClient
    image: str
    temp: Path
    runtimes: tuple[str, ...] = RUNTIMES
    rows: list[Row] = field(default_factory=list)

    def server(self, name: str, **options: Any) -> Server:
        return Server(name, self.engine, self.temp, **options)

    def row(self, *args: Any, **kwargs: Any) -> None:
        self.rows.append(Row(*args, **kwargs))

    def ratio(self, section: str, metric: str, value: float, limit: float | None = None) -> None:
        """A ratio to the baseline; judged when it has a limit (at most `limit`)."""
        if limit is None:
            self.row(section, metric, f"{value:.2f}x")
        else:
            self.row(section, metric, f"{value:.2f}x", f"<= {limit}x", value <= limit)


@dataclass
class Interleaved:
    airlock: list[float] = field(default_factory=list)  # seconds per call
    baseline: list[float] = field(default_factory=list)  # seconds per docker run
    calls: list[Call] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)  # untimed wait before each call


async def interleaved(srv: Server, image: str, n: int, *, warmups: int, what: str) -> Interleaved:
    """After `warmups` calls and one baseline run, n Airlock calls and n baseline runs,
    ABBA, each after the engine is quiet."""
    for _ in range(warmups):
        await srv.run_print()
    await docker_run(image)
    progress(what)
    out = Interleaved()
    for i in range(n):
        for kind in ("airlock", "baseline") if i % 2 == 0 else ("baseline", "airlock"):
            waited = await srv.settle()
            if kind == "airlock":
                call = await srv.run_print()
                out.airlock.append(call.elapsed)
                out.calls.append(call)
                out.waits.append(waited)
            else:
                out.baseline.append(await docker_run(image))
        if (i + 1) % 20 == 0:
            progress(f"  {i + 1}/{n}")
    return out


async def section_warm(b: Bench, runtime: str) -> dict[str, Any]:
    n = b.counts.warm
    async with b.server(f"warm-{runtime}", runtime=runtime) as srv:
        raw = await interleaved(
            srv,
            b.image,
            n,
            warmups=3,
            what=f"warm: {n} paced calls interleaved with {n} docker runs",
        )
        await srv.settle()
        progress(f"warm: {b.counts.unpaced} calls back to back")
        unpaced = []
        unpaced_started = time.perf_counter()
        for _ in range(b.counts.unpaced):
            unpaced.append((await srv.run_print()).elapsed)
        unpaced_wall = time.perf_counter() - unpaced_started
    warm, base, unp = summary(raw.airlock), summary(raw.baseline), summary(unpaced)
    waits = summary(raw.waits)
    parts = srv.breakdown(raw.calls)
    section = f"1 warm {runtime}"
    p50_target, p95_target = WARM_TARGETS.get(runtime, (None, None))
    b.row(section, f"run_code p50 / p95 / p99 (n={n})", _triple(warm))
    b.row(section, f"docker run p50 / p95 / p99 (n={n})", _triple(base))
    b.ratio(section, "p50 ratio", warm["p50"] / base["p50"], p50_target)
    b.ratio(section, "p95 ratio", warm["p95"] / base["p95"], p95_target)
    b.ratio(section, "p99 ratio", warm["p99"] / base["p99"])
    b.row(section, "p50 split: before / code / rest / reply", _split(parts))
    b.row(
        section, "pacing: wait for a full pool", f"p50 {ms(waits['p50'])}, max {ms(waits['max'])}"
    )
    b.row(section, f"unpaced p50 / p95 / p99 (n={len(unpaced)})", _triple(unp))
    b.ratio(section, "unpaced p50 ratio", unp["p50"] / base["p50"])
    b.ratio(section, "unpaced p95 ratio", unp["p95"] / base["p95"])
    return {
        "pool_size": srv.pool,
        "runtime": runtime,
        "airlock_s": raw.airlock,
        "baseline_s": raw.baseline,
        "wait_before_call_s": raw.waits,
        "unpaced_s": unpaced,
        "unpaced_wall_s": unpaced_wall,
        "airlock": warm,
        "baseline": base,
        "unpaced": unp,
        "breakdown": parts,
        "ratio_p50": warm["p50"] / base["p50"],
        "ratio_p95": warm["p95"] / base["p95"],
        "ratio_p99": warm["p99"] / base["p99"],
        "settle_timeouts": srv.settle_timeouts,
        "orphans": srv.orphans,
    }


async def section_cold(b: Bench, runtime: str) -> dict[str, Any]:
    n = b.counts.cold
    async with b.server(f"cold-{runtime}", pooled=False, runtime=runtime) as srv:
        raw = await interleaved(
            srv, b.image, n, warmups=2, what=f"cold: {n} calls interleaved with {n} docker runs"
        )
    cold, base = summary(raw.airlock), summary(raw.baseline)
    parts = srv.breakdown(raw.calls)
    section = f"2 cold {runtime}"
    b.row(section, f"run_code p50 / p95 (n={n})", f"{ms(cold['p50'])} / {ms(cold['p95'])}")
    b.row(section, f"docker run p50 / p95 (n={n})", f"{ms(base['p50'])} / {ms(base['p95'])}")
    b.ratio(section, "p50 ratio", cold["p50"] / base["p50"], COLD_TARGETS.get(runtime))
    b.ratio(section, "p95 ratio", cold["p95"] / base["p95"])
    b.row(section, "p50 split: before / code / rest / reply", _split(parts))
    return {
        "pool_size": 0,
        "runtime": runtime,
        "airlock_s": raw.airlock,
        "baseline_s": raw.baseline,
        "airlock": cold,
        "baseline": base,
        "breakdown": parts,
        "ratio_p50": cold["p50"] / base["p50"],
        "ratio_p95": cold["p95"] / base["p95"],
        "settle_timeouts": srv.settle_timeouts,
        "orphans": srv.orphans,
    }


async def section_concurrency(b: Bench, runtime: str) -> dict[str, Any]:
    n = b.counts.concurrent
    latencies: list[float] = []
    failures: list[str] = []
    async with b.server(f"concurrency-{runtime}", runtime=runtime) as srv:
        for _ in range(2):
            await srv.run_print()
        await srv.settle()

        async def one() -> None:
            try:
                latencies.append((await srv.run_print()).elapsed)
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")

        progress(f"concurrency: {n} calls at once")
        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(one)
        wall = time.perf_counter() - started
        left_at_end = len([c for c in await srv.containers() if c["Labels"][LABEL_SESSION]])
        cleanup_started = time.perf_counter()
        await srv.settle()
        cleanup = time.perf_counter() - cleanup_started
        quiet = srv.settle_timeouts == 0 and cleanup <= CLEANUP_LIMIT_S
    section = f"3 concurrency {runtime}"
    lat = summary(latencies)
    b.row(
        section,
        f"{n} concurrent calls succeeded",
        f"{len(latencies)}/{n}",
        "all",
        len(latencies) == n,
    )
    b.row(section, "wall time / throughput", f"{wall:.2f} s / {n / wall:.1f} calls/s")
    b.row(section, "per-call latency p50 / max", f"{ms(lat['p50'])} / {ms(lat['max'])}")
    b.row(section, "all run containers gone after", f"{cleanup:.2f} s", "<= 10 s", quiet)
    b.row(section, "orphan containers after server exit", str(srv.orphans), "0", srv.orphans == 0)
    return {
        "n": n,
        "runtime": runtime,
        "succeeded": len(latencies),
        "failures": failures,
        "wall_s": wall,
        "calls_per_s": n / wall,
        "latency_s": latencies,
        "latency": lat,
        "run_containers_when_last_reply_came": left_at_end,
        "cleanup_after_burst_s": cleanup,
        "cleanup_complete": quiet,
        "orphans_after_exit": srv.orphans,
    }


async def section_teardown(b: Bench) -> dict[str, Any]:
    n = b.counts.teardown
    outcomes: list[str] = []
    async with b.server("teardown", pooled=False) as srv:
        _, first = await srv.call("run_code", {"code": "print(1)"})
        session = first.structured_content["session_id"]
        await srv.settle()

        async def long_run() -> None:
            _, result = await srv.call(
                "run_code",
                {"code": "import time; time.sleep(60)", "timeout_s": 90, "session_id": session},
            )
            if result.is_error:
                outcomes.append(f"tool error: {result.content[0].text}")
            else:
                outcomes.append(result.structured_content["status"])

        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(long_run)
            progress(f"teardown: waiting for {n} running containers of the session")
            with anyio.fail_after(120):
                while True:
                    if outcomes:
                        raise RuntimeError(f"a long run ended before teardown: {outcomes[0]}")
                    found = await srv.containers(**{LABEL_SESSION: session})
                    if len([c for c in found if c["State"] == "running"]) >= n:
                        break
                    await anyio.sleep(0.1)
            await anyio.sleep(0.5)  # let the runners start the code

            async def session_gone() -> bool:
                return not await srv.containers(**{LABEL_SESSION: session})

            started = time.perf_counter()
            returned, result = await srv.call("end_session", {"session_id": session})
            with anyio.fail_after(60):
                await poll_async(session_gone, 0.02)
            gone = time.perf_counter() - started
    section = "5 teardown"
    removed = (result.structured_content or {}).get("containers_removed")
    b.row(section, f"end_session returns ({n} live containers)", f"{returned:.2f} s")
    b.row(section, f"until none of {n} is left", f"{gone:.2f} s", "<= 2 s", gone <= 2.0)
    return {
        "n": n,
        "end_session_returned_s": returned,
        "all_gone_s": gone,
        "containers_removed": removed,
        "run_outcomes": dict(Counter(outcomes)),
        "orphans": srv.orphans,
    }


async def section_rss(b: Bench) -> dict[str, Any]:
    blocks = b.counts.rss_blocks
    readings: list[dict[str, Any]] = []
    async with b.server("rss") as srv:
        await srv.settle(limit_s=180)
        await anyio.sleep(1)
        readings.append({"calls": 0, **srv.rss()})
        progress(f"rss: idle {readings[0]['VmRSS'] / 1024:.1f} MiB; {blocks[-1]} calls")
        done = 0
        limiter = anyio.Semaphore(RSS_CONCURRENCY)

        async def one() -> None:
            async with limiter:
                await srv.run_print()

        for target in blocks:
            async with anyio.create_task_group() as tg:
                for _ in range(target - done):
                    tg.start_soon(one)
            done = target
            await srv.settle()
            await anyio.sleep(1)
            readings.append({"calls": done, **srv.rss()})
            progress(f"  {done} calls: RSS {readings[-1]['VmRSS'] / 1024:.1f} MiB")
    section = "6 rss"
    idle, first, last = readings[0], readings[1], readings[-1]
    growth = (last["VmRSS"] - first["VmRSS"]) / first["VmRSS"]
    b.row(section, "server RSS idle", f"{idle['VmRSS'] / 1024:.1f} MiB")
    b.row(section, f"after {first['calls']} calls", f"{first['VmRSS'] / 1024:.1f} MiB")
    b.row(section, f"after {last['calls']} calls", f"{last['VmRSS'] / 1024:.1f} MiB")
    b.row(
        section,
        f"growth {first['calls']} -> {last['calls']} calls",
        f"{growth * 100:+.1f} %",
        "<= +20 %",
        growth <= 0.20,
    )
    return {"readings": readings, "growth": growth, "orphans": srv.orphans}


def _patch_cases() -> dict[str, tuple[dict[str, bytes], dict[str, bytes]]]:
    import random

    block = b'[[package]]\nname = "dep"\nversion = "1.0.0"\nsource = "registry+x"\n\n'
    blocks = [block] * (125_000 // len(block))
    lock = b"".join(blocks)
    for i in range(0, len(blocks), 5):
        blocks[i] = block.replace(b"1.0.0", b"1.0.1")
    rng = random.Random(1)
    hostile = [b"".join(rng.choice([b"a\n", b"b\n"]) for _ in range(1 << 19)) for _ in "ab"]
    binary = {f"blob{i}.bin": b"\0" + os.urandom(4 << 20) for i in range(8)}
    return {
        "lock file (125 KB, every 5th version)": ({"f": lock}, {"f": b"".join(blocks)}),
        "hostile lines (1 MiB, past budget)": ({"f": hostile[0]}, {"f": hostile[1]}),
        "new binary files (32 MiB)": ({}, binary),
    }


def _patch_once(
    before: dict[str, bytes], after: dict[str, bytes], tmp: Path
) -> tuple[float, int, int, float]:
    """CPU seconds of build_patch, its work and budget, and git diff's CPU seconds."""
    import hashlib
    import io

    from airlock.sandbox.gitdiff import FileState, build_patch
    from airlock.sandbox.linediff import budget

    blobs = {hashlib.sha256(d).hexdigest(): d for d in (*before.values(), *after.values())}

    def states(tree: dict[str, bytes]) -> dict[str, FileState]:
        return {p: FileState(hashlib.sha256(d).hexdigest(), 0o644) for p, d in tree.items()}

    with open(tmp / "out.patch", "wb") as out:
        t0 = time.process_time()
        made = build_patch(
            states(before), states(after), lambda s: io.BytesIO(blobs[s]), out, lambda _: None
        )
        spent = time.process_time() - t0
    texts = [e for e in made.entries if not e.binary]
    work = sum(e.work for e in texts)
    allowed = sum(budget(len(before.get(e.path, b"")), len(after.get(e.path, b""))) for e in texts)
    for side, tree in (("a", before), ("b", after)):
        (tmp / side).mkdir()
        for name, data in tree.items():
            (tmp / side / name).write_bytes(data)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp), "GIT_CONFIG_NOSYSTEM": "1"}
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        ["git", "diff", "--no-index", "--binary", "--full-index", "a", "b"],
        cwd=tmp,
        env=env,
        stdout=subprocess.DEVNULL,
        check=False,
    )
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    git_cpu = c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime
    return spent, work, allowed, git_cpu


async def section_patch(b: Bench) -> dict[str, Any]:
    section = "7 patch"
    results: dict[str, Any] = {}
    for name, (before, after) in _patch_cases().items():
        tmp = Path(tempfile.mkdtemp(prefix="patch-", dir=b.temp))
        spent, work, allowed, git_cpu = await anyio.to_thread.run_sync(
            _patch_once, before, after, tmp
        )
        mib = (sum(map(len, before.values())) + sum(map(len, after.values()))) / (1 << 20)
        results[name] = {"cpu_s": spent, "mib": mib, "work": work, "budget": allowed}
        results[name]["git_cpu_s"] = git_cpu
        b.row(section, f"{name}: CPU per MiB", f"{spent / mib:.3f} s (git {git_cpu / mib:.3f} s)")
        if allowed:
            b.row(section, f"{name}: diff work", f"{work} of {allowed}")
    return results


@dataclass
class _EgressRig:
    """The real proxy of this process, an HTTPS upstream process and two grants to reach it."""

    egress: Egress
    settings: EgressSettings
    grant: Grant  # with a secret injected (the usual capability)
    plain: Grant  # the same reach without a secret: nothing injected, nothing to scrub
    port: int
    ca_file: Path
    upstream_pid: int
    runs: int = 0

    async def client(
        self,
        path: str,
        count: int,
        warmup: int,
        *,
        keepalive: bool = False,
        secret: bool = True,
        proxy_first: bool = False,
    ) -> dict[str, list[float]]:
        """One run's client process: `count` GETs of `path` each way (direct, proxied)."""
        self.runs += 1
        async with self.egress.open(
            tenant="bench",
            session_id="ses_bench",
            run_id=f"run_bench{self.runs}",
            grants=[self.grant if secret else self.plain],
            deadline=time.time() + 600,
            settings=self.settings,
            secrets="inject",
        ) as run:
            config = {
                "port": self.port,
                "upstream_ca_file": str(self.ca_file),
                "run_ca_pem": run.plan.ca_pem,
                "token": run.plan.token.reveal(),
                "socket": str(run.plan.socket_dir / SOCKET_NAME),
                "path": path,
                "count": count,
                "warmup": warmup,
                "keepalive": keepalive,
                "proxy_first": proxy_first,
            }
            before = _cpu_now(self.upstream_pid)
            done = await anyio.run_process(
                [sys.executable, str(WORKER), "client", json.dumps(config)],
                check=False,
                stderr=None,
            )
            used = [b - a for a, b in zip(before, _cpu_now(self.upstream_pid), strict=True)]
            if done.returncode != 0:
                raise RuntimeError(f"egress client failed ({done.returncode})")
            denied = [r for r in run.records if r.decision != "allow"]
            if denied:
                raise RuntimeError(f"proxy refused requests: {denied[0]}")
            result: dict[str, list[float]] = json.loads(done.stdout)
            result["cpu_proxy_client_upstream"] = used
            return result

    async def while_flooded(self, n: int) -> tuple[dict[str, list[float]], int]:
        """Kept-alive GETs while another run (limit 50) floods its own proxy with denied
        CONNECTs from a third process; also how many records the flooding run kept."""
        flooding = self.egress.open(
            tenant="bench",
            session_id="ses_flood",
            run_id="run_flood",
            grants=[self.plain],
            deadline=time.time() + 600,
            settings=EgressSettings.model_validate(
                {"upstream_ca_file": str(self.ca_file), "limits": {"max_requests": 50}}
            ),
            secrets="inject",
        )
        async with flooding as flood_run:
            flood_config = {
                "socket": str(flood_run.plan.socket_dir / SOCKET_NAME),
                "token": flood_run.plan.token.reveal(),
            }
            async with await anyio.open_process(
                [sys.executable, str(WORKER), "flood", json.dumps(flood_config)], stderr=None
            ) as flooder:
                assert flooder.stdout is not None
                with anyio.fail_after(30):
                    await flooder.stdout.receive()  # 100 connections in: the flood is on
                during = await self.client("/small", n, warmup=10, keepalive=True)
                flooder.kill()
        return during, len(flood_run.records)

    async def big(
        self, size: int, repeats: int, *, secret: bool
    ) -> tuple[dict[str, list[float]], list[list[float]]]:
        """`repeats` runs of one `size`-byte transfer each way, the order flipped from one
        run to the next (ABBA), and each run's CPU seconds of one transfer: this process's
        is the proxy's alone (nothing else runs in it meanwhile); the client's and the
        upstream's cover both transfers, so half is one transfer's."""
        times: dict[str, list[float]] = {"direct": [], "proxy": []}
        cpu: list[list[float]] = []
        for i in range(repeats):
            one = await self.client(
                f"/big/{size}", 1, warmup=0, secret=secret, proxy_first=i % 2 == 1
            )
            for k in times:
                times[k].extend(one[k])
            proxy_cpu, client_cpu, upstream_cpu = one["cpu_proxy_client_upstream"]
            cpu.append([proxy_cpu, client_cpu / 2, upstream_cpu / 2])
        return times, cpu


def _bench_grant(grants: Grants, capability: Capability, name: str) -> Grant:
    return grants.grant(
        capability,
        resolve_scope(capability, {}),
        name=name,
        params={},
        tenant="bench",
        session_id="ses_bench",
        approved_by="policy",
        reason="benchmark",
        ttl_s=3600,
        now=time.time(),
        max_per_session=32,
        max_live_per_tenant=64,
    )


@asynccontextmanager
async def _egress_rig(b: Bench) -> AsyncIterator[_EgressRig]:
    import trustme  # a dev extra, like the rest of the test tooling

    tmp = Path(tempfile.mkdtemp(prefix="egress-", dir=b.temp))
    ca = trustme.CA()
    leaf = ca.issue_cert("localhost", "127.0.0.1")
    cert, key, ca_file = tmp / "cert.pem", tmp / "key.pem", tmp / "ca.pem"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(ca_file))
    data = tmp / "data"
    vault = Vault(vault_path(data), load_key(data, {}))
    vault.set("bench_token", "sk-bench-not-a-secret", ["localhost"])
    grants = Grants()
    settings = EgressSettings.model_validate({"upstream_ca_file": str(ca_file)})
    egress = Egress(
        root=tmp / "egress",
        grants=grants,
        tokens=RunTokens(),
        vault=vault,
    )
    async with await anyio.open_process(
        [sys.executable, str(WORKER), "upstream", str(cert), str(key)], stderr=None
    ) as upstream:
        assert upstream.stdout is not None and upstream.stdin is not None
        with anyio.fail_after(10):
            port = int((await upstream.stdout.receive()).decode().split()[0])
        reach: dict[str, Any] = {
            "hosts": ["localhost"],
            "ports": [port],
            "methods": ["GET"],
            "paths": ["/**"],
            "allow_private": ["127.0.0.0/8", "::1/128"],
        }
        inject = {"header": "Authorization", "format": "Bearer {secret}"}
        local = Capability.model_validate(reach | {"secret": "bench_token", "inject": inject})
        yield _EgressRig(
            egress=egress,
            settings=settings,
            grant=_bench_grant(grants, local, "bench-local"),
            plain=_bench_grant(grants, Capability.model_validate(reach), "bench-plain"),
            port=port,
            ca_file=ca_file,
            upstream_pid=upstream.pid,
        )
        await upstream.stdin.aclose()


async def section_egress(b: Bench) -> dict[str, Any]:
    n, size, repeats = b.counts.egress_small, b.counts.egress_big_bytes, b.counts.egress_big_repeats
    async with _egress_rig(b) as rig:
        progress(f"egress: {n} small GETs each way, new connection each")
        small = await rig.client("/small", n, warmup=10)
        progress(f"egress: {n} small GETs each way on one kept-alive connection")
        kept = await rig.client("/small", n, warmup=10, keepalive=True)
        progress(f"egress: {n} kept-alive GETs each way while another run floods its proxy")
        during, flood_records = await rig.while_flooded(n)
        progress(f"egress: {repeats} x {size / 1e6:.0f} MB each way")
        await rig.client(f"/big/{size}", 1, warmup=0)  # warm-up, left out
        big, cpu = await rig.big(size, repeats, secret=True)
        progress(f"egress: {repeats} x {size / 1e6:.0f} MB, no secret")
        bare, _ = await rig.big(size, repeats, secret=False)
    result = _egress_latency_rows(b, small, kept, during, flood_records)
    result |= _egress_throughput_rows(b, size, big, cpu, bare)
    return result | {"small_s": small, "kept_s": kept, "during_flood_s": during}


def _egress_latency_rows(
    b: Bench,
    small: dict[str, list[float]],
    kept: dict[str, list[float]],
    during: dict[str, list[float]],
    flood_records: int,
) -> dict[str, Any]:
    n = len(small["direct"])
    direct, proxy = summary(small["direct"]), summary(small["proxy"])
    added = proxy["p50"] - direct["p50"]
    paired = statistics.median(p - d for p, d in zip(small["proxy"], small["direct"], strict=True))
    kept_direct, kept_proxy = summary(kept["direct"]), summary(kept["proxy"])
    kept_added = kept_proxy["p50"] - kept_direct["p50"]
    during_direct, during_proxy = summary(during["direct"]), summary(during["proxy"])
    during_added = during_proxy["p50"] - during_direct["p50"]
    section = "4 egress"
    b.row(
        section,
        f"first GET p50 direct / proxied (n={n})",
        f"{ms(direct['p50'])} / {ms(proxy['p50'])}",
    )
    b.row(section, "added latency p50, first request", ms(added), "<= 5 ms", added <= 0.005)
    b.row(
        section,
        f"kept-alive GET p50 direct / proxied (n={n})",
        f"{ms(kept_direct['p50'])} / {ms(kept_proxy['p50'])}",
    )
    b.row(section, "added latency p50, kept-alive", ms(kept_added), "<= 2 ms", kept_added <= 0.002)
    b.row(
        section,
        "same, while another run floods (p50 / max)",
        f"{ms(during_added)} / {ms(during_proxy['max'])}",
    )
    b.row(section, "records of the flooding run (limit 50)", str(flood_records))
    return {
        "small_direct": direct,
        "small_proxy": proxy,
        "added_p50_s": added,
        "added_paired_median_s": paired,
        "kept_direct": kept_direct,
        "kept_proxy": kept_proxy,
        "kept_added_p50_s": kept_added,
        "during_flood_added_p50_s": during_added,
        "flood_records": flood_records,
    }


def _egress_throughput_rows(
    b: Bench,
    size: int,
    big: dict[str, list[float]],
    cpu: list[list[float]],
    bare: dict[str, list[float]],
) -> dict[str, Any]:
    mbps = {k: statistics.median(size / t / 1e6 for t in v) for k, v in big.items()}
    ratio = mbps["proxy"] / mbps["direct"]
    bare_mbps = {k: statistics.median(size / t / 1e6 for t in v) for k, v in bare.items()}
    bare_ratio = bare_mbps["proxy"] / bare_mbps["direct"]
    section = "4 egress"
    b.row(
        section,
        f"{size / 1e6:.0f} MB GET direct / proxied",
        f"{mbps['direct']:.0f} / {mbps['proxy']:.0f} MB/s",
    )
    b.row(section, "throughput ratio", f"{ratio * 100:.0f} %", ">= 80 %", ratio >= 0.8)
    cpu_median = [statistics.median(run[i] for run in cpu) for i in range(3)]
    b.row(
        section,
        f"CPU per {size / 1e6:.0f} MB: proxy / client / upstream",
        " / ".join(f"{seconds:.3f}" for seconds in cpu_median) + " s",
    )
    b.row(
        section,
        f"{size / 1e6:.0f} MB GET, no secret (no scrubbing)",
        f"{bare_mbps['direct']:.0f} / {bare_mbps['proxy']:.0f} MB/s",
    )
    b.row(
        section,
        "throughput ratio, no secret",
        f"{bare_ratio * 100:.0f} %",
        ">= 80 %",
        bare_ratio >= 0.8,
    )
    return {
        "big_bytes": size,
        "big_s": big,
        "big_mb_per_s": mbps,
        "big_cpu_s_proxy_client_upstream": cpu,
        "big_pair_ratios": [d / p for d, p in zip(big["direct"], big["proxy"], strict=True)],
        "throughput_ratio": ratio,
        "bare_s": bare,
        "bare_mb_per_s": bare_mbps,
        "bare_pair_ratios": [d / p for d, p in zip(bare["direct"], bare["proxy"], strict=True)],
        "bare_throughput_ratio": bare_ratio,
        "secret_injected": True,
    }


@contextmanager
def _postgres() -> Iterator[str]:
    """A throwaway PostgreSQL cluster (tests/postgres.py, as .ci/run starts one); its URL."""
    directory = Path(tempfile.mkdtemp(prefix="postgres-", dir="/tmp"))
    script = str(ROOT / "tests" / "postgres.py")
    done = subprocess.run(
        [sys.executable, script, "start", str(directory)], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"cannot start PostgreSQL: {done.stderr.strip()[-300:]}")
    try:
        yield done.stdout.strip()
    finally:
        subprocess.run([sys.executable, script, "stop", str(directory)], capture_output=True)
        shutil.rmtree(directory, ignore_errors=True)


async def section_fleet(b: Bench, runtime: str) -> dict[str, Any]:
    """Warm run_code through a replica on PostgreSQL against one on SQLite (the default),
    ABBA, each call after its engine is quiet; both servers up for the whole section."""
    n = b.counts.warm
    # Replicas of one fleet share the vault key (another key is refused at start).
    key = Path(tempfile.mkdtemp(prefix="fleet-key-", dir=b.temp)) / "vault.key"
    key.write_bytes(base64.b64encode(os.urandom(32)) + b"\n")
    key.chmod(0o600)
    shared = {"AIRLOCK_VAULT_KEY_FILE": str(key)}
    with _postgres() as url:
        async with (
            _upstream(b) as (port, ca_file, upstream_stdin),
            b.server(f"fleet-sqlite-{runtime}", runtime=runtime) as lite,
            b.server(
                f"fleet-pg-{runtime}",
                runtime=runtime,
                store=url,
                env=shared,
                extra_policy=_fleet_api(port, ca_file),
            ) as pg,
            b.server(
                f"fleet-pg2-{runtime}",
                runtime=runtime,
                store=url,
                env=shared,
                extra_policy=_fleet_api(port, ca_file),
            ) as pg2,
        ):
            for srv in (lite, pg):
                for _ in range(3):
                    await srv.run_print()
            progress(f"fleet {runtime}: {n} paced warm calls each, SQLite and PostgreSQL, ABBA")
            times: dict[str, list[float]] = {"sqlite": [], "postgresql": []}
            for i in range(n):
                order = (("sqlite", lite), ("postgresql", pg))
                for kind, srv in order if i % 2 == 0 else order[::-1]:
                    await srv.settle()
                    times[kind].append((await srv.run_print()).elapsed)
            load = b.counts.concurrent
            progress(f"fleet {runtime}: {load} calls at once on one replica, then on two")
            spread = {
                "one": await _at_once([pg] * load),
                "two": await _at_once([pg, pg2] * (load // 2)),
            }
            repeats = b.counts.egress_big_repeats * 2
            progress(f"fleet {runtime}: {repeats} revocations on one replica, cut on the other")
            cuts = [await _revocation_to_cut(pg, pg2, port) for _ in range(repeats)]
            await upstream_stdin.aclose()
    lite_s, pg_s = summary(times["sqlite"]), summary(times["postgresql"])
    ratio = pg_s["p50"] / lite_s["p50"]
    section = f"9 fleet {runtime}"
    b.row(
        section, f"warm p50 SQLite / PostgreSQL (n={n})", f"{ms(lite_s['p50'])} / {ms(pg_s['p50'])}"
    )
    b.ratio(section, "PostgreSQL / SQLite p50", ratio, 1.3)
    b.row(
        section,
        f"{b.counts.concurrent} calls at once: one replica / two (wall)",
        f"{ms(spread['one'])} / {ms(spread['two'])}",
    )
    cut = summary(cuts)
    b.row(
        section,
        f"revoke on one replica to refusal on another p50 / p99 (n={len(cuts)})",
        f"{ms(cut['p50'])} / {ms(cut['p99'])}",
        "p99 <= 1 s",
        cut["p99"] <= 1.0,
    )
    return {
        "runtime": runtime,
        "times_s": times,
        "sqlite": lite_s,
        "postgresql": pg_s,
        "ratio_p50": ratio,
        "concurrent_wall_s": spread,
        "revocation_to_cut_s": cuts,
    }


@asynccontextmanager
async def _upstream(b: Bench) -> AsyncIterator[tuple[int, Path, Any]]:
    """The egress section's HTTPS upstream process (a trustme certificate): its port, the
    CA file that verifies it, and its stdin (closing it stops the upstream)."""
    import trustme  # a dev extra, like the rest of the test tooling

    tmp = Path(tempfile.mkdtemp(prefix="fleet-upstream-", dir=b.temp))
    ca = trustme.CA()
    leaf = ca.issue_cert("localhost", "127.0.0.1")
    cert, key, ca_file = tmp / "cert.pem", tmp / "key.pem", tmp / "ca.pem"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(ca_file))
    async with await anyio.open_process(
        [sys.executable, str(WORKER), "upstream", str(cert), str(key)], stderr=None
    ) as upstream:
        assert upstream.stdout is not None and upstream.stdin is not None
        with anyio.fail_after(10):
            port = int((await upstream.stdout.receive()).decode().split()[0])
        yield port, ca_file, upstream.stdin


def _fleet_api(port: int, ca_file: Path) -> str:
    return (
        "[capabilities.fleet-api]\n"
        f'hosts = ["localhost"]\nports = [{port}]\nmethods = ["GET"]\npaths = ["/**"]\n'
        'approval = "auto"\nallow_private = ["127.0.0.0/8", "::1/128"]\n'
        f'[egress]\nupstream_ca_file = "{ca_file}"\n'
    )


_HAMMER = """
import json, time, urllib.request
deadline, ok = time.time() + 60, 0
while time.time() < deadline:
    try:
        urllib.request.urlopen("https://localhost:{port}/small", timeout=10).read()
        ok += 1
    except Exception as exc:
        print(json.dumps({{"cut_at": time.time(), "ok": ok, "error": str(exc)[:80]}}))
        break
"""


async def _revocation_to_cut(granting: Server, running: Server, port: int) -> float:
    """Seconds from revoke_capability on `granting` to the first refused request of a run
    of the same session on `running` (one clock: the host's, which the container reads)."""
    _, granted = await granting.call(
        "request_capability", {"capability": "fleet-api", "reason": "bench"}
    )
    data = granted.structured_content or {}
    if granted.is_error:
        raise RuntimeError(f"request_capability failed: {granted.content}")
    session, cap = data["session_id"], data["capability_id"]
    result: dict[str, Any] = {}

    async def run() -> None:
        _, done = await running.call(
            "run_code",
            {"code": _HAMMER.format(port=port), "session_id": session, "capabilities": [cap]},
        )
        result.update(done.structured_content or {})

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await anyio.sleep(3)  # the run is up and its requests go through
        revoked_at = time.time()
        _, revoked = await granting.call(
            "revoke_capability", {"capability_id": cap, "session_id": session}
        )
        if revoked.is_error:
            raise RuntimeError(f"revoke_capability failed: {revoked.content}")
    facts = json.loads(result["stdout"]["text"].strip().splitlines()[-1])
    if facts["ok"] == 0 or facts["cut_at"] < revoked_at:
        raise RuntimeError(f"the run was refused before the revocation: {facts}")
    await running.call("end_session", {"session_id": session})
    return float(facts["cut_at"]) - revoked_at


async def _at_once(servers: Sequence[Server]) -> float:
    """Wall time of one print(1) call on each of `servers` (repeats allowed), all at once."""
    for srv in set(servers):
        await srv.settle()
    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for srv in servers:
            tg.start_soon(srv.run_print)
    return time.perf_counter() - started


async def section_egress_run(b: Bench, runtime: str) -> dict[str, Any]:
    n = b.counts.warm
    async with b.server(f"egress-run-{runtime}", runtime=runtime, egress=True) as srv:
        raw = await interleaved(
            srv,
            b.image,
            n,
            warmups=3,
            what=f"egress-run {runtime}: {n} paced calls with egress, interleaved",
        )
    warm, base = summary(raw.airlock), summary(raw.baseline)
    parts = srv.breakdown(raw.calls)
    section = f"4 egress run {runtime}"
    b.row(
        section, f"run_code with egress p50 / p95 (n={n})", f"{ms(warm['p50'])} / {ms(warm['p95'])}"
    )
    b.row(section, f"docker run p50 / p95 (n={n})", f"{ms(base['p50'])} / {ms(base['p95'])}")
    b.ratio(section, "p50 ratio", warm["p50"] / base["p50"], EGRESS_RUN_TARGET)
    b.row(section, "p50 split: before / code / rest / reply", _split(parts))
    return {
        "pool_size": srv.pool,
        "runtime": runtime,
        "airlock_s": raw.airlock,
        "baseline_s": raw.baseline,
        "airlock": warm,
        "baseline": base,
        "breakdown": parts,
        "ratio_p50": warm["p50"] / base["p50"],
        "settle_timeouts": srv.settle_timeouts,
        "orphans": srv.orphans,
    }


# A browse from the warm browser pool, at most this times the baseline (issue 31).
BROWSE_POOL_TARGET = 0.5
BROWSE_PAGE = b"<title>bench</title><h1>A small page</h1><p>for the browse bench</p>"
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--user-data-dir=/tmp/profile",
    "--screenshot=/tmp/shot.png",
    "--window-size=1280,800",
)


def _page_server(tmp: Path, pages: Mapping[str, bytes] | None = None) -> tuple[Any, Path]:
    """A threaded HTTPS server on 127.0.0.1 (a trustme leaf) and its CA file: `pages` by
    path (404 for any other), or BROWSE_PAGE on every path."""
    import http.server
    import ssl
    import threading

    import trustme  # a dev extra, like the rest of the test tooling

    ca = trustme.CA()
    ca_file = tmp / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(context)

    class Page(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            body = BROWSE_PAGE if pages is None else pages.get(self.path)
            self.send_response(404 if body is None else 200)
            body = body or b"not found"
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, ca_file


async def docker_run_chromium(image: str) -> float:
    """The browse baseline: the browser image's own Chromium in a `docker run --rm`,
    loading a small page (a data: URL, no network) and writing a screenshot."""
    page = "data:text/html," + BROWSE_PAGE.decode()
    started = time.perf_counter()
    done = await anyio.run_process(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint",
         "/usr/lib/chromium/chromium", image, *CHROMIUM_FLAGS, page],
        check=False,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"baseline chromium failed: {done.returncode} {done.stderr[-500:]!r}")
    return elapsed


# Whether a box's page is open: Chromium runs a renderer for it (a pooled box opens its
# page, about:blank, before any job; until then the box is still starting). Chromium
# rewrites its helpers' command lines as one string, so this looks for a substring.
PAGE_OPEN = (
    "import os\n"
    "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
    "    try: command = open(f'/proc/{pid}/cmdline', 'rb').read()\n"
    "    except OSError: continue\n"
    "    if b'--type=renderer' in command: raise SystemExit(0)\n"
    "raise SystemExit(1)\n"
)
BROWSE_POOL = 1


def _page_open(engine: docker.DockerClient, container_id: str) -> bool:
    command = ["python3", "-I", "-S", "-c", PAGE_OPEN]
    try:
        done = engine.containers.get(container_id).exec_run(command, user="0:0")
    except docker.errors.APIError:
        # Taken and removed meanwhile (a 404 or a 409): not the one a call will find.
        return False
    return bool(done.exit_code == 0)


async def _warm_browser(b: Bench, srv: Server) -> float:
    """Wait (untimed) until the server has a pooled browser box whose page is open, as a
    call finds it once the pool has refilled since the last; seconds waited."""
    started = time.perf_counter()

    async def ready() -> bool:
        for box in await srv.containers(**{"airlock.browser": "1"}):
            if box["State"] != "running" or (box.get("Labels") or {}).get(LABEL_SESSION):
                continue
            done = await anyio.to_thread.run_sync(_page_open, b.engine, box["Id"])
            if done:
                return True
        return False

    with anyio.fail_after(SETTLE_TIMEOUT_S):
        await poll_async(ready, 0.2)
    return time.perf_counter() - started


async def _browse_calls(
    b: Bench, srv: Server, url: str, image: str, n: int, *, pooled: bool
) -> tuple[list[float], list[float], list[str]]:
    """n browse calls interleaved ABBA with n docker runs; (airlock, baseline, run ids)."""
    airlock: list[float] = []
    baseline: list[float] = []
    run_ids: list[str] = []
    await srv.call("browse", {"url": url})  # warm-up: the first call connects
    await docker_run_chromium(image)
    progress(f"browse {srv.name}: {n} calls interleaved with {n} docker runs")
    for i in range(n):
        # ABBA, so drift in the machine's load hits both sides alike.
        for kind in ("airlock", "base") if i % 2 == 0 else ("base", "airlock"):
            if kind == "base":
                baseline.append(await docker_run_chromium(image))
                continue
            if pooled:
                await _warm_browser(b, srv)
            elapsed, result = await srv.call("browse", {"url": url})
            data = result.structured_content or {}
            if result.is_error or data.get("title") != "bench":
                raise RuntimeError(f"browse failed: {result.content!r}")
            airlock.append(elapsed)
            run_ids.append(data["run_id"])
    return airlock, baseline, run_ids


def _browse_peaks(srv: Server) -> list[int]:
    db = sqlite3.connect(srv.dir / "data" / "airlock.db")
    try:
        found = db.execute("SELECT peak_memory_bytes FROM runs WHERE language = 'browse'")
        return [row[0] for row in found if row[0]]
    finally:
        db.close()


async def section_browse(b: Bench, runtime: str) -> dict[str, Any]:
    """Cold `browse` of a small local HTTPS page through the full stack: from the warm
    browser pool (`[browser] pool = 1`, each call taking a box whose page is open) and from
    a box made for the call (pool 0), each interleaved with the baseline; peak memory of
    one box from the run records."""
    from airlock.sandbox.browser_image import ensure_browser_image

    n = max(3, b.counts.cold)
    image = await anyio.to_thread.run_sync(
        ensure_browser_image, b.engine, lambda line: progress(f"browser image: {line}")
    )
    tmp = Path(tempfile.mkdtemp(prefix="browse-", dir=b.temp))
    page_server, ca_file = _page_server(tmp)
    port = page_server.server_address[1]
    url = f"https://localhost:{port}/"
    allow = (
        f'[egress]\nupstream_ca_file = "{ca_file}"\n'
        f'[[egress.allow]]\nname = "page"\nhosts = ["localhost"]\nports = [{port}]\n'
        'methods = ["GET"]\npaths = ["/**"]\nallow_private = ["127.0.0.0/8"]\n'
    )
    times: dict[str, tuple[list[float], list[float], list[str]]] = {}
    peaks: list[int] = []
    orphans = 0
    try:
        for mode, size in (("pooled", BROWSE_POOL), ("fresh", 0)):
            name = f"browse-{mode}-{runtime}"
            options = {"runtime": runtime, "extra_policy": allow, "browser_pool": size}
            async with b.server(name, **options) as srv:
                times[mode] = await _browse_calls(b, srv, url, image, n, pooled=size > 0)
                peaks += _browse_peaks(srv)
            orphans += srv.orphans
    finally:
        page_server.shutdown()
    section = f"8 browse {runtime}"
    result: dict[str, Any] = {"runtime": runtime, "peak_memory_bytes": peaks, "orphans": orphans}
    for mode, (airlock, baseline, _) in times.items():
        cold, base = summary(airlock), summary(baseline)
        b.row(section, f"browse {mode} p50 / p95 (n={n})", f"{ms(cold['p50'])} / {ms(cold['p95'])}")
        b.row(
            section,
            f"docker run chromium p50 / p95 (n={n}, beside {mode})",
            f"{ms(base['p50'])} / {ms(base['p95'])}",
        )
        limit = BROWSE_POOL_TARGET if mode == "pooled" else None
        b.ratio(section, f"{mode} p50 ratio", cold["p50"] / base["p50"], limit)
        result[mode] = {
            "airlock_s": airlock,
            "baseline_s": baseline,
            "airlock": cold,
            "baseline": base,
            "ratio_p50": cold["p50"] / base["p50"],
        }
    peak = max(peaks) if peaks else 0
    b.row(section, "peak memory of one box", f"{peak / 1e6:.0f} MB")
    return result


def per_runtime(
    measure: Callable[[Bench, str], Awaitable[dict[str, Any]]],
) -> Callable[[Bench], Awaitable[dict[str, Any]]]:
    """The section once per runtime, results keyed by runtime."""

    async def each(b: Bench) -> dict[str, Any]:
        results: dict[str, Any] = {}
        for runtime in b.runtimes:
            progress(f"  runtime {runtime}")
            results[runtime] = await measure(b, runtime)
        return results

    return each


SECTION_FUNCS: dict[str, Callable[[Bench], Awaitable[dict[str, Any]]]] = {
    "warm": per_runtime(section_warm),
    "cold": per_runtime(section_cold),
    "concurrency": per_runtime(section_concurrency),
    "egress-run": per_runtime(section_egress_run),
    "egress": section_egress,
    "teardown": section_teardown,
    "rss": section_rss,
    "patch": section_patch,
    "browse": per_runtime(section_browse),
    "fleet": per_runtime(section_fleet),
}


def _triple(s: dict[str, float]) -> str:
    return f"{ms(s['p50'])} / {ms(s['p95'])} / {ms(s['p99'])}"


def _split(parts: dict[str, dict[str, float]]) -> str:
    return " / ".join(f"{parts[k]['p50'] * 1000:.0f}" for k in BREAKDOWN) + " ms"


# ---- machine facts and the run --------------------------------------------------------------


def machine(engine: docker.DockerClient, image: str) -> dict[str, Any]:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip()

    version = engine.version()
    cli = subprocess.run(
        ["docker", "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True
    )
    with open("/proc/meminfo", encoding="ascii") as f:
        mem_kib = int(f.readline().split()[1])
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "mem_total_mib": mem_kib // 1024,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "docker_server": version.get("Version"),
        "docker_api": version.get("ApiVersion"),
        "docker_cli": cli.stdout.strip(),
        "mcp": importlib.metadata.version("mcp"),
        "airlock": importlib.metadata.version("airlock-mcp"),
        "image": image,
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    }


async def run_sections(args: argparse.Namespace) -> tuple[dict[str, Any], list[Row]]:
    counts = QUICK if args.quick else FULL
    engine = await anyio.to_thread.run_sync(connect)
    image = await anyio.to_thread.run_sync(
        ensure_image, engine, lambda line: progress(f"image: {line}")
    )
    bench = Bench(
        counts,
        engine,
        image,
        Path(tempfile.mkdtemp(prefix="airlock-bench-")),
        runtimes=tuple(args.runtimes),
    )
    report: dict[str, Any] = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "mode": "quick" if args.quick else "full",
        "counts": asdict(counts),
        "machine": await anyio.to_thread.run_sync(machine, engine, image),
        "loadavg_before": os.getloadavg(),
        "sections": {},
        "failed_sections": [],
    }
    started = time.perf_counter()
    for name in args.sections:
        progress(f"section {name} (load {os.getloadavg()[0]:.2f})")
        t0, load0 = time.perf_counter(), os.getloadavg()
        try:
            result = await SECTION_FUNCS[name](bench)
        except Exception as exc:
            progress(f"section {name} crashed: {exc!r}")
            report["failed_sections"].append(name)
            result = {"error": traceback.format_exc()}
            bench.row(name, "section crashed", f"{type(exc).__name__}: {exc}"[:80], "", False)
        result["elapsed_s"] = time.perf_counter() - t0
        result["loadavg_before"], result["loadavg_after"] = load0, os.getloadavg()
        report["sections"][name] = result
    report["elapsed_s"] = time.perf_counter() - started
    report["loadavg_after"] = os.getloadavg()
    report["table"] = [asdict(r) | {"result": r.verdict} for r in bench.rows]
    engine.close()
    if args.keep_temp:
        report["temp_dir"] = str(bench.temp)
        progress(f"kept {bench.temp}")
    else:
        await anyio.to_thread.run_sync(lambda: shutil.rmtree(bench.temp, ignore_errors=True))
    return report, bench.rows


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.run", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="JSON results file")
    parser.add_argument(
        "--keep-temp", action="store_true", help="keep the servers' data dirs and logs"
    )
    parser.add_argument(
        "--runtimes",
        default=",".join(RUNTIMES),
        help=f"comma-separated runtimes for {', '.join(PER_RUNTIME)} (default: "
        f"{','.join(RUNTIMES)})",
    )
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated subset of {','.join(SECTIONS)} (default: all, in that order)",
    )
    args = parser.parse_args(argv)
    chosen = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown or not chosen:
        parser.error(f"unknown sections {unknown}; choose from {', '.join(SECTIONS)}")
    args.sections = chosen
    args.runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    if not args.runtimes:
        parser.error("name at least one runtime")
    return args


def write_report(rows: Sequence[Row], report: dict[str, Any], out: Path, note: str = "") -> None:
    """The table and the machine's line on stdout, every number to `out` (JSON)."""
    load = report["loadavg_before"], report["loadavg_after"]
    m = report["machine"]
    sys.stdout.write(
        f"{render(rows)}\n\n{m['nproc']} CPUs, Docker {m['docker_server']}, load average "
        f"{load[0][0]:.2f} before / {load[1][0]:.2f} after, {report['elapsed_s']:.0f} s"
        f"{note}\n"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    progress(f"wrote {out}")


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    report, rows = anyio.run(run_sections, args)
    write_report(rows, report, Path(args.out), f" ({report['mode']} run)")
    sys.exit(1 if report["failed_sections"] else 0)


if __name__ == "__main__":
    main()
