"""Choosing the runtime (pure), the gVisor seccomp profile, and the warm pool's refill."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import anyio
import docker.errors
import pytest
import requests
from support import wait_until

from airlock.errors import SandboxError
from airlock.sandbox import ContainerLimits
from airlock.sandbox.docker.events import EngineWatch
from airlock.sandbox.pool import Profile, WarmPool
from airlock.sandbox.runtime import REGISTER_GVISOR, choose_runtime
from airlock.sandbox.seccomp import gvisor_profile, gvisor_security_opt

WITH_GVISOR = {"runc", "io.containerd.runc.v2", "runsc"}
WITHOUT = {"runc", "io.containerd.runc.v2"}


@pytest.mark.parametrize(
    ("wanted", "registered", "runtime", "warns"),
    [
        ("auto", WITH_GVISOR, "runsc", False),
        ("auto", WITHOUT, "runc", True),
        ("runc", WITH_GVISOR, "runc", False),
        ("runsc", WITH_GVISOR, "runsc", False),
    ],
)
def test_choose_runtime(wanted: str, registered: set[str], runtime: str, warns: bool) -> None:
    choice = choose_runtime(wanted, registered)
    assert choice.runtime == runtime
    if warns:
        assert choice.warning is not None
        assert REGISTER_GVISOR in choice.warning
        assert 'runtime = "runc"' in choice.warning
        assert "\n" not in choice.warning
    else:
        assert choice.warning is None


def test_runsc_asked_for_but_missing_names_the_registration_fix() -> None:
    with pytest.raises(SandboxError) as caught:
        choose_runtime("runsc", WITHOUT)
    message = str(caught.value)
    assert "apt-get install runsc" in message
    assert "/etc/docker/daemon.json" in message
    assert '"--network=none", "--host-uds=open", "--oci-seccomp"' in message
    assert "kill -HUP" in message


def test_gvisor_profile_refuses_escapes_and_lets_clone3_reach_the_sentry() -> None:
    profile = gvisor_profile()
    refused = {name for rule in profile["syscalls"] for name in rule["names"]}
    assert {"unshare", "setns", "mount", "ptrace", "bpf", "keyctl", "clone"} <= refused
    assert {"get_mempolicy", "mbind", "syslog", "sethostname", "chroot"} <= refused
    assert "clone3" not in refused
    assert json.loads(gvisor_security_opt().removeprefix("seccomp=")) == profile


LIMITS = ContainerLimits(memory_mb=128, cpus=1.0, pids=64, workspace_mb=16, tmp_mb=16)


@pytest.mark.anyio
async def test_pool_starts_missing_containers_in_parallel_and_counts() -> None:
    in_flight = 0
    most = 0
    release = anyio.Event()
    started: list[str] = []

    async def start(profile: Profile) -> str:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await release.wait()
        in_flight -= 1
        started.append(f"c{len(started)}")
        return started[-1]

    async def remove(container_id: str) -> None:
        raise AssertionError("nothing is old enough to remove")

    pool = WarmPool(4, start, remove)
    profile = Profile(image="img", runtime="runsc", limits=LIMITS)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(pool.refill_forever)
            assert pool.take(profile) is None
            await wait_until(lambda: most == 4, within=5)
            release.set()
            await wait_until(lambda: pool.ready_count() == 4, within=5)
            taken = {pool.take(profile), pool.take(profile)}
            # Each taken container is replaced at once; none is handed out twice.
            await wait_until(lambda: pool.started == 6, within=5)
            rest = {pool.take(profile) for _ in range(4)}
            tg.cancel_scope.cancel()
    assert most == 4
    assert None not in taken | rest
    assert not taken & rest
    assert (pool.hits, pool.misses, pool.started, pool.failures) == (6, 1, 6, 0)


@pytest.mark.anyio
async def test_pool_lost_with_its_engine_hands_out_nothing_until_it_is_back() -> None:
    release = anyio.Event()
    started: list[str] = []
    removed: list[str] = []

    async def start(profile: Profile) -> str:
        if len(started) >= 2:
            await release.wait()
        started.append(f"c{len(started)}")
        return started[-1]

    async def remove(container_id: str) -> None:
        removed.append(container_id)

    pool = WarmPool(2, start, remove)
    profile = Profile(image="img", runtime="runsc", limits=LIMITS)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(pool.refill_forever)
            pool.want(profile)
            await wait_until(lambda: pool.ready_count() == 2, within=5)
            assert pool.discard("c0") and not pool.discard("c0")
            # c2 starts to replace c0 and is still starting when the engine goes.
            await wait_until(lambda: len(started) == 2 and pool._starting[profile] == 1, within=5)
            assert pool.lose_engine() == ["c1"]
            assert pool.take(profile) is None and pool.ready_count() == 0
            release.set()
            # A start that overlapped the lost engine is removed, not kept.
            await wait_until(lambda: removed == ["c2"], within=5)
            assert pool.ready_count() == 0
            pool.engine_back()
            await wait_until(lambda: pool.ready_count() == 2, within=5)
            taken = pool.take(profile)
            tg.cancel_scope.cancel()
    assert taken in {"c3", "c4"}
    assert pool.dropped == 3


@pytest.mark.anyio
async def test_browser_boxes_are_kept_to_their_own_size_and_go_with_a_lost_engine() -> None:
    started: list[Profile] = []

    async def start(profile: Profile) -> str:
        started.append(profile)
        return f"c{len(started)}"

    async def remove(container_id: str) -> None:
        pass

    pool = WarmPool(3, start, remove, browser_size=1)
    runs = Profile(image="img", runtime="runsc", limits=LIMITS, egress=True)
    browsers = Profile(image="browser", runtime="runsc", limits=LIMITS, egress=True, browser=True)
    off = WarmPool(3, start, remove, browser_size=0)
    off.want(browsers)
    assert off.take(browsers) is None and (off.misses, off.ready_count()) == (0, 0)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(pool.refill_forever)
            pool.want(runs)
            pool.want(browsers)
            await wait_until(lambda: pool.ready_count() == 4, within=5)
            assert started.count(browsers) == 1
            # A browser box is replaced once its call gives it back, not while it runs.
            lent = pool.take(browsers)
            await anyio.wait_all_tasks_blocked()
            assert lent is not None and started.count(browsers) == 1
            pool.give_back(browsers)
            await wait_until(lambda: pool.ready_count() == 4, within=5)
            assert started.count(browsers) == 2
            # An engine restart takes the browser box too; it is started again once back.
            assert len(pool.lose_engine()) == 4 and pool.take(browsers) is None
            pool.engine_back()
            await wait_until(lambda: pool.ready_count() == 4, within=5)
            tg.cancel_scope.cancel()
    assert started.count(browsers) == 3 and pool.dropped == 4


@pytest.mark.anyio
async def test_an_engine_refusing_its_event_stream_leaves_the_pool_serving() -> None:
    class Api:
        def events(self, **_: Any) -> None:
            raise docker.errors.APIError("page not found", response=requests.Response())

    async def start(profile: Profile) -> str:
        return "c"

    async def remove_many(container_ids: list[str]) -> None:
        raise AssertionError("nothing was lost")

    pool = WarmPool(1, start, lambda container_id: remove_many([container_id]))
    profile = Profile(image="img", runtime="runsc", limits=LIMITS)
    watch = EngineWatch(SimpleNamespace(api=Api()), "label", pool, remove_many)  # type: ignore[arg-type]
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(pool.refill_forever)
            pool.want(profile)
            await watch.run()
            await wait_until(lambda: pool.ready_count() == 1, within=5)
            assert pool.take(profile) == "c"
            tg.cancel_scope.cancel()
