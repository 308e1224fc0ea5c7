"""The named statements, loaded once: SQLite's texts (Q) and PostgreSQL's (POSTGRES).

A statement whose text is the same on both backends is written once, in
shared.sql; one whose text differs has a twin in each dialect's file
(sqlite/queries.sql, postgres/queries.postgres.sql). ``Q.claim_by_id`` is
the text under ``-- name: claim_by_id``; an unknown name fails at attribute
access, not at run time inside a transaction. Each is a ``Statement``: a
``str`` (SQLite's text, what the SQLite store runs) that knows its ``name``,
so that another backend finds its own text by it: ``POSTGRES[Q.claim_by_id.name]``
(same names, same parameters, same result columns). Loading refuses dialect
files whose names differ, naming what one has and the other lacks, and a
name both shared and a twin.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType

# The statements both backends run as they are; each backend's own, in its folder of this package.
SHARED_FILE = "shared.sql"
SQLITE_FILE = "sqlite/queries.sql"
POSTGRES_FILE = "postgres/queries.postgres.sql"


class Statement(str):
    """A statement's text (SQLite's), carrying its name."""

    name: str

    def __new__(cls, text: str, name: str) -> Statement:
        statement = super().__new__(cls, text)
        statement.name = name
        return statement

    def __reduce__(self) -> tuple[object, ...]:
        return (Statement, (str(self), self.name))


def _parse(text: str, file: str = SQLITE_FILE) -> dict[str, str]:
    statements: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("-- name:"):
            if name is not None:
                statements[name] = "\n".join(lines).strip().rstrip(";")
            name = line.removeprefix("-- name:").strip()
            if name in statements:
                raise ValueError(f"{file} names {name!r} twice")
            lines = []
        elif name is not None:
            lines.append(line)
    if name is not None:
        statements[name] = "\n".join(lines).strip().rstrip(";")
    return statements


def apart(shared: Mapping[str, str], dialect: Mapping[str, str], *, names: tuple[str, str]) -> None:
    """Raise ValueError if a statement is both shared and a dialect's twin, saying which."""
    both = sorted(set(shared) & set(dialect))
    if both:
        raise ValueError(
            f"{names[0]} and {names[1]} both name {', '.join(both)}: a statement is shared or has twins, not both"
        )


def same_names(first: Mapping[str, str], second: Mapping[str, str], *, names: tuple[str, str]) -> None:
    """Raise ValueError unless both sets of statements have the same names, saying which differ."""
    missing = sorted(set(first) - set(second))
    extra = sorted(set(second) - set(first))
    if missing or extra:
        told = []
        if missing:
            told.append(f"{names[1]} lacks {', '.join(missing)}")
        if extra:
            told.append(f"{names[1]} has {', '.join(extra)}, which {names[0]} does not")
        raise ValueError(f"{names[0]} and {names[1]} must name the same statements: {'; '.join(told)}")


class _Queries:
    def __init__(self, statements: Mapping[str, str]) -> None:
        self.__dict__.update({name: Statement(text, name) for name, text in statements.items()})

    def __getattr__(self, name: str) -> Statement:
        raise AttributeError(f"no SQL statement is named {name!r} (shared.sql, sqlite/queries.sql)")


def _load(file: str) -> dict[str, str]:
    # A data file, found by its place: the backend's modules are not imported for it.
    found = resources.files(__package__)
    for part in file.split("/"):
        found = found.joinpath(part)
    return _parse(found.read_text("utf-8"), file)


SHARED: Mapping[str, str] = MappingProxyType(_load(SHARED_FILE))
_sqlite = _load(SQLITE_FILE)
_postgres = _load(POSTGRES_FILE)
same_names(_sqlite, _postgres, names=(SQLITE_FILE, POSTGRES_FILE))
apart(SHARED, _sqlite, names=(SHARED_FILE, SQLITE_FILE))
apart(SHARED, _postgres, names=(SHARED_FILE, POSTGRES_FILE))
TWINS: frozenset[str] = frozenset(_sqlite)
"""The statements whose texts differ between the dialects: one in each dialect's file."""

POSTGRES: Mapping[str, str] = MappingProxyType({**SHARED, **_postgres})
Q = _Queries({**SHARED, **_sqlite})
