"""The one path from a call to a run in a box: its job, record, staging area, the box, its
egress and the proxy token in its environment, the run, the shielded keep and teardown.

Every tool that runs something in a sandbox (`run_code`, `browse` one-shot and kept) goes
through `run_in_box`, in this order:

1. the run's record is created (`recorded_run`: it is ended once, however the call ends)
   and a staging area opened for the files the box sends;
2. the kind's `prepare` runs (run_code records what the run started from);
3. the box: a fresh one from the backend (removed when the run is over), or one that
   outlives its calls (a kept browser's, `lasting_box.open_lasting`); a box made with a
   CA of its own (a browser box's, `Sandbox.ca`) has its run's proxy bound to that CA;
4. when the box has an egress directory, the run's egress opens on it (`Network` says
   with which grants, whether secrets are injected or withheld, and which token value
   the box already presents), and the job gets the proxy token and CA; the run's egress
   decisions go to its record;
5. the job runs (with progress), and its outcome is the run's;
6. what the run left is kept under a shield (the kind's `keep`): it ran, so a cancelled
   call still keeps it.

A new kind of box is one module and one entry: the module builds its `JobSpec` with
`new_job`, says what its run keeps, calls `run_in_box` and makes its result; the entry
registers its tool (`server/registration/`).

Belongs here: the order above and the wiring of a box to its run. Does not belong here:
what a kind validates or answers (its tool module), the proxy (`egress/`), how a backend
starts or removes a container (`sandbox/`), a run record's end (`run_record.py`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anyio

from airlock.broker import Grant, Secret
from airlock.egress import SecretUse
from airlock.ids import new_id
from airlock.policies import Policy
from airlock.sandbox import (
    EXCHANGE_GRACE_S,
    Backend,
    EgressMount,
    JobOutcome,
    JobSpec,
    Sandbox,
)
from airlock.sandbox.environment import sandbox_environment
from airlock.store import ArtifactRecord, EgressRecord, RunRecord, Staging

from .context import Services, Session
from .progress import Progress, run_reporting
from .run_record import OpenRun, recorded_run

T = TypeVar("T")

Keep = Callable[[JobOutcome, Staging], Awaitable[T]]
"""What a kind keeps of its run's outcome (its files are drafts in the staging area)."""


@dataclass(frozen=True)
class Network:
    """How a run's egress opens, when its box has any."""

    grants: Sequence[Grant]
    secrets: SecretUse
    """"inject" each grant's secret as its capability says, or "withhold" them all (a
    browser box: its page decides what its browser sends)."""
    always: bool = False
    """Give the box egress even with no grant and no allow rule (a browser's page is itself
    a request the proxy decides); else only when the grants or [egress] allow need it."""
    token: Secret | None = None
    """The run token value the box already presents (a kept browser's: its Chromium keeps
    the credentials it answered the first challenge with), bound to this run now; None: a
    new value."""


@dataclass(frozen=True)
class BoxCall:
    """One call's run in a box: who asks, on which backend, the job and its network."""

    services: Services
    session: Session
    policy: Policy
    backend: Backend
    job: JobSpec
    network: Network
    recorded_limits: Mapping[str, Any]
    """The limits the run record keeps (the policy section the job's limits came from)."""
    source: bytes
    """What the run was asked to do, kept as a blob its record names (the code, a request)."""
    progress: Progress | None = None


@dataclass(frozen=True)
class BoxRun(Generic[T]):
    """A run that ended with an outcome: its record as created, what it kept, its egress."""

    record: RunRecord
    outcome: JobOutcome
    kept: T
    egress: Sequence[EgressRecord]
    token: Secret | None
    """The run token value the box was given (None: the box had no egress)."""


def new_job(session: Session, **fields: Any) -> JobSpec:
    """The job of a new run of `session`, with the environment every box starts from (the
    proxy token is added when the run's egress opens); `fields`: the rest of its `JobSpec`
    (image, runtime, language, timeout, limits, caps and the kind's own)."""
    return JobSpec(
        run_id=new_id("run_"),
        session_id=session.id,
        tenant=session.tenant,
        env=sandbox_environment(),
        **fields,
    )


def artifact(
    job: JobSpec, path: str, *, sha256: str, size: int, mime_type: str, at: float
) -> ArtifactRecord:
    """A file the run left (or a stream it wrote), as an artifact of the run alone."""
    return ArtifactRecord(
        run_id=job.run_id, tenant=job.tenant, created_at=at,
        path=path, sha256=sha256, size=size, mime_type=mime_type,
    )  # fmt: skip


async def run_in_box(
    call: BoxCall,
    keep: Keep[T],
    *,
    box: Sandbox | None = None,
    again: bool = False,
    prepare: Callable[[], Awaitable[None]] | None = None,
) -> BoxRun[T]:
    """Run `call.job` in `box` (None: a fresh box of the backend's, removed once the job
    ran; `again`: the next job of a kept box) and keep its outcome with `keep`."""
    services = call.services
    record = await _record(call)
    # The files the run leaves arrive as drafts in a staging area, never whole in memory;
    # only those `keep` keeps become blobs, and the block's end removes the rest.
    async with services.blobs.staging() as staging, recorded_run(services, record) as run:
        if prepare is not None:
            await prepare()
        if box is not None:
            outcome, token = await _run(call, run, box, staging, again)
        else:
            network = call.network
            egress = network.always or services.egress.needed(
                network.grants, settings=call.policy.egress
            )
            async with call.backend.sandbox(call.job, egress=egress) as fresh:
                outcome, token = await _run(call, run, fresh, staging, again)
        run.ran(outcome)
        # What the box left is kept even if the call is cancelled now: it ran.
        with anyio.CancelScope(shield=True):
            kept = await keep(outcome, staging)
    return BoxRun(record, outcome, kept, run.egress, token)


async def _record(call: BoxCall) -> RunRecord:
    job = call.job
    services = call.services
    return RunRecord(
        id=job.run_id, session_id=job.session_id, tenant=job.tenant, runtime=job.runtime,
        language=job.language, timeout_s=int(job.timeout_s), limits=dict(call.recorded_limits),
        status="running", created_at=services.clock(), instance_id=services.instance_id,
        code_sha256=await services.blobs.put(call.source),
    )  # fmt: skip


async def _run(
    call: BoxCall, run: OpenRun, box: Sandbox, staging: Staging, again: bool
) -> tuple[JobOutcome, Secret | None]:
    """The job on `box`, through the run's own egress when the box has any (over the CA
    the box was made with, if it was); its outcome and the token value it was given."""
    job = call.job
    if box.egress_dir is None:
        alone = await run_reporting(call.backend, box, job, staging, call.progress, again=again)
        return alone, None
    services = call.services
    policy = call.policy
    network = call.network
    async with services.egress.open(
        settings=policy.egress,
        secrets=network.secrets,
        capabilities=policy.capabilities,
        tenant=job.tenant,
        session_id=job.session_id,
        run_id=job.run_id,
        grants=network.grants,
        deadline=services.clock() + job.timeout_s + EXCHANGE_GRACE_S,
        socket_dir=box.egress_dir,
        ca=box.ca,
        token=network.token,
    ) as run_egress:
        run.egress = run_egress.records
        plan = run_egress.plan
        job = job.model_copy(
            update={
                "env": sandbox_environment(proxy_token=plan.token.reveal()),
                "egress": EgressMount(ca_pem=plan.ca_pem),
            }
        )
        try:
            outcome: JobOutcome | None = await run_reporting(
                call.backend, box, job, staging, call.progress, again=again
            )
        except Exception as exc:
            # Raised below, out of the proxy's task group, which would wrap it in an
            # ExceptionGroup that the tool's error mapping cannot read.
            failure: Exception | None = exc
            outcome = None
        else:
            failure = None
    if failure is not None:
        raise failure
    assert outcome is not None
    return outcome, plan.token
