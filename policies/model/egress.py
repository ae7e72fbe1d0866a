"""What every run may reach without asking ([egress]): the allow rules, their unique names,
the per-run caps on requests, bytes and connections, and the extra upstream CA. The parts
of a rule are `traffic.py`; deciding a request is `egress/decision.py`."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    BeforeValidator,
    Field,
    field_validator,
    model_validator,
)

from airlock.policies.capabilities import path_placeholders

from .section import MIB, Name, Section, all_problems, as_tuple, problem, quoted
from .traffic import (
    Cidrs,
    Hosts,
    Methods,
    Paths,
    Ports,
    Tls,
    TrafficRule,
    tls_shape_problems,
)


class EgressRule(TrafficRule):
    """Traffic every run may send without asking for a capability."""

    name: Name
    """Name of the rule, shown in the egress log and in denials; required and unique."""

    hosts: Hosts
    """Hosts this rule allows; required, at least one. Exact names, "*.example.com"
    for the subdomains of example.com (not example.com itself), or canonical IP literals."""

    ports: Ports = (443,)
    """Destination ports; missing means [443]."""

    methods: Methods = ()
    """HTTP methods allowed: GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS. Required
    with tls = "terminate"; must be left out with "passthrough"."""

    paths: Paths = ()
    """Path patterns allowed: "*" is one segment, "**" any number of segments; rules
    take no params. Required with tls = "terminate"; must be left out with "passthrough"."""

    tls: Tls = "terminate"
    """"terminate" (missing means this) lets the proxy see and check each request;
    "passthrough" is an opaque tunnel checked by host and port only."""

    allow_private: Cidrs = ()
    """Private or otherwise guarded address ranges (CIDR) these hosts may resolve to,
    despite the SSRF guard. Missing or empty: none; use only for hosts you run."""

    @field_validator("paths")
    @classmethod
    def _no_placeholders(cls, paths: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in paths:
            if path_placeholders(pattern):
                raise problem(
                    "rule_placeholder",
                    f"{quoted(pattern)} has a placeholder, but egress rules take no params; "
                    'write the segment itself, or "*" for any one segment',
                )
        return paths

    @model_validator(mode="after")
    def _parts_agree(self) -> EgressRule:
        all_problems(tls_shape_problems(self.tls, self.methods, self.paths))
        return self


class EgressLimits(Section):
    """Caps on the network traffic of one run."""

    max_requests: int = Field(default=1000, gt=0)
    """Most requests one run may make through the proxy: each request, each tunnel
    (CONNECT) and each refusal counts, so a run cannot flood the proxy with denials."""

    max_request_bytes: int = Field(default=10 * MIB, gt=0)
    """Total bytes one run may send upstream, headers and bodies."""

    max_response_bytes: int = Field(default=100 * MIB, gt=0)
    """Total bytes one run may receive from upstream, headers and bodies."""

    max_connections: int = Field(default=16, gt=0)
    """Most connections (tunnels) to the proxy one run may hold open at once."""


class EgressSettings(Section):
    """Network access every run gets without a capability, and per-run caps."""

    allow: Annotated[tuple[EgressRule, ...], BeforeValidator(as_tuple)] = ()
    """Allow rules, written as [[egress.allow]] tables. Missing or empty: runs reach
    nothing but what granted capabilities allow."""

    limits: EgressLimits = EgressLimits()
    """Per-run caps on requests, bytes and connections."""

    upstream_ca_file: str | None = Field(default=None, min_length=1)
    """Extra PEM bundle the proxy trusts when it verifies upstream TLS (a private CA).
    Missing: only the system's trust store."""

    @field_validator("allow")
    @classmethod
    def _names_unique(cls, rules: tuple[EgressRule, ...]) -> tuple[EgressRule, ...]:
        seen: set[str] = set()
        for rule in rules:
            if rule.name in seen:
                raise problem(
                    "duplicate_rule",
                    f"two rules are named {quoted(rule.name)}; give each rule its own name",
                )
            seen.add(rule.name)
        return rules
