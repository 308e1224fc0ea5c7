"""What a PostgreSQL statement is sent as and what comes back: the named statements'
texts (shared.sql's and queries.postgres.sql's) with their parameters in psycopg's style, converted once;
and rows that read as sqlite3.Row's do, so that a verb cannot tell the backends apart.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import pq


def convert_params(sql: str) -> str:
    """``:name`` → ``%(name)s``, ``?`` → ``%s``, ``%`` → ``%%``; casts (``::``), strings,
    quoted names, dollar quotes and comments are left alone."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c == "'" or c == '"':
            end = i + 1
            while end < n:
                if sql[end] == c:
                    if end + 1 < n and sql[end + 1] == c:  # '' or "" inside
                        end += 2
                        continue
                    break
                end += 1
            out.append(sql[i : end + 1].replace("%", "%%"))
            i = end + 1
        elif c == "-" and sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif c == "/" and sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif c == "$" and (m := re.match(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$", sql[i:])):
            tag = m.group(0)
            end = sql.find(tag, i + len(tag))
            end = n if end < 0 else end + len(tag)
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif c == ":":
            if sql.startswith("::", i):
                out.append("::")
                i += 2
            elif m := re.match(r":([A-Za-z_][A-Za-z0-9_]*)", sql[i:]):
                out.append(f"%({m.group(1)})s")
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        elif c == "?":
            out.append("%s")
            i += 1
        elif c == "%":
            out.append("%%")
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


class Statements:
    """The PostgreSQL text of each named statement, converted for psycopg once, when first used.

    A statement is found by its name (``Q.name`` carries it); a plain string
    is accepted only when it is the SQLite text of a named statement.
    """

    def __init__(self) -> None:
        self._pg: Mapping[str, str] | None = None  # loaded at the first statement
        self._names_by_text: dict[str, str] = {}
        self._converted: dict[str, str] = {}
        self._lock = threading.Lock()

    def _load(self) -> Mapping[str, str]:
        from .. import queries

        with self._lock:
            if self._pg is None:
                self._names_by_text = {str(t): n for n, t in vars(queries.Q).items() if isinstance(t, str)}
                self._pg = queries.POSTGRES
            return self._pg

    def __getitem__(self, sql: str) -> tuple[str, str]:
        pg = self._pg if self._pg is not None else self._load()
        name = getattr(sql, "name", None) or self._names_by_text.get(sql)
        if name is None:
            raise ValueError(f"the PostgreSQL store runs named statements only (Q.name), not SQL text: {sql[:80]!r}")
        found = self._converted.get(name)
        if found is None:
            try:
                text = pg[name]
            except KeyError:
                raise ValueError(f"no PostgreSQL statement is named {name!r}") from None
            found = convert_params(str(text))
            with self._lock:
                self._converted[name] = found
        return name, found


# ---------------------------------------------------------------- rows


class PgRow:
    """A row as sqlite3.Row offers it: ``row["col"]``, ``row[0]``, ``keys()``, iteration, equality with tuples."""

    __slots__ = ("_values", "_index")

    def __init__(self, values: tuple[Any, ...], index: dict[str, int]) -> None:
        self._values = values
        self._index = index

    def __getitem__(self, key: str | int | slice) -> Any:
        if isinstance(key, str):
            try:
                return self._values[self._index[key]]
            except KeyError:
                lowered = {k.lower(): v for k, v in self._index.items()}
                if key.lower() in lowered:
                    return self._values[lowered[key.lower()]]
                raise IndexError(f"No item with that key: {key!r}") from None
        return self._values[key]

    def keys(self) -> list[str]:
        return list(self._index)

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PgRow):
            return self._values == other._values and self._index == other._index
        if isinstance(other, tuple):
            return self._values == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        return f"PgRow({dict(zip(self._index, self._values))!r})"


_INDEXES: dict[tuple[bytes, ...], dict[str, int]] = {}  # column names -> positions, one per result shape


def row_factory(cursor: psycopg.Cursor[Any]) -> Callable[[Sequence[Any]], PgRow]:
    """Rows as PgRow. The column names are read from the result itself, not from
    ``cursor.description`` (which builds a Column per column per statement: a third
    of a point read's time in Python)."""
    result = cursor.pgresult
    names = tuple(result.fname(i) or b"" for i in range(result.nfields)) if result is not None else ()
    index = _INDEXES.get(names)
    if index is None:
        index = _INDEXES[names] = {name.decode(): i for i, name in enumerate(names)}
    return lambda values: PgRow(tuple(values), index)


def has_rows(cursor: psycopg.Cursor[Any]) -> bool:
    """Whether the statement answered rows (a SELECT, a RETURNING), without building its description."""
    result = cursor.pgresult
    return result is not None and result.status == pq.ExecStatus.TUPLES_OK
