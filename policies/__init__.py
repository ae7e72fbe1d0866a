"""Policies: what the operator allows, as a validated, frozen model.

This room holds the policy model, loading and validating policy files, the default
policy shipped with the package, and the pure helpers that enforcing rooms share
with it: host canonicalization and matching (`policies.hosts`) and capability
scopes, path patterns and durations (`policies.capabilities`), the globs of
paths a hatch patch holds back (`policies.globs`), and what a valid policy opens that
an operator should see (`policies.review`, for the drill and the exception review).
The rooms that enforce a policy import it from here.

May import only the base modules: no room, not even store (pyproject's `rooms` import
contract, checked by `lint-imports`).
"""

from __future__ import annotations

from airlock.rooms import only_as_airlock

only_as_airlock(__name__)

from airlock.policies.capabilities import (
    Scope,
    format_duration,
    parse_duration,
    path_matches,
    resolve_scope,
)
from airlock.policies.globs import (
    DEFAULT_EXCLUDED,
    DEFAULT_IGNORED,
    DEFAULT_PROTECTED,
    canonical_segment,
    glob_matches,
    matching_glob,
    protecting_glob,
)
from airlock.policies.hosts import (
    canonical_host,
    canonical_host_pattern,
    host_matches,
    parse_ip_literal,
)
from airlock.policies.load import (
    default_policy_toml,
    load_policy,
    policy_json_schema,
)
from airlock.policies.model.browser import BrowserSettings
from airlock.policies.model.capability import BrokerSettings, Capability, Duration, InjectSpec
from airlock.policies.model.egress import EgressLimits, EgressRule, EgressSettings
from airlock.policies.model.hatch import HatchSettings
from airlock.policies.model.lifetimes import ConsoleSettings, SessionSettings, TaskSettings
from airlock.policies.model.limits import FileLimits, Limits, OutputLimits, TenantLimits
from airlock.policies.model.policy import Policy
from airlock.policies.model.sandbox import ImageSettings, PoolSettings, SandboxSettings

__all__ = [
    "DEFAULT_EXCLUDED",
    "DEFAULT_IGNORED",
    "DEFAULT_PROTECTED",
    "BrokerSettings",
    "BrowserSettings",
    "Capability",
    "ConsoleSettings",
    "Duration",
    "EgressLimits",
    "EgressRule",
    "EgressSettings",
    "FileLimits",
    "HatchSettings",
    "ImageSettings",
    "InjectSpec",
    "Limits",
    "OutputLimits",
    "Policy",
    "PoolSettings",
    "SandboxSettings",
    "Scope",
    "SessionSettings",
    "TaskSettings",
    "TenantLimits",
    "canonical_host",
    "canonical_host_pattern",
    "canonical_segment",
    "default_policy_toml",
    "format_duration",
    "glob_matches",
    "host_matches",
    "load_policy",
    "matching_glob",
    "parse_duration",
    "parse_ip_literal",
    "path_matches",
    "policy_json_schema",
    "protecting_glob",
    "resolve_scope",
]
