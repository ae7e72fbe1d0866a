"""A box that outlives the call that started it (a kept browser's): the backend's box (it
trusts only the CA it was made with, `Sandbox.ca`, so each of its runs' egress is bound to
that one) and what removes it.

Its runs go through the one box path (`box.run_in_box(..., box=lasting.box)`); this module
only starts and removes the box. It imports nothing of the tools, so the kept browsers'
registry, which `Services` holds, can hold a lasting box without an import circle.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import dataclass

import anyio

from airlock.sandbox import Backend, JobSpec, Sandbox


@dataclass(eq=False)
class LastingBox:
    """A started box with egress and what removes it (and with it its CA)."""

    backend: Backend
    box: Sandbox
    exits: AsyncExitStack
    """Removes the box, then runs what was pushed on it before the box (its record's close)."""

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            await self.exits.aclose()


async def open_lasting(backend: Backend, job: JobSpec, exits: AsyncExitStack) -> LastingBox:
    """A box for `job` that lives until its `close` (the reaper's deadline is the job's
    `lifetime_s`); `exits` may already hold what must run once the box is gone."""
    box = await exits.enter_async_context(backend.sandbox(job, egress=True))
    return LastingBox(backend, box, exits)
