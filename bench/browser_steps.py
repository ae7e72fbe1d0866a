"""One step on Airlock's kept browser against the same step in Playwright MCP, side by side
in one run (issue 31, Performance): the p50 of Airlock's step under gVisor should be at most
1.5x of Playwright MCP's.

Run from the repository root (needs Docker, gVisor registered, the browser image, which it
builds if missing, the `dev` extras, npx with the npm registry reachable, /usr/bin/chromium):

    .venv/bin/python -m bench.browser_steps [--steps N] [--runtimes runc,runsc] [--out FILE]

It prints a table on stdout, progress on stderr, and writes every raw number and machine
fact to `--out` (default bench/results/browser_steps.json). It exits 0 when every runtime
ran, whatever the target says; 1 when one crashed (its error is in the JSON).

Method
------
* Pages: two small pages on a local HTTPS server (a trustme leaf, bench/run.py's
  `_page_server`), /a with a link "to b" and /b with a link "to a". One step = click the
  link by its ref and read the new page's accessibility snapshot; the step is checked (the
  snapshot shows the other page's heading) and its next link's ref read from it.
* Airlock: `airlock serve` per runtime (bench/run.py's `Server`, the MCP SDK client over
  stdio), its policy naming `[sandbox] runtime`, trusting the page server's CA
  (`[egress] upstream_ca_file`) and allowing localhost:PORT (`allow_private` 127.0.0.0/8).
  `browse(url=/a, keep=true, screenshot=false)` opens the kept browser (untimed); a step is
  one call `browse(session_id, browser_id, actions=[click ref], screenshot=false)`, which
  returns the snapshot with `[ref=eN]`. Every step is a run of its own through the proxy.
* Playwright MCP: `npx -y @playwright/mcp@latest --headless --executable-path
  /usr/bin/chromium --ignore-https-errors --no-sandbox --isolated` over the same SDK stdio
  client, its cwd a temporary directory (it writes .playwright-mcp/ there). A step is
  `browser_click` {"target": ref, "element": "link"} then `browser_snapshot`: the click's
  own reply points to a snapshot file rather than carrying it, so the inline snapshot is a
  second call, as a model reading the page would make. No proxy, no box: the machine's
  Chromium on the host.
* Per runtime: a fresh Airlock server and a fresh Playwright MCP, both opened on /a, a few
  warm-up steps each (not timed), then N steps each in ABBA order (A,B then B,A), so drift
  in the shared machine's load hits both alike. Timed in this process around the calls.
* Memory: the kept box's peak (the run records' `peak_memory_bytes`, the container's cgroup
  peak, which the server reads after every step) and its memory now (the engine's stats of
  the kept container: cgroup usage, page cache included); beside it Playwright MCP's
  proportional set size (PSS, /proc/PID/smaps_rollup) summed over the processes whose cwd
  is its temporary directory (npx, node and Chromium's processes). From the box's peak: how
  many kept browsers fit in 24 GiB.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import time
import traceback
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

import anyio
import docker
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult

from airlock.sandbox import connect
from airlock.sandbox.browser_image import ensure_browser_image
from bench.run import (
    LABEL_PID,
    LABEL_SESSION,
    ROOT,
    Row,
    Server,
    _page_server,
    machine,
    ms,
    open_stdio,
    progress,
    summary,
    write_report,
)

DEFAULT_OUT = ROOT / "bench" / "results" / "browser_steps.json"
RUNTIMES = ("runsc", "runc")
TARGET = 1.5  # Airlock's p50 / Playwright MCP's, under gVisor
STEPS = 40
WARMUPS = 3
CALL_TIMEOUT_S = 120.0
GIB = 1024**3
PAGES = {
    "/a": b"<title>a</title><h1>Page A</h1><a href='/b'>to b</a>",
    "/b": b"<title>b</title><h1>Page B</h1><a href='/a'>to a</a>",
}
NEXT = {"A": "B", "B": "A"}
# Airlock writes `- link "to b" [ref=e3]`; Playwright MCP `- link "to b" [ref=e3] [cursor=...`.
LINK = re.compile(r'link "to [ab]"[^\n]*?\[ref=(\w+)\]')
HEADING = re.compile(r'heading "Page ([AB])"')
PLAYWRIGHT = (
    *("-y", "@playwright/mcp@latest", "--headless", "--executable-path", "/usr/bin/chromium"),
    *("--ignore-https-errors", "--no-sandbox", "--isolated"),
)


def text_of(result: CallToolResult) -> str:
    return "".join(getattr(part, "text", "") for part in result.content)


def page_of(snapshot: str, who: str) -> tuple[str, str]:
    """The page a snapshot shows (its heading's letter) and the ref of its link."""
    heading, link = HEADING.search(snapshot), LINK.search(snapshot)
    if heading is None or link is None:
        raise RuntimeError(f"{who}: no heading or link in the snapshot:\n{snapshot[:2000]}")
    return heading.group(1), link.group(1)


class StepFailed(RuntimeError):
    """A step's call answered with an error: counted, and the side opened again."""


class Side(Protocol):
    name: str

    async def open(self, url: str) -> str: ...

    async def step(self, ref: str) -> tuple[str, str]:
        """Click `ref`; the new snapshot and the step's run id (Airlock's; "" otherwise)."""
        ...


class Kept:
    """Airlock's side: one kept browser of one session on an `airlock serve`."""

    name = "airlock"

    def __init__(self, srv: Server) -> None:
        self.srv = srv
        self.session_id = ""
        self.browser_id = ""

    async def _browse(self, arguments: dict[str, Any]) -> dict[str, Any]:
        _, result = await self.srv.call("browse", arguments | {"screenshot": False})
        data: dict[str, Any] = result.structured_content or {}
        if result.is_error or data.get("status") != "ok" or data.get("error"):
            raise StepFailed(f"browse failed: {text_of(result)[:2000]}")
        return data

    async def open(self, url: str) -> str:
        # Opened again after a failed step: in the same session (a failed step's browser
        # is closed by the server, so the session's cap is not in the way).
        session = {"session_id": self.session_id} if self.session_id else {}
        data = await self._browse({"url": url, "keep": True} | session)
        self.session_id, self.browser_id = data["session_id"], data["browser_id"]
        return str(data["snapshot"])

    async def step(self, ref: str) -> tuple[str, str]:
        click = {"kind": "click", "ref": ref}
        ids = {"session_id": self.session_id, "browser_id": self.browser_id}
        data = await self._browse(ids | {"actions": [click]})
        return str(data["snapshot"]), str(data["run_id"])

    def split(self, run_ids: list[str]) -> dict[str, list[float]]:
        """Per step (these runs), from the run and egress
        records (one clock): the box's own time (the driver's `duration_ms`), the time from
        the page's last answered request to the run's end (the driver waiting for the page
        to settle, then reading it), and the proxy's 407s (refused tunnels) in the step."""
        db = sqlite3.connect(self.srv.dir / "data" / "airlock.db")
        try:
            out: dict[str, list[float]] = {"box_s": [], "after_last_request_s": [], "refused": []}
            for run_id in run_ids:
                finished, duration_ms = db.execute(
                    "SELECT finished_at, duration_ms FROM runs WHERE id = ?", (run_id,)
                ).fetchone()
                (last,) = db.execute(
                    "SELECT max(time) FROM egress_log WHERE run_id = ? AND method != 'CONNECT'",
                    (run_id,),
                ).fetchone()
                (refused,) = db.execute(
                    "SELECT count(*) FROM egress_log WHERE run_id = ? AND status = 407", (run_id,)
                ).fetchone()
                out["box_s"].append(duration_ms / 1000)
                if last is not None:
                    out["after_last_request_s"].append(finished - last)
                out["refused"].append(refused)
            return out
        finally:
            db.close()

    async def memory(self) -> dict[str, Any]:
        """The kept box's peak from the session's run records and its usage now."""
        db = sqlite3.connect(self.srv.dir / "data" / "airlock.db")
        try:
            peaks = [
                row[0]
                for row in db.execute(
                    "SELECT peak_memory_bytes FROM runs WHERE session_id = ?", (self.session_id,)
                )
                if row[0]
            ]
        finally:
            db.close()
        # By the session's label alone, each with its state and owner: a box that lost
        # this server's pid label would be missed by Server.containers (and shown here).
        api = self.srv.engine.api
        label = {"label": f"{LABEL_SESSION}={self.session_id}"}
        found = await anyio.to_thread.run_sync(lambda: api.containers(all=True, filters=label))
        boxes = [
            {"state": c["State"], "pid": (c.get("Labels") or {}).get(LABEL_PID)} for c in found
        ]
        running = [c["Id"] for c in found if c["State"] == "running"]
        usage = None
        if len(running) == 1:
            stats = await anyio.to_thread.run_sync(
                lambda: api.stats(running[0], stream=False, one_shot=True)
            )
            usage = (stats.get("memory_stats") or {}).get("usage")
        return {"peaks_bytes": peaks, "usage_bytes": usage, "boxes": boxes}


class Playwright:
    """Playwright MCP over the SDK's stdio client, in a temporary cwd of its own."""

    name = "playwright"

    def __init__(self, directory: Path, client: Client) -> None:
        self.dir, self._client = directory, client

    async def _call(self, name: str, arguments: dict[str, Any]) -> str:
        with anyio.fail_after(CALL_TIMEOUT_S):
            result = await self._client.call_tool(name, arguments)
        if result.is_error:
            raise RuntimeError(f"playwright {name} failed: {text_of(result)[:2000]}")
        return text_of(result)

    async def open(self, url: str) -> str:
        await self._call("browser_navigate", {"url": url})
        return await self._call("browser_snapshot", {})

    async def step(self, ref: str) -> tuple[str, str]:
        await self._call("browser_click", {"target": ref, "element": "link"})
        return await self._call("browser_snapshot", {}), ""

    def pss_bytes(self) -> tuple[int, int]:
        """PSS summed over the processes working in its directory, and how many there are."""
        total = count = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{entry}/cwd") != str(self.dir):
                    continue
                rollup = Path(f"/proc/{entry}/smaps_rollup").read_text()
            except OSError:
                continue
            found = re.search(r"^Pss:\s+(\d+) kB", rollup, re.MULTILINE)
            if found:
                total += int(found.group(1)) * 1024
                count += 1
        return total, count


@asynccontextmanager
async def playwright_mcp(temp: Path) -> AsyncIterator[Playwright]:
    directory = Path(tempfile.mkdtemp(prefix="playwright-", dir=temp))
    params = StdioServerParameters(command="npx", args=list(PLAYWRIGHT), cwd=str(directory))
    async with AsyncExitStack() as stack:
        yield Playwright(directory, await open_stdio(stack, params, directory / "stderr.log"))


class Walk:
    """One side's place on the two pages: where it is and which ref leads on. A step that
    fails (an error, or the old page read back) is counted, not timed, and the walk goes on
    (from a freshly opened page after an error), so one defect does not hide the rest."""

    def __init__(self, side: Side, url: str) -> None:
        self.side, self.url = side, url
        self.page = self.ref = ""
        self.times: list[float] = []
        self.run_ids: list[str] = []
        self.failures: list[str] = []

    async def open(self) -> Walk:
        self.page, self.ref = page_of(await self.side.open(self.url), self.side.name)
        return self

    async def step(self, timed: bool = True) -> None:
        started = time.perf_counter()
        try:
            snapshot, run_id = await self.side.step(self.ref)
        except StepFailed as exc:
            self.failures.append(str(exc)[:1000])
            progress(f"{self.side.name}: step failed, opening again: {str(exc)[:300]}")
            await self.open()
            return
        elapsed = time.perf_counter() - started
        page, ref = page_of(snapshot, self.side.name)
        wanted, self.page, self.ref = NEXT[self.page], page, ref
        if page != wanted:
            self.failures.append(f"clicked the link to page {wanted}, read page {page}")
            progress(f"{self.side.name}: {self.failures[-1]}")
        elif timed:
            self.times.append(elapsed)
            self.run_ids.append(run_id)


async def interleave(airlock: Walk, playwright: Walk, steps: int) -> None:
    for _ in range(WARMUPS):
        await airlock.step(timed=False)
        await playwright.step(timed=False)
    for i in range(steps):
        # ABBA, so drift in the machine's load hits both sides alike.
        for walk in (airlock, playwright) if i % 2 == 0 else (playwright, airlock):
            await walk.step()
        if (i + 1) % 10 == 0:
            progress(f"  {i + 1}/{steps}")


def _policy(port: int, ca_file: Path) -> str:
    return (
        f'[egress]\nupstream_ca_file = "{ca_file}"\n'
        f'[[egress.allow]]\nname = "pages"\nhosts = ["localhost"]\nports = [{port}]\n'
        'methods = ["GET"]\npaths = ["/**"]\nallow_private = ["127.0.0.0/8"]\n'
    )


async def measure(
    engine: docker.DockerClient, temp: Path, runtime: str, steps: int, rows: list[Row]
) -> dict[str, Any]:
    page_server, ca_file = _page_server(Path(tempfile.mkdtemp(prefix="pages-", dir=temp)), PAGES)
    port = page_server.server_address[1]
    url = f"https://localhost:{port}/a"
    extra = _policy(port, ca_file)
    try:
        async with (
            Server(f"steps-{runtime}", engine, temp, runtime=runtime, extra_policy=extra) as srv,
            playwright_mcp(temp) as pw,
        ):
            kept = Kept(srv)
            progress(f"{runtime}: opening both browsers on {url}")
            airlock, playwright = await Walk(kept, url).open(), await Walk(pw, url).open()
            progress(f"{runtime}: {steps} steps each, ABBA")
            await interleave(airlock, playwright, steps)
            memory = await kept.memory()
            split = kept.split(airlock.run_ids)
            memory["playwright_pss_bytes"], memory["playwright_processes"] = pw.pss_bytes()
    finally:
        page_server.shutdown()
    result = _report(runtime, airlock, playwright, memory, rows)
    return result | {"airlock_split": split, "orphans": srv.orphans} | _split_rows(split, rows)


def _p50_p95(s: dict[str, float]) -> str:
    return f"{ms(s['p50'])} / {ms(s['p95'])}"


def _report(
    runtime: str, airlock: Walk, playwright: Walk, memory: dict[str, Any], rows: list[Row]
) -> dict[str, Any]:
    ours, theirs = summary(airlock.times), summary(playwright.times)
    ratio = ours["p50"] / theirs["p50"]
    section = f"kept browser step {runtime}"
    rows.append(Row(section, f"airlock p50 / p95 (n={len(airlock.times)})", _p50_p95(ours)))
    rows.append(
        Row(section, f"playwright mcp p50 / p95 (n={len(playwright.times)})", _p50_p95(theirs))
    )
    judged = runtime == "runsc"
    rows.append(
        Row(
            section,
            "p50 ratio",
            f"{ratio:.2f}x",
            f"<= {TARGET}x" if judged else "",
            ratio <= TARGET if judged else None,
        )
    )
    rows.append(Row(section, "p95 ratio", f"{ours['p95'] / theirs['p95']:.2f}x"))
    for walk in (airlock, playwright):
        failed = len(walk.failures)
        rows.append(Row(section, f"{walk.side.name} failed steps", str(failed), "0", failed == 0))
    peak = max(memory["peaks_bytes"], default=0)
    usage = memory["usage_bytes"]
    rows.append(
        Row(
            section,
            "kept box memory peak / now",
            f"{peak / 1e6:.0f} MB / " + (f"{usage / 1e6:.0f} MB" if usage else "n/a"),
        )
    )
    if peak:
        rows.append(Row(section, "kept browsers in 24 GiB (by peak)", f"{24 * GIB // peak}"))
    rows.append(
        Row(section, "playwright mcp PSS", f"{memory['playwright_pss_bytes'] / 1e6:.0f} MB")
    )
    return {
        "runtime": runtime,
        "airlock_s": airlock.times,
        "playwright_s": playwright.times,
        "airlock_failures": airlock.failures,
        "playwright_failures": playwright.failures,
        "airlock": ours,
        "playwright": theirs,
        "ratio_p50": ratio,
        "ratio_p95": ours["p95"] / theirs["p95"],
        "memory": memory,
        "kept_in_24_gib": 24 * GIB // peak if peak else None,
    }


def _split_rows(split: dict[str, list[float]], rows: list[Row]) -> dict[str, Any]:
    """Where Airlock's step goes: the box, and in it the wait after the page's last request."""
    box, after = summary(split["box_s"]), summary(split["after_last_request_s"])
    section = rows[-1].section
    rows.append(Row(section, "airlock in the box p50 (driver)", ms(box["p50"])))
    rows.append(Row(section, "airlock after the last request p50", ms(after["p50"])))
    refused = split["refused"]
    rows.append(Row(section, "proxy 407s per step (mean)", f"{sum(refused) / len(refused):.1f}"))
    return {"airlock_box": box, "airlock_after_last_request": after}


async def run(args: argparse.Namespace) -> tuple[dict[str, Any], list[Row]]:
    engine = await anyio.to_thread.run_sync(connect)
    image = await anyio.to_thread.run_sync(
        ensure_browser_image, engine, lambda line: progress(f"browser image: {line}")
    )
    temp = Path(tempfile.mkdtemp(prefix="airlock-steps-"))
    rows: list[Row] = []
    report: dict[str, Any] = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "steps": args.steps,
        "warmups": WARMUPS,
        "machine": await anyio.to_thread.run_sync(machine, engine, image),
        "loadavg_before": os.getloadavg(),
        "runtimes": {},
        "failed_runtimes": [],
    }
    started = time.perf_counter()
    for runtime in args.runtimes:
        load0 = os.getloadavg()
        try:
            result = await measure(engine, temp, runtime, args.steps, rows)
        except Exception as exc:
            progress(f"{runtime} crashed: {exc!r}")
            report["failed_runtimes"].append(runtime)
            result = {"error": traceback.format_exc()}
            rows.append(Row(f"kept browser step {runtime}", "crashed", f"{exc}"[:80], "", False))
        result["loadavg_before"], result["loadavg_after"] = load0, os.getloadavg()
        report["runtimes"][runtime] = result
    report["elapsed_s"] = time.perf_counter() - started
    report["loadavg_after"] = os.getloadavg()
    report["table"] = [asdict(r) | {"result": r.verdict} for r in rows]
    engine.close()
    if args.keep_temp:
        report["temp_dir"] = str(temp)
        progress(f"kept {temp}")
    else:
        await anyio.to_thread.run_sync(lambda: shutil.rmtree(temp, ignore_errors=True))
    return report, rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.browser_steps", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=STEPS, help=f"timed steps a side ({STEPS})")
    parser.add_argument("--runtimes", default=",".join(RUNTIMES), help="comma-separated")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="JSON results file")
    parser.add_argument("--keep-temp", action="store_true", help="keep the servers' dirs and logs")
    args = parser.parse_args(argv)
    args.runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    if args.steps < 1 or not args.runtimes:
        parser.error("give --steps of at least 1 and at least one runtime")
    report, rows = anyio.run(run, args)
    write_report(rows, report, Path(args.out))
    sys.exit(1 if report["failed_runtimes"] else 0)


if __name__ == "__main__":
    main()
