"""Reading the database file as a test sees it: what is committed on disk.

Each call opens its own sqlite3 connection (autocommit) and closes it, so a
read never holds a snapshot or a lock past the call and never sees another
connection's uncommitted writes. `run` is the one writer: a statement another
process (or a hand edit) could have run, committed at once.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def rows(db: Path | str, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
    """Every row ``sql`` selects, as tuples."""
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
    if not Path(db).exists():
        return 0
    return value(db, f"SELECT count(*) FROM {table}")


def records(db: Path | str, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
    """Every row ``sql`` selects, each readable by column name too (``row["id"]``)."""
    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.row_factory = sqlite3.Row
        return conn.execute(sql, tuple(params)).fetchall()


def counts(db: Path | str) -> tuple[int, int]:
    """(events, todos): what deliveries have stored (the operator's audit events left out)."""
    ((events, todos),) = rows(
        db, "SELECT (SELECT count(*) FROM events WHERE family <> 'operator'), (SELECT count(*) FROM todos)"
    )
    return events, todos
