"""Named documents in PostgreSQL (a `documents.Document`), read and replaced whole under a
row lock: what a fleet shares that is one file on a single server (the vault's entries).

The store knows nothing of what a document holds (the vault's format, checks and
encryption are the broker's); it only keeps bytes under a name and lets one writer at a
time, across every replica, read-modify-write them (`SELECT ... FOR UPDATE` in one
transaction). Database failures leave this module as `StoreError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import SQLAlchemyError

from airlock.errors import StoreError

from ..connection import driver_sentence
from ..documents import DocumentUpdate
from ..schema import documents


class PostgresDocuments:
    """One named document in the fleet's database (see the module docstring)."""

    def __init__(self, engine: Engine, name: str) -> None:
        self._engine = engine
        self.name = name
        self.where = f"{engine.url.render_as_string(hide_password=True)} ({name})"

    def read(self) -> bytes | None:
        name = self.name
        query = select(documents.c.body).where(documents.c.name == name)
        try:
            with self._engine.connect() as conn:
                body = conn.execute(query).scalar_one_or_none()
        except SQLAlchemyError as exc:
            raise StoreError(
                f"cannot read {name!r} in {self.where}: {driver_sentence(exc)}"
            ) from exc
        return None if body is None else bytes(body)

    @contextmanager
    def updating(self) -> Iterator[DocumentUpdate]:
        """The document under an exclusive row lock for the block; what the block passes
        to `replace` is written when it ends without an exception, nothing otherwise."""
        name = self.name
        try:
            with self._engine.begin() as conn:
                # The row must exist to be locked; a first writer makes it empty.
                conn.execute(insert(documents).values(name=name).on_conflict_do_nothing())
                locked = select(documents.c.body).where(documents.c.name == name).with_for_update()
                body = conn.execute(locked).scalar_one()
                update = DocumentUpdate(None if body is None else bytes(body))
                yield update
                if update.replacement is not None:
                    conn.execute(
                        documents.update()
                        .where(documents.c.name == name)
                        .values(
                            body=update.replacement, updated_at=func.extract("epoch", func.now())
                        )
                    )
        except SQLAlchemyError as exc:
            raise StoreError(
                f"cannot write {name!r} in {self.where}: {driver_sentence(exc)}"
            ) from exc
