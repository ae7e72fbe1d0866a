"""Choosing the store from the command line (`--store URL`, AIRLOCK_STORE_URL): every
command that opens records reads the one named, a store that cannot be used stops the
start with one line naming the fix, and no password is ever shown."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anyio
import pytest
from support import AIRLOCK, free_port, run_record, session_record, vault_key_file

from airlock.broker import Vault, load_key
from airlock.store import SCHEMA_REVISION, Database
from airlock.store.postgres.documents import PostgresDocuments

UNREACHABLE = "postgresql://airlock:hunter2@127.0.0.1:1/records"
"""With a password, so given through AIRLOCK_STORE_URL: `--store` refuses one."""


def without_password(url: str) -> tuple[str, dict[str, str]]:
    """`url` with its password taken out, and the environment that gives it to libpq."""
    parts = urlsplit(url)
    bare = parts._replace(netloc=f"{parts.username}@{parts.hostname}:{parts.port}")
    return urlunsplit(bare), {"PGPASSWORD": parts.password or ""}


def airlock(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AIRLOCK, *args],
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_serve_refuses_an_unreachable_store_in_one_line_without_the_password(
    tmp_path: Path,
) -> None:
    env = {"AIRLOCK_STORE_URL": UNREACHABLE}
    done = airlock("serve", "--data-dir", str(tmp_path / "data"), env=env)
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert "postgresql://airlock:***@127.0.0.1:1/records" in line
    assert "check the store URL" in line and "hunter2" not in line
    assert "Traceback" not in done.stderr


def test_serve_refuses_a_store_of_no_known_database(tmp_path: Path) -> None:
    env = {"AIRLOCK_STORE_URL": "mysql://root:hunter2@db.example/airlock"}
    done = airlock("serve", "--data-dir", str(tmp_path / "data"), env=env)
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert "neither PostgreSQL nor SQLite" in line and "--store postgresql://" in line
    assert "hunter2" not in line


async def _mark_the_vault(url: str, key_file: Path) -> None:
    """What a fleet's first replica does at its start: mark the shared vault with its key."""
    db = await Database.open(url)
    try:
        vault = Vault(
            PostgresDocuments(db.engine, "vault"),
            load_key(key_file.parent, {"AIRLOCK_VAULT_KEY_FILE": str(key_file)}),
        )
        await anyio.to_thread.run_sync(vault.check_key)
    finally:
        await db.close()


def test_a_replica_with_another_vault_key_stops_before_it_says_it_serves(
    tmp_path: Path, postgres_url: str
) -> None:
    anyio.run(_mark_the_vault, postgres_url, vault_key_file(tmp_path / "first.key"))
    other = vault_key_file(tmp_path / "other.key")
    done = airlock(
        "serve",
        "--http",
        "--port",
        str(free_port()),
        "--data-dir",
        str(tmp_path / "data"),
        env={"AIRLOCK_STORE_URL": postgres_url, "AIRLOCK_VAULT_KEY_FILE": str(other)},
    )
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "vault key is not the key the vault" in line and "AIRLOCK_VAULT_KEY_FILE" in line
    assert "serving MCP" not in done.stderr and "Traceback" not in done.stderr


async def _write_a_run(url: str) -> None:
    db = await Database.open(url)
    try:
        await db.create_session(session_record("ses_pg"))
        await db.create_run(run_record("run_on_pg", session_id="ses_pg"))
    finally:
        await db.close()


def test_audit_reads_the_store_the_environment_names(tmp_path: Path, postgres_url: str) -> None:
    anyio.run(_write_a_run, postgres_url)
    empty = tmp_path / "no-records-here"
    by_env = airlock(
        "audit", "runs", "--data-dir", str(empty), env={"AIRLOCK_STORE_URL": postgres_url}
    )
    assert by_env.returncode == 0, by_env.stderr
    assert "run_on_pg" in by_env.stdout
    bare, env = without_password(postgres_url)
    by_option = airlock("audit", "runs", "--data-dir", str(empty), "--store", bare, env=env)
    assert by_option.returncode == 0 and "run_on_pg" in by_option.stdout
    password = postgres_url.split("@")[0].rsplit(":", 1)[1]
    assert password not in by_env.stderr + by_option.stderr
    # Reading another store made nothing in the data dir.
    assert not empty.exists()


def test_doctor_checks_the_stores_connection_and_schema(tmp_path: Path, postgres_url: str) -> None:
    bare, env = without_password(postgres_url)
    fresh = airlock("doctor", "--data-dir", str(tmp_path), "--store", bare, env=env)
    assert "[ok ] store: " in fresh.stdout and "the next start upgrades it" in fresh.stdout
    anyio.run(_write_a_run, postgres_url)
    current = airlock("doctor", "--data-dir", str(tmp_path), "--store", bare, env=env)
    assert f"schema {SCHEMA_REVISION} (this Airlock's)" in current.stdout
    # A fleet's store: its notices must travel (LISTEN hears NOTIFY on that database).
    assert "[ok ] fleet: notices: LISTEN/NOTIFY works on postgresql://" in current.stdout
    down = airlock("doctor", "--data-dir", str(tmp_path), env={"AIRLOCK_STORE_URL": UNREACHABLE})
    assert (
        "[MISSING] store: cannot reach database postgresql://airlock:***@127.0.0.1:1" in down.stdout
    )
    assert "fix: check the store URL" in down.stdout
    assert "fleet:" not in down.stdout  # no channel to check on a store that is not there
    assert "hunter2" not in down.stdout + down.stderr
    password = postgres_url.split("@")[0].rsplit(":", 1)[1]
    assert password not in fresh.stdout + current.stdout + fresh.stderr + current.stderr


@pytest.mark.parametrize(
    "command", [["approvals", "list"], ["patch", "list"], ["audit", "runs"], ["policy", "usage"]]
)
def test_operator_commands_take_the_store_option(tmp_path: Path, command: list[str]) -> None:
    bare, env = without_password(UNREACHABLE)
    done = airlock(*command, "--data-dir", str(tmp_path), "--store", bare, env=env)
    assert done.returncode != 0
    assert "postgresql://airlock@127.0.0.1:1/records" in done.stderr
    assert "hunter2" not in done.stderr


@pytest.mark.parametrize(
    "command",
    [["serve"], ["serve", "--http"], ["doctor"], ["audit", "runs"], ["patch", "list"]],
)
@pytest.mark.parametrize(
    "url", [UNREACHABLE, "postgresql://airlock@127.0.0.1:1/records?password=hunter2"]
)
def test_a_password_in_the_store_option_is_refused_naming_libpqs_ways(
    tmp_path: Path, command: list[str], url: str
) -> None:
    # /proc/PID/cmdline is readable by every user of the host: the password would be too.
    done = airlock(*command, "--data-dir", str(tmp_path / "data"), "--store", url)
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert "a password in --store" in line
    for way in ("PGPASSFILE", "PGPASSWORD", "service", "AIRLOCK_STORE_URL"):
        assert way in line, way
    assert "hunter2" not in done.stderr + done.stdout
    assert not (tmp_path / "data").exists()
