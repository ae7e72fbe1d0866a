"""Policies: what the operator allows, as a validated, frozen model.

This room holds the policy model, loading and validating policy files, and the
default policy shipped with the package. It imports nothing of Airlock's but
`airlock.errors`; the rooms that enforce a policy import it from here.
"""

from __future__ import annotations

from policies.load import load_policy, policy_json_schema
from policies.model import (
    FileLimits,
    Limits,
    OutputLimits,
    Policy,
    PoolSettings,
    SandboxSettings,
    SessionSettings,
)

__all__ = [
    "FileLimits",
    "Limits",
    "OutputLimits",
    "Policy",
    "PoolSettings",
    "SandboxSettings",
    "SessionSettings",
    "load_policy",
    "policy_json_schema",
]
