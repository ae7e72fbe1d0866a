"""The drill's openings probe: what the policy under test itself opens.

Derived from the policy (every allow rule's exact hosts and ports, and an address in each
of its `allow_private` ranges), sent through `run_code` like the other probes, and judged
from the proxy's own records of the run, which say what address it dialled: a guarded
range an allow rule opens to every run fails, naming the rule.

Belongs here: the openings probe's targets, program and judge. Does not belong here: the
fixed probes and what every probe shares (`drill_probes`), the table (`drill`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from airlock.egress.addresses import forbidden_reason
from airlock.policies import EgressRule, Policy, parse_ip_literal, path_matches
from airlock.policies.review import Finding
from airlock.store import EgressRecord

from .drill_probes import PRELUDE, Probe, Verdict

OPENINGS = r"""
import concurrent.futures
def one(target):
    method, host, port, path = target
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if method is None:
        return proxy(f"CONNECT {authority} HTTP/1.1", [f"Host: {authority}"])
    return proxy(f"{method} http://{authority}{path} HTTP/1.1", [f"Host: {authority}"])
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    answers = list(pool.map(one, TARGETS))
report(answers=[str(a) for a in answers])
"""

OPENINGS_ATTACK = "what the policy itself opens"
OPENINGS_EXPECTED = "no guarded address range open to every run"
MAX_TARGETS = 32
"""Requests of the openings probe: 8 at a time, each given up after 10 s, stay within
`PROBE_TIMEOUT_S` even when every destination hangs."""
_SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


@dataclass(frozen=True)
class Target:
    """One request of the openings probe: `method` None is a CONNECT (passthrough)."""

    rule: str
    host: str
    port: int
    method: str | None
    path: str


def opening_targets(policy: Policy) -> tuple[list[Target], list[str]]:
    """What the openings probe asks the proxy for, and notes on what it cannot probe:
    each allow rule's exact hosts, then an address in each of its allow_private ranges,
    on each of its ports (wildcards name no host to ask for; the review flags them)."""
    targets: list[Target] = []
    notes: list[str] = []
    for rule in policy.egress.allow:
        method = _probe_method(rule)
        if method == "":
            notes.append(f"allow rule {rule.name} allows only write methods: not probed")
            continue
        path = _sample_path(rule.paths[0]) if rule.paths else "/"
        hosts = [h for h in rule.hosts if not h.startswith("*.")]
        hosts += [_first_address(cidr) for cidr in rule.allow_private]
        for host in dict.fromkeys(hosts):
            targets += [Target(rule.name, host, port, method, path) for port in rule.ports]
    if len(targets) > MAX_TARGETS:
        notes.append(f"probed the first {MAX_TARGETS} of {len(targets)} destinations")
    return targets[:MAX_TARGETS], notes


def _probe_method(rule: EgressRule) -> str | None:
    """A method that changes nothing upstream; "" when the rule allows none."""
    if rule.tls == "passthrough":
        return None
    return next((m for m in _SAFE_METHODS if m in rule.methods), "")


def _sample_path(pattern: str) -> str:
    """A concrete path `pattern` allows: `**` dropped, each `*` a plain segment."""
    segments = [s for s in pattern.split("/")[1:] if s != "**"]
    path = "/" + "/".join("airlock-drill" if s == "*" else s for s in segments)
    return path if path_matches(pattern, path) else "/"


def _first_address(cidr: str) -> str:
    network = ipaddress.ip_network(cidr, strict=False)
    return str(network.network_address + 1 if network.num_addresses > 2 else network[0])


def openings_probe(targets: Sequence[Target]) -> Probe:
    wire = [(t.method, t.host, t.port, t.path) for t in targets]
    return Probe(
        OPENINGS_ATTACK,
        OPENINGS_EXPECTED,
        PRELUDE + OPENINGS.replace("TARGETS", repr(wire)),
        lambda facts: Verdict("", None),  # judged by judge_openings, from the host's records
    )


def judge_openings(
    findings: Sequence[Finding], records: Sequence[EgressRecord], notes: Sequence[str]
) -> Verdict:
    """Fails on every guarded range an allow rule (or an automatic grant) opens, naming
    the rule, and shows what the proxy actually dialled there; public destinations the
    rules name are reached by design."""
    reached, public = [], []
    for r in records:
        # A dial that failed keeps no address; an IP literal is its own address.
        address = ipaddress.ip_address(r.resolved_ip) if r.resolved_ip else parse_ip_literal(r.host)
        if r.decision == "deny" or address is None:
            continue
        target = f"{r.method} {r.host}:{r.port}"
        if forbidden_reason(address) is None:
            public.append(target)
            continue
        rule = (r.capability or "no rule").removeprefix("policy:")
        reached.append(f"{target} reached {address} (rule {rule}, answered {r.status})")
    tail = list(notes)
    if public:
        tail.append(f"{len(public)} public destination(s) reached, as allowed")
    if findings or reached:
        opened = [f.text for f in findings] + reached
        return Verdict("opened by the policy: " + "; ".join([*opened, *tail]), False)
    return Verdict("; ".join(["no guarded address reached", *tail]), True)
