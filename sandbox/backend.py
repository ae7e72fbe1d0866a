"""What every sandbox backend offers the tools; Docker is the first of them.

A run takes one sandbox (`Backend.sandbox`), binds the run's egress proxy into the
sandbox's egress directory when it has egress, and hands the sandbox its one job.
docs/backends.md describes the contract every backend passes
(tests/rooms/sandbox/test_backend_contract.py).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import NamedTuple, Protocol

from airlock.egress.tls import RunCA
from airlock.errors import SandboxError
from airlock.store import Staging

from .spec import JobOutcome, JobSpec

EXCHANGE_GRACE_S = 15.0
"""How long past a job's own timeout its backend may take: starting the sandbox and
moving the workspace in and out happen outside the user's timeout. The host's deadline for
a job, its egress and its labels is `timeout_s + EXCHANGE_GRACE_S`."""


class Sandbox(Protocol):
    """One never-used sandbox, taken for one job."""

    @property
    def egress_dir(self) -> Path | None:
        """Host directory the sandbox sees read-only as its way out: the run's proxy
        listens here. None for a sandbox taken without egress."""
        ...

    @property
    def runtime(self) -> str:
        """The OCI runtime the sandbox runs under (runc, runsc)."""
        ...

    @property
    def ca(self) -> RunCA | None:
        """The CA the sandbox has trusted since it started (a browser box's, made with it):
        its run's proxy must use this one. None: the job brings its CA (`EgressMount`)."""
        ...

    async def run(self, job: JobSpec, staging: Staging) -> JobOutcome:
        """Run the sandbox's one job; a second call is a `SandboxError`.

        The job's files are read from `staging.store`; the files the run leaves come
        back as drafts in `staging`, for the caller to keep or let go."""
        ...

    @property
    def kept(self) -> bool:
        """Whether the last job left the sandbox waiting for another (a browse job with
        `keep` whose box reported it kept its browser)."""
        ...

    async def step(self, job: JobSpec, staging: Staging) -> JobOutcome:
        """Another job in a `kept` sandbox, on the same stream; else a `SandboxError`."""
        ...


class Backend(Protocol):
    def sandbox(self, job: JobSpec, *, egress: bool) -> AbstractAsyncContextManager[Sandbox]:
        """A fresh sandbox for `job`'s image, runtime and limits (with an egress directory
        when `egress`), removed when the block ends, whatever happens."""
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


class Ready(NamedTuple):
    """What a run needs from the engine side: the backend, the image and the runtime."""

    backend: Backend
    image: str
    runtime: str


def check_first_job(used: bool, job: JobSpec, egress_dir: Path | None) -> None:
    """Refuse what no sandbox takes: a second job, or a job with egress in a sandbox taken
    without it (every backend's `Sandbox.run` asks this first)."""
    if used:
        raise SandboxError("a sandbox takes exactly one job; take a new one")
    if job.egress is not None and egress_dir is None:
        raise SandboxError("this job has egress but its sandbox was taken without it")
