"""`airlock policy usage`: the exception review, from the stored egress log and grants.

For every egress allow rule and capability of the policy: how often it was granted, how
many requests it let out, how many of its requests or approvals were refused, when it
was last used, and how many destinations it weighs (`policies.review.weight`: a
wildcard counts more than a host, a wildcard over a whole cloud or tunnel service more
than `MAX_DESTINATIONS`); the destinations runs were refused, grouped by host; and what to
act on: rules nobody used in the window, and every finding of `policies.review` (wide
wildcards, write methods on broad paths, open private ranges, too many destinations).
Drill runs (`airlock-drill`) are left out unless asked for. Host names and reasons in the
log came from sandboxes (or a tampered database), so the text goes through
`terminal.safe_line`; JSON escapes them itself.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio

from airlock.errors import InvalidRequest
from airlock.policies import Policy
from airlock.policies.review import (
    HOST_WEIGHT,
    WIDE_WEIGHT,
    WILDCARD_WEIGHT,
    destinations,
    review,
)
from airlock.store import Database
from airlock.tools.context import iso_time

from .config import Config, open_records
from .drill import DRILL_TENANT, target_policies
from .terminal import safe_line, table

DAY_S = 86_400


@dataclass
class RuleUsage:
    kind: str  # "allow rule" or "capability"
    name: str
    destinations: int
    """Weighted (`policies.review.weight`), not the number of host patterns."""
    grants: int = 0
    requests: int = 0
    denials: int = 0
    last_use: float | None = None
    """Last request it let out, over all time (not only the window)."""
    last_grant: float | None = None


@dataclass
class DeniedHost:
    host: str
    count: int
    last_time: float
    ports: list[int] = field(default_factory=list)
    reason: str = ""


@dataclass
class UsageReport:
    policy: str
    tenant: str | None
    since: float
    rules: list[RuleUsage]
    denied: list[DeniedHost]
    findings: list[str]

    def as_json(self) -> str:
        data: dict[str, Any] = asdict(self)
        data["since"] = iso_time(self.since)
        for rule in data["rules"]:
            for key in ("last_use", "last_grant"):
                rule[key] = iso_time(rule[key]) if rule[key] is not None else None
        for host in data["denied"]:
            host["last_time"] = iso_time(host["last_time"])
        return json.dumps(data, indent=2)

    def text(self) -> str:
        who = f"tenant {self.tenant}" if self.tenant else "all tenants"
        lines = [f"Exception review of {self.policy}, {who}, since {iso_time(self.since)}", ""]
        header = ("KIND", "NAME", "DESTINATIONS", "GRANTS", "REQUESTS", "DENIALS", "LAST USE")
        rows = [
            (
                r.kind,
                r.name,
                str(r.destinations),
                str(r.grants) if r.kind == "capability" else "-",
                str(r.requests),
                str(r.denials),
                iso_time(r.last_use) if r.last_use is not None else "never",
            )
            for r in self.rules
        ]
        if rows:
            lines.append(table(header, rows))
            lines.append(
                f"(DESTINATIONS: a host counts {HOST_WEIGHT}, a wildcard {WILDCARD_WEIGHT}, "
                f"a wildcard over a cloud or tunnel service {WIDE_WEIGHT})"
            )
        else:
            lines.append("the policy has no egress allow rules and no capabilities")
        lines += ["", "Denied destinations:"]
        lines.extend(
            f"  {safe_line(d.host)}  {d.count} request(s), ports {','.join(map(str, d.ports))}, "
            f"last {iso_time(d.last_time)}: {safe_line(d.reason)}"
            for d in self.denied
        )
        if not self.denied:
            lines.append("  none")
        lines += ["", "Review:"]
        lines.extend(f"  {safe_line(f)}" for f in self.findings or ["nothing to act on"])
        return "\n".join(lines)


def parse_since(text: str) -> int:
    """Seconds in `30d`, `12h`, `2w` or a plain number of days."""
    units = {"w": 7 * DAY_S, "d": DAY_S, "h": 3600, "m": 60}
    number, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "d")
    if not number.isdigit() or int(number) < 1:
        raise ValueError(f"--since {text!r} is not a duration; write e.g. 30d, 12h or 2w")
    return int(number) * units[unit]


async def usage_report(
    db: Database, policy: Policy, *, label: str, tenant: str | None, since: float
) -> UsageReport:
    scope: dict[str, str | None] = {
        "tenant": tenant,
        "except_tenant": None if tenant is not None else DRILL_TENANT,
    }
    counts = await db.egress_counts(since=since, **scope)
    last_use = await db.last_egress_use(**scope)
    grants = [
        g
        for g in await db.list_grants(tenant=tenant, limit=1_000_000)
        if tenant is not None or g.tenant != DRILL_TENANT
    ]
    capability_of = {g.id: g.capability for g in grants}
    approvals = await db.list_approvals(tenant=tenant, limit=1_000_000)

    rules: dict[str, RuleUsage] = {}
    for rule in policy.egress.allow:
        rules[f"policy:{rule.name}"] = RuleUsage(
            "allow rule",
            rule.name,
            destinations(rule.hosts),
            last_use=last_use.get(f"policy:{rule.name}"),
        )
    for name, cap in sorted(policy.capabilities.items()):
        rules[name] = RuleUsage("capability", name, destinations(cap.hosts))
    for grant in grants:
        usage = rules.get(grant.capability)
        if usage is None:
            continue
        if grant.created_at >= since:
            usage.grants += 1
        usage.last_grant = max(usage.last_grant or 0, grant.created_at)
        used = last_use.get(grant.id)
        if used is not None:
            usage.last_use = max(usage.last_use or 0, used)
    for approval in approvals:
        usage = rules.get(approval.capability)
        refused = approval.status in ("denied", "expired") and approval.created_at >= since
        if usage is not None and refused:
            usage.denials += 1
    denied: dict[str, DeniedHost] = {}
    for count in counts:
        key = count.rule if count.rule is None else capability_of.get(count.rule, count.rule)
        usage = rules.get(key) if key is not None else None
        if usage is not None:
            if count.decision == "deny":
                usage.denials += count.count
            else:
                usage.requests += count.count
        if count.decision == "deny":
            entry = denied.setdefault(count.host, DeniedHost(count.host, 0, count.last_time))
            entry.count += count.count
            if count.port not in entry.ports:
                entry.ports.append(count.port)
            if count.last_time >= entry.last_time:
                entry.last_time = count.last_time
                entry.reason = count.reason
    return UsageReport(
        policy=label,
        tenant=tenant,
        since=since,
        rules=list(rules.values()),
        denied=sorted(denied.values(), key=lambda d: (-d.count, d.host)),
        findings=_findings(policy, list(rules.values())),
    )


def _findings(policy: Policy, rules: list[RuleUsage]) -> list[str]:
    findings = []
    for rule in rules:
        if rule.requests == 0 and rule.grants == 0:
            last = max(filter(None, (rule.last_use, rule.last_grant)), default=None)
            when = iso_time(last) if last is not None else "ever (never used)"
            findings.append(f"{rule.kind} {rule.name}: unused since {when}: remove it?")
    findings.extend(f.text for f in review(policy))
    return findings


def usage_main(
    config: Config,
    *,
    since: str,
    tenant: str | None,
    auth: Path | None,
    as_json: bool,
) -> int:
    """`airlock policy usage`: print the review (or JSON) of the policy that applies."""
    try:
        window = parse_since(since)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc
    if tenant is not None and auth is None:
        # Without the auth file the tenant's own policy is unknown: review the server's.
        server_policy, tenant_policy, label = target_policies(config, None, None)
        label += f" (pass --auth to use tenant {tenant}'s own policy)"
    else:
        server_policy, tenant_policy, label = target_policies(config, tenant, auth)

    async def review() -> UsageReport:
        db = await open_records(config)
        try:
            return await usage_report(
                db,
                tenant_policy or server_policy,
                label=label,
                tenant=tenant,
                since=time.time() - window,
            )
        finally:
            await db.close()

    report = anyio.run(review)
    sys.stdout.write((report.as_json() if as_json else report.text()) + "\n")
    return 0
