"""What an operator reads when something is missing or wrong: each message names the fix.

What a command says runs the CLI's `main` in this process; the doctor, the server and the
terminal note run the real `airlock` as a subprocess, and the server start runs in-process
with the SDK client.
"""

from __future__ import annotations

import json
import logging
import os
import pty
import signal
import socket
import subprocess
import time
import tomllib
from pathlib import Path

import anyio
import httpx
import pytest
from joserfc.jwk import OKPKey
from mcp.client import Client
from support import AIRLOCK, airlock, airlock_main

from airlock.errors import AuthConfigInvalid, EngineUnavailable
from airlock.policies import Policy, default_policy_toml
from airlock.sandbox import connect
from airlock.server import Config, build_server
from airlock.server.auth import AuthConfig, generate_api_key, hash_api_key, load_auth_config
from airlock.server.http import http_app

CAPABILITY_WITH_SECRET = """
[capabilities.github-read]
hosts = ["api.github.com"]
methods = ["GET"]
paths = ["/**"]
secret = "github_token"
inject = { header = "Authorization", format = "Bearer {secret}" }
"""


def system_path() -> dict[str, str]:
    """This environment with PATH cut to the system's, so that what doctor finds on PATH
    (debootstrap, for one) is the machine's and not the developer's."""
    return {**os.environ, "PATH": "/usr/bin:/bin"}


def test_policy_check_lists_every_problem_with_the_nearest_key(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("[limits]\nmax_timout_s = 100\nmemory_mb = 8\n[capabilities.x]\nhosts = []\n")
    result = airlock_main("policy", "check", str(policy))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{policy}: 5 problem(s)",
        "  - limits.memory_mb: must be at least 64",
        "  - limits.max_timout_s: unknown key (did you mean 'max_timeout_s'?)",
        '  - capabilities.x.hosts: list at least one host, such as hosts = ["api.example.com"]',
        "  - capabilities.x: methods is missing; list the methods allowed, such as "
        'methods = ["GET", "HEAD"]',
        "  - capabilities.x: paths is missing; list the paths allowed, such as "
        'paths = ["/**"] for all of them',
    ]


def test_policy_check_warns_about_a_secret_the_vault_lacks(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(CAPABILITY_WITH_SECRET)
    data = tmp_path / "data"
    missing = airlock_main("policy", "check", str(policy), "--data-dir", str(data))
    assert missing.returncode == 0, missing.stdout
    assert missing.stdout.splitlines() == [
        f"{policy}: valid",
        f"  warning: capability 'github-read' injects the secret 'github_token', which the vault "
        f"in {data} does not hold; store it with `airlock secrets set github_token "
        "--hosts api.github.com` (the value is read from stdin)",
    ]
    # Checking created nothing: no vault, no key.
    assert not data.exists()
    stored = airlock_main(
        "secrets",
        "set",
        "github_token",
        "--hosts",
        "api.github.com",
        "--data-dir",
        str(data),
        stdin="ghp_example\n",
    )
    assert stored.returncode == 0, stored.stderr
    present = airlock_main("policy", "check", str(policy), "--data-dir", str(data))
    assert present.stdout.splitlines() == [f"{policy}: valid"]


def test_doctor_flags_a_secret_the_vault_lacks(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(CAPABILITY_WITH_SECRET)
    result = airlock(
        "doctor", "--policy", str(policy), "--data-dir", str(tmp_path / "data"), env=system_path()
    )
    assert result.returncode == 1
    assert "[MISSING] secret: capability 'github-read' injects the secret 'github_token'" in (
        result.stdout
    )
    assert "fix: airlock secrets set github_token --hosts api.github.com" in result.stdout


@pytest.mark.anyio
async def test_the_server_warns_at_start_about_a_secret_the_vault_lacks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy = Policy.model_validate(
        {**tomllib.loads(CAPABILITY_WITH_SECRET), "sandbox": {"image": "airlock-test/absent:0"}}
    )
    server = build_server(Config(data_dir=tmp_path / "data"), policy)
    with caplog.at_level(logging.WARNING, logger="airlock.server.secret_check"):
        async with Client(server, mode="auto") as client:
            await client.list_tools()
    warnings = [r.getMessage() for r in caplog.records if r.name == "airlock.server.secret_check"]
    assert warnings == [
        f"capability 'github-read' injects the secret 'github_token', which the vault in "
        f"{tmp_path / 'data'} does not hold; store it with `airlock secrets set github_token "
        "--hosts api.github.com` (the value is read from stdin)"
    ]


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_policy_image_that_cannot_be_pulled_is_not_called_ready_and_names_the_fix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    absent = "example.invalid/nope:1"
    policy = Policy.model_validate({"sandbox": {"image": absent}})
    server = build_server(Config(data_dir=tmp_path / "data"), policy)
    with caplog.at_level(logging.INFO, logger="airlock.server.engine"):
        async with Client(server, mode="auto") as client:
            with anyio.fail_after(60):
                while True:
                    result = await client.call_tool("run_code", {"code": "print(1)"})
                    text = getattr(result.content[0], "text", "")
                    if "being pulled" not in text:
                        break
                    await anyio.sleep(0.2)  # the agent's retry, as the message asks
    assert result.is_error
    assert f"cannot pull {absent}" in text
    assert "check that the registry example.invalid is running" in text
    assert "airlock image build" not in text
    messages = [r.getMessage() for r in caplog.records if r.name == "airlock.server.engine"]
    assert not any("engine ready" in m for m in messages), messages
    assert any(m.startswith("sandbox engine not ready") and absent in m for m in messages)


@pytest.mark.docker
def test_doctor_names_the_pull_for_a_missing_policy_image(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[sandbox]\nimage = "example.invalid/nope:1"\n')
    result = airlock(
        "doctor", "--policy", str(policy), "--data-dir", str(tmp_path / "data"), env=system_path()
    )
    assert result.returncode == 1
    assert (
        "[MISSING] image: example.invalid/nope:1 (pulled from example.invalid by [sandbox] image)"
        " is not in the engine yet (`airlock serve` pulls it on first use)"
    ) in result.stdout
    assert "fix: docker pull example.invalid/nope:1" in result.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (['ac"me'], "tenant: 'ac\"me' is not a tenant name: use 1-63 lowercase letters"),
        (["Acme Corp"], "tenant: 'Acme Corp' is not a tenant name"),
        (["local"], "tenant: 'local' is not a tenant name: 'local' is reserved for the local"),
        (
            ["airlock-drill"],
            "tenant: 'airlock-drill' is not a tenant name: names starting with 'airlock-' are "
            "reserved for Airlock's own calls (`airlock drill` runs as 'airlock-drill', which "
            "`airlock policy usage` leaves out); choose another name",
        ),
        (["acme", "--id", 'x"y'], "id: 'x\"y' is not a key id"),
    ],
)
def test_keys_create_refuses_a_bad_name_before_making_a_key(
    tmp_path: Path, args: list[str], expected: str
) -> None:
    auth = tmp_path / "auth.toml"
    result = airlock_main("keys", "create", *args, "--auth", str(auth))
    assert result.returncode == 1
    assert result.stdout == ""  # no key was shown
    assert "no key created: " + expected in result.stderr
    assert result.stderr.count("is not") == 1  # one problem, not an echo of it
    assert not auth.exists()


def test_keys_create_prints_an_entry_the_auth_loader_accepts(tmp_path: Path) -> None:
    result = airlock("keys", "create", "acme", "--id", "ci.bot@acme", env=system_path())
    assert result.returncode == 0, result.stderr
    key = result.stdout.strip()
    entry = result.stderr[result.stderr.index("[[keys]]") :]
    auth = tmp_path / "auth.toml"
    auth.write_text(entry)
    [loaded] = load_auth_config(auth).keys
    assert (loaded.id, loaded.tenant, loaded.hash) == ("ci.bot@acme", "acme", hash_api_key(key))


def test_keys_create_appends_to_the_auth_file_safely(tmp_path: Path) -> None:
    auth = tmp_path / "auth.toml"
    auth.write_text(
        '# team keys\n[[keys]]\nid = "old"\ntenant = "acme"\nhash = "sha256:' + "0" * 64 + '"'
    )
    auth.chmod(0o644)
    first = airlock("keys", "create", "acme", "--id", "ci", "--auth", str(auth), env=system_path())
    second = airlock("keys", "create", "globex", "--auth", str(auth), env=system_path())
    assert first.returncode == 0 and second.returncode == 0, (first.stderr, second.stderr)
    assert f"added key ci for acme to {auth}" in first.stderr
    text = auth.read_text()
    assert text.startswith("# team keys\n")  # the operator's text is kept
    keys = {k.id: k for k in load_auth_config(auth).keys}
    assert keys["ci"].hash == hash_api_key(first.stdout.strip())
    assert [k.tenant for k in keys.values()] == ["acme", "acme", "globex"]
    assert auth.stat().st_mode & 0o777 == 0o600

    taken = airlock("keys", "create", "acme", "--id", "ci", "--auth", str(auth), env=system_path())
    assert taken.returncode == 1
    assert taken.stdout == ""
    assert "id 'ci' is used 2 times" in taken.stderr
    assert auth.read_text() == text  # a refused append leaves the file as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == [".auth.toml.lock", "auth.toml"]


def test_doctor_with_a_bad_docker_host_names_docker_host(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "DOCKER_HOST": "tcp://127.0.0.1:1"}
    result = airlock("doctor", "--data-dir", str(tmp_path), env=env)
    assert result.returncode == 1
    assert "[MISSING] docker: cannot reach the engine at DOCKER_HOST=tcp://127.0.0.1:1 (" in (
        result.stdout
    )
    assert "fix: start the engine DOCKER_HOST names, or correct DOCKER_HOST" in result.stdout
    assert "airlock doctor" not in result.stdout  # it is the command being run


def test_the_server_names_a_bad_docker_host_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    with pytest.raises(EngineUnavailable, match=r"at DOCKER_HOST=tcp://127\.0\.0\.1:1 "):
        connect()


def test_serving_on_a_taken_port_says_so_and_exits_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = airlock(
            "serve", "--http", "--port", port, "--data-dir", str(tmp_path), env=system_path()
        )
    assert result.returncode == 2
    assert result.stderr.strip().endswith(f"port {port} is in use; pick another with --port")
    assert "serving MCP" not in result.stderr and "Traceback" not in result.stderr


def _auth_file(tmp_path: Path, jwt: bool) -> AuthConfig:
    _, digest = generate_api_key()
    text = f'[[keys]]\nid = "ci"\ntenant = "acme"\nhash = "{digest}"\n'
    if jwt:
        key = OKPKey.generate_key("Ed25519", parameters={"kid": "k1"})
        (tmp_path / "jwks.json").write_text(json.dumps({"keys": [key.as_dict(private=False)]}))
        text += '[jwt]\nissuer = "https://login.example.com"\naudience = "airlock"\n'
        text += 'jwks_file = "jwks.json"\nalgorithms = ["Ed25519"]\n'
    (tmp_path / "auth.toml").write_text(text)
    return load_auth_config(tmp_path / "auth.toml")


async def _unauthenticated(tmp_path: Path, auth: AuthConfig) -> tuple[httpx.Response, ...]:
    app = http_app(
        Config(data_dir=tmp_path / "data"),
        Policy(),
        host="127.0.0.1",
        port=8765,
        auth=auth,
        allowed_hosts=[],
        allowed_origins=[],
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as http:
        call = await http.post("/mcp", json={})
        metadata = await http.get("/.well-known/oauth-protected-resource/mcp")
        server_metadata = await http.get("/.well-known/oauth-authorization-server")
    return call, metadata, server_metadata


@pytest.mark.anyio
async def test_with_api_keys_only_no_authorization_server_is_advertised(tmp_path: Path) -> None:
    call, metadata, server_metadata = await _unauthenticated(tmp_path, _auth_file(tmp_path, False))
    assert call.status_code == 401
    assert "resource_metadata" not in call.headers["www-authenticate"]
    # Nothing points at Airlock as an authorization server, and it does not pretend to be one.
    assert metadata.status_code == 404
    assert server_metadata.status_code == 404


@pytest.mark.anyio
async def test_with_jwts_the_metadata_names_the_real_issuer(tmp_path: Path) -> None:
    call, metadata, _ = await _unauthenticated(tmp_path, _auth_file(tmp_path, True))
    assert call.status_code == 401
    assert (
        'resource_metadata="http://127.0.0.1:8765/.well-known/oauth-protected-resource/mcp"'
        in (call.headers["www-authenticate"])
    )
    assert metadata.status_code == 200
    assert metadata.json()["authorization_servers"] == ["https://login.example.com"]
    assert metadata.json()["resource"] == "http://127.0.0.1:8765/mcp"


def test_policy_init_writes_the_commented_default_for_editing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = airlock_main("policy", "init")
    written = tmp_path / "airlock.toml"
    assert result.returncode == 0, result.stderr
    assert written.read_bytes() == default_policy_toml()
    assert "# " in written.read_text()  # commented, for editing
    assert "airlock policy check airlock.toml" in result.stderr
    # The server an agent starts runs in a directory of its own: it needs the whole path.
    assert f"airlock serve --policy {written.resolve()}`" in result.stderr
    assert airlock_main("policy", "check", str(written)).stdout.splitlines() == [
        f"{written}: valid"
    ]

    written.write_text("# mine\n")
    again = airlock_main("policy", "init", str(written))
    assert again.returncode == 1
    assert f"{written} exists" in again.stderr
    assert written.read_text() == "# mine\n"  # never overwritten


def test_serve_typed_in_a_terminal_says_it_waits_and_how_to_register(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    # No warm browser box: this test is the terminal's message, and on a loaded CI engine
    # the Ctrl-C below waited over 60 s for a pooled browser box's start and removal.
    policy.write_text('[sandbox]\nimage = "airlock-test/absent:0"\n[browser]\npool = 0\n')
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [AIRLOCK, "serve", "--policy", str(policy), "--data-dir", str(tmp_path / "data")],
        stdin=terminal,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(terminal)
    try:
        assert process.stderr is not None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while not any("claude mcp add" in line for line in lines):
            assert time.monotonic() < deadline, lines
            line = process.stderr.readline()
            assert line, lines  # the server must not exit
            lines.append(line)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
        os.close(controller)
        if process.stderr is not None:
            process.stderr.close()
    text = "".join(lines)
    assert "waiting for an MCP client" in text
    assert (
        f"  claude mcp add airlock -- {AIRLOCK} serve --policy {policy} "
        f"--data-dir {tmp_path / 'data'}\n"
    ) in text


def test_serve_started_by_a_client_prints_no_terminal_note(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[sandbox]\nimage = "airlock-test/absent:0"\n')
    # stdin at EOF (not a terminal): the server ends at once, having said nothing of the sort.
    result = airlock(
        "serve", "--policy", str(policy), "--data-dir", str(tmp_path / "data"), env=system_path()
    )
    assert result.returncode == 0, result.stderr
    assert "waiting for an MCP client" not in result.stderr
    assert "claude mcp add" not in result.stderr


def test_a_misspelt_auth_file_key_gets_the_nearest_one_suggested(tmp_path: Path) -> None:
    path = tmp_path / "auth.toml"
    path.write_text('[[keys]]\nid = "ci"\ntennant = "acme"\nhash = "sha256:' + "0" * 64 + '"\n')
    with pytest.raises(AuthConfigInvalid) as caught:
        load_auth_config(path)
    assert caught.value.problems == [
        "keys[0].tenant: required but missing",
        "keys[0].tennant: unknown key (did you mean 'tenant'?)",
    ]


def test_policy_check_says_when_it_cannot_read_the_vault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(CAPABILITY_WITH_SECRET)
    data = tmp_path / "data"
    stored = airlock_main(
        "secrets",
        "set",
        "other",
        "--hosts",
        "api.example.com",
        "--data-dir",
        str(data),
        stdin="v\n",
    )
    assert stored.returncode == 0, stored.stderr
    monkeypatch.setenv("AIRLOCK_VAULT_KEY_FILE", str(tmp_path / "no"))
    result = airlock_main("policy", "check", str(policy), "--data-dir", str(data))
    assert result.returncode == 0  # the policy itself is valid
    lines = result.stdout.splitlines()
    assert lines[0] == f"{policy}: valid"
    assert lines[1].startswith(
        "  warning: cannot check that the vault holds the capabilities' secrets: "
        f"AIRLOCK_VAULT_KEY_FILE={tmp_path / 'no'} does not exist"
    )


@pytest.mark.parametrize(
    ("args", "fix"),
    [
        (("serve", "--policy", "{missing}"), "airlock policy init {missing}"),
        (("serve", "--http", "--auth", "{missing}"), "airlock keys create TENANT --auth {missing}"),
        (("serve", "--http", "--auth", "{bad}"), "airlock keys create TENANT --auth {bad}"),
    ],
)
def test_a_missing_or_bad_config_file_is_said_line_by_line_with_its_fix(
    tmp_path: Path, args: tuple[str, ...], fix: str
) -> None:
    bad = tmp_path / "auth.toml"
    bad.write_text('[[keys]]\nid = "x"\n')
    names = {"missing": str(tmp_path / "nowhere.toml"), "bad": str(bad)}
    env = {**os.environ, "AIRLOCK_DATA_DIR": str(tmp_path / "data")}
    result = airlock(*(arg.format(**names) for arg in args), env=env)
    assert result.returncode == 1
    assert "\\n" not in result.stderr, result.stderr  # each problem is its own log line
    lines = result.stderr.splitlines()
    assert any(line.endswith(":   - keys[0].tenant: required but missing") for line in lines) or (
        "nowhere" in result.stderr and "cannot read the file" in result.stderr
    ), result.stderr
    assert fix.format(**names) in result.stderr, result.stderr


@pytest.mark.parametrize(
    "command",
    [("audit", "runs"), ("patch", "list"), ("approvals", "list"), ("policy", "usage")],
)
def test_an_operator_command_on_a_data_dir_without_records_names_the_data_dir_to_use(
    tmp_path: Path, command: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = tmp_path / "not-the-servers"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    result = airlock_main(*command, "--data-dir", str(wrong))
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"no Airlock records in {wrong}" in result.stderr, result.stderr
    assert "--data-dir" in result.stderr and "AIRLOCK_DATA_DIR" in result.stderr
    assert not wrong.exists(), "an operator command must not create an empty data dir"
