"""The store's queries, one module per family of records, each a function of an open
SQLAlchemy `Connection` (inside the transaction `db.Database` opened) built from the
tables of `schema.py` with Core constructs: the same query runs on SQLite and PostgreSQL.

Statements that do not depend on the call are built once, at import, so the compiled
form is found in SQLAlchemy's cache instead of being built again on the warm path.
"""
