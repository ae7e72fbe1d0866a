"""The store's migrations (Alembic revisions under `versions/`) and the one way they run:
`upgrade`, on the connection and inside the transaction `connection.py` opened.

A database has one of three states here: Alembic's (an `alembic_version` row naming a
revision of ours), pre-Alembic (SQLite written by an Airlock of schema 1 to 4: revision
0001 adopts it, keeping every row), or newer (a revision we do not know, or a pre-Alembic
`user_version` above 4): refused before anything is written, since only a newer Airlock
knows what its revisions mean.

SQLite's `PRAGMA user_version` is set to `SCHEMA_VERSION` (5) once Alembic owns the
file, so an Airlock from before Alembic refuses it ("upgrade Airlock") instead of writing
rows in a schema it does not know.
"""

from __future__ import annotations

import logging
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection

from airlock.errors import StoreError

SCHEMA_VERSION = 5
"""SQLite's `user_version` of a database Alembic manages. 1-4 were the pre-Alembic
schemas: 1 the first; 2 workspace entries keep kind, mode, mtime, writer and version, and
versions with their changes; 3 runs record their runtime; 4 runs record their instance."""

log = logging.getLogger(__name__)

_LAST_PRE_ALEMBIC = 4
_SCRIPTS = Path(__file__).parent


def _config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    config.attributes["connection"] = connection
    return config


_SCRIPT = ScriptDirectory.from_config(_config())
HEAD: str = _SCRIPT.get_current_head() or ""
"""The revision this Airlock writes and understands last."""
_KNOWN = frozenset(script.revision for script in _SCRIPT.walk_revisions())


def current(connection: Connection) -> str | None:
    """The database's revision: None for a new or pre-Alembic one."""
    return MigrationContext.configure(connection).get_current_revision()


def refuse_newer(connection: Connection, where: str) -> None:
    """Raise `StoreError` if the database is of a schema this Airlock does not know; reads only."""
    revision = current(connection)
    if revision is not None and revision not in _KNOWN:
        raise StoreError(
            f"database {where} has schema revision {revision!r}, newer than this Airlock "
            f"understands ({HEAD!r}): upgrade Airlock (nothing was written to it)"
        )
    if revision is None and connection.dialect.name == "sqlite":
        version = connection.exec_driver_sql("PRAGMA user_version").scalar_one()
        if version > _LAST_PRE_ALEMBIC:
            raise StoreError(
                f"database {where} has schema version {version}, newer than this Airlock "
                f"understands ({SCHEMA_VERSION}): upgrade Airlock (nothing was written to it)"
            )


def upgrade(connection: Connection, where: str) -> None:
    """Bring the database to `HEAD` inside the caller's transaction (a no-op at head)."""
    refuse_newer(connection, where)
    revision = current(connection)
    if revision != HEAD:
        if revision is None and not sa.inspect(connection).get_table_names():
            log.info("store %s: new, making schema %s", where, HEAD)
        else:
            was = revision or "pre-Alembic"
            log.info("store %s: schema %s, upgrading to %s", where, was, HEAD)
        command.upgrade(_config(connection), "head")
    if connection.dialect.name == "sqlite":
        version = connection.exec_driver_sql("PRAGMA user_version").scalar_one()
        if version != SCHEMA_VERSION:
            connection.exec_driver_sql(f"PRAGMA user_version = {SCHEMA_VERSION}")
