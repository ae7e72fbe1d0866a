"""Alembic's entry point, run by `airlock.store.migrations.upgrade` on the connection (and
transaction) it passes in `config.attributes`; never connects on its own."""

from __future__ import annotations

from alembic import context

from airlock.store.schema import metadata

context.configure(connection=context.config.attributes["connection"], target_metadata=metadata)
with context.begin_transaction():
    context.run_migrations()
