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


@pytest.mark.docker
def test_quick_bench_of_warm_calls_and_teardown_writes_a_complete_report(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "run.py"),
            "--quick",
            "--sections",
            "warm,teardown",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-4000:]
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
