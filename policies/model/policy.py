"""A complete policy file: one field per section, each with its defaults, so every section
may be left out. Each section's model is the module of its name in this package."""

from __future__ import annotations

from typing import Literal

from .browser import BrowserSettings
from .capability import BrokerSettings, Capability
from .egress import EgressSettings
from .hatch import HatchSettings
from .lifetimes import ConsoleSettings, SessionSettings, TaskSettings
from .limits import FileLimits, Limits, OutputLimits, TenantLimits
from .sandbox import ImageSettings, PoolSettings, SandboxSettings
from .section import Name, Section


class Policy(Section):
    """A complete Airlock policy. Every section may be left out to take its defaults."""

    version: Literal[1] = 1
    """Version of the policy format; only 1 exists."""

    sandbox: SandboxSettings = SandboxSettings()
    """Image and runtime of sandboxes."""

    image: ImageSettings = ImageSettings()
    """Python lock file, extra Debian packages and base of the image Airlock builds."""

    tenants: TenantLimits = TenantLimits()
    """Per-tenant caps."""

    limits: Limits = Limits()
    """Resource limits of each run."""

    output: OutputLimits = OutputLimits()
    """Caps on stdout and stderr."""

    files: FileLimits = FileLimits()
    """Caps on input files and artifacts."""

    sessions: SessionSettings = SessionSettings()
    """Idle and total lifetime of session leases."""

    tasks: TaskSettings = TaskSettings()
    """When a long tool call becomes an MCP task, and how long a task is kept."""

    pool: PoolSettings = PoolSettings()
    """Warm pool of containers."""

    browser: BrowserSettings = BrowserSettings()
    """Limits of the browser box (`browse`); missing means the defaults."""

    capabilities: dict[Name, Capability] = {}
    """Capabilities agents may ask for, by name ([capabilities.NAME] tables; names are
    lower-case letters, digits and hyphens). Missing or empty: there is nothing to
    ask for, and every request_capability call is refused."""

    egress: EgressSettings = EgressSettings()
    """Allow rules every run gets, and per-run traffic caps."""

    broker: BrokerSettings = BrokerSettings()
    """Caps on live capability grants."""

    hatch: HatchSettings = HatchSettings()
    """Repositories agents may have copied in, and paths their patches may not touch."""

    console: ConsoleSettings = ConsoleSettings()
    """The operator console's sign-in (the server's policy only)."""
