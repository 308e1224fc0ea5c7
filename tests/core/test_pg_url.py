"""A PostgreSQL URL is read here before libpq sees it (core/store/url.py): a well-formed one as libpq
reads it, and no message or display of any URL holds a piece of its password (issue 28 §3.4)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict

from switchboard_local.core.errors import InvalidArgument
from switchboard_local.core.store import url as pg_url
from switchboard_local.core.store.postgres.store import Target

WELL_FORMED = [
    "postgresql://alice:p%40ss%2Fw%3Fo%23rd@db.example:5433/orders",
    "postgres://alice@localhost/orders",
    "postgresql://u:pw@h1:5432,h2:5433/db?sslmode=disable&application_name=x",
    "postgresql://[::1]:5432/db",
    "postgresql://%2Fvar%2Frun%2Fpostgresql/db",
    "postgresql:///db?host=/tmp&port=5433",
    "postgresql://alice:p:a,s[s@host/db",
    "postgresql://alice@host/db?password=s%26cret",
    "postgresql://",
]


@pytest.mark.parametrize("url", WELL_FORMED)
def test_a_well_formed_url_is_read_as_libpq_reads_it(url: str) -> None:
    assert pg_url.parse(url) == conninfo_to_dict(url)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("postgresql://alice:Zq9w%zz@h/db", "the URL's password holds a '%' that is not followed by two hex digits"),
        ("postgresql://alice:Zq9w@[h/db", "opens an IPv6 address with '[' and never closes it"),
        ("postgresql://alice:Zq@9w@h/db", "the URL's user part holds an '@'"),
        ("postgresql://alice:Zq/9w@h/db", "the URL holds an '@' after its host"),
        ("postgresql://alice:Zq#9w@h/db", "the URL holds a '#'"),
        ("postgresql://h:port/db", "the URL's port (of its host) is not a number"),
        ("postgresql://h/db/more", "the URL's path holds more than one '/'"),
        ("postgresql://h/db?password=ab&Zq9w", "parameter 2 of the URL's query has no '='"),
        ("postgresql://h/db?password=ab&Zq9w=1", "parameter 2 of the URL's query is not a connection parameter"),
    ],
)
def test_a_url_that_does_not_read_cleanly_is_refused_saying_why_and_quoting_none_of_it(url: str, said: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        Target(url)
    assert said in refused.value.message
    assert "Zq" not in refused.value.message and "9w" not in refused.value.message


# Letters no message and no host here holds: a four-letter piece of a password with one of them
# in it can only be shown if the password was.
MARKED = "ZXJW"
PASSWORD_TEXT = st.text(alphabet=MARKED + "abc123%@/?#[]:&=,. ", min_size=4, max_size=24)


@settings(max_examples=300, deadline=None)
@given(password=PASSWORD_TEXT, query=st.booleans())
def test_no_message_or_display_of_a_url_holds_a_piece_of_its_password(password: str, query: bool) -> None:
    url = (f"postgresql://alice@127.0.0.1:5432/db?password={password}" if query
           else f"postgresql://alice:{password}@127.0.0.1:5432/db")  # fmt: skip
    pieces = {password[i : i + 4] for i in range(len(password) - 3)}
    pieces = {p for p in pieces if any(c in MARKED for c in p)}
    try:
        target = Target(url)
        shown = [target.where]
    except InvalidArgument as exc:
        shown = [exc.message]
    shown.append(pg_url.redacted(url))
    for text in shown:
        assert not [p for p in pieces if p in text], text


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://sb:s3cret@db.example:5432/queue", "postgresql://sb:***@db.example:5432/queue"),
        ("postgresql://db/q?sslmode=require&password=s3cret&sslpassword=k3y&connect_timeout=5",
         "postgresql://db/q?sslmode=require&password=***&sslpassword=***&connect_timeout=5"),
        ("postgresql://db/q?password=s3cret&more=Zq9w", "postgresql://db/q?password=***&***"),
        ("postgresql://alice:Zq9w@ss@db/q", "postgresql://***@db (a malformed URL)"),
        ("postgresql://db/q?password=Zq@9w", "postgresql://(a malformed URL)"),
    ],
)  # fmt: skip
def test_a_url_is_shown_with_its_secrets_hidden(url: str, shown: str) -> None:
    assert pg_url.redacted(url) == shown

