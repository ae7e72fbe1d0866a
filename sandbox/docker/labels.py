"""The labels every sandbox container carries, and what they decide.

Belongs here: the label names beyond the instance's own (`sandbox/instance.py`), the
labels of a container made for a job and of a pooled one, and the reaper's rule
(`is_reapable`: its owner is dead, or its deadline passed). Session teardown and the
reaper find containers by these labels, so a crashed server's containers are found too.
Pure: nothing here calls the engine.

Labels are fixed when a container is created, so a pooled one (a run's box or a one-shot
browse's) has empty session, run and tenant labels for life: while it serves a call the
backend records its session (`DockerBackend._active`), which session teardown adds to what
the labels find, and the reaper spares it; after a crash its owner is dead and it is
reaped. A browser box is told apart by its image's own label (`browser_image.BROWSER_LABEL`,
`airlock.browser=1`) whether pooled or not, and a kept browser (`LABEL_KEPT`) never comes
from the pool: its box is made for it, labelled with its session, run and a deadline as
long as its session's.
"""

from __future__ import annotations

import time

from ..backend import EXCHANGE_GRACE_S
from ..instance import Instance
from ..pool import MAX_AGE_S as POOL_MAX_AGE_S
from ..spec import JobSpec

LABEL_SESSION = "airlock.session"
LABEL_RUN = "airlock.run"
LABEL_TENANT = "airlock.tenant"
LABEL_DEADLINE = "airlock.deadline"
LABEL_KEPT = "airlock.kept_browser"
"""On a browser box kept across calls (`browse(keep=true)`): told apart from a run's box."""


def job_labels(instance: Instance, job: JobSpec) -> dict[str, str]:
    """The labels of a container created for `job`: whose, gone by when, and whether it is
    a kept browser's."""
    kept = {LABEL_KEPT: "1"} if job.browse is not None and job.browse.keep else {}
    return {
        **kept,
        **instance.labels(),
        LABEL_SESSION: job.session_id,
        LABEL_RUN: job.run_id,
        LABEL_TENANT: job.tenant,
        LABEL_DEADLINE: str(
            int(time.time() + max(job.timeout_s, job.lifetime_s or 0) + EXCHANGE_GRACE_S)
        ),
    }


def pooled_labels(instance: Instance) -> dict[str, str]:
    """The labels of a pooled container: no session, run or tenant yet."""
    return {
        **instance.labels(),
        LABEL_SESSION: "",
        LABEL_RUN: "",
        LABEL_TENANT: "",
        # A taken container may run up to the longest timeout past its pool age;
        # the reaper also skips containers that are in use.
        LABEL_DEADLINE: str(int(time.time() + POOL_MAX_AGE_S + 3600)),
    }


def is_reapable(labels: dict[str, str], instance: Instance, now: float) -> bool:
    """Whether a container labelled `labels`, seen by `instance`, is left over: its owner
    is dead, or its deadline (Unix seconds) is before `now`; a bad deadline is past."""
    if instance.owner_is_dead(labels):
        return True
    try:
        return float(labels.get(LABEL_DEADLINE, "0")) < now
    except ValueError:
        return True
