"""The README's promises that CI relies on, and everything in it that can be checked.

Commands must exist with the options shown, snippets must parse, the example policies must
pass `airlock policy check`, and configuration values must be the real defaults (read from
the policy model, so a changed default fails here until the README follows).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import stat
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from support import AIRLOCK, NO_POOL_TOML, ROOT, airlock_main, free_port

from airlock.policies import Policy
from airlock.server.auth import load_auth_config
from airlock.server.cli import _parser

README = (ROOT / "README.md").read_text(encoding="utf-8")
# The README and the docs it sends readers to: every command, snippet and default in them is
# checked alike (the README first, so its opening commands stay first).
DOCS = sorted((ROOT / "docs").glob("*.md"))
TEXTS = "\n".join([README, *(doc.read_text(encoding="utf-8") for doc in DOCS)])
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w*)\n(?P<body>.*?)^(?P=indent)```", re.M | re.S)
SEPARATORS = {"&&", "||", "|", ";"}


def _blocks(lang: str) -> list[str]:
    found = []
    for match in FENCE.finditer(TEXTS):
        if match["lang"] == lang:
            indent = len(match["indent"])
            found.append("".join(line[indent:] for line in match["body"].splitlines(True)))
    return found


def _commands() -> list[str]:
    return [block.strip() for block in _blocks("sh")]


def _is_airlock(token: str) -> bool:
    return token == "airlock" or token.endswith("/bin/airlock")


def _shell_invocations() -> Iterator[list[str]]:
    """The arguments of every airlock started by a command in a sh block."""
    for block in _blocks("sh"):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            command: list[str] = []
            for word in [*words, ";"]:
                if word not in SEPARATORS:
                    command.append(word)
                    continue
                yield from _airlock_in(command)
                command = []


def _airlock_in(command: list[str]) -> Iterator[list[str]]:
    words = []
    skip = False
    for word in command:  # redirections are the shell's, not the command's
        if skip:
            skip = False
        elif word in (">", "2>", ">>"):
            skip = True
        else:
            words.append(word)
    if words and _is_airlock(words[0]):
        yield words[1:]
    elif words[:3] == ["claude", "mcp", "add"] and "--" in words:
        rest = words[words.index("--") + 1 :]
        if rest and _is_airlock(rest[0]):
            yield rest[1:]


def _json_invocations() -> Iterator[list[str]]:
    """The `args` of every client entry that starts airlock."""

    def walk(node: Any) -> Iterator[list[str]]:
        if isinstance(node, dict):
            if _is_airlock(str(node.get("command", ""))):
                yield [str(arg) for arg in node.get("args", [])]
            for value in node.values():
                yield from walk(value)
        elif isinstance(node, list):
            for value in node:
                yield from walk(value)

    for block in _blocks("json"):
        yield from walk(json.loads(block))


def _parse(args: list[str]) -> argparse.Namespace:
    try:
        return _parser().parse_args(args)
    except SystemExit as exc:
        raise AssertionError(f"the README runs `airlock {shlex.join(args)}`, which fails") from exc


def test_readme_opens_with_the_serve_command_then_the_test_command() -> None:
    serve, test = _commands()[:2]
    assert serve.endswith("airlock serve")
    assert test.endswith("pytest")


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1] == _commands()[1]


def test_the_readme_installs_every_package_ci_installs() -> None:
    """The README's install line, the block after the test command, names what `.ci/run`
    installs on a fresh machine: one missing package fails the README's own test command."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    installed = {p for group in re.findall(r"missing\+=\(([^)]*)\)", ci) for p in group.split()}
    line = _commands()[2]
    assert line.startswith("apt-get install -y "), line
    assert set(line.split()[3:]) == installed
    assert installed >= {"docker.io", "debootstrap", "docker-registry", "postgresql", "npm"}


def test_every_airlock_command_in_a_shell_block_or_client_config_parses() -> None:
    invocations = [*_shell_invocations(), *_json_invocations()]
    assert len(invocations) >= 10, invocations  # the extraction itself works
    for args in invocations:
        _parse(args)


def test_shell_blocks_never_call_a_bare_airlock() -> None:
    # After the README's own commands, `airlock` is in .venv/bin, not on PATH.
    for block in _blocks("sh"):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            starts = [w for i, w in enumerate(words) if i == 0 or words[i - 1] in SEPARATORS]
            assert "airlock" not in starts, line


def _known(words: list[str]) -> tuple[list[str], argparse.ArgumentParser]:
    """Walk the subcommands named by `words`; the path taken and the parser reached."""
    parser, path = _parser(), []
    while words and words[0] in _subcommands(parser):
        path.append(words[0])
        parser = _subcommands(parser)[words.pop(0)]
    return path, parser


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_every_airlock_command_named_in_the_prose_exists_with_its_options() -> None:
    spans = re.findall(r"`(?:\.venv/bin/)?airlock ([a-z][^`]*)`", TEXTS)
    assert len(spans) >= 15, spans
    for span in spans:
        words = shlex.split(span.replace("[", " ").replace("]", " ").replace("…", ""))
        rest = list(words)
        path, parser = _known(rest)
        assert path, f"`airlock {span}` names no command"
        # A command group may be named alone (`airlock audit`), never with a wrong action.
        assert not (_subcommands(parser) and rest), f"`airlock {span}`: no such action"
        options = {w.split("=")[0] for w in words if w.startswith("--")}
        unknown = options - set(parser._option_string_actions)
        assert not unknown, f"`airlock {span}`: no option {sorted(unknown)}"


def test_json_and_toml_snippets_parse() -> None:
    assert len(_blocks("json")) >= 5
    for block in _blocks("json"):
        json.loads(block)
    assert len(_blocks("toml")) >= 3
    for block in _blocks("toml"):
        tomllib.loads(block)


def _policy_examples() -> list[str]:
    return [b for b in _blocks("toml") if "[limits]" in b or "[capabilities." in b]


@pytest.mark.parametrize("index", range(len(_policy_examples())))
def test_the_example_policies_pass_policy_check(tmp_path: Path, index: int) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(_policy_examples()[index], encoding="utf-8")
    result = airlock_main("policy", "check", str(path), "--data-dir", str(tmp_path / "data"))
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[0] == f"{path}: valid"


def test_the_configuration_example_shows_the_real_defaults() -> None:
    [example] = [b for b in _policy_examples() if "[limits]" in b]
    defaults = Policy().model_dump()
    shown = tomllib.loads(example)
    assert {"limits", "pool"} <= set(shown)
    for section, values in shown.items():
        if not isinstance(values, dict):
            assert values == defaults[section], section
            continue
        for key, value in values.items():
            assert value == defaults[section][key], f"[{section}] {key} = {value} in the README"


def test_the_auth_file_example_loads(tmp_path: Path) -> None:
    [example] = [b for b in _blocks("toml") if "[[keys]]" in b]
    (tmp_path / "acme-policy.toml").write_text("version = 1\n")
    path = tmp_path / "auth.toml"
    path.write_text(example, encoding="utf-8")
    config = load_auth_config(path)
    assert [k.tenant for k in config.keys] == ["acme"]
    assert config.jwt is not None


def test_the_readme_links_only_files_that_exist() -> None:
    for target in re.findall(r"\]\(([^)#:]+)\)", README):
        assert (ROOT / target).exists(), target
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#:]+)", doc.read_text(encoding="utf-8")):
            assert (doc.parent / target).exists(), f"{doc.name} links {target}"
    for name in re.findall(r"`([A-Z]+\.md)`", README):
        assert (ROOT / name).exists(), f"the README names {name}, which is not in the repository"


def test_defaults_named_in_the_prose_are_the_real_ones() -> None:
    defaults = Policy()
    timeout = re.search(r"`timeout_s` defaults to the policy's default \((\d+) s\)", TEXTS)
    inline = re.search(r"inline up to (\d+) KiB; the whole stream \(up to (\d+) MiB\)", TEXTS)
    assert timeout is not None and inline is not None
    assert int(timeout[1]) == defaults.limits.timeout_s
    assert int(inline[1]) * 1024 == defaults.output.inline_bytes
    assert int(inline[2]) * 1024 * 1024 == defaults.output.stream_cap_bytes


def _section_commands(heading: str) -> list[str]:
    """The lines of the first sh block under the README heading `heading`."""
    section = README.split(f"\n{heading}\n", 1)[1]
    block = FENCE.search(section)
    assert block is not None and block["lang"] == "sh", f"no sh block under {heading}"
    return [line for line in block["body"].splitlines() if line.strip()]


@pytest.mark.docker
@pytest.mark.anyio
async def test_the_http_quick_start_runs_as_written(tmp_path: Path) -> None:
    """The two commands of "Serve a team over HTTP", run verbatim by a shell in a directory
    laid out like a clone: the key file is the owner's alone, and the key opens /mcp."""
    keys_line, serve_line = _section_commands("## Serve a team over HTTP")
    clone = tmp_path / "clone"
    (clone / ".venv" / "bin").mkdir(parents=True)
    (clone / ".venv" / "bin" / "airlock").symlink_to(AIRLOCK)
    no_pool = tmp_path / "no-pool.toml"
    no_pool.write_text(NO_POOL_TOML)
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "AIRLOCK_DATA_DIR": str(tmp_path / "data"),
        "AIRLOCK_POLICY": str(no_pool),  # the README's default policy, less the warm pool
    }
    made = await anyio.run_process(
        ["bash", "-c", f"umask 022; {keys_line}"], cwd=clone, env=env, check=False
    )
    assert made.returncode == 0, made.stderr.decode()
    key_file, auth_file = clone / "acme.key", clone / "auth.toml"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(auth_file.stat().st_mode) == 0o600
    key = key_file.read_text().strip()
    # A free port, not the README's: the developer's own Airlock may serve on 8765.
    written = int(re.search(r"--port (\d+)", serve_line)[1])  # type: ignore[index]
    port = free_port()
    serve_line = serve_line.replace(f"--port {written}", f"--port {port}")
    server = await anyio.open_process(["bash", "-c", f"exec {serve_line}"], cwd=clone, env=env)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            with anyio.fail_after(60):
                while True:
                    with contextlib.suppress(httpx.TransportError):
                        if (await http.get("/healthz")).status_code == 200:
                            break
                    await anyio.sleep(0.1)
            refused = await http.post("/mcp", json={})
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http2:
            transport = streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http2)
            async with Client(transport) as client:
                tools = {tool.name for tool in (await client.list_tools()).tools}
    finally:
        server.terminate()
        with anyio.fail_after(60):
            await server.wait()
    assert refused.status_code == 401
    assert "run_code" in tools


@pytest.mark.docker
@pytest.mark.anyio
async def test_the_fleet_block_runs_as_written_and_replicas_share_a_session(
    tmp_path: Path, postgres_url: str
) -> None:
    """ "Serve a fleet", on two replicas: its two exports with this test's own values (a real
    PostgreSQL, a real key file), its serve line verbatim but for the port, each replica with
    a data dir of its own; a session started through one is used and ended through the other."""
    store_line, key_line, serve_line = _section_commands("## Serve a fleet")
    assert store_line.startswith("export AIRLOCK_STORE_URL=")
    assert key_line.startswith("export AIRLOCK_VAULT_KEY_FILE=")
    keys_line, _ = _section_commands("## Serve a team over HTTP")
    clone = tmp_path / "clone"
    (clone / ".venv" / "bin").mkdir(parents=True)
    (clone / ".venv" / "bin" / "airlock").symlink_to(AIRLOCK)
    no_pool = tmp_path / "no-pool.toml"
    no_pool.write_text(NO_POOL_TOML)
    key_file = tmp_path / "vault.key"
    await anyio.run_process(
        ["bash", "-c", f"head -c 32 /dev/urandom | base64 > {key_file}; chmod 600 {key_file}"]
    )
    env = {**os.environ, "HOME": str(tmp_path / "home"), "AIRLOCK_POLICY": str(no_pool)}
    made = await anyio.run_process(["bash", "-c", keys_line], cwd=clone, env=env, check=False)
    assert made.returncode == 0, made.stderr.decode()
    key = (clone / "acme.key").read_text().strip()
    exports = (
        f"export AIRLOCK_STORE_URL={shlex.quote(postgres_url)}; "
        f"export AIRLOCK_VAULT_KEY_FILE={shlex.quote(str(key_file))}; "
    )
    ports = [free_port(), free_port()]
    replicas = [
        await anyio.open_process(
            ["bash", "-c", exports + "exec " + serve_line.replace("--port 8765", f"--port {port}")],
            cwd=clone,
            env={**env, "AIRLOCK_DATA_DIR": str(tmp_path / f"data-{port}")},
            stderr=None,
        )
        for port in ports
    ]
    headers = {"Authorization": f"Bearer {key}"}
    try:
        for port in ports:
            await _until_healthy(port)
        url_a, url_b = (f"http://127.0.0.1:{port}/mcp" for port in ports)
        async with (
            httpx2.AsyncClient(headers=headers, timeout=120) as http_a,
            httpx2.AsyncClient(headers=headers, timeout=120) as http_b,
            Client(streamable_http_client(url_a, http_client=http_a)) as a,
            Client(streamable_http_client(url_b, http_client=http_b)) as b,
        ):
            first = await a.call_tool(
                "run_code", {"language": "bash", "code": "echo fleet > f.txt"}
            )
            assert first.structured_content is not None, first.content
            session = first.structured_content["session_id"]
            second = await b.call_tool(
                "run_code", {"language": "bash", "code": "cat f.txt", "session_id": session}
            )
            assert second.structured_content is not None, second.content
            assert second.structured_content["stdout"]["text"] == "fleet\n"
            ended = await b.call_tool("end_session", {"session_id": session})
            assert not ended.is_error, ended.content
            gone = await a.call_tool("list_workspace", {"session_id": session})
            assert gone.is_error
    finally:
        for replica in replicas:
            replica.terminate()
            with anyio.fail_after(60):
                await replica.wait()


async def _until_healthy(port: int) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        with anyio.fail_after(60):
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get("/healthz")).status_code == 200:
                        return
                await anyio.sleep(0.1)
