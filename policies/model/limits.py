"""What one run or one tenant may use: a run's resources ([limits]), its output
([output]), its files in and out ([files]), and a tenant's runs and sessions at once
([tenants]). The browser box has limits of its own (`browser.py`), egress traffic too
(`egress.py`)."""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from .section import MIB, Section


class Limits(Section):
    """Resource limits of one run."""

    timeout_s: int = Field(default=30, gt=0)
    """Wall-clock seconds a run gets when the call names no timeout; 1..max_timeout_s."""

    max_timeout_s: int = Field(default=300, gt=0, le=3600)
    """Largest timeout_s a call may ask for, in seconds; at most 3600."""

    memory_mb: int = Field(default=512, ge=64, le=16384)
    """Memory of the container in MiB, with no extra swap; 64..16384."""

    cpus: float = Field(default=1.0, ge=0.1, le=64)
    """CPU quota in cores (fractions allowed), counted per second; 0.1..64."""

    pids: int = Field(default=128, ge=16, le=4096)
    """Most processes and threads alive at once in the container; 16..4096."""

    workspace_mb: int = Field(default=256, gt=0)
    """Size in MiB of the /workspace tmpfs, where the code runs and leaves its files."""

    tmp_mb: int = Field(default=64, gt=0)
    """Size in MiB of the /tmp tmpfs, and of the code's home (/home/sandbox, a tmpfs too)."""

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


class OutputLimits(Section):
    """How much of stdout and stderr a run keeps and returns."""

    inline_bytes: int = Field(default=65536, gt=0)
    """Bytes of each stream returned inline in the result; at most stream_cap_bytes."""

    stream_cap_bytes: int = Field(default=8 * MIB, gt=0)
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


class FileLimits(Section):
    """Caps on files copied into a sandbox and on artifacts copied out."""

    max_input_files: int = Field(default=256, gt=0)
    """Most files one call may send in."""

    max_input_bytes: int = Field(default=16 * MIB, gt=0)
    """Total decoded size in bytes of the files one call sends in."""

    max_artifact_files: int = Field(default=512, gt=0)
    """Most files one run may leave behind as artifacts."""

    max_artifact_file_bytes: int = Field(default=32 * MIB, gt=0)
    """Largest single artifact file in bytes."""

    max_artifact_total_bytes: int = Field(default=128 * MIB, gt=0)
    """Total size in bytes of the artifacts of one run."""

    max_path_length: int = Field(default=255, gt=0)
    """Longest relative path, in characters, of an input file or artifact."""

    max_workspace_entries: int = Field(default=10_000, gt=0)
    """Most entries (files and directories) a run's final /workspace listing may hold; past
    it, the entries listed later are not kept and the run deletes nothing from the session."""


class TenantLimits(Section):
    """Caps per tenant (over HTTP each API key or JWT names one; over stdio there is one)."""

    max_concurrent_runs: int = Field(default=32, gt=0, le=1024)
    """Most runs (and so run containers) one tenant may have at once; one more is refused."""

    max_live_sessions: int = Field(default=64, gt=0, le=100000)
    """Most sessions one tenant may have live at once (each keeps a workspace on the host's
    disk until it ends); one more is refused until one ends or expires."""
