"""Todo.from_row: a todo read from a row of any shape the stores give, by position where it can be."""

from __future__ import annotations

import sqlite3
from types import MappingProxyType
from typing import Any

import pytest

from switchboard_local.core.store.postgres.statements import PgRow
from switchboard_local.core.todo_model import Todo

COLUMNS = ("id", "queue", "title", "kind", "payload", "state", "priority", "assignee", "attempt", "max_attempts",
           "owner", "lease_expires_at", "visible_at", "idempotency_key", "event_id", "result", "last_error",
           "created_at", "updated_at", "claimed_at", "completed_at", "cancelled_by", "cancel_reason", "blocked_by",
           "waits_for")  # fmt: skip
VALUES: dict[str, Any] = {
    **{column: n for n, column in enumerate(COLUMNS)},
    "queue": "q", "title": "t", "state": "claimed", "payload": '{"a": [1]}', "result": '"ok"',
}  # fmt: skip
EXPECTED = Todo(**{**VALUES, "payload": {"a": [1]}, "result": "ok"})


def sqlite_row(names: list[str], values: list[Any]) -> sqlite3.Row:
    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    selected = ", ".join(f"? AS {name}" for name in names)
    return conn.execute(f"SELECT {selected}", values).fetchone()


def pg_row(names: list[str], values: list[Any]) -> PgRow:
    return PgRow(tuple(values), {name: n for n, name in enumerate(names)})


ROWS = [sqlite_row, pg_row]


@pytest.mark.parametrize("make", ROWS, ids=["sqlite3.Row", "PgRow"])
def test_a_row_of_every_column_in_any_order_and_with_more_columns_reads_as_its_todo(make) -> None:  # noqa: ANN001
    names = [*reversed(COLUMNS), "lease_token_hash", "completed_by"]
    values = [VALUES[c] for c in reversed(COLUMNS)] + ["hash", "someone"]
    for _ in range(2):  # the second time through the shape's remembered places
        assert Todo.from_row(make(names, values)) == EXPECTED
    assert Todo.from_row(make(names, values), lease_token="tok").lease_token == "tok"


@pytest.mark.parametrize("make", ROWS, ids=["sqlite3.Row", "PgRow"])
def test_a_column_named_in_another_case_is_found_as_the_row_finds_it(make) -> None:  # noqa: ANN001
    names = ["ID" if c == "id" else c for c in COLUMNS]
    assert Todo.from_row(make(names, [VALUES[c] for c in COLUMNS])) == EXPECTED


@pytest.mark.parametrize("make", ROWS, ids=["sqlite3.Row", "PgRow"])
@pytest.mark.parametrize("twice", [[*COLUMNS, "id"], ["ID", *COLUMNS]], ids=["same-case", "other-case"])
def test_a_column_named_twice_is_read_as_the_row_reads_it(make, twice: list[str]) -> None:  # noqa: ANN001
    values = [99, *(VALUES[c] for c in COLUMNS)] if twice[0] == "ID" else [*(VALUES[c] for c in COLUMNS), 99]
    row = make(twice, values)
    assert Todo.from_row(row).id == row["id"]  # sqlite3.Row: the first, whatever its case; PgRow: the last of that name


def test_a_mapping_reads_as_its_todo() -> None:
    assert Todo.from_row(dict(VALUES)) == EXPECTED
    assert Todo.from_row(MappingProxyType(dict(VALUES))) == EXPECTED


def test_a_row_missing_a_column_is_refused_as_the_row_refuses_the_name() -> None:
    names = [c for c in COLUMNS if c != "cancel_reason"]
    with pytest.raises(IndexError):
        Todo.from_row(sqlite_row(names, [VALUES[c] for c in names]))
