"""Warm browser boxes on the real engine, in the real browser image, under runc and runsc:
each pooled box waits with Chromium running and a CA of its own, is handed out once and
replaced, and trusts only that CA; `[browser] pool = 0` starts none; a kept browser's box
is made for its session; a box killed while it waits is dropped and replaced.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import docker
import pytest
from support import wait_until

from airlock.egress.tls import RunCA
from airlock.errors import RunnerFailed
from airlock.policies import BrowserSettings
from airlock.sandbox import ArtifactCaps, DockerBackend, EgressMount, JobSpec
from airlock.sandbox.browser_image import BROWSER_LABEL
from airlock.sandbox.docker.labels import LABEL_KEPT, LABEL_RUN, LABEL_SESSION
from airlock.sandbox.docker.options import profile_of
from airlock.sandbox.environment import EGRESS_MOUNT, sandbox_environment
from airlock.sandbox.instance import LABEL_INSTANCE, Instance
from airlock.sandbox.spec import BrowseJob, browser_limits
from airlock.store import BlobStore

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

# A browser box and its Chromium start in a few seconds under gVisor on a busy machine.
READY_WITHIN_S = 90


def browse_job(image: str, runtime: str, *, keep: bool = False) -> JobSpec:
    return JobSpec(
        run_id="run_" + os.urandom(8).hex(),
        session_id="ses_" + os.urandom(8).hex(),
        tenant="pool",
        image=image,
        runtime=runtime,
        language="browse",
        code="",
        env=sandbox_environment(proxy_token="not-a-token"),
        timeout_s=20,
        limits=browser_limits(BrowserSettings()),
        stream_cap_bytes=16 * 1024,
        artifact_caps=ArtifactCaps(max_files=4, max_file_bytes=1 << 20, max_total_bytes=1 << 20),
        browse=BrowseJob(
            url="https://localhost/",
            actions=(),
            screenshot=False,
            max_snapshot_lines=100,
            width=1280,
            height=800,
            max_pages=1,
            max_title_chars=100,
            max_url_chars=100,
            max_error_chars=500,
            keep=keep,
        ),
    )


@asynccontextmanager
async def browser_backend(
    client: docker.DockerClient, image: str, runtime: str, size: int
) -> AsyncIterator[DockerBackend]:
    """A running backend keeping `size` browser boxes ready, once they are."""
    backend = DockerBackend(client, Instance.current(), browser_pool_size=size)
    async with backend.running():
        backend.pool.want(profile_of(browse_job(image, runtime), egress=True))
        await wait_until(lambda: backend.pool.ready_count() == size, within=READY_WITHIN_S)
        yield backend


def in_box(client: docker.DockerClient, container_id: str, program: str) -> str:
    result = client.containers.get(container_id).exec_run(
        ["python3", "-I", "-S", "-c", program], user="0:0"
    )
    assert result.exit_code == 0 and isinstance(result.output, bytes), result.output
    return result.output.decode()


def runs_chromium(client: docker.DockerClient, container_id: str) -> bool:
    listing = (
        "import os\n"
        "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try: print(open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')[0].decode())\n"
        "    except OSError: pass\n"
    )
    return "/usr/lib/chromium/chromium" in in_box(client, container_id, listing).split()


def exists(client: docker.DockerClient, container_id: str) -> bool:
    return bool(client.api.containers(all=True, filters={"id": container_id}))


async def take_one(backend: DockerBackend, client: docker.DockerClient, job: JobSpec) -> bytes:
    """Take the one waiting box; check it is the one handed out, trusts its own CA, is
    replaced by another once its call gave it back (not while the call runs, whose
    Chromium would share the CPU with the new one's start), and is gone after its block;
    its CA's certificate."""
    [waiting] = backend.pool.waiting()
    started = backend.pool.started
    async with backend.sandbox(job, egress=True) as box:
        assert box.container_id == waiting
        assert box.ca is not None
        # The box trusts exactly the CA it was made with, given it before it started.
        shown = in_box(client, waiting, f"print(open('{EGRESS_MOUNT}/ca.pem').read())")
        assert shown.strip() == box.ca.pem.decode().strip()
        assert backend.pool.waiting() == [] and backend.pool.started == started
    await wait_until(lambda: backend.pool.waiting() not in ([], [waiting]), within=READY_WITHIN_S)
    await wait_until(lambda: not exists(client, waiting), within=30)
    return box.ca.pem


async def test_a_pooled_box_waits_with_chromium_and_its_own_ca_is_handed_out_once_and_replaced(
    docker_client: docker.DockerClient, browser_image: str, sandbox_runtime: str
) -> None:
    job = browse_job(browser_image, sandbox_runtime)
    async with browser_backend(docker_client, browser_image, sandbox_runtime, 1) as backend:
        [first] = backend.pool.waiting()
        # Chromium is up before any job: that is what a taken box saves.
        await wait_until(lambda: runs_chromium(docker_client, first), within=READY_WITHIN_S)
        one = await take_one(backend, docker_client, job)
        two = await take_one(backend, docker_client, job)
        assert backend.pool.hits == 2 and one != two
        assert first not in backend.pool.waiting()


async def test_a_box_refuses_a_job_whose_ca_is_not_its_own(
    docker_client: docker.DockerClient, browser_image: str, sandbox_runtime: str
) -> None:
    job = browse_job(browser_image, sandbox_runtime)
    other = Path(tempfile.mkdtemp(prefix="airlock-test-ca-"))
    try:
        stranger = RunCA("run_stranger", other / "private")
        with_ca = job.model_copy(update={"egress": EgressMount(ca_pem=stranger.pem.decode())})
        async with (
            browser_backend(docker_client, browser_image, sandbox_runtime, 1) as backend,
            backend.sandbox(job, egress=True) as box,
            BlobStore(other / "blobs").staging() as staging,
        ):
            with pytest.raises(RunnerFailed) as refused:
                await box.run(with_ca, staging)
        assert "the job's CA is not the one this box trusts" in str(refused.value.reported)
    finally:
        shutil.rmtree(other, ignore_errors=True)


async def test_no_browser_box_waits_when_the_browser_pool_is_zero(
    docker_client: docker.DockerClient, browser_image: str, sandbox_runtime: str
) -> None:
    instance = Instance.current()
    backend = DockerBackend(docker_client, instance, pool_size=2, browser_pool_size=0)
    async with backend.running():
        backend.pool.want(profile_of(browse_job(browser_image, sandbox_runtime), egress=True))
        assert backend.pool.ready_count() == 0 and backend.pool.waiting() == []
        job = browse_job(browser_image, sandbox_runtime)
        # A browse then gets a box made for it, and nothing is left waiting after it.
        async with backend.sandbox(job, egress=True) as box:
            assert box.ca is not None and backend.pool.hits == 0
            labels = docker_client.containers.get(box.container_id).labels
            assert labels[LABEL_SESSION] == job.session_id and labels[BROWSER_LABEL] == "1"
        mine = {"label": f"{LABEL_INSTANCE}={instance.id}"}
        await wait_until(
            lambda: not docker_client.api.containers(all=True, filters=mine), within=30
        )
        assert backend.pool.ready_count() == 0 and backend.pool.started == 0


async def test_a_kept_browser_gets_a_box_labelled_for_its_session_never_a_pooled_one(
    docker_client: docker.DockerClient, browser_image: str, sandbox_runtime: str
) -> None:
    job = browse_job(browser_image, sandbox_runtime, keep=True)
    async with browser_backend(docker_client, browser_image, sandbox_runtime, 1) as backend:
        [waiting] = backend.pool.waiting()
        pooled: dict[str, Any] = docker_client.containers.get(waiting).labels
        # A pooled box is a browser's from the start; its session is not known yet.
        assert pooled[BROWSER_LABEL] == "1" and pooled[LABEL_SESSION] == ""
        async with backend.sandbox(job, egress=True) as box:
            assert box.container_id != waiting and backend.pool.waiting() == [waiting]
            labels = docker_client.containers.get(box.container_id).labels
            assert labels[LABEL_SESSION] == job.session_id and labels[LABEL_RUN] == job.run_id
            assert labels[LABEL_KEPT] == "1" and labels[BROWSER_LABEL] == "1"
            assert box.ca is not None


async def test_a_pooled_box_killed_while_it_waits_is_dropped_and_replaced(
    docker_client: docker.DockerClient, browser_image: str, sandbox_runtime: str
) -> None:
    async with browser_backend(docker_client, browser_image, sandbox_runtime, 1) as backend:
        [dead] = backend.pool.waiting()
        await anyio.to_thread.run_sync(docker_client.api.kill, dead)
        await wait_until(lambda: dead not in backend.pool.waiting(), within=30)
        await wait_until(lambda: not exists(docker_client, dead), within=30)
        await wait_until(lambda: backend.pool.ready_count() == 1, within=READY_WITHIN_S)
        assert backend.pool.dropped == 1
        [fresh] = backend.pool.waiting()
        await wait_until(lambda: runs_chromium(docker_client, fresh), within=READY_WITHIN_S)
