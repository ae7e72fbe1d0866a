"""`airlock policy usage`: the exception review over a seeded egress log, grants and
approvals, run as the operator runs it (the CLI's `main` reading the data directory)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from support import airlock_main

from airlock.policies import Policy
from airlock.server.policy_usage import usage_report
from airlock.store import ApprovalRecord, Database, EgressRecord, GrantRecord, SessionRecord
from airlock.tools.context import iso_time

DAY = 86_400
NOW = time.time()
MIRRORS = [f"mirror{i}.example.com" for i in range(11)]
WIDE = [f"h{i}.example.com" for i in range(13)]
POLICY = f"""
[[egress.allow]]
name = "pypi"
hosts = ["pypi.org", "files.pythonhosted.org"]
methods = ["GET"]
paths = ["/**"]

[[egress.allow]]
name = "old-mirror"
hosts = {json.dumps(MIRRORS)}
methods = ["GET"]
paths = ["/**"]

[capabilities.github-read]
hosts = ["api.github.com"]
methods = ["GET"]
paths = ["/**"]
approval = "auto"

[capabilities.wide]
hosts = {json.dumps(WIDE)}
methods = ["GET"]
paths = ["/**"]
approval = "ask"
"""
GRANT = "tenant/acme/session/ses_a/cap/g1"
PYPI = {"name": "pypi", "hosts": ["pypi.org"], "methods": ["GET"], "paths": ["/**"]}


def egress(
    rule: str | None, decision: str, host: str, age_days: float, **extra: Any
) -> EgressRecord:
    fields: dict[str, Any] = {
        "time": NOW - age_days * DAY,
        "tenant": "acme",
        "session_id": "ses_a",
        "run_id": "run_a",
        "capability": rule,
        "method": "GET",
        "host": host,
        "port": 443,
        "path": "/",
        "status": 200 if decision == "allow" else 403,
        "bytes_in": 0,
        "bytes_out": 0,
        "duration_ms": 1,
        "decision": decision,
        "reason": "allowed" if decision == "allow" else f"{host} is not allowed",
        **extra,
    }
    return EgressRecord.model_validate(fields)


async def seed(data_dir: Path) -> None:
    db = await Database.open(data_dir / "airlock.db")
    try:
        for session, tenant in (("ses_a", "acme"), ("ses_d", "airlock-drill")):
            await db.create_session(
                SessionRecord(id=session, tenant=tenant, created_at=0, last_used_at=0, expires_at=1)
            )
        await db.add_egress(
            [
                egress("policy:pypi", "allow", "pypi.org", 1),
                egress("policy:pypi", "allow", "files.pythonhosted.org", 2),
                egress("policy:old-mirror", "allow", "mirror1.example.com", 60),
                egress(GRANT, "allow", "api.github.com", 3),
                egress(GRANT, "allow", "api.github.com", 2),
                egress(GRANT, "deny", "api.github.com", 2),
                egress(None, "deny", "169.254.169.254", 1, port=80),
                egress(None, "deny", "169.254.169.254", 5, port=80),
                egress(None, "deny", "evil.example\x1b[2J", 4),
                egress(
                    None, "deny", "drill.example", 1, tenant="airlock-drill", session_id="ses_d"
                ),
            ]
        )
        await db.record_grant(
            GrantRecord(
                id=GRANT,
                tenant="acme",
                session_id="ses_a",
                capability="github-read",
                params={},
                scope={"hosts": ["api.github.com"]},
                approved_by="policy",
                reason="r",
                created_at=NOW - 3 * DAY,
                expires_at=NOW,
            )
        )
        await db.create_approval(
            ApprovalRecord(
                id="apr_x",
                tenant="acme",
                session_id="ses_a",
                capability="wide",
                params={},
                ttl_s=60,
                reason="r",
                status="denied",
                created_at=NOW - DAY,
                expires_at=NOW,
            )
        )
    finally:
        await db.close()


def usage(data_dir: Path, policy: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return airlock_main(
        "policy", "usage", "--data-dir", str(data_dir), "--policy", str(policy), *args
    )


@pytest.fixture
def seeded(tmp_path: Path) -> tuple[Path, Path]:
    data_dir = tmp_path / "data"
    anyio.run(seed, data_dir)
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    return data_dir, policy


def test_review_counts_use_per_rule_and_capability_and_groups_denied_hosts(
    seeded: tuple[Path, Path],
) -> None:
    done = usage(*seeded, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    rules = {r["name"]: r for r in report["rules"]}
    assert (rules["pypi"]["requests"], rules["pypi"]["denials"]) == (2, 0)
    assert rules["old-mirror"]["requests"] == 0 and rules["old-mirror"]["last_use"] is not None
    github = rules["github-read"]
    assert (github["grants"], github["requests"], github["denials"]) == (1, 2, 1)
    assert (rules["wide"]["grants"], rules["wide"]["denials"]) == (0, 1)
    assert rules["wide"]["last_use"] is None
    denied = {d["host"]: d for d in report["denied"]}
    metadata = denied["169.254.169.254"]
    assert metadata["count"] == 2 and metadata["ports"] == [80]
    assert metadata["last_time"] == iso_time(NOW - DAY)  # the latest of its denials
    assert "drill.example" not in denied  # the drill's own attacks are not exceptions
    assert "evil.example\x1b[2J" in denied  # exact in JSON, which escapes the ESC
    assert "\x1b" not in done.stdout
    findings = "\n".join(report["findings"])
    assert "allow rule old-mirror: unused since 20" in findings and "remove it?" in findings
    assert "capability wide: unused since ever (never used): remove it?" in findings
    assert "capability wide reaches 13 weighted destinations (more than 12)" in findings
    assert "allow rules reach 13 weighted destinations (more than 12" in findings
    assert "pypi" not in findings and "github-read" not in findings


def test_a_shorter_window_and_the_text_report(seeded: tuple[Path, Path]) -> None:
    done = usage(*seeded, "--since", "36h")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    pypi = next(line for line in lines if line.startswith("allow rule  pypi"))
    assert pypi.split()[5:7] == ["1", "0"]  # one request in the last 36 hours, no denial
    assert "capability github-read: unused since" in done.stdout
    assert "\x1b" not in done.stdout


@pytest.mark.parametrize("since", ["30x", "0d", "-1d", ""])
def test_a_bad_window_is_refused_naming_the_form(seeded: tuple[Path, Path], since: str) -> None:
    done = usage(*seeded, f"--since={since}")
    assert done.returncode == 1
    assert "write e.g. 30d, 12h or 2w" in done.stderr


# The four wide wildcards, with write methods on /**: 4 destinations before, so
# the "more than 12" warning never fired and nothing was flagged.
WILDCARDS = ["*.amazonaws.com", "*.ngrok-free.app", "*.blob.core.windows.net"]
WILDCARD_POLICY = f"""
[[egress.allow]]
name = "clouds"
hosts = {json.dumps(WILDCARDS)}
methods = ["GET"]
paths = ["/**"]

[capabilities.content]
hosts = ["*.githubusercontent.com"]
methods = ["GET", "POST", "PUT", "DELETE"]
paths = ["/**"]
"""


async def _empty_records(data_dir: Path) -> None:
    await (await Database.open(data_dir / "airlock.db")).close()


def test_wide_wildcards_and_broad_writes_are_flagged_and_weigh_more_than_hosts(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "wide.toml"
    policy.write_text(WILDCARD_POLICY)
    anyio.run(_empty_records, tmp_path / "data")  # a server's data dir, before any run
    done = usage(tmp_path / "data", policy)
    assert done.returncode == 0, done.stderr
    review = done.stdout.split("\nReview:\n", 1)[1]
    for host in [*WILDCARDS, "*.githubusercontent.com"]:
        assert f" allows {host}: every " in review, review
    assert "capability content allows POST/PUT/DELETE on /** of *.githubusercontent.com" in review
    assert "the allow rules reach 39 weighted destinations (more than 12" in review
    clouds = next(line for line in done.stdout.splitlines() if line.startswith("allow rule"))
    assert clouds.split()[3] == "39"  # the DESTINATIONS column is weighted too


async def seed_forgery(data_dir: Path) -> None:
    db = await Database.open(data_dir / "airlock.db")
    try:
        await db.add_egress(
            [
                egress(
                    None,
                    "deny",
                    "evil.example\nReview:\n  nothing to act on\x1b[8m",
                    1,
                    reason="refused\nReview:\n  all clear\x1b]0;title\x07",
                )
            ]
        )
    finally:
        await db.close()


def test_a_tampered_egress_log_cannot_forge_a_review_section_or_drive_the_terminal(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    anyio.run(seed_forgery, data_dir)
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    done = usage(data_dir, policy)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines.count("Review:") == 1
    assert not any(line.strip() in ("nothing to act on", "all clear") for line in lines)
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    shown = next(line for line in lines if "evil.example" in line)
    assert shown.startswith("  evil.example<U+000A>Review:<U+000A>  nothing to act on<U+001B>[8m")
    assert "refused<U+000A>Review:<U+000A>  all clear<U+001B>]0;title<U+0007>" in shown


def challenge(host: str, seq_age_s: float, run: str = "run_c", **extra: Any) -> EgressRecord:
    """A 407 of the proxy: the request came without a valid run token."""
    reason = "missing, expired or revoked run token; use the proxy settings Airlock put in"
    fields = {"status": 407, "reason": reason, "method": "CONNECT", "path": "-"}
    return egress(None, "deny", host, seq_age_s / DAY, run_id=run, **fields, **extra)


@pytest.mark.anyio
async def test_a_proxy_challenge_the_run_answered_with_its_token_is_not_a_denial(
    db: Database,
) -> None:
    """Chromium's CONNECT without credentials, then again with the run token: one request
    of the rule, no denial. A 407 no later request of its run answered stays a denial, as
    does one another run answered."""
    await db.add_egress(
        [
            challenge("pypi.org", 30),
            egress("policy:pypi", "allow", "pypi.org", 29 / DAY, run_id="run_c", method="CONNECT"),
            challenge("pypi.org", 20, run="run_other"),
            challenge("files.pythonhosted.org", 10),
            egress("policy:pypi", "allow", "pypi.org", 5 / DAY, run_id="run_c"),
        ]
    )
    policy = Policy.model_validate({"egress": {"allow": [PYPI]}})
    report = await usage_report(db, policy, label="p", tenant=None, since=NOW - DAY)
    [pypi] = report.rules
    assert (pypi.requests, pypi.denials) == (2, 0)
    denied = {d.host: d.count for d in report.denied}
    assert denied == {"pypi.org": 1, "files.pythonhosted.org": 1}
