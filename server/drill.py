"""`airlock drill`: attack the live configuration and report what held.

The drill builds the real server on the real data directory with the policy under test
(the server's, or one tenant's), and sends each hostile program (`drill_probes`) through
`run_code` with the SDK's in-memory client: the very path an agent's code takes. Its
calls run as their own tenant (`airlock-drill`), each probe in a fresh session that it
ends. One probe is derived from the policy (`drill_openings`: what its allow rules open,
judged from the proxy's records in the database), the browser box is attacked through
`browse` (`drill_browser`: pages under the policy, and a page of the drill's own on a
server built with the drill's two extra capabilities; `drill_kept`: one session's kept
browser out of another's reach), and `policies.review` names the
doors no probe can see.
Afterwards it checks that nothing was left behind (containers, live sessions, unrevoked
grants) and records the whole table in the database (`airlock audit drills`). The table
is printed through `terminal.table`, wrapped to about 100 columns.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from mcp.client import Client
from mcp.types import CallToolResult

from airlock.broker import Vault, load_key, vault_path
from airlock.errors import AirlockError
from airlock.ids import new_id
from airlock.policies import Policy
from airlock.policies.review import review
from airlock.sandbox import connect
from airlock.sandbox.docker import session_containers
from airlock.sandbox.environment import sandbox_environment
from airlock.store import DrillRecord
from airlock.tools.envelope import sanitize

from .app import build_server
from .config import DRILL_TENANT, Config, open_store
from .drill_browser import (
    BROWSER_ATTACK,
    BROWSER_EXPECTED,
    TRICKS_ATTACK,
    TRICKS_EXPECTED,
    denied_pages,
    ensure_browser_image,
    page_tricks,
)
from .drill_kept import KEPT_ATTACK, KEPT_EXPECTED, kept_browser
from .drill_openings import (
    OPENINGS_ATTACK,
    OPENINGS_EXPECTED,
    judge_openings,
    opening_targets,
    openings_probe,
)
from .drill_probes import (
    PROTECTED_PAYLOAD,
    CallFacts,
    Probe,
    Verdict,
    battery,
    everyday_probe,
    protected_probe,
    replay_probe,
    result_text,
    token_probe,
)
from .tenant_policy import target_policies
from .terminal import safe_line, table

CALL_TIMEOUT_S = 180
PROBE_TIMEOUT_S = 60
# Names whose values in the operator's environment count as secrets the sandbox must
# never see (the vault's values always count).
_SECRET_NAME_PARTS = ("KEY", "TOKEN", "SECRET", "PASS", "CRED", "AUTH", "COOKIE", "SESSION")


@dataclass(frozen=True)
class DrillRow:
    attack: str
    expected: str
    observed: str
    held: bool | None


_HELD = {True: "yes", False: "NO", None: "n/a"}
# HELD, ATTACK, EXPECTED, OBSERVED: 4 + 24 + 24 + 42 and three gaps of 2 make 100 columns.
_WRAP = (None, 24, 24, 42)
_WIDTH = 100


def _wrapped_verdict(text: str) -> list[str]:
    return textwrap.wrap(safe_line(text), _WIDTH, break_on_hyphens=False)


@dataclass(frozen=True)
class DrillReport:
    id: str
    target: str
    rows: list[DrillRow]
    sessions: list[str]

    @property
    def failed(self) -> list[DrillRow]:
        return [r for r in self.rows if r.held is False]

    def table(self) -> str:
        """The report for a terminal, about 100 columns wide: long cells wrap."""
        body = [(_HELD[r.held], r.attack, r.expected, r.observed) for r in self.rows]
        lines = table(("HELD", "ATTACK", "EXPECTED", "OBSERVED"), body, wrap=_WRAP)
        failed = len(self.failed)
        verdict = (
            f"drill {self.id} against {self.target}: "
            + (f"{failed} attack(s) got through" if failed else "every attack was held")
            + f" ({sum(r.held is None for r in self.rows)} not applicable under this policy)"
        )
        return "\n".join([lines, "", *_wrapped_verdict(verdict)])

    def as_json(self) -> str:
        return json.dumps(
            {
                "drill": self.id,
                "target": self.target,
                "held": not self.failed,
                "rows": [asdict(r) for r in self.rows],
            },
            indent=2,
        )


def needles(config: Config, environ: dict[str, str]) -> list[str]:
    """sha256 digests of what must never be inside: every vault value, and the operator's
    secret-looking environment values (not those the sandbox gets by design)."""
    values: set[str] = set()
    try:
        vault = Vault(vault_path(config.data_dir), load_key(config.data_dir, environ))
        for info in vault.list():
            found = vault.get(info.name)
            if found is not None:
                values.add(found[0].reveal())
    except AirlockError:
        pass  # no vault (or no key): there are no vault secrets to leak
    by_design = set(sandbox_environment().values())
    for name, value in environ.items():
        if any(part in name.upper() for part in _SECRET_NAME_PARTS) and value not in by_design:
            values.add(value)
    return sorted(hashlib.sha256(v.encode()).hexdigest() for v in values if len(v) >= 8)


def allowed_host(policy: Policy) -> str:
    """A host the policy lets every run reach, for the Host-mismatch probes."""
    for rule in policy.egress.allow:
        for host in rule.hosts:
            if not host.startswith("*"):
                return host
    return "example.com"


async def run_drill(
    config: Config, policy: Policy, *, tenant_policy: Policy | None, target: str
) -> DrillReport:
    """Run the whole battery; the report says what held. Records it in the database."""
    effective = tenant_policy or policy
    started = _now()
    drill_id = new_id("drill_", random_bytes=10)
    server = build_server(
        config,
        policy,
        tenant_policies={DRILL_TENANT: effective},
        local_tenant=DRILL_TENANT,
    )
    host = allowed_host(effective)
    rows: list[DrillRow] = []
    sessions: list[str] = []
    async with Client(server) as client:
        for probe in battery(needles(config, dict(os.environ)), host):
            facts, session = await _attack(client, probe)
            sessions.append(session)
            rows.append(_row(probe, probe.judge(facts)))
        rows.append(await _replay(client, host, sessions))
        rows.append(await _protected(client, effective, sessions))
        rows.append(await _everyday(client, sessions))
        rows.append(await _browser(client, sessions))
        rows.append(await _openings(client, config, effective, sessions))
    rows.append(await _browser_tricks(config, policy, effective, sessions))
    rows.append(await _kept_browser(config, policy, effective, sessions))
    rows.append(policy_review(effective))
    rows.append(await _leftovers(config, sessions))
    report = DrillReport(id=drill_id, target=target, rows=rows, sessions=sessions)
    await _record(config, report, started)
    return report


async def _attack(client: Client, probe: Probe) -> tuple[CallFacts, str]:
    """Run one probe in a fresh session and end that session."""
    args: dict[str, Any] = {"code": probe.code, "timeout_s": PROBE_TIMEOUT_S}
    if probe.files:
        args["files"] = [{"path": p, "content": c} for p, c in probe.files]
    result = await _call(client, "run_code", args)
    structured = dict(result.structured_content or {})
    text = result_text(result)
    if result.is_error:
        raise AirlockError(f"the drill could not run its probe {probe.name!r}: {sanitize(text)}")
    session = str(structured["session_id"])
    ended = await _call(client, "end_session", {"session_id": session})
    if ended.is_error:
        raise AirlockError(f"the drill could not end its session {session}")
    return CallFacts(text=text, structured=structured), session


def _row(probe: Probe, verdict: Verdict) -> DrillRow:
    return DrillRow(probe.name, probe.expected, verdict.observed, verdict.held)


async def _replay(client: Client, host: str, sessions: list[str]) -> DrillRow:
    first = token_probe()
    facts, session = await _attack(client, first)
    sessions.append(session)
    token = facts.report.get("token")
    if not isinstance(token, str) or not token:
        return DrillRow(
            first.name,
            first.expected,
            "no run token is ever issued under this policy (no egress): nothing to replay",
            None,
        )
    probe = replay_probe(token, host)
    facts, session = await _attack(client, probe)
    sessions.append(session)
    return _row(probe, probe.judge(facts))


async def _everyday(client: Client, sessions: list[str]) -> DrillRow:
    probe = everyday_probe()
    facts, session = await _attack(client, probe)
    sessions.append(session)
    return _row(probe, probe.judge(facts))


async def _browser(client: Client, sessions: list[str]) -> DrillRow:
    # The server would build a missing browser image in the background and answer "being
    # built"; the drill waits for it instead, once.
    await anyio.to_thread.run_sync(ensure_browser_image)
    verdict = await denied_pages(client, _call, sessions, PROBE_TIMEOUT_S)
    return DrillRow(BROWSER_ATTACK, BROWSER_EXPECTED, verdict.observed, verdict.held)


async def _browser_tricks(
    config: Config, policy: Policy, effective: Policy, sessions: list[str]
) -> DrillRow:
    """The drill's own page, under the tenant's policy plus the drill's two capabilities,
    on a server of its own (the policy under test stays as it is for every other row)."""
    verdict = await page_tricks(_drill_client(config, policy), effective, _call, sessions)
    return DrillRow(TRICKS_ATTACK, TRICKS_EXPECTED, verdict.observed, verdict.held)


async def _kept_browser(
    config: Config, policy: Policy, effective: Policy, sessions: list[str]
) -> DrillRow:
    """One session's kept browser, out of another's reach, on a server of its own as for
    the tricks (the drill's page capability added)."""
    verdict = await kept_browser(_drill_client(config, policy), effective, _call, sessions)
    return DrillRow(KEPT_ATTACK, KEPT_EXPECTED, verdict.observed, verdict.held)


def _drill_client(config: Config, policy: Policy) -> Callable[[Policy], Client]:
    """Clients of a server whose drill tenant has the policy given to each."""

    def client_of(drilled: Policy) -> Client:
        server = build_server(
            config, policy, tenant_policies={DRILL_TENANT: drilled}, local_tenant=DRILL_TENANT
        )
        return Client(server)

    return client_of


COPY_DIR = "airlock-drill-copy"
# Paths a patch must never carry, whatever the policy's own list says; the probe writes
# them and the drill checks each against `[hatch] protected`.
_PROTECTED_SAMPLES = [
    ".github/workflows/ci.yml",
    ".github/dependabot.yml",
    ".gitlab-ci.yml",
    ".env",
    "config/.env.production",
    "CODEOWNERS",
]


async def _protected(client: Client, policy: Policy, sessions: list[str]) -> DrillRow:
    """Copy a hatch root in, write protected paths, and check the patch holds them back."""
    probe = protected_probe([f"{COPY_DIR}/{p}" for p in _PROTECTED_SAMPLES])

    def row(observed: str, held: bool | None) -> DrillRow:
        return DrillRow(probe.name, probe.expected, observed, held)

    unprotected = [p for p in _PROTECTED_SAMPLES if policy.hatch.protecting_glob(p) is None]
    if unprotected:
        return row("[hatch] protected does not cover " + ", ".join(unprotected), False)
    if not policy.hatch.roots:
        return row(
            "the policy names no [hatch] roots: nothing is copied in, so no patch exists to "
            "carry them; [hatch] protected covers all",
            None,
        )
    root = sorted(policy.hatch.roots)[0]
    copied = await _call(client, "copy_in", {"root": root, "to": COPY_DIR})
    if copied.is_error or copied.structured_content is None:
        return row(f"could not copy root {root} in: {sanitize(result_text(copied))[:200]}", None)
    session = str(copied.structured_content["session_id"])
    sessions.append(session)
    try:
        ran = await _call(client, "run_code", {"code": probe.code, "session_id": session})
        patch = await _call(
            client,
            "get_patch",
            {"copy_id": copied.structured_content["copy_id"], "session_id": session},
        )
    finally:
        await _call(client, "end_session", {"session_id": session})
    if ran.is_error or patch.is_error or patch.structured_content is None:
        return row(f"the probe could not run: {sanitize(result_text(patch))[:200]}", False)
    held = {f["path"] for f in patch.structured_content["needs_human"]}
    carried = {f["path"] for f in patch.structured_content["files"]}
    leaked = [p for p in _PROTECTED_SAMPLES if p in carried or p not in held]
    if leaked or PROTECTED_PAYLOAD in result_text(patch):
        return row("the patch carries " + ", ".join(leaked or ["the payload"]), False)
    return row(
        f"copied root {root} in, wrote {len(_PROTECTED_SAMPLES)}; the patch held every one "
        "back under needs_human",
        True,
    )


async def _call(client: Client, tool: str, args: dict[str, Any]) -> CallToolResult:
    with anyio.fail_after(CALL_TIMEOUT_S):
        return await client.call_tool(tool, args)


async def _openings(
    client: Client, config: Config, policy: Policy, sessions: list[str]
) -> DrillRow:
    """Ask the proxy for every destination the allow rules name, and an address in each
    range they open; judged from the proxy's records (what it dialled), not the sandbox."""
    findings = [f for f in review(policy) if f.kind == "private_range"]
    targets, notes = opening_targets(policy)
    if not targets:
        if not policy.egress.allow:
            notes.append("the policy has no allow rules: runs reach nothing without a capability")
        elif not notes:
            notes.append("the allow rules name only wildcards: no host to ask the proxy for")
        observed = "; ".join([*(f.text for f in findings), *notes])
        return DrillRow(OPENINGS_ATTACK, OPENINGS_EXPECTED, observed, False if findings else None)
    facts, session = await _attack(client, openings_probe(targets))
    sessions.append(session)
    db = await open_store(config)
    try:
        records = await db.list_egress(run_id=str(facts.structured["run_id"]), limit=1000)
    finally:
        await db.close()
    verdict = judge_openings(findings, records, notes)
    return DrillRow(OPENINGS_ATTACK, OPENINGS_EXPECTED, verdict.observed, verdict.held)


def policy_review(policy: Policy) -> DrillRow:
    """What no probe can see from inside: entries that open a door for a later run (the
    ranges they open are the openings row's; too many destinations is advice, no door)."""
    problems = [f.text for f in review(policy) if f.door and f.kind != "private_range"]
    entries = len(policy.capabilities) + len(policy.egress.allow)
    return DrillRow(
        "policy entries that open a door",
        "no wide wildcard, broad write, metadata range or secret on a wildcard",
        "; ".join(problems) or f"{entries} entries reviewed, none",
        not problems,
    )


async def _leftovers(config: Config, sessions: list[str]) -> DrillRow:
    """Containers, live sessions or live grants the drill's sessions left behind."""
    found: list[str] = []
    client = await anyio.to_thread.run_sync(connect)
    try:
        for session in sessions:
            containers = await anyio.to_thread.run_sync(session_containers, client, session)
            found.extend(f"container {short_id}" for short_id in containers)
    finally:
        client.close()
    db = await open_store(config)
    try:
        for session in sessions:
            record = await db.get_session(session)
            if record is None or record.ended_at is None:
                found.append(f"session {session} not ended")
        grants = await db.list_grants(tenant=DRILL_TENANT, limit=10_000)
        found.extend(
            f"grant {g.id} not revoked"
            for g in grants
            if g.session_id in sessions and g.revoked_at is None
        )
    finally:
        await db.close()
    return DrillRow(
        "leaves nothing behind",
        "no container, live session or grant",
        "left " + ", ".join(found) if found else f"{len(sessions)} sessions ended, nothing left",
        not found,
    )


async def _record(config: Config, report: DrillReport, started: float) -> None:
    db = await open_store(config)
    try:
        await db.record_drill(
            DrillRecord(
                id=report.id,
                target=report.target,
                tenant=DRILL_TENANT,
                started_at=started,
                finished_at=_now(),
                held=sum(r.held is True for r in report.rows),
                failed=len(report.failed),
                not_applicable=sum(r.held is None for r in report.rows),
                sessions=report.sessions,
                rows=[asdict(r) for r in report.rows],
            )
        )
    finally:
        await db.close()


def _now() -> float:
    return time.time()


def drill_main(config: Config, *, tenant: str | None, auth: Path | None, as_json: bool) -> int:
    """`airlock drill`: print the table (or JSON); 1 when any attack got through."""
    policy, tenant_policy, target = target_policies(config, tenant, auth)
    report = anyio.run(
        partial(run_drill, config, policy, tenant_policy=tenant_policy, target=target)
    )
    sys.stdout.write((report.as_json() if as_json else report.table()) + "\n")
    return 1 if report.failed else 0
