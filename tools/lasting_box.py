"""A box that outlives the call that started it (a kept browser's): the backend's box, the CA
made for it (the box trusts only the CA it was started with, so each of its runs' egress is
opened over this one: `box.Network(ca=...)`), and what removes both.

Its runs go through the one box path (`box.run_in_box(..., box=lasting.box)`); this module
only starts and removes the box. It imports nothing of the tools, so the kept browsers'
registry, which `Services` holds, can hold a lasting box without an import circle.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import anyio

from airlock.egress.tls import RunCA
from airlock.sandbox import Backend, JobSpec, Sandbox


@dataclass(eq=False)
class LastingBox:
    """A started box with egress, the CA it trusts, and what removes them."""

    backend: Backend
    box: Sandbox
    ca: RunCA
    exits: AsyncExitStack
    """Removes the box."""
    ca_dir: Path

    async def close(self) -> None:
        """Remove the box, then its CA (whatever removing the box did)."""
        with anyio.CancelScope(shield=True):
            try:
                await self.exits.aclose()
            finally:
                shutil.rmtree(self.ca_dir, ignore_errors=True)


def new_ca(name: str) -> tuple[RunCA, Path]:
    """A CA for one lasting box, in a private directory of its own (its leaves are written
    there), removed when the box is."""
    directory = Path(tempfile.mkdtemp(prefix="airlock-kept-"))
    return RunCA(name, directory / "private"), directory


async def open_lasting(backend: Backend, job: JobSpec, name: str) -> LastingBox:
    """A box for `job` that lives until its `close` (the reaper's deadline is the job's
    `lifetime_s`), and the CA made for it under `name`."""
    ca, ca_dir = new_ca(name)
    exits = AsyncExitStack()
    try:
        box = await exits.enter_async_context(backend.sandbox(job, egress=True))
    except BaseException:
        shutil.rmtree(ca_dir, ignore_errors=True)
        raise
    return LastingBox(backend, box, ca, exits, ca_dir)
