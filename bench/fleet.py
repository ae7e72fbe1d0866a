"""Fleet notices: how long a notice takes from one server to another through PostgreSQL.

    .venv/bin/python -m bench.fleet [--url postgresql://...] [-n 300]

Without `--url` it starts a throwaway cluster with tests/postgres.py (Debian's PostgreSQL
15, as its own user) and stops it at the end. Two `PostgresNotices` listen on one database,
as two replicas do; the first publishes `-n` revocation notices one at a time, each sent
when the previous one arrived at the second; each latency is from just before `publish` to
the second's subscriber running, on one clock (one process). Then the same with the
second's listener backend terminated mid-run (its reconnect and re-read included: what a
missed notice costs until the re-read finds it). Prints p50/p95/p99/max in milliseconds.

A revocation's cut on another replica comes one watcher tick later at most
(`egress.proxy.WATCH_INTERVAL`, 100 ms): the proxy re-checks open connections on that
period, so revocation-to-cut is below notice latency + 100 ms.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from airlock.store import AnyNotice, GrantRevoked
from airlock.store.fleet.pg_notices import PostgresNotices

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
# tests/postgres.py: standard library only, the same cluster code .ci/run uses.
import postgres


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def line(what: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (
        f"{what}: n={len(ms)} p50={statistics.median(ms):.2f} ms p95={pct(ms, 0.95):.2f} ms "
        f"p99={pct(ms, 0.99):.2f} ms max={max(ms):.2f} ms"
    )


async def measure(url: str, n: int) -> list[str]:
    a, b = PostgresNotices(url, "bench_a"), PostgresNotices(url, "bench_b")
    arrived = anyio.Event()

    async def heard(notice: AnyNotice) -> None:
        arrived.set()

    b.subscribe(heard, "grant_revoked")
    out = []
    async with anyio.create_task_group() as tg:
        await tg.start(a.serve)
        await tg.start(b.serve)
        latencies = []
        for i in range(n):
            arrived = anyio.Event()
            started = time.perf_counter()
            await a.publish(GrantRevoked(tenant="bench", grant_ids=(f"g{i}",)))
            with anyio.fail_after(10):
                await arrived.wait()
            latencies.append(time.perf_counter() - started)
        out.append(line("notice, replica to replica", latencies))

        # A notice sent while the listener is down is found by the re-read on reconnect.
        reread = anyio.Event()

        async def resync() -> None:
            reread.set()

        b.on_resync(resync)
        outages = []
        for _ in range(max(5, n // 30)):
            reread = anyio.Event()
            started = time.perf_counter()
            await anyio.to_thread.run_sync(
                postgres.psql, url, f"SELECT pg_terminate_backend({b.listener_pid})"
            )
            with anyio.fail_after(30):
                await reread.wait()
            outages.append(time.perf_counter() - started)
        out.append(line("listener killed to re-read done", outages))
        tg.cancel_scope.cancel()
    return out


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--url", help="a PostgreSQL database (default: a throwaway cluster)")
    parser.add_argument("-n", type=int, default=300)
    args = parser.parse_args(argv)
    directory = None
    url = args.url
    if url is None:
        directory = Path(tempfile.mkdtemp(prefix="airlock-bench-pg-"))
        url = postgres.fresh_database(postgres.start(directory))
    try:
        for text in await measure(url, args.n):
            sys.stdout.write(text + "\n")
    finally:
        if directory is not None:
            postgres.stop(directory)
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])
