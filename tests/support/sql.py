"""Reading the database file as a test sees it: what is committed on disk.

Each call opens its own connection (autocommit) and closes it, so a
read never holds a snapshot or a lock past the call and never sees another
connection's uncommitted writes. `run` is the one writer: a statement another
process (or a hand edit) could have run, committed at once.

``db`` is an SQLite file's path, or a PostgreSQL URL (the ``postgres`` backend
of tests/conftest.py): then the same SQL runs there (``?`` placeholders
become psycopg's), and values read come back as SQLite gives them: times
(timestamptz) as integer milliseconds, JSON (jsonb) as its text, flags
(boolean) as 0 or 1, so that a test reads both backends alike.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from switchboard_local.core.store.shared import is_url


def rows(db: Path | str, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
    """Every row ``sql`` selects, as tuples."""
    if is_url(db):
        return _pg(str(db), sql, params, records=False)
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        return conn.execute(sql, tuple(params)).fetchall()


def run(db: Path | str, sql: str, params: Iterable[Any] = ()) -> None:
    """Run one statement (a PRAGMA, a trigger, a row as another process writes it), committed at once."""
    rows(db, sql, params)


def value(db: Path | str, sql: str, params: Iterable[Any] = ()) -> Any:
    """The first column of the one row ``sql`` selects (None if it selects none)."""
    found = rows(db, sql, params)
    return found[0][0] if found else None


def count(db: Path | str, table: str) -> int:
    """How many rows ``table`` holds; 0 if there is no file (nothing was ever written), without making one."""
    if not is_url(db) and not Path(db).exists():
        return 0
    return value(db, f"SELECT count(*) FROM {table}")


def records(db: Path | str, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
    """Every row ``sql`` selects, each readable by column name too (``row["id"]``)."""
    if is_url(db):
        return _pg(str(db), sql, params, records=True)
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.row_factory = sqlite3.Row
        return conn.execute(sql, tuple(params)).fetchall()


def counts(db: Path | str) -> tuple[int, int]:
    """(events, todos): what deliveries have stored (the operator's audit events left out)."""
    ((events, todos),) = rows(
        db, "SELECT (SELECT count(*) FROM events WHERE family <> 'operator'), (SELECT count(*) FROM todos)"
    )
    return events, todos


def _pg(url: str, sql: str, params: Iterable[Any], *, records: bool) -> list[Any]:
    from switchboard_local.core.store.postgres.statements import convert_params

    with pg_connection(url, records=records) as conn, conn.cursor() as cursor:
        cursor.execute(convert_params(sql), tuple(params))  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []


@contextlib.contextmanager
def pg_connection(url: str, *, records: bool = True) -> Iterator[Any]:
    """A psycopg connection (autocommit) to ``url`` that reads values as SQLite gives them
    (times as integer milliseconds, JSON as text, flags as 0 or 1); rows readable by
    column name too when ``records``. For a test that reads many times (``rows`` opens
    a connection per call)."""
    from datetime import datetime, timedelta, timezone

    import psycopg
    from psycopg.adapt import Loader

    EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

    from switchboard_local.core.store.postgres.statements import row_factory

    class Millis(Loader):
        def load(self, data: Any) -> int:
            stamp = datetime.fromisoformat(bytes(data).decode())
            return (stamp - EPOCH) // timedelta(milliseconds=1)

    class AsText(Loader):
        def load(self, data: Any) -> str:
            return bytes(data).decode()

    class AsInt(Loader):
        def load(self, data: Any) -> int:
            return 1 if bytes(data) == b"t" else 0

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        conn.adapters.register_loader("timestamptz", Millis)
        conn.adapters.register_loader("jsonb", AsText)
        conn.adapters.register_loader("json", AsText)
        conn.adapters.register_loader("bool", AsInt)
        if records:
            conn.row_factory = row_factory  # type: ignore[assignment]
        yield conn


def ms(db: Path | str, value: int) -> str:
    """A time in integer milliseconds as an SQL literal for ``db``: the number on SQLite, a timestamptz on PostgreSQL."""
    return f"sb_ts({int(value)})" if is_url(db) else str(int(value))


def refuse_inserts(db: Path | str, name: str, table: str, message: str, *, when: str | None = None,
                   payload_like: str | None = None) -> None:  # fmt: skip
    """A trigger ``name`` that refuses inserts into ``table`` with ``message``, as a constraint
    does (the store answers Conflict): every insert, those for which ``when`` holds (SQL on
    ``NEW``, the same on both backends), or those whose payload is LIKE ``payload_like``."""
    if is_url(db):
        test = when or (f"NEW.payload::text LIKE '{payload_like}'" if payload_like is not None else "true")
        run(db, f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF {test} THEN RAISE EXCEPTION '{message}' USING ERRCODE = 'check_violation'; END IF; "
                f"RETURN NEW; END $$")  # fmt: skip
        run(db, f"CREATE TRIGGER {name} BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION {name}()")
    else:
        test = when or (f"NEW.payload LIKE '{payload_like}'" if payload_like is not None else None)
        condition = f"WHEN {test} " if test else ""
        run(db, f"CREATE TRIGGER {name} BEFORE INSERT ON {table} {condition}BEGIN SELECT RAISE(ABORT, '{message}'); END")


def drop_trigger(db: Path | str, name: str, table: str) -> None:
    run(db, f"DROP TRIGGER {name} ON {table}" if is_url(db) else f"DROP TRIGGER {name}")
