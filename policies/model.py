"""The policy model: what an operator may configure, its defaults and its bounds.

Only the shape and the rules that relate one value to another live here. Reading
files and turning validation errors into messages is `policies.load`; applying a
policy to a run is the job of the rooms that import this one.

Every section is frozen and rejects unknown keys, so a typo in a policy file is an
error rather than a setting that silently does nothing. New sections (capabilities,
egress) are added as further fields of `Policy`, each with a default so that older
files keep loading.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

_MIB = 1024 * 1024


class _Section(BaseModel):
    # strict: TOML values are already typed, so a quoted number or a boolean where a
    # count belongs is a mistake in the file, not something to coerce.
    # use_attribute_docstrings: the docstring under each field becomes its JSON Schema
    # description, which is what editors show operators.
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        allow_inf_nan=False,
        use_attribute_docstrings=True,
    )


class SandboxSettings(_Section):
    """Which image sandboxes start from and which container runtime runs them."""

    image: str | None = Field(default=None, min_length=1)
    """Container image for sandboxes. Missing means the image Airlock builds itself;
    an empty string is rejected."""

    runtime: Literal["runc", "runsc"] = "runc"
    """OCI runtime: "runc" (Docker's default) or "runsc" (gVisor, where installed)."""


class Limits(_Section):
    """Resource limits of one run."""

    timeout_s: int = Field(default=30, gt=0)
    """Wall-clock seconds a run gets when the call names no timeout; 1..max_timeout_s."""

    max_timeout_s: int = Field(default=300, gt=0, le=3600)
    """Largest timeout_s a call may ask for, in seconds; at most 3600."""

    memory_mb: int = Field(default=512, ge=64, le=16384)
    """Memory of the container in MiB, with no extra swap; 64..16384."""

    cpus: float = Field(default=1.0, ge=0.1, le=64)
    """CPU quota in cores (fractions allowed); 0.1..64."""

    pids: int = Field(default=128, ge=16, le=4096)
    """Most processes and threads alive at once in the container; 16..4096."""

    workspace_mb: int = Field(default=256, gt=0)
    """Size in MiB of the /workspace tmpfs, where the code runs and leaves its files."""

    tmp_mb: int = Field(default=64, gt=0)
    """Size in MiB of the /tmp tmpfs."""

    @model_validator(mode="after")
    def _timeout_within_max(self) -> Limits:
        if self.timeout_s > self.max_timeout_s:
            raise PydanticCustomError(
                "timeout_above_max",
                "timeout_s ({timeout_s}) is larger than max_timeout_s ({max_timeout_s}); "
                "lower timeout_s or raise max_timeout_s",
                {"timeout_s": self.timeout_s, "max_timeout_s": self.max_timeout_s},
            )
        return self


class OutputLimits(_Section):
    """How much of stdout and stderr a run keeps and returns."""

    inline_bytes: int = Field(default=65536, gt=0)
    """Bytes of each stream returned inline in the result; at most stream_cap_bytes."""

    stream_cap_bytes: int = Field(default=8 * _MIB, gt=0)
    """Bytes of each stream kept as an artifact; beyond that the stream is counted and
    hashed but its bytes are dropped."""

    @model_validator(mode="after")
    def _inline_within_cap(self) -> OutputLimits:
        if self.inline_bytes > self.stream_cap_bytes:
            raise PydanticCustomError(
                "inline_above_cap",
                "inline_bytes ({inline_bytes}) is larger than stream_cap_bytes "
                "({stream_cap_bytes}); lower inline_bytes or raise stream_cap_bytes",
                {"inline_bytes": self.inline_bytes, "stream_cap_bytes": self.stream_cap_bytes},
            )
        return self


class FileLimits(_Section):
    """Caps on files copied into a sandbox and on artifacts copied out."""

    max_input_files: int = Field(default=256, gt=0)
    """Most files one call may send in."""

    max_input_bytes: int = Field(default=16 * _MIB, gt=0)
    """Total decoded size in bytes of the files one call sends in."""

    max_artifact_files: int = Field(default=512, gt=0)
    """Most files one run may leave behind as artifacts."""

    max_artifact_file_bytes: int = Field(default=32 * _MIB, gt=0)
    """Largest single artifact file in bytes."""

    max_artifact_total_bytes: int = Field(default=128 * _MIB, gt=0)
    """Total size in bytes of the artifacts of one run."""

    max_path_length: int = Field(default=255, gt=0)
    """Longest relative path, in characters, of an input file or artifact."""


class SessionSettings(_Section):
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


class PoolSettings(_Section):
    """The warm pool of started, never-used containers (used once the pool exists)."""

    size: int = Field(default=0, ge=0, le=64)
    """Warm containers kept per image; 0 disables the pool; at most 64."""


class Policy(_Section):
    """A complete Airlock policy. Every section may be left out to take its defaults."""

    version: Literal[1] = 1
    """Version of the policy format; only 1 exists."""

    sandbox: SandboxSettings = SandboxSettings()
    """Image and runtime of sandboxes."""

    limits: Limits = Limits()
    """Resource limits of each run."""

    output: OutputLimits = OutputLimits()
    """Caps on stdout and stderr."""

    files: FileLimits = FileLimits()
    """Caps on input files and artifacts."""

    sessions: SessionSettings = SessionSettings()
    """Idle and total lifetime of session leases."""

    pool: PoolSettings = PoolSettings()
    """Warm pool of containers."""
