"""The `airlock` command line as an operator uses it.

What a command says and returns is checked by calling the CLI's `main` in this process;
start-up imports, the doctor and a key written through a redirected stdout run the real
`airlock` as a subprocess."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import anyio
import docker
import docker.errors
import pytest
from support import AIRLOCK, ROOT, airlock, airlock_main

from airlock.server.cli import main
from airlock.server.config import DRILL_TENANT, Config
from airlock.server.doctor import run_checks
from airlock.store import Database, HatchCopyRecord, PatchRecord, SessionRecord

HEAVY = ("mcp", "docker", "uvicorn", "starlette", "httpx", "airlock.server.app", "airlock.egress")
"""What only serving, drilling and the Docker commands need: a command that does neither
must start without them (they made `airlock --help` take seconds)."""


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    help_text = capsys.readouterr().out
    for command in ("serve", "image", "doctor", "audit", "policy", "secrets"):
        assert command in help_text


def test_version_is_the_installed_one_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"airlock {version('airlock-mcp')}\n"


def _imported(*args: str) -> set[str]:
    """Every module `airlock ARGS` imports, from the interpreter's own import report."""
    result = airlock(*args, env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 0, result.stderr
    found = set(re.findall(r"^import time: +\d+ \| +\d+ \| +(\S+)$", result.stderr, re.M))
    assert "airlock.server.cli" in found, result.stderr  # the report was read
    return found


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("secrets", "list"),
        ("audit", "runs", "--help"),
        # The operator's commands that read a server's records: none serves or runs code.
        ("audit", "runs"),
        ("audit", "capabilities"),
        ("approvals", "list"),
        ("patch", "list"),
        ("policy", "usage"),
    ],
)
def test_light_commands_start_without_the_sdk_docker_or_the_proxy(
    args: tuple[str, ...], tmp_path: Path
) -> None:
    data_dir = () if args[0] == "--help" else ("--data-dir", str(tmp_path))
    if args[0] in ("audit", "approvals", "patch", "policy"):
        anyio.run(_empty_records, tmp_path / "airlock.db")
    found = _imported(*args, *data_dir)
    heavy = sorted(m for m in found if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert not heavy, heavy


async def _empty_records(path: Path) -> None:
    db = await Database.open(path)
    await db.close()


def test_secret_value_comes_from_stdin_and_is_never_shown_or_stored_in_clear(
    tmp_path: Path,
) -> None:
    value = "sk-live-7d1f3a9c0b"
    stored = airlock_main(
        "secrets",
        "set",
        "github_token",
        "--hosts",
        "api.github.com",
        "--data-dir",
        str(tmp_path),
        stdin=value + "\n",
    )
    listed = airlock_main("secrets", "list", "--data-dir", str(tmp_path))
    assert stored.returncode == 0, stored.stderr
    assert listed.stdout.strip() == "github_token  api.github.com"
    for output in (stored.stdout, stored.stderr, listed.stdout, listed.stderr):
        assert value not in output
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert value.encode() not in path.read_bytes(), path
    removed = airlock_main("secrets", "rm", "github_token", "--data-dir", str(tmp_path))
    assert removed.returncode == 0
    assert airlock_main("secrets", "list", "--data-dir", str(tmp_path)).stdout.strip() == (
        "no secrets stored"
    )
    assert (
        airlock_main("secrets", "rm", "github_token", "--data-dir", str(tmp_path)).returncode == 1
    )


def test_secret_needs_hosts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["secrets", "set", "x", "--data-dir", str(tmp_path)])
    assert exited.value.code == 2
    assert "--hosts" in capsys.readouterr().err


def test_policy_check_lists_every_problem_and_fails(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[limits]\ntimeout_s = 0\nbogus = 1\n[capabilities.x]\nhosts = ["*"]\n')
    result = airlock_main("policy", "check", str(bad))
    assert result.returncode == 1
    assert result.stdout.splitlines()[0] == f"{bad}: 5 problem(s)"
    assert "limits.timeout_s: must be at least 1" in result.stdout
    assert "limits.bogus" in result.stdout
    assert "capabilities.x" in result.stdout


def test_policy_check_accepts_the_shipped_default() -> None:
    default = ROOT / "policies" / "default.toml"
    result = airlock_main("policy", "check", str(default))
    assert result.returncode == 0
    assert "valid" in result.stdout


def test_policy_schema_is_json_schema_of_the_policy() -> None:
    schema = json.loads(airlock_main("policy", "schema").stdout)
    assert {"limits", "capabilities", "egress"} <= set(schema["properties"])


@pytest.mark.docker
def test_doctor_reports_engine_image_and_data_dir(tmp_path: Path) -> None:
    result = airlock("doctor", "--data-dir", str(tmp_path / "d"))
    assert result.returncode == 0, result.stdout
    assert "[ok ] docker" in result.stdout
    # CI registers gVisor (the conftest fails every Docker test there otherwise).
    assert "[ok ] runtime: gVisor (runsc) is registered" in result.stdout
    assert "[ok ] image" in result.stdout
    assert "[ok ] commands: `ls -la /` and `stat /` work in a sandbox under runsc" in result.stdout
    assert "[ok ] data dir" in result.stdout
    # CI builds the browser image too (`airlock image build --browser`).
    assert "[ok ] browser image: airlock-browser:" in result.stdout


@pytest.fixture
def image_without_statx_shim(
    docker_client: docker.DockerClient, sandbox_image: str
) -> Iterator[str]:
    """The sandbox image without its statx shim (/etc/ld.so.preload gone): as it was before."""
    tag = f"airlock-test-noshim:{os.urandom(6).hex()}"
    recipe = f"FROM {sandbox_image}\nUSER 0:0\nRUN rm /etc/ld.so.preload\nUSER 1000:1000\n"
    docker_client.images.build(
        fileobj=io.BytesIO(recipe.encode()), tag=tag, network_mode="none", rm=True, forcerm=True
    )
    try:
        yield tag
    finally:
        docker_client.images.remove(tag, force=True)


def _stat_works(client: docker.DockerClient, image: str, runtime: str) -> bool:
    try:
        client.containers.run(
            image,
            entrypoint="/usr/bin/stat",
            command=["/"],
            runtime=runtime,
            user="1000:1000",
            network_mode="none",
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges:true"],
            remove=True,
        )
    except docker.errors.ContainerError:
        return False
    return True


@pytest.mark.docker
def test_doctor_says_when_the_runtime_breaks_ls_and_names_the_fix(
    tmp_path: Path, docker_client: docker.DockerClient, image_without_statx_shim: str
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[sandbox]\nruntime = "runsc"\nimage = "{image_without_statx_shim}"\n')
    result = airlock("doctor", "--policy", str(policy), "--data-dir", str(tmp_path / "d"))
    # Whether this engine's runsc refuses AT_NO_AUTOMOUNT, asked without Airlock: doctor
    # must say what is true of the engine it checks (Debian's runsc 20221219 refuses it).
    if _stat_works(docker_client, image_without_statx_shim, "runsc"):
        assert "[ok ] commands: `ls -la /` and `stat /` work" in result.stdout, result.stdout
        return
    assert result.returncode == 1, result.stdout
    assert (
        "[MISSING] commands: in a sandbox under runsc: `ls -la /` fails (exit status 2); "
        '`stat /` fails (exit status 1) with "Invalid argument": the runtime refuses the '
        "statx flag AT_NO_AUTOMOUNT"
    ) in result.stdout, result.stdout
    assert "fix: run the image Airlock builds (`airlock image build`" in result.stdout


def test_doctor_names_the_fix_for_an_unreachable_engine(tmp_path: Path) -> None:
    result = airlock(
        "doctor",
        "--data-dir",
        str(tmp_path),
        env={"PATH": "/usr/bin:/bin", "DOCKER_HOST": "tcp://127.0.0.1:1"},
    )
    assert result.returncode == 1
    assert "MISSING] docker" in result.stdout
    assert "fix:" in result.stdout


@pytest.mark.docker
def test_doctor_says_building_the_image_needs_root_and_how(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An extra Debian package: a base that is not built, checked by a non-root user.
    policy = tmp_path / "policy.toml"
    policy.write_text('[image]\ndebian_packages = ["graphviz"]\n')
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    checks = {
        check.name: check
        for check in run_checks(Config(data_dir=tmp_path / "d", policy_path=policy))
    }
    assert not checks["image"].ok
    assert not checks["root"].ok
    assert "root" not in {
        check.name for check in run_checks(Config(data_dir=tmp_path / "d", policy_path=None))
    }, "with the base built, the layer needs no root"
    assert "needs root" in checks["root"].detail
    assert checks["root"].fix.startswith("sudo ") and "airlock image build" in checks["root"].fix
    # The fix builds this policy's image, not the default one.
    assert checks["image"].fix == f"airlock image build --policy {policy}"
    assert checks["root"].fix.startswith(f"sudo .venv/bin/airlock image build --policy {policy} ")


def test_a_key_redirected_to_a_file_is_not_readable_through_a_descriptor_opened_early(
    tmp_path: Path,
) -> None:
    # `keys create acme > acme.key` under umask 022: the shell makes acme.key 0644 before
    # airlock starts, and another user may open it then; a later chmod leaves their
    # descriptor readable. The key must not reach the file they opened.
    key_file = tmp_path / "acme.key"
    out = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.fchmod(out, 0o644)
    early = os.open(key_file, os.O_RDONLY)
    try:
        made = subprocess.run(
            [AIRLOCK, "keys", "create", "acme"], stdout=out, capture_output=False, check=False
        )
        assert made.returncode == 0
        assert os.read(early, 4096) == b""
    finally:
        os.close(early)
        os.close(out)
    assert key_file.read_text().startswith("alk_")
    assert key_file.stat().st_mode & 0o777 == 0o600


def test_a_reader_that_leaves_early_ends_the_command_without_a_traceback() -> None:
    # What `airlock patch show ID | head` meets: the pipe's reader is gone before the end.
    read, write = os.pipe()
    os.close(read)
    try:
        command = [AIRLOCK, "policy", "schema"]
        done = subprocess.run(command, stdout=write, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode == 141, done.stderr


@pytest.mark.parametrize("action", [["show"], ["apply", "--to", "."]])
def test_an_unknown_patch_names_the_records_it_looked_in(tmp_path: Path, action: list[str]) -> None:
    anyio.run(_empty_records, tmp_path / "airlock.db")
    patch_id = "pat_" + "a" * 26
    verb, *rest = action
    done = airlock_main("patch", verb, patch_id, *rest, "--data-dir", str(tmp_path))
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert f"no patch '{patch_id}'" in line and f"the data dir {tmp_path}" in line
    assert "--data-dir or --store of the agent's server" in line


async def _patches_of_a_user_and_the_drill(path: Path) -> None:
    db = await Database.open(path)
    try:
        for n, tenant in enumerate(["local", DRILL_TENANT]):
            session, copy = f"ses_{n}", "cpy_" + str(n) * 26
            await db.create_session(
                SessionRecord(id=session, tenant=tenant, created_at=0, last_used_at=0, expires_at=1)
            )
            await db.add_copy(
                HatchCopyRecord(
                    id=copy,
                    tenant=tenant,
                    session_id=session,
                    root="repo",
                    root_path="/repo",
                    dest="repo",
                    baseline_sha256="0" * 64,
                    files=1,
                    bytes=1,
                    version=1,
                    created_at=n,
                )
            )
            await db.add_patch(
                PatchRecord(
                    id="pat_" + str(n) * 26,
                    copy_id=copy,
                    tenant=tenant,
                    session_id=session,
                    created_at=n,
                    version=2,
                    sha256="0" * 64,
                    size=1,
                    entries=[],
                    held_back=[],
                    refused=[],
                )
            )
    finally:
        await db.close()


def test_patch_list_leaves_the_drills_patches_out_unless_asked_and_marks_them(
    tmp_path: Path,
) -> None:
    anyio.run(_patches_of_a_user_and_the_drill, tmp_path / "airlock.db")
    mine, drills = "pat_" + "0" * 26, "pat_" + "1" * 26
    listed = airlock_main("patch", "list", "--data-dir", str(tmp_path))
    assert listed.returncode == 0, listed.stderr
    assert mine in listed.stdout and drills not in listed.stdout, listed.stdout
    for asked in (["--drill"], ["--session", "ses_1"]):
        shown = airlock_main("patch", "list", *asked, "--data-dir", str(tmp_path))
        [row] = [line for line in shown.stdout.splitlines() if drills in line]
        assert "ses_1 (drill)" in row, shown.stdout
    everything = airlock_main("patch", "list", "--drill", "--data-dir", str(tmp_path)).stdout
    [row] = [line for line in everything.splitlines() if mine in line]
    assert "(drill)" not in row, everything
