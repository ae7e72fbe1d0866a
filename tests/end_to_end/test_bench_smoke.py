"""A smoke run of the benchmarks: `bench/run.py --quick` and `bench.suite --repeat 1` run end
to end and write their reports.

Only that it runs and what the report holds are checked here. The timing targets are the
benchmark's business (see docs/design.md); a test never asserts on them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT


def bench(module: str, *args: str, out: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """`python -m MODULE ARGS --out OUT` from the repository's root, checked to exit 0."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done


@pytest.mark.docker
def test_quick_bench_of_warm_calls_and_teardown_writes_a_complete_report(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = bench("bench.run", "--quick", "--sections", "warm,teardown", out=out, timeout=240)
    assert "section" in done.stdout and "5 teardown" in done.stdout
    assert "1 warm runc" in done.stdout and "1 warm runsc" in done.stdout

    report = json.loads(out.read_text(encoding="utf-8"))
    assert {"machine", "counts", "sections", "table", "loadavg_before", "loadavg_after"} <= set(
        report
    )
    assert report["mode"] == "quick" and report["failed_sections"] == []
    assert {"nproc", "docker_server", "image"} <= set(report["machine"])
    assert set(report["sections"]) == {"warm", "teardown"}

    counts = report["counts"]
    assert {"runc", "runsc"} <= set(report["sections"]["warm"])
    warm = report["sections"]["warm"]["runc"]
    assert {"airlock", "baseline", "unpaced", "breakdown", "ratio_p50", "ratio_p95"} <= set(warm)
    assert len(warm["airlock_s"]) == len(warm["baseline_s"]) == counts["warm"]
    assert len(warm["unpaced_s"]) == counts["unpaced"]
    assert warm["orphans"] == 0

    teardown = report["sections"]["teardown"]
    assert {"end_session_returned_s", "all_gone_s"} <= set(teardown)
    assert teardown["containers_removed"] == counts["teardown"]
    assert teardown["orphans"] == 0

    judged = {row["metric"] for row in report["table"] if row["ok"] is not None}
    assert {"p50 ratio", "p95 ratio", f"until none of {counts['teardown']} is left"} <= judged


@pytest.mark.docker
def test_the_suite_bench_runs_each_workload_on_the_host_and_both_runtimes(tmp_path: Path) -> None:
    out = tmp_path / "suite.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.suite", "--repeat", "1", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "airlock runsc: wall / CPU vs host" in done.stdout, done.stdout
    runs = json.loads(out.read_text(encoding="utf-8"))["runs"]
    assert set(runs) == {"syscall loop", "pytest suite"}
    for by_target in runs.values():
        assert set(by_target) == {"host", "runc", "runsc"}
        assert all(len(measured) == 1 for measured in by_target.values())
        assert all(run["cpu_s"] > 0 for run in by_target["runsc"])


@pytest.mark.docker
def test_kept_browser_steps_bench_runs_both_sides_and_writes_its_report(tmp_path: Path) -> None:
    """bench/browser_steps.py with two steps a side under runc: real Chromium in the browser
    image against Playwright MCP (npx, the machine's Chromium), both clicking the same link."""
    out = tmp_path / "steps.json"
    done = bench("bench.browser_steps", "--steps", "2", "--runtimes", "runc", out=out, timeout=300)
    assert "kept browser step runc" in done.stdout and "p50 ratio" in done.stdout

    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["failed_runtimes"] == [] and set(report["runtimes"]) == {"runc"}
    runc = report["runtimes"]["runc"]
    # A failed step is counted (and shown as a failed row), not timed.
    assert len(runc["airlock_s"]) + len(runc["airlock_failures"]) == 2
    assert len(runc["playwright_s"]) + len(runc["playwright_failures"]) == 2
    assert runc["ratio_p50"] > 0 and runc["orphans"] == 0
    split = runc["airlock_split"]
    assert len(split["box_s"]) == len(split["refused"]) == len(runc["airlock_s"])
    assert "airlock after the last request p50" in done.stdout
    memory = runc["memory"]
    assert memory["peaks_bytes"] and memory["usage_bytes"] > 0
    assert [box["state"] for box in memory["boxes"]] == ["running"]
    assert memory["playwright_processes"] > 1 and memory["playwright_pss_bytes"] > 0
