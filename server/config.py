"""Server configuration: where data lives and which policy applies.

Command-line options win over environment variables, which win over defaults.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from airlock.errors import InvalidRequest, NotFound

if TYPE_CHECKING:
    from collections.abc import Mapping

    from airlock.broker import Vault
    from airlock.store import BlobStore, Database

ENV_DATA_DIR = "AIRLOCK_DATA_DIR"
ENV_POLICY = "AIRLOCK_POLICY"
ENV_AUTH = "AIRLOCK_AUTH"
ENV_STORE_URL = "AIRLOCK_STORE_URL"
LOCAL_TENANT = "local"
RESERVED_TENANT_PREFIX = "airlock-"
"""Tenant names Airlock keeps for its own callers: `airlock drill` calls as
`airlock-drill`, and the usage review leaves that tenant's records out, so a real tenant
of that name would be hidden from it. No API key or JWT may name one (nor `local`)."""
DRILL_TENANT = RESERVED_TENANT_PREFIX + "drill"
"""The tenant `airlock drill` calls as."""


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return Path(base) / "airlock"


@dataclass(frozen=True)
class Config:
    data_dir: Path
    policy_path: Path | None = None
    store_url: str | None = None
    """Where the records live when not in the data dir's SQLite file: a `postgresql://`
    (or `sqlite:///`) URL, from --store or AIRLOCK_STORE_URL; a PostgreSQL one makes this
    server one of a fleet (`fleet_url`)."""

    @classmethod
    def resolve(
        cls, data_dir: str | None = None, policy: str | None = None, store: str | None = None
    ) -> Config:
        if store is not None:
            _refuse_a_password(store)
        chosen_dir = data_dir or os.environ.get(ENV_DATA_DIR)
        chosen_policy = policy or os.environ.get(ENV_POLICY)
        return cls(
            data_dir=Path(chosen_dir).expanduser() if chosen_dir else default_data_dir(),
            policy_path=Path(chosen_policy).expanduser() if chosen_policy else None,
            store_url=store or os.environ.get(ENV_STORE_URL) or None,
        )

    @property
    def db_path(self) -> Path:
        return self.data_dir / "airlock.db"

    @property
    def store(self) -> Path | str:
        """What `Database.open` is given: the store URL if one was chosen, else the file."""
        return self.store_url or self.db_path

    @property
    def fleet_url(self) -> str | None:
        """The PostgreSQL database the servers of a fleet coordinate through: its channel
        carries their notices (revocations, session ends, approval decisions), its advisory
        locks their instance claims, and it keeps their blobs and vault. None: one server
        (in-process notices, `flock` claims, files under the data dir)."""
        if self.store_url is not None and self.store_url.startswith("postgresql"):
            return self.store_url
        return None

    @property
    def blobs_dir(self) -> Path:
        return self.data_dir / "blobs"

    @property
    def instances_dir(self) -> Path:
        return self.data_dir / "instances"


async def open_store(config: Config, instance_id: str | None = None) -> Database:
    """The records `config` names, made or upgraded if needed (the server's and the
    drill's), their connections named for server `instance_id`; a store that cannot be
    opened is a `StoreError` naming the fix."""
    from airlock.store import Database  # SQLAlchemy and pydantic: not for `airlock --help`

    return await Database.open(config.store, instance_id=instance_id)


async def open_records(config: Config) -> Database:
    """The records of the server whose data directory (or store URL) `config` names, for
    the operator commands (audit, patch, approvals, policy usage): they read what a server
    wrote, so a data directory without records is a wrong --data-dir, never a new, empty one."""
    if config.store_url is None and not config.db_path.is_file():
        raise NotFound(
            f"no Airlock records in {config.data_dir} (it has no {config.db_path.name}): pass "
            f"the --data-dir (or set {ENV_DATA_DIR}) of the server whose records you want, or "
            f"its --store URL; a server an agent started uses {default_data_dir()} unless "
            "its command names another --data-dir"
        )
    return await open_store(config)


def blob_store(config: Config, db: Database, *, owner: str = "") -> BlobStore:
    """Where the bytes of `db`'s records are: files under the data dir, or, for a fleet, the
    same PostgreSQL (every replica reads what any replica stored). Drafts stage locally."""
    from airlock.store import BlobStore

    if config.fleet_url is None:
        return BlobStore(config.blobs_dir, owner=owner)
    from airlock.store.postgres.blobs import PostgresContents  # psycopg: for a fleet only

    return BlobStore(config.blobs_dir, owner=owner, contents=PostgresContents(db.engine))


def _refuse_a_password(store: str) -> None:
    """A password in `--store` sits in /proc/PID/cmdline, which every user of the host can
    read: refuse it and name the ways libpq (psycopg) takes one without the command line."""
    parts = urlsplit(store)
    try:
        password = parts.password
    except ValueError:
        password = None
    if password or "password=" in parts.query.lower():
        raise InvalidRequest(
            "a password in --store is readable by every user of this host in the process "
            "list: drop it from the URL and give it through libpq, in a password file "
            "(~/.pgpass, or PGPASSFILE=FILE), PGPASSWORD, or a service file "
            f"(PGSERVICEFILE with ?service=NAME), or set the whole URL in {ENV_STORE_URL}"
        )


def open_vault(config: Config, db: Database | None, env: Mapping[str, str]) -> Vault:
    """The vault of `config`: its data dir's file, or, for a fleet (`db` its store), the
    fleet's document in PostgreSQL, read with this server's key either way."""
    from airlock.broker import Vault, load_key, vault_path

    key = load_key(config.data_dir, env)
    if config.fleet_url is None or db is None:
        return Vault(vault_path(config.data_dir), key)
    from airlock.store.postgres.documents import PostgresDocuments

    return Vault(PostgresDocuments(db.engine, "vault"), key)
