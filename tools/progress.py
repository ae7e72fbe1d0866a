"""Progress of a long run_code call: elapsed time and bytes of output so far.

The MCP client gets a progress notification every `INTERVAL_S` while the sandbox runs
(the SDK drops them when the caller asked for none). A notification carries our own
numbers only, never text the sandbox wrote: that leaves only inside the envelope.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import anyio

from airlock.sandbox import Backend, JobOutcome, JobSpec, Sandbox
from airlock.store import Staging

log = logging.getLogger(__name__)

INTERVAL_S = 1.0

Progress = Callable[[float, str], Awaitable[None]]
"""Reports (seconds elapsed, message) to the caller."""


async def run_reporting(
    backend: Backend,
    box: Sandbox,
    job: JobSpec,
    staging: Staging,
    progress: Progress | None,
    *,
    again: bool = False,
) -> JobOutcome:
    """`box.run(job, staging)` (a sandbox of `backend`), or with `again` `box.step` (a
    kept browser's next job), reporting progress each second after the first."""
    run = box.step if again else box.run
    if progress is None:
        return await run(job, staging)
    started = time.monotonic()

    async def tick() -> None:
        while True:
            await anyio.sleep(INTERVAL_S)
            elapsed = time.monotonic() - started
            received = backend.output_bytes(job.run_id)
            try:
                await progress(
                    elapsed, f"running for {elapsed:.0f} s; {received} bytes of output so far"
                )
            except Exception as exc:
                # A client that cannot take notifications must not stop the run.
                log.debug("progress notification failed: %s", exc)
                return

    outcome: JobOutcome | None = None
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        # Kept out of the task group, which would wrap it in an ExceptionGroup that
        # tool_errors cannot map (a runner fault became "Error executing tool").
        try:
            outcome = await run(job, staging)
        except Exception as exc:
            failure = exc
        tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
    assert outcome is not None
    return outcome
