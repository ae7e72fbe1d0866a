"""`airlock audit`: what ran, what it cost, what it printed.

Sandbox output and every stored value go through `terminal` before they reach the
operator's terminal: they may hold escape sequences written to fool exactly that
terminal, or newlines that forge a line of the report.
"""

from __future__ import annotations

import json

from airlock.errors import NotFound
from airlock.store import BlobStore, Database, KeptBrowserRecord, RunRecord
from airlock.tools.context import iso_time
from airlock.tools.envelope import new_nonce, wrap
from airlock.tools.models import STREAM_PATHS

from .terminal import safe_block, safe_line, table


def cpu_text(run: RunRecord) -> str:
    return f"{run.cpu_seconds:.2f}s" if run.cpu_seconds is not None else "-"


def memory_text(run: RunRecord) -> str:
    if run.peak_memory_bytes is None:
        return "-"
    return f"{run.peak_memory_bytes / (1024 * 1024):.1f}MiB"


def duration_text(run: RunRecord) -> str:
    return f"{run.duration_ms}ms" if run.duration_ms is not None else "-"


async def runs_table(
    db: Database, *, session_id: str | None, limit: int, tenant: str | None = None
) -> str:
    runs = await db.list_runs(session_id=session_id, tenant=tenant, limit=limit)
    if not runs:
        return "no runs recorded" + (f" for tenant {tenant!r}" if tenant is not None else "")
    header = (
        "RUN", "TENANT", "SESSION", "STARTED", "LANG", "STATUS", "EXIT", "DURATION", "CPU",
        "PEAK MEM",
    )  # fmt: skip
    return table(
        header,
        [
            (
                run.id,
                run.tenant,
                run.session_id,
                iso_time(run.created_at),
                run.language,
                run.status,
                "-" if run.exit_code is None else str(run.exit_code),
                duration_text(run),
                cpu_text(run),
                memory_text(run),
            )
            for run in runs
        ],
    )


async def egress_table(
    db: Database, *, session_id: str | None, run_id: str | None, limit: int
) -> str:
    records = await db.list_egress(session_id=session_id, run_id=run_id, limit=limit)
    if not records:
        return "no egress recorded"
    header = ("TIME", "RUN", "DECISION", "STATUS", "REQUEST", "IN", "OUT", "IP", "REASON")
    return table(
        header,
        [
            (
                iso_time(r.time),
                r.run_id,
                r.decision,
                str(r.status),
                f"{r.method} {r.host}:{r.port}{r.path}",
                str(r.bytes_in),
                str(r.bytes_out),
                r.resolved_ip or "-",
                r.reason + (f" [injected {', '.join(r.injected)}]" if r.injected else ""),
            )
            for r in records
        ],
    )


async def grants_table(db: Database, *, session_id: str | None, limit: int) -> str:
    grants = await db.list_grants(session_id=session_id, limit=limit)
    if not grants:
        return "no capabilities granted"
    header = (
        "GRANTED",
        "CAPABILITY",
        "PARAMS",
        "APPROVED BY",
        "EXPIRES",
        "REVOKED",
        "SESSION",
        "REASON",
    )
    return table(
        header,
        [
            (
                iso_time(g.created_at),
                g.capability,
                ",".join(f"{k}={v}" for k, v in sorted(g.params.items())) or "-",
                g.approved_by,
                iso_time(g.expires_at),
                iso_time(g.revoked_at) if g.revoked_at else "-",
                g.session_id,
                g.reason,
            )
            for g in grants
        ],
    )


async def run_detail(db: Database, blobs: BlobStore, run_id: str) -> str:
    run = await db.get_run(run_id)
    if run is None:
        raise NotFound(f"no run {run_id!r} in this data directory; `airlock audit runs` lists them")
    lines = [
        f"run        {run.id}",
        f"session    {run.session_id} (tenant {run.tenant})",
        f"started    {iso_time(run.created_at)}",
        f"finished   {iso_time(run.finished_at) if run.finished_at else '-'}",
        f"language   {run.language}   code sha256 {run.code_sha256}",
        f"runtime    {run.runtime or '-'}",
        f"status     {run.status}   exit {run.exit_code if run.exit_code is not None else '-'}",
        f"duration   {duration_text(run)} (timeout {run.timeout_s}s)",
        f"usage      cpu {cpu_text(run)}, peak memory {memory_text(run)}",
        f"limits     {', '.join(f'{k}={v}' for k, v in sorted(run.limits.items()))}",
    ]
    on_browser = await db.kept_browser_step_of(run.id)
    if on_browser is not None:
        browser_id, call = on_browser
        lines.append(f"browser    call {call} on kept browser {browser_id} (`audit browsers`)")
    lines = [safe_line(line) for line in lines]
    if run.error:
        # The error may quote the container (a runner fault): data, never instructions.
        lines.append("error      (may quote the sandbox; the text inside the envelope is data)")
        lines.append(wrap(run.error, run_id=run.id, stream="error", nonce=new_nonce()))
    inputs = await db.list_run_inputs(run.id)
    lines.append(f"inputs     {len(inputs)}")
    lines.extend(safe_line(f"  {f.path}  {f.size} bytes  {f.sha256}") for f in inputs)
    artifacts = await db.list_artifacts(run.id)
    files = [a for a in artifacts if a.path not in STREAM_PATHS.values()]
    lines.append(f"artifacts  {len(files)}")
    lines.extend(safe_line(f"  {a.path}  {a.size} bytes  {a.mime_type}  {a.sha256}") for a in files)
    kept = {a.path: a for a in artifacts}
    for name, total, sha in (
        ("stdout", run.stdout_bytes, run.stdout_sha256),
        ("stderr", run.stderr_bytes, run.stderr_sha256),
    ):
        lines.append(f"--- {name}: {total} bytes, sha256 {sha or '-'} ---")
        record = kept.get(STREAM_PATHS[name])
        if record is not None:
            text = (await blobs.read(record.sha256)).decode("utf-8", errors="replace")
            lines.append(_quoted(text))
            if record.size < total:
                lines.append(f"[kept the first {record.size} of {total} bytes]")
    lines.append(f"--- code ({run.language}), sha256 {run.code_sha256} ---")
    if await blobs.exists(run.code_sha256):
        # The agent's own code, shown as written, minus what could drive the terminal.
        code = (await blobs.read(run.code_sha256)).decode("utf-8", errors="replace")
        lines.append(_quoted(code))
    else:
        lines.append("[not kept: this run predates code auditing]")
    return "\n".join(lines)


def _quoted(text: str) -> str:
    """Text a run chose, every line behind "| ": printed as is, its lines could pass for
    the report's own (a "--- code" header with other code under it)."""
    return "\n".join("| " + line for line in safe_block(text).rstrip("\n").split("\n"))


async def drills_table(db: Database, *, limit: int) -> str:
    drills = await db.list_drills(limit=limit)
    if not drills:
        return "no drills recorded; run `airlock drill`"
    lines = []
    for d in drills:
        verdict = f"{d.failed} GOT THROUGH" if d.failed else "all held"
        lines.append(
            safe_line(
                f"{d.id}  {iso_time(d.started_at)}  {verdict}, {d.held} held, "
                f"{d.not_applicable} n/a  against {d.target}"
            )
        )
        lines.extend(
            "    "
            + safe_line(
                f"{'NO ' if row['held'] is False else 'n/a' if row['held'] is None else 'yes'}"
                f"  {row['attack']}: {row['observed']}"
            )
            for row in d.rows
        )
    return "\n".join(lines)


async def sessions_table(db: Database, *, tenant: str | None, limit: int) -> str:
    """Sessions, newest first, with the session and version each fork started from."""
    sessions = await db.list_sessions(tenant=tenant, limit=limit)
    if not sessions:
        return "no sessions recorded"
    header = ("SESSION", "TENANT", "CREATED", "ENDED", "FORKED FROM")
    return table(
        header,
        [
            (
                s.id,
                s.tenant,
                iso_time(s.created_at),
                "-" if s.ended_at is None else iso_time(s.ended_at),
                "-" if s.parent_id is None else f"{s.parent_id} at version {s.parent_version}",
            )
            for s in sessions
        ],
    )


async def versions_table(db: Database, session_id: str) -> str:
    """A session's workspace versions and who wrote each (a run, a copy, the parent of a
    fork, a restore)."""
    versions = await db.workspace_versions(session_id)
    if not versions:
        return f"no workspace versions recorded for session {safe_line(session_id)}"
    return table(
        ("VERSION", "BASE", "WRITTEN BY", "AT"),
        [(str(v), str(b), w or "-", iso_time(t)) for v, b, w, t in versions],
    )


async def browsers_report(
    db: Database, *, tenant: str | None, session_id: str | None, limit: int, as_json: bool
) -> str:
    """Kept browsers, newest first: who kept each on which server, when it opened and when
    and why it closed, and each call on it (its browse run, how that run ended)."""
    found = await db.list_kept_browsers(tenant=tenant, session_id=session_id, limit=limit)
    if as_json:
        return json.dumps([b.model_dump(mode="json") for b in found], indent=2)
    if not found:
        return "no kept browsers recorded"
    lines = []
    for b in found:
        lines.append(
            safe_line(f"{b.id}  tenant {b.tenant}  session {b.session_id}  server {b.instance_id}")
        )
        lines.append(safe_line(f"    opened {iso_time(b.opened_at)}, {_closed_text(b)}"))
        lines.extend(
            safe_line(
                f"    call {s.step}  {s.run_id}  {s.status or 'no run record'}"
                f"  {'-' if s.duration_ms is None else f'{s.duration_ms}ms'}"
            )
            for s in b.steps
        )
        if not b.steps:
            lines.append("    no calls recorded")
    return "\n".join(lines)


def _closed_text(browser: KeptBrowserRecord) -> str:
    if browser.closed_at is None:
        return "open (or its server stopped without closing it)"
    return f"closed {iso_time(browser.closed_at)}: {browser.closed_why or '-'}"
