"""`connection.shown_url`, the one way a message shows a database's URL, attacked: a
password hidden in every place a user may write one (the userinfo, the query, percent-encoded,
libpq's key=value form, an unencoded `@`) never comes out, and what names the database does."""

from __future__ import annotations

import pytest
from sqlalchemy import make_url

from airlock.errors import StoreError
from airlock.store.connection import location, shown_url

SECRET = "s3cr3t"

CASES = [
    # (given, shown exactly)
    (
        "postgresql://alice:s3cr3t@db.example:5432/airlock",
        "postgresql://alice:***@db.example:5432/airlock",
    ),
    ("postgres://alice:s3cr3t@db/airlock", "postgres://alice:***@db/airlock"),
    ("postgresql+psycopg://alice:s3cr3t@db/airlock", "postgresql://alice:***@db/airlock"),
    ("postgresql://:s3cr3t@db/airlock", "postgresql://:***@db/airlock"),
    # In the query, in any case, or as the client key's password.
    (
        "postgresql://alice@db/airlock?password=s3cr3t&sslmode=require",
        "postgresql://alice@db/airlock?sslmode=require",
    ),
    ("postgresql://alice@db/airlock?PassWord=s3cr3t", "postgresql://alice@db/airlock"),
    ("postgresql://alice@db/airlock?sslpassword=s3cr3t", "postgresql://alice@db/airlock"),
    # Percent-encoded: the password, a query key, a query value.
    ("postgresql://alice:s%33cr%33t@db/airlock", "postgresql://alice:***@db/airlock"),
    ("postgresql://alice:s3%40cr%3At@db/airlock", "postgresql://alice:***@db/airlock"),
    ("postgresql://alice@db/airlock?pass%77ord=s3cr3t", "postgresql://alice@db/airlock"),
    ("postgresql://alice@db/airlock?password=s3%63r3t", "postgresql://alice@db/airlock"),
    # Characters a password holds unencoded: `@` (twice), `?`, `/`, a space.
    ("postgresql://alice:s3@cr3t@db/airlock", "postgresql://***@db/airlock"),
    ("postgresql://alice:s3?cr3t@db/airlock", "postgresql://alice:***@db/airlock"),
    ("postgresql://alice:s3/cr3t@db/airlock", "postgresql://alice:***@db/airlock"),
    ("postgresql://alice:s3 cr3t@db/airlock", "postgresql://alice:***@db/airlock"),
    # Not a URL SQLAlchemy parses (a port that is no number).
    ("postgresql://alice:s3cr3t@db:port/airlock", "postgresql://***@db:port/airlock"),
    # libpq's key=value form: plain, quoted with a space, escaped, spaced, upper case.
    (
        "host=db port=5432 dbname=airlock user=alice password=s3cr3t",
        "host=db port=5432 dbname=airlock user=alice password=***",
    ),
    ("host=db password='s3 cr3t' dbname=airlock", "host=db dbname=airlock password=***"),
    ("password=s3\\ cr3t host=db", "host=db password=***"),
    ("password = s3cr3t host=db", "host=db password=***"),
    ("PASSWORD=s3cr3t host=db", "host=db password=***"),
    ("sslpassword=s3cr3t host=db", "host=db password=***"),
    # No password at all: shown as given.
    ("postgresql://alice@db:5432/airlock", "postgresql://alice@db:5432/airlock"),
    ("host=db dbname=airlock", "host=db dbname=airlock"),
    ("sqlite:////var/lib/airlock/airlock.db", "sqlite:////var/lib/airlock/airlock.db"),
]


@pytest.mark.parametrize(("given", "shown"), CASES)
def test_a_url_is_shown_without_its_password(given: str, shown: str) -> None:
    assert shown_url(given) == shown
    # Every password above is a spelling of s3cr3t (or s3@cr:t): no piece of one is shown.
    for piece in ("cr3t", "cr%", "%63r3t", "cr:t"):
        assert piece not in shown


def test_a_parsed_url_is_shown_as_its_text_is() -> None:
    url = make_url("postgresql+psycopg://alice:s3cr3t@db/airlock?password=s3cr3t&sslmode=require")
    assert shown_url(url) == "postgresql://alice:***@db/airlock?sslmode=require"


@pytest.mark.parametrize(
    "given",
    [
        "host=db password=s3cr3t",
        "mysql://alice:s3cr3t@db/airlock",
        "postgresql://alice:s3cr3t@db:port/airlock",
        "sqlite://",
    ],
)
def test_a_store_refused_is_named_without_its_password(given: str) -> None:
    with pytest.raises(StoreError) as caught:
        location(given)
    assert SECRET not in str(caught.value)
    assert "pass --store" in str(caught.value)


def test_a_store_opened_is_named_without_its_password() -> None:
    place = location("postgresql://alice:s3cr3t@db/airlock?password=s3cr3t")
    assert place.shown == "postgresql://alice:***@db/airlock"
    assert place.url.password == SECRET  # the engine still gets it
