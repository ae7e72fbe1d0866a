"""The vault a fleet shares: one document in the real PostgreSQL, read on every call and
written by one replica at a time, and the key check that refuses a replica with another key."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import sqlalchemy

from airlock.broker import Vault
from airlock.errors import VaultError
from airlock.store import Database
from airlock.store.postgres.documents import PostgresDocuments

KEY = os.urandom(32)


@pytest.fixture
def engine(postgres_url: str) -> Iterator[sqlalchemy.Engine]:
    """The engine of a real PostgreSQL store, its schema made by the store's migrations."""
    db = anyio.run(Database.open, postgres_url)
    yield db.engine
    anyio.run(db.close)


def replica(engine: sqlalchemy.Engine, key: bytes = KEY) -> Vault:
    return Vault(PostgresDocuments(engine, "vault"), key)


def test_a_secret_set_on_one_replica_is_read_on_another(engine: sqlalchemy.Engine) -> None:
    a, b = replica(engine), replica(engine)
    a.set("api", "sk-one", ["api.example.com"])
    found = b.get("api")
    assert found is not None
    secret, hosts = found
    assert secret.reveal() == "sk-one" and hosts == ("api.example.com",)
    assert b.remove("api")
    assert a.get("api") is None


def test_replicas_writing_at_once_lose_no_entry(engine: sqlalchemy.Engine) -> None:
    vaults = [replica(engine) for _ in range(4)]

    def write(i: int) -> None:
        for j in range(5):
            vaults[i].set(f"s{i}-{j}", f"value-{i}-{j}", ["example.com"])

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(info.name for info in vaults[0].list()) == sorted(
        f"s{i}-{j}" for i in range(4) for j in range(5)
    )


def test_a_replica_with_another_key_is_refused_at_the_check_and_writes_nothing(
    engine: sqlalchemy.Engine,
) -> None:
    first = replica(engine)
    first.check_key()  # the first replica marks the empty vault with its key
    replica(engine).check_key()  # the same key passes
    documents = PostgresDocuments(engine, "vault")
    before = documents.read()
    with pytest.raises(VaultError) as info:
        replica(engine, os.urandom(32)).check_key()
    message = str(info.value)
    assert "vault key is not the key" in message and "AIRLOCK_VAULT_KEY_FILE" in message
    assert "/vault" in message or "(vault)" in message
    with pytest.raises(VaultError):
        replica(engine, os.urandom(32)).set("x", "y", ["example.com"])
    assert documents.read() == before


def test_the_check_on_a_vault_written_before_marks_refuses_a_key_its_entries_refuse(
    tmp_path: Path,
) -> None:
    """A single server's vault file without a mark: its entries are the evidence."""
    path = tmp_path / "vault" / "secrets.json"
    Vault(path, KEY).set("api", "sk", ["example.com"])
    with pytest.raises(VaultError):
        Vault(path, os.urandom(32)).check_key()
    Vault(path, KEY).check_key()
    with pytest.raises(VaultError) as info:
        Vault(path, os.urandom(32)).check_key()
    assert "same key file" in str(info.value)
    assert Vault(path, KEY).get("api") is not None


def test_an_unreachable_database_is_a_vault_error_without_the_password() -> None:
    engine = sqlalchemy.create_engine(
        "postgresql+psycopg://airlock:hunter2@127.0.0.1:1/nothing",
        connect_args={"connect_timeout": 2},
    )
    with pytest.raises(VaultError) as info:
        replica(engine).get("api")
    assert "hunter2" not in str(info.value) and "127.0.0.1:1" in str(info.value)
    engine.dispose()
