"""How long things last: a session's lease ([sessions]), when a tool call becomes an MCP
task and how long its outcome is kept ([tasks]), and an operator's console sign-in
([console]). A grant's lifetime is the capability's own (`capability.py`)."""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from .section import Section


class SessionSettings(Section):
    """Lifetime of session leases."""

    idle_ttl_s: int = Field(default=900, gt=0)
    """Seconds a session lease lives without a call before it ends; at most max_lifetime_s."""

    max_lifetime_s: int = Field(default=28800, gt=0)
    """Seconds after which a session lease ends however busy it is."""

    @model_validator(mode="after")
    def _idle_within_lifetime(self) -> SessionSettings:
        if self.idle_ttl_s > self.max_lifetime_s:
            raise PydanticCustomError(
                "idle_above_lifetime",
                "idle_ttl_s ({idle_ttl_s}) is larger than max_lifetime_s ({max_lifetime_s}); "
                "lower idle_ttl_s or raise max_lifetime_s",
                {"idle_ttl_s": self.idle_ttl_s, "max_lifetime_s": self.max_lifetime_s},
            )
        return self


class TaskSettings(Section):
    """When a tool call becomes an MCP task (io.modelcontextprotocol/tasks), and how long
    a task is kept."""

    answer_within_s: float = Field(default=5.0, gt=0, le=600)
    """Seconds run_code, get_patch, copy_in and browse may take before a caller that
    declared the Tasks extension gets a task handle to poll instead of the result."""

    ttl_s: int = Field(default=3600, gt=0, le=30 * 86400)
    """Seconds a task's outcome is kept after it ends (tasks/get answers it until then)."""

    poll_interval_ms: int = Field(default=2000, ge=100, le=60000)
    """How often a client is asked to poll a task (pollIntervalMs)."""


class ConsoleSettings(Section):
    """The operator console (`/console`): how long a sign-in lasts. Set by the server's
    policy only; a tenant's policy may not change it."""

    session_s: int = Field(default=28800, gt=0, le=7 * 86400)
    """Seconds a console sign-in stays valid (its signed cookie expires then, and the
    server refuses it after); sign out to end it sooner. At most 7 days."""
