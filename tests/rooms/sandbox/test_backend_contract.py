"""The contract every sandbox backend passes, written against `sandbox.Backend`.

Each test takes a harness: a backend factory plus the facts only the platform can answer
(does the sandbox named N still exist; kill it from outside, as an operator or the OOM
killer would). `harness` runs a test on every backend: Docker under gVisor and under runc,
and the in-memory backend of the tests (tests/memory_backend.py), which needs no engine;
`DOCKER_ONLY` runs the tests of containment (network, environment, limits, the way out, the
processes inside) on Docker alone, since the in-memory backend contains nothing. A
Kubernetes backend would add a harness and pass the same tests (docs/backends.md). Each
behaviour is checked on a pooled sandbox and on a freshly created one.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio
import docker
import pytest
import trustme
from memory_backend import IMAGE, MemoryBackend, MemoryEngine, MemorySandbox
from support import require_runtime, wait_until

from airlock.egress import SOCKET_NAME
from airlock.errors import SandboxError
from airlock.sandbox import (
    ArtifactCaps,
    ContainerLimits,
    DockerBackend,
    EgressMount,
    InputFile,
    JobOutcome,
    JobSpec,
    Sandbox,
)
from airlock.sandbox.docker import DockerSandbox, registered_runtimes
from airlock.sandbox.environment import RELAY_PORT, sandbox_environment
from airlock.sandbox.inside.wire import SANDBOX_UID
from airlock.sandbox.instance import LABEL_INSTANCE, Instance
from airlock.sandbox.pool import Profile, WarmPool
from airlock.sandbox.runtime import GVISOR, RUNC
from airlock.store import BlobStore, Staging

pytestmark = [pytest.mark.anyio]

LIMITS = ContainerLimits(memory_mb=256, cpus=1.0, pids=128, workspace_mb=16, tmp_mb=16)
CAPS = ArtifactCaps(max_files=16, max_file_bytes=1 << 20, max_total_bytes=4 << 20)
POOLED = pytest.mark.parametrize("pool_size", [0, 2], ids=["fresh", "pooled"])
ON_DOCKER = [pytest.param(r, marks=pytest.mark.docker, id=f"docker-{r}") for r in (GVISOR, RUNC)]
EVERY_BACKEND = [*ON_DOCKER, pytest.param("memory", id="memory")]
DOCKER_ONLY = pytest.mark.parametrize("harness", ON_DOCKER, indirect=True)
"""For a test of containment: the `harness` fixture on Docker alone."""


class ContractBackend(Protocol):
    """A backend as the contract drives it: `Backend`, its pool and its lifetime."""

    pool: WarmPool

    def running(self) -> Any: ...
    def sandbox(self, job: JobSpec, *, egress: bool) -> Any: ...
    def in_use(self) -> int: ...
    async def remove_session(self, session_id: str) -> int: ...
    async def remove_all(self) -> int: ...
    async def reap(self, now: float) -> int: ...


@dataclass
class Harness:
    image: str
    runtime: str
    blobs: BlobStore
    staging: Staging
    """Where the jobs' files come from and where what they leave arrives (as drafts)."""

    def make(self, instance: Instance, pool_size: int) -> ContractBackend:
        raise NotImplementedError

    @asynccontextmanager
    async def backend(
        self, pool_size: int = 0, instance: Instance | None = None, *, egress: bool = False
    ) -> AsyncIterator[Any]:
        """A running backend; with a pool (of sandboxes with or without egress), once the
        pool is full."""
        backend = self.make(instance or Instance.current(), pool_size)
        async with backend.running():
            if pool_size:
                backend.pool.want(self.profile(egress=egress))
                await wait_until(lambda: backend.pool.ready_count() == pool_size, within=60)
            try:
                yield backend
            finally:
                with anyio.CancelScope(shield=True):
                    await backend.remove_all()

    def profile(self, *, egress: bool = False) -> Profile:
        return Profile(image=self.image, runtime=self.runtime, limits=LIMITS, egress=egress)

    @staticmethod
    def taken(backend: ContractBackend) -> int:
        """How many sandboxes have a job right now."""
        return backend.in_use()

    @staticmethod
    def pooled(backend: ContractBackend) -> list[str]:
        """The names of the sandboxes waiting in the pool right now."""
        return backend.pool.waiting()

    def name_of(self, box: Sandbox) -> str:
        raise NotImplementedError

    def kill(self, name: str) -> None:
        """Kill sandbox `name` from outside (an operator, the OOM killer) and return once
        the platform has it stopped."""
        raise NotImplementedError

    def exists(self, name: str) -> bool:
        """Whether the sandbox named `name` still exists."""
        raise NotImplementedError

    def of_instance(self, instance: Instance, *, running: bool = False) -> list[str]:
        """The sandboxes labelled with `instance` (only the running ones, if asked)."""
        raise NotImplementedError

    def egress_dirs(self, backend: ContractBackend) -> dict[str, Path]:
        """The egress directory of each sandbox made for egress, by sandbox."""
        raise NotImplementedError

    def job(self, code: str, **fields: Any) -> JobSpec:
        return JobSpec(
            **{
                "run_id": "run_" + os.urandom(8).hex(),
                "session_id": "ses_contract",
                "tenant": "contract",
                "image": self.image,
                "runtime": self.runtime,
                "language": "python",
                "code": code,
                "env": sandbox_environment(),
                "timeout_s": 20,
                "limits": LIMITS,
                "stream_cap_bytes": 1 << 20,
                "artifact_caps": CAPS,
                **fields,
            }
        )


@dataclass
class DockerHarness(Harness):
    engine: docker.DockerClient

    def make(self, instance: Instance, pool_size: int) -> DockerBackend:
        return DockerBackend(self.engine, instance, pool_size=pool_size)

    def name_of(self, box: Sandbox) -> str:
        assert isinstance(box, DockerSandbox)
        return box.container_id

    def kill(self, name: str) -> None:
        self.engine.api.kill(name)
        self.engine.api.wait(name, timeout=30)

    def exists(self, name: str) -> bool:
        """Also true for the hostname inside, which is the id's prefix on Docker."""
        found = self.engine.api.containers(all=True, filters={"id": name})
        return bool(found)

    def of_instance(self, instance: Instance, *, running: bool = False) -> list[str]:
        filters: dict[str, Any] = {"label": f"{LABEL_INSTANCE}={instance.id}"}
        if running:
            filters["status"] = "running"
        found = self.engine.api.containers(all=True, filters=filters)
        return [c["Id"] for c in found]

    def egress_dirs(self, backend: ContractBackend) -> dict[str, Path]:
        assert isinstance(backend, DockerBackend)
        return backend.containers.egress_dirs()

    def commands(self, name: str) -> list[str]:
        """The command lines of the processes the sandbox user sees in sandbox `name`."""
        listing = (
            "import os\n"
            "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
            "    try: line = open(f'/proc/{pid}/cmdline', 'rb').read()\n"
            "    except OSError: continue\n"
            "    print(line.replace(b'\\0', b' ').decode())\n"
        )
        return self.in_sandbox(name, listing).splitlines()

    def in_sandbox(self, name: str, program: str) -> str:
        """What the Python `program` prints as the sandbox user in sandbox `name`, run in
        a process the platform starts in there (the sandbox's own job is not involved)."""
        exec_id = self.engine.api.exec_create(name, ["python3", "-I", "-c", program], user="1000")
        output: bytes = self.engine.api.exec_start(exec_id["Id"])
        return output.decode()


@dataclass
class MemoryHarness(Harness):
    engine: MemoryEngine

    def make(self, instance: Instance, pool_size: int) -> MemoryBackend:
        return MemoryBackend(self.engine, instance, pool_size=pool_size)

    def name_of(self, box: Sandbox) -> str:
        assert isinstance(box, MemorySandbox)
        return box.name

    def kill(self, name: str) -> None:
        self.engine.kill(name)

    def exists(self, name: str) -> bool:
        return self.engine.exists(name)

    def of_instance(self, instance: Instance, *, running: bool = False) -> list[str]:
        boxes = self.engine.labelled(LABEL_INSTANCE, instance.id)
        return [b.name for b in boxes if b.running or not running]

    def egress_dirs(self, backend: ContractBackend) -> dict[str, Path]:
        return {n: b.egress_dir for n, b in self.engine.boxes.items() if b.egress_dir is not None}


@pytest.fixture(params=EVERY_BACKEND)
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    """Every backend in turn: Docker under gVisor and runc, and the in-memory backend."""
    async with _harness(request, tmp_path) as made:
        yield made


@asynccontextmanager
async def _harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    blobs = BlobStore(tmp_path / "blobs")
    async with blobs.staging() as staging:
        if request.param == "memory":
            yield MemoryHarness(IMAGE, IMAGE, blobs, staging, MemoryEngine())
            return
        client: docker.DockerClient = request.getfixturevalue("docker_client")
        require_runtime(request.param, registered_runtimes(client))
        image: str = request.getfixturevalue("sandbox_image")
        yield DockerHarness(image, request.param, blobs, staging, client)


async def run_one(harness: Harness, backend: Any, job: JobSpec) -> JobOutcome:
    async with backend.sandbox(job, egress=False) as box:
        outcome: JobOutcome = await box.run(job, harness.staging)
        return outcome


def report(outcome: JobOutcome) -> Any:
    assert outcome.status == "ok", (outcome, outcome.stderr.data)
    return json.loads(outcome.stdout.data)


PROBE = r"""
import json, os, socket
facts = {"hostname": socket.gethostname(), "env": dict(os.environ), "uid": os.getuid()}
facts["seen_before"] = sorted(os.listdir("/workspace")) + sorted(os.listdir("/tmp"))
open("/workspace/mark", "w").write("x")
open("/tmp/mark", "w").write("x")
facts["interfaces"] = sorted(name for _, name in socket.if_nameindex())
def attempt(fn):
    try:
        fn()
        return "reached"
    except OSError as exc:
        return type(exc).__name__
facts["tcp"] = attempt(lambda: socket.create_connection(("1.1.1.1", 53), timeout=3))
facts["dns"] = attempt(lambda: socket.getaddrinfo("example.com", 443))
print(json.dumps(facts))
"""


@DOCKER_ONLY
@POOLED
async def test_each_job_gets_a_fresh_sandbox_with_no_network_and_only_its_environment(
    harness: DockerHarness, pool_size: int
) -> None:
    async with harness.backend(pool_size) as backend:
        first = report(await run_one(harness, backend, harness.job(PROBE)))
        second = report(await run_one(harness, backend, harness.job(PROBE)))
    assert first["hostname"] != second["hostname"]
    # What one job left in /workspace and /tmp never reaches the next.
    assert "mark" not in second["seen_before"]
    assert first["seen_before"] == second["seen_before"]
    assert first["env"] == second["env"] == sandbox_environment()
    assert first["uid"] != 0
    assert first["interfaces"] == ["lo"]
    assert first["tcp"] != "reached"
    assert first["dns"] != "reached"


@POOLED
async def test_files_go_in_and_changed_files_come_out_with_streams_and_exit_code(
    harness: Harness, pool_size: int
) -> None:
    code = (
        "import sys\n"
        "data = open('in/data.txt').read()\n"
        "open('out.txt', 'w').write(data.upper())\n"
        "print('to stdout'); print('to stderr', file=sys.stderr); sys.exit(3)\n"
    )
    sha = await harness.blobs.put(b"hello")
    job = harness.job(code, files=(InputFile(path="in/data.txt", sha256=sha, size=5),))
    async with harness.backend(pool_size) as backend:
        outcome = await run_one(harness, backend, job)
    assert outcome.status == "error"
    assert outcome.exit_code == 3
    assert outcome.stdout.data == b"to stdout\n"
    assert outcome.stderr.data == b"to stderr\n"
    kept = {f.path: await harness.staging.keep(f.blob) for f in outcome.files}
    assert {path: await harness.blobs.read(sha) for path, sha in kept.items()} == {
        "out.txt": b"HELLO"
    }
    assert outcome.workspace is not None
    assert {e.path for e in outcome.workspace} == {"in", "in/data.txt", "out.txt"}


@POOLED
async def test_a_shell_job_starts_with_no_signal_ignored(harness: Harness, pool_size: int) -> None:
    """As a fresh process would: the interpreters that start the code ignore SIGPIPE and
    SIGXFSZ for themselves, and a program they hand over to must not inherit that (a
    pipeline's writer would see EPIPE errors instead of ending quietly)."""
    # A shell lists the signals it found ignored at its start as traps it cannot change.
    code = 'yes | head -n 1; echo "${PIPESTATUS[@]}"; trap -p\n'
    async with harness.backend(pool_size) as backend:
        outcome = await run_one(harness, backend, harness.job(code, language="bash"))
    assert outcome.status == "ok", outcome
    assert outcome.stdout.data == b"y\n141 0\n", outcome
    assert outcome.stderr.data == b"", outcome


# The commands an agent runs first, each as a step whose output (stderr too) and status
# come back under its name. Times are fixed, so what cp -a and find -newer did is checkable.
EVERYDAY = r"""
step() { name=$1; shift; echo "== $name"; "$@" 2>&1; echo "== status $?"; }
mkdir -p src/sub && printf 'hello\n' > src/sub/file.txt && ln -s file.txt src/sub/link
touch -d '2001-02-03 04:05:06 UTC' src/sub/file.txt
touch -d '2000-01-01 00:00:00 UTC' old
touch -d '1999-01-01 00:00:00 UTC' ancient
step ls-workspace ls -la /workspace
step ls-root ls -la /
step stat stat -c '%F|%s|%U|%n' src/sub/file.txt src/sub/link /
step cp cp -a src copy
step cp-kept stat -c '%Y|%N' copy/sub/file.txt copy/sub/link
step tar sh -c 'tar -cf src.tar src && mkdir unpacked && tar -xf src.tar -C unpacked'
step tar-kept stat -c '%Y|%s|%N' unpacked/src/sub/file.txt unpacked/src/sub/link
step du du -sb src/sub/file.txt
step find find src copy unpacked ancient -newer old -type f
step statx python3 -c 'import ctypes, errno
libc, buf = ctypes.CDLL(None, use_errno=True), ctypes.create_string_buffer(256)
def call(path, flags, mask):
    ctypes.set_errno(0)
    failed = libc.statx(-100, path, flags, mask, buf)
    return errno.errorcode[ctypes.get_errno()] if failed else "ok"
print(call(b"/", 0x800, 0x7FF), call(b"/absent", 0x800, 0x7FF), call(b"/", 0, 1 << 31))'
step git sh -c 'git init -q repo && cd repo && echo a > kept && git add kept &&
    git commit -qm first && echo b >> kept && echo c > new && git status --short'
"""


def steps(output: str) -> dict[str, tuple[list[str], str]]:
    """EVERYDAY's output by step: the lines it printed and its exit status."""
    found: dict[str, tuple[list[str], str]] = {}
    name, lines = "", list[str]()
    for line in output.splitlines():
        if line.startswith("== status "):
            found[name] = (lines, line.removeprefix("== status "))
        elif line.startswith("== "):
            name, lines = line.removeprefix("== "), []
        else:
            lines.append(line)
    return found


@DOCKER_ONLY
async def test_the_everyday_commands_work(harness: DockerHarness) -> None:
    """ls -l, stat and friends, under both runtimes: some gVisor releases refuse the statx
    flags coreutils passes (AT_NO_AUTOMOUNT), and `ls -la` then fails on every file."""
    async with harness.backend(0) as backend:
        outcome = await run_one(
            harness, backend, harness.job(EVERYDAY, language="bash", timeout_s=60)
        )
    assert outcome.status == "ok", outcome
    ran = steps(outcome.stdout.data.decode())
    failed = {name: lines for name, (lines, status) in ran.items() if status != "0"}
    assert not failed, failed
    assert len(ran) == EVERYDAY.count("\nstep "), ran
    listing = ran["ls-workspace"][0]
    assert listing[0].startswith("total "), listing
    for name, kind in (("src", "d"), ("old", "-"), ("ancient", "-"), (".", "d")):
        assert any(line.startswith(kind) and line.endswith(f" {name}") for line in listing), name
    root = ran["ls-root"][0]
    for name in ("etc", "tmp", "usr", "workspace"):
        assert any(line.startswith("d") and line.endswith(f" {name}") for line in root), root
    file, link, top = ran["stat"][0]
    assert (file, link) == (
        "regular file|6|sandbox|src/sub/file.txt",
        "symbolic link|8|sandbox|src/sub/link",
    ), ran["stat"]
    assert top.startswith("directory|") and top.endswith("|root|/"), ran["stat"]
    # cp -a and tar keep the modification time (981173106: 2001-02-03 04:05:06 UTC) and links.
    file, link = ran["cp-kept"][0]
    assert file == "981173106|'copy/sub/file.txt'", ran["cp-kept"]
    assert link.endswith("|'copy/sub/link' -> 'file.txt'"), ran["cp-kept"]
    file, link = ran["tar-kept"][0]
    assert file == "981173106|6|'unpacked/src/sub/file.txt'", ran["tar-kept"]
    assert link.endswith("|'unpacked/src/sub/link' -> 'file.txt'"), ran["tar-kept"]
    assert ran["du"][0] == ["6\tsrc/sub/file.txt"], ran["du"]
    # Newer than 2000: the 2001 files, not the 1999 one.
    assert sorted(ran["find"][0]) == [
        "copy/sub/file.txt",
        "src/sub/file.txt",
        "unpacked/src/sub/file.txt",
    ], ran["find"]
    # statx itself, as glibc offers it: with AT_NO_AUTOMOUNT (0x800) it works, and the real
    # errors stay what they are (a missing file, a reserved mask bit).
    assert ran["statx"][0] == ["ok ENOENT EINVAL"], ran["statx"]
    assert ran["git"][0] == [" M kept", "?? new"], ran["git"]


DESCRIPTORS = r"""
import json, os
held = {}
for fd in range(1024):
    try:
        os.fstat(fd)
    except OSError:
        continue
    held[fd] = os.readlink(f"/proc/self/fd/{fd}")
print(json.dumps(held))
"""


@DOCKER_ONLY
@POOLED
async def test_the_code_holds_no_descriptor_but_its_standard_three(
    harness: DockerHarness, pool_size: int
) -> None:
    """Nothing of the runner's reaches the code: not the host's report channel (the
    runner's stdin and stdout), not the pipe the code's process got its order from."""
    async with harness.backend(pool_size) as backend:
        held = report(await run_one(harness, backend, harness.job(DESCRIPTORS)))
    assert set(held) == {"0", "1", "2"}, held
    assert held["0"] == "/dev/null", held
    assert held["1"].startswith("pipe:") and held["2"].startswith("pipe:"), held
    assert held["1"] != held["2"], held


@DOCKER_ONLY
async def test_the_cpu_quota_holds_over_seconds(harness: DockerHarness) -> None:
    """Three busy processes on a quota of half a core: over the sandbox's life they get
    half a core a second, and at most one second's share more (the quota's period)."""
    cpus = 0.5
    job = harness.job(
        "for i in 1 2 3; do (while :; do :; done) & done\nsleep 4\n",
        language="bash",
        limits=LIMITS.model_copy(update={"cpus": cpus}),
    )
    async with harness.backend(0) as backend:
        started = time.monotonic()
        outcome = await run_one(harness, backend, job)
        elapsed = time.monotonic() - started
    assert outcome.status == "ok", outcome
    used = outcome.usage.cpu_seconds
    assert used is not None, outcome
    # Unlimited they would take both cores: about 8 s of CPU.
    assert 0.5 < used <= cpus * (elapsed + 1.0) + 0.2, (used, elapsed)


@DOCKER_ONLY
@POOLED
async def test_limits_hold_memory_pids_and_time(harness: DockerHarness, pool_size: int) -> None:
    memory = "hoard = [b'x' * (16 << 20) for _ in range(32)]\nprint('survived')"
    forks = (
        "import os, errno\n"
        "n = 0\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        "            import time; time.sleep(30)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print(n, e.errno)\n"
    )
    # Enough memory that the task limit, not memory, stops the forks: under gVisor's
    # ptrace platform every task costs a few MiB of the container's memory.
    few_tasks = ContainerLimits(memory_mb=1024, cpus=1.0, pids=32, workspace_mb=16, tmp_mb=16)
    async with harness.backend(pool_size) as backend:
        oom = await run_one(harness, backend, harness.job(memory))
        pids = await run_one(harness, backend, harness.job(forks, limits=few_tasks))
        slow = await run_one(
            harness, backend, harness.job("import time; time.sleep(60)", timeout_s=2)
        )
    assert oom.status == "oom", oom
    assert b"survived" not in oom.stdout.data
    count, code = pids.stdout.data.split()
    assert 16 < int(count) < few_tasks.pids
    assert int(code) == errno.EAGAIN
    assert slow.status == "timeout"


@DOCKER_ONLY
@POOLED
async def test_the_proxy_path_is_the_only_way_out_and_it_is_read_only(
    harness: DockerHarness, pool_size: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    code = r"""
import json, os, socket, urllib.request
facts = {"mount": sorted(os.listdir("/airlock/egress"))}
try:
    open("/airlock/egress/planted", "w")
    facts["write"] = "written"
except OSError as exc:
    facts["write"] = type(exc).__name__
relay = socket.create_connection(("127.0.0.1", 3128), timeout=10)
relay.sendall(b"ping")
facts["reply"] = relay.recv(16).decode()
print(json.dumps(facts))
"""
    ca = trustme.CA()
    async with harness.backend(pool_size, egress=True) as backend:
        job = harness.job(code)
        async with backend.sandbox(job, egress=True) as box:
            assert box.runtime == harness.runtime
            assert box.egress_dir is not None
            # Nothing listens yet: the directory was made when the sandbox was created.
            assert list(box.egress_dir.iterdir()) == []
            listener = await anyio.create_unix_listener(box.egress_dir / SOCKET_NAME)
            # As the proxy does: the sandbox user (another uid) must be able to connect.
            (box.egress_dir / SOCKET_NAME).chmod(0o666)

            async def answer(stream: anyio.abc.SocketStream) -> None:
                async with stream:
                    if await stream.receive(4) == b"ping":
                        await stream.send(b"pong")

            async with listener, anyio.create_task_group() as tg:
                tg.start_soon(listener.serve, answer)
                egress_job = job.model_copy(
                    update={"egress": EgressMount(ca_pem=ca.cert_pem.bytes().decode())}
                )
                outcome = await box.run(egress_job, harness.staging)
                tg.cancel_scope.cancel()
            egress_dir = box.egress_dir
        await wait_until(lambda: not egress_dir.exists(), within=30)
    facts = report(outcome)
    assert facts["mount"] == [SOCKET_NAME]
    assert facts["write"] != "written"
    assert facts["reply"] == "pong"


@DOCKER_ONLY
async def test_an_egress_sandbox_has_its_relay_running_before_it_is_given_a_job(
    harness: DockerHarness,
) -> None:
    """The relay starts with the sandbox, so a call does not wait for it; nothing is on
    the other end until the run's proxy binds the socket."""
    async with harness.backend(1, egress=True) as backend:
        job = harness.job("print(1)")
        async with backend.sandbox(job, egress=True) as box:
            assert backend.pool.hits == 1
            assert box.egress_dir is not None
            assert list(box.egress_dir.iterdir()) == []

            # The runner listens before it forks the relay, so once a connection is taken
            # the relay answers it; with no proxy bound, with a 502 naming the reason.
            probe = (
                "import socket, time\n"
                "for _ in range(300):\n"
                "    try:\n"
                f"        s = socket.create_connection(('127.0.0.1', {RELAY_PORT}), timeout=30)\n"
                "        break\n"
                "    except ConnectionRefusedError:\n"
                "        time.sleep(0.1)\n"
                "s.sendall(b'CONNECT example.com:443 HTTP/1.1\\r\\n\\r\\n')\n"
                "answer = b''\n"
                "while chunk := s.recv(65536):\n"
                "    answer += chunk\n"
                "print(answer.decode())\n"
            )
            answer = await anyio.to_thread.run_sync(harness.in_sandbox, box.container_id, probe)
            assert answer.startswith("HTTP/1.1 502 "), answer
            assert "the egress relay cannot reach Airlock's proxy (ENOENT)" in answer, answer


@DOCKER_ONLY
async def test_a_pooled_sandbox_has_the_codes_process_started_before_it_is_given_a_job(
    harness: DockerHarness,
) -> None:
    """The interpreter that will run the code is up before the job, as the sandbox user;
    the code then runs in it (tests/rooms/inside/test_prestart.py: as in a fresh one)."""
    async with harness.backend(1) as backend:
        job = harness.job(
            "import os, sys\n"
            "print(os.getuid(), any(a.endswith('prestart.py') for a in sys.orig_argv))\n"
        )
        async with backend.sandbox(job, egress=False) as box:
            assert backend.pool.hits == 1

            def waiting() -> bool:
                return any("prestart.py" in line for line in harness.commands(box.container_id))

            await wait_until(lambda: waiting(), within=60, interval=0.5)
            outcome = await box.run(job, harness.staging)
    assert outcome.stdout.data == f"{SANDBOX_UID} True\n".encode(), outcome


@DOCKER_ONLY
async def test_a_job_whose_waiting_process_died_runs_once_in_a_new_one(
    harness: DockerHarness,
) -> None:
    """The process started ahead may die while its sandbox waits (killed, out of memory):
    the job then gets a new one, and its code runs exactly once."""
    async with harness.backend(1) as backend:
        job = harness.job(
            "import os\n"
            "with open('/workspace/runs', 'a') as f:\n"
            "    f.write('run\\n')\n"
            "print(open('/workspace/runs').read().count('run'), os.getuid())\n"
        )
        async with backend.sandbox(job, egress=False) as box:

            def waiting() -> bool:
                return any("prestart.py" in line for line in harness.commands(box.container_id))

            await wait_until(lambda: waiting(), within=60, interval=0.5)
            killer = "import os, signal\n" + (
                "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
                "    try: line = open(f'/proc/{pid}/cmdline', 'rb').read()\n"
                "    except OSError: continue\n"
                "    if b'prestart.py' in line: os.kill(int(pid), signal.SIGKILL)\n"
            )
            await anyio.to_thread.run_sync(harness.in_sandbox, box.container_id, killer)
            await wait_until(lambda: not waiting(), within=60, interval=0.5)
            outcome = await box.run(job, harness.staging)
    assert outcome.status == "ok", outcome
    assert outcome.stdout.data == f"1 {SANDBOX_UID}\n".encode(), outcome


async def test_a_pooled_sandbox_that_died_is_never_handed_out_even_before_the_pool_hears(
    harness: Harness,
) -> None:
    async with harness.backend(2) as backend:
        dead = harness.pooled(backend)
        # Killed and seen stopped with the event loop blocked: the pool cannot have heard
        # of it (the engine's events wait for the loop), so only the check at take stands
        # between the job and a dead sandbox, whose attach would never end.
        for name in dead:
            harness.kill(name)
        job = harness.job("print('ran')")
        with anyio.fail_after(20):
            async with backend.sandbox(job, egress=False) as box:
                assert harness.name_of(box) not in dead
                outcome = await box.run(job, harness.staging)
    assert outcome.status == "ok", outcome
    assert outcome.stdout.data == b"ran\n"


async def test_a_pooled_sandbox_killed_while_it_waits_is_removed_and_replaced_at_once(
    harness: Harness,
) -> None:
    async with harness.backend(2) as backend:
        dead = harness.pooled(backend)[0]
        await anyio.to_thread.run_sync(harness.kill, dead)
        await wait_until(lambda: dead not in harness.pooled(backend), within=10)
        await wait_until(lambda: not harness.exists(dead), within=10)
        await wait_until(lambda: backend.pool.ready_count() == 2, within=30)
        assert backend.pool.dropped == 1
        outcome = await run_one(harness, backend, harness.job("print('ran')"))
    assert outcome.status == "ok", outcome


async def test_pooled_sandboxes_never_taken_leave_nothing_behind_when_the_backend_stops(
    harness: Harness,
) -> None:
    async with harness.backend(2, egress=True) as backend:
        # Each pooled sandbox made for egress has its own egress directory.
        waiting = harness.egress_dirs(backend)
        assert len(waiting) == 2
    for name, egress_dir in waiting.items():
        assert not harness.exists(name)
        assert not egress_dir.exists()


async def test_a_sandbox_takes_exactly_one_job(harness: Harness) -> None:
    async with harness.backend(1) as backend:
        job = harness.job("print(1)")
        async with backend.sandbox(job, egress=False) as box:
            assert (await box.run(job, harness.staging)).status == "ok"
            with pytest.raises(SandboxError, match="exactly one job"):
                await box.run(job, harness.staging)


@POOLED
async def test_a_sandbox_is_gone_once_its_block_ends(harness: Harness, pool_size: int) -> None:
    async with harness.backend(pool_size) as backend:
        job = harness.job("print(1)")
        async with backend.sandbox(job, egress=False) as box:
            name = harness.name_of(box)
            assert (await box.run(job, harness.staging)).status == "ok"
            assert harness.exists(name)
        await wait_until(lambda: not harness.exists(name), within=30)


async def test_a_backend_stopped_while_its_pool_fills_leaves_no_sandbox(
    harness: Harness,
) -> None:
    instance = Instance.current()
    backend = harness.make(instance, pool_size=2)
    async with backend.running():
        backend.pool.want(harness.profile())
        # Stop once the engine runs a sandbox the pool has not taken in yet.
        await wait_until(
            lambda: harness.of_instance(instance, running=True), within=60, interval=0.002
        )
    assert harness.of_instance(instance) == []


async def run_killable(
    harness: Harness, backend: Any, job: JobSpec, names: list[str], endings: list[str]
) -> None:
    """Run `job`, noting its sandbox's name and how it ended: "killed" when it was killed
    mid-run, "refused" when it was killed before it could start."""
    try:
        async with backend.sandbox(job, egress=False) as box:
            names.append(harness.name_of(box))
            endings.append((await box.run(job, harness.staging)).status)
    except SandboxError:
        endings.append("refused")


LONG = "import time; time.sleep(60)"


@POOLED
async def test_ending_a_session_kills_its_running_sandboxes(
    harness: Harness, pool_size: int
) -> None:
    names: list[str] = []
    endings: list[str] = []
    async with harness.backend(pool_size) as backend:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for _ in range(2):
                    job = harness.job(LONG, session_id="ses_doomed")
                    tg.start_soon(run_killable, harness, backend, job, names, endings)
                await wait_until(lambda: harness.taken(backend) == 2)
                assert await backend.remove_session("ses_doomed") == 2
    assert len(names) == 2
    assert set(endings) <= {"killed", "refused"} and len(endings) == 2
    for name in names:
        assert not harness.exists(name)


@POOLED
async def test_sandboxes_of_a_dead_server_are_reaped_by_the_next(
    harness: Harness, pool_size: int
) -> None:
    # A pid that no longer runs on "this host", as a killed server leaves behind. The host
    # name is the test's own, so other servers sharing the engine leave these containers
    # to their deadline instead of reaping them first.
    host = "contract-" + os.urandom(6).hex()
    dead = Instance(id="dead" + os.urandom(6).hex(), host=host, pid=2**22 + 1, pid_start="1")
    alive = dataclasses.replace(Instance.current(), host=host)
    names: list[str] = []
    endings: list[str] = []
    async with harness.backend(pool_size, instance=dead) as orphaned:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_killable, harness, orphaned, harness.job(LONG), names, endings)
                await wait_until(lambda: harness.taken(orphaned) == 1)
                async with harness.backend(instance=alive) as survivor:
                    assert await survivor.reap(now=0) >= 1
    assert len(names) == 1
    assert endings in (["killed"], ["refused"])
    assert not harness.exists(names[0])
