"""What gVisor costs a real workload: a syscall-heavy loop and a small pytest suite, each
run on the host, in Airlock under runc and in Airlock under runsc, side by side in one run.

    .venv/bin/python -m bench.suite [--repeat N] [--runtimes runc,runsc] [--out FILE]

Run from the repository root; needs Docker, gVisor registered and the sandbox image (built
if missing). Takes a few minutes.

Method: one `airlock serve` per runtime (bench.run's `Server`: the MCP SDK client over
stdio, the shipped default policy but for `[sandbox] runtime`), both up for the whole run.
Each workload is run `--repeat` times on every target, the order of the targets rotated
each round so drift in load hits all alike, every server's engine quiet (pool full, no
call's container left) before each timed run. Per run: the wall time of the workload's
process (in the box, the runner's `duration_ms`; on the host, around the subprocess), its
CPU seconds (the run's usage; on the host, the child's rusage) and, for the boxes, the
whole `run_code` call as the client saw it. Reported: medians, and each box's wall and
CPU as a multiple of the host's.

* syscall loop: 100,000 rounds of `os.stat("/")` and `os.getpid()` in Python, about
  200,000 system calls and little else: gVisor's cost per system call, which its default
  (ptrace) platform pays in full.
* pytest suite: 60 tests run by the real pytest (`python3 -m pytest -q`) over files the
  bench writes (`SUITE`, below): a unit suite's usual mix of parametrized pure-Python
  checks, small files in tmp_path, an SQLite database, and a few subprocesses. The box
  gets the files in an untimed call of the same session first. The host runs the same
  files with this interpreter and its pytest (the box's Python is Debian's; the versions
  are in the JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from airlock.sandbox import connect
from airlock.sandbox.image import ensure_image
from bench.run import ROOT, Row, Server, machine, progress, write_report

DEFAULT_OUT = ROOT / "bench" / "results" / "suite.json"
SHM = "/dev/shm"
CALL_TIMEOUT_S = 300  # the default policy's max_timeout_s
SYSCALL_LOOP = """\
import os
for _ in range(100_000):
    os.stat("/")
    os.getpid()
print("done")
"""
SUITE = {
    "suite/test_text.py": """\
import json, re
import pytest

WORDS = re.compile(r"[a-z]+")

@pytest.mark.parametrize("n", range(20))
def test_json_round_trip(n):
    data = {"n": n, "items": [{"k": str(i), "v": i * n} for i in range(200)]}
    assert json.loads(json.dumps(data)) == data

@pytest.mark.parametrize("n", range(10))
def test_words(n):
    text = " ".join(f"word{i} and more text" for i in range(500 * (n + 1)))
    assert len(WORDS.findall(text)) == 500 * (n + 1) * 4
""",
    "suite/test_files.py": """\
import os, shutil
import pytest

@pytest.mark.parametrize("n", range(15))
def test_write_read_and_copy(tmp_path, n):
    for i in range(40):
        (tmp_path / f"f{i}.txt").write_text(f"{n} {i}\\n" * 50)
    shutil.copytree(tmp_path, tmp_path.parent / f"copy{n}")
    names = sorted(os.listdir(tmp_path.parent / f"copy{n}"))
    assert len(names) == 40
    assert all((tmp_path / name).read_text().startswith(f"{n} ") for name in names)
""",
    "suite/test_db.py": """\
import sqlite3
import pytest

@pytest.mark.parametrize("n", range(10))
def test_sqlite(tmp_path, n):
    db = sqlite3.connect(tmp_path / "t.db")
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
    for i in range(200):
        with db:
            db.execute("INSERT INTO t VALUES (?, ?)", (i, str(i * n)))
    assert db.execute("SELECT count(*) FROM t").fetchone() == (200,)
    db.close()
""",
    "suite/test_procs.py": """\
import subprocess, sys
import pytest

@pytest.mark.parametrize("n", range(5))
def test_child(n):
    done = subprocess.run([sys.executable, "-c", f"print({n} * 2)"], capture_output=True)
    assert done.stdout == f"{n * 2}\\n".encode()
""",
}
# No bytecode or cache files (the workspace must not grow from run to run), and no plugin
# but pytest's own: the host's venv has others installed, the box none.
QUIET = {"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
PYTEST_ARGS = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "suite"]
PYTEST = " ".join([*(f"{k}={v}" for k, v in QUIET.items()), "python3", *PYTEST_ARGS])
WRITE_SUITE = f"""\
import json, pathlib
for name, text in json.loads({json.dumps(json.dumps(SUITE))}).items():
    path = pathlib.Path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
"""
WORKLOADS = ("syscall loop", "pytest suite")
EXPECT = {"syscall loop": "done", "pytest suite": "60 passed"}
"""What each workload's stdout holds when it ran whole."""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _host_run(argv: list[str], cwd: Path, expect: str) -> dict[str, float]:
    """One run on the host: its wall time and CPU seconds (rusage counts children that
    ended: the servers live on, so only this one ends meanwhile)."""
    before, started = _children_cpu(), time.perf_counter()
    env = os.environ | QUIET | {"TMPDIR": str(cwd / "tmp")}
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0 or expect not in done.stdout:
        raise RuntimeError(f"host run {argv} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return {"wall_s": wall, "cpu_s": _children_cpu() - before}


async def _box_run(server: Server, arguments: dict[str, Any], expect: str) -> dict[str, float]:
    await server.settle()
    arguments = {"timeout_s": CALL_TIMEOUT_S, **arguments}
    started = time.perf_counter()
    with anyio.fail_after(CALL_TIMEOUT_S + 60):
        result = await server.client.call_tool("run_code", arguments)
    call = time.perf_counter() - started
    data = result.structured_content or {}
    if result.is_error or data.get("status") != "ok" or expect not in data["stdout"]["text"]:
        raise RuntimeError(f"{server.name}: run_code failed: {result.content!r}")
    cpu = (data.get("usage") or {}).get("cpu_seconds")
    return {"wall_s": data["duration_ms"] / 1000, "cpu_s": cpu or 0.0, "call_s": call}


async def _session_with_suite(server: Server) -> str:
    result = await server.client.call_tool("run_code", {"code": WRITE_SUITE})
    data = result.structured_content or {}
    if result.is_error or data.get("status") != "ok":
        raise RuntimeError(f"{server.name}: writing the suite failed: {result.content!r}")
    return str(data["session_id"])


async def measure(
    repeat: int, runtimes: Sequence[str], temp: Path, stack: ExitStack
) -> dict[str, Any]:
    engine = await anyio.to_thread.run_sync(connect)
    image = await anyio.to_thread.run_sync(ensure_image, engine, lambda s: progress(s))
    # The box's /workspace and /tmp are tmpfs; on the host's disk the suite's SQLite commits
    # would wait on fsync and measure the disk, not the runtime.
    host_dir = Path(tempfile.mkdtemp(prefix="airlock-bench-suite-", dir=SHM))
    stack.callback(shutil.rmtree, host_dir, ignore_errors=True)
    (host_dir / "tmp").mkdir()
    for name, text in SUITE.items():
        (host_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (host_dir / name).write_text(text)
    (host_dir / "loop.py").write_text(SYSCALL_LOOP)
    host = {
        "syscall loop": [sys.executable, "loop.py"],
        "pytest suite": [sys.executable, *PYTEST_ARGS],
    }
    runs: dict[str, dict[str, list[dict[str, float]]]] = {w: {} for w in WORKLOADS}
    async with AsyncExitStack() as boxes:
        servers = [
            await boxes.enter_async_context(Server(f"suite-{rt}", engine, temp, runtime=rt))
            for rt in runtimes
        ]
        sessions = {s.name: await _session_with_suite(s) for s in servers}
        targets = ["host", *runtimes]
        for round_ in range(repeat):
            shift = round_ % len(targets)
            for target in targets[shift:] + targets[:shift]:
                for workload in WORKLOADS:
                    progress(f"round {round_ + 1}/{repeat}: {workload} on {target}")
                    if target == "host":
                        argv = host[workload]
                        one = await anyio.to_thread.run_sync(
                            _host_run, argv, host_dir, EXPECT[workload]
                        )
                    else:
                        server = servers[runtimes.index(target)]
                        arguments = (
                            {"code": SYSCALL_LOOP}
                            if workload == "syscall loop"
                            else {"code": PYTEST, "language": "bash"}
                        )
                        arguments["session_id"] = sessions[server.name]
                        one = await _box_run(server, arguments, EXPECT[workload])
                    runs[workload].setdefault(target, []).append(one)
    report = {"runs": runs, "machine": await anyio.to_thread.run_sync(machine, engine, image)}
    engine.close()
    return report


def rows(runs: dict[str, dict[str, list[dict[str, float]]]]) -> list[Row]:
    table = []
    for workload, by_target in runs.items():
        host = {k: statistics.median(r[k] for r in by_target["host"]) for k in ("wall_s", "cpu_s")}
        for target, measured in by_target.items():
            median = {k: statistics.median(r[k] for r in measured) for k in measured[0]}
            where = "host" if target == "host" else f"airlock {target}"
            value = f"{median['wall_s']:.2f} s / {median['cpu_s']:.2f} s"
            table.append(Row(workload, f"{where}: wall / CPU (n={len(measured)})", value))
            if target == "host":
                continue
            ratio = f"{median['wall_s'] / host['wall_s']:.1f}x / "
            ratio += f"{median['cpu_s'] / host['cpu_s']:.1f}x" if host["cpu_s"] else "-"
            table.append(Row(workload, f"airlock {target}: wall / CPU vs host", ratio))
            table.append(
                Row(workload, f"airlock {target}: whole call", f"{median['call_s']:.2f} s")
            )
    return table


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.suite", description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per workload and target")
    parser.add_argument("--runtimes", default="runc,runsc", help="comma-separated runtimes")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="JSON results file")
    args = parser.parse_args(argv)
    runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    load_before, started = os.getloadavg(), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="airlock-bench-suite-") as temp, ExitStack() as stack:
        report = anyio.run(measure, args.repeat, runtimes, Path(temp), stack)
    report |= {"loadavg_before": load_before, "loadavg_after": os.getloadavg()}
    report["machine"]["host_pytest"] = subprocess.run(
        [sys.executable, "-m", "pytest", "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    report["elapsed_s"] = time.perf_counter() - started
    write_report(rows(report["runs"]), report, Path(args.out), "")


if __name__ == "__main__":
    main()
