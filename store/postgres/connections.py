"""The PostgreSQL connections a replica holds outside the records' pool, with psycopg 3
directly: its claim's (a session-level advisory lock lives as long as its connection) and
its notices' (a connection that LISTENs is blocked reading). Each has keepalives on and is
named for its server (`connection.KEEPALIVES`, `connection.application_name`), as the
pool's are. psycopg's errors leave as they are: the caller says what failed.
"""

from __future__ import annotations

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.rows import TupleRow

from ..connection import CONNECT_TIMEOUT_S, KEEPALIVES, application_name

Connection = psycopg.AsyncConnection[TupleRow]


async def connect(url: str, instance_id: str) -> Connection:
    """An autocommit connection to `url` for the server `instance_id`."""
    conninfo = make_conninfo(url, application_name=application_name(instance_id), **KEEPALIVES)
    return await psycopg.AsyncConnection.connect(
        conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
    )
