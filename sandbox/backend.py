"""What every sandbox backend offers the tools; Docker is the first of them."""

from __future__ import annotations

from typing import Protocol

from .spec import JobOutcome, JobSpec


class Backend(Protocol):
    async def run(self, job: JobSpec) -> JobOutcome:
        """Run one job in a fresh sandbox and remove the sandbox, whatever happens."""
        ...

    def output_bytes(self, run_id: str) -> int:
        """Bytes of stdout and stderr received so far from a run in progress (0 once done)."""
        ...

    async def remove_session(self, session_id: str) -> int:
        """Kill and remove every sandbox of a session; return how many there were."""
        ...

    async def remove_all(self) -> int:
        """Kill and remove every sandbox of this server instance."""
        ...

    async def reap(self, now: float) -> int:
        """Remove sandboxes of dead instances and those past their deadline."""
        ...
