"""The one door to a backend: which store a database is opened with, chosen by how it is named.

A ``postgresql://`` or ``postgres://`` URL (``shared.is_url``) is PostgreSQL's
(postgres/, imported only then: nothing else needs psycopg installed); any
other name is a file's path, SQLite's (sqlite/). Callers hold what this
answers as the interface's ``Store`` and never name a backend's class.
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path
from typing import TYPE_CHECKING

from ..clock import Clock
from .interface import FileState, Store
from .shared import Location, default_path, is_url

if TYPE_CHECKING:
    from .sqlite.group_commit import Monotonic

SQLITE = "SQLite"
POSTGRESQL = "PostgreSQL"


def backend(db: str | os.PathLike[str]) -> str:
    """Which backend opens ``db``: ``POSTGRESQL`` for a PostgreSQL URL, else ``SQLITE`` (a file)."""
    return POSTGRESQL if is_url(db) else SQLITE


async def open_store(
    db: str | os.PathLike[str] | None = None,
    *,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    synchronous: str = "FULL",
    monotonic: Monotonic | None = None,
    read_only: bool = False,
) -> Store:
    """Open the store at ``db`` (default: $SWITCHBOARD_DB, else the user data dir):
    a file path (SQLite), or a ``postgresql://`` URL (PostgreSQL).

    ``clock`` is the verbs' time, ``rng`` their jitter, ``monotonic`` the
    group commit's time budget (all injected so that tests move them).
    ``read_only``: an existing file at the current schema version, read
    and never changed (nothing created, migrated or chmod-ed; every write
    refused with ``Unavailable``); anything else is refused as when opened.
    """
    if db is None:
        db = default_path()
    if backend(db) == POSTGRESQL:
        from .postgres.store import PostgresStore  # only when asked for: psycopg is imported there alone

        return await PostgresStore.open(
            str(db), clock=clock, rng=rng, synchronous=synchronous, monotonic=monotonic, read_only=read_only
        )
    from .sqlite.store import SQLiteStore

    return await SQLiteStore.open(
        db, clock=clock, rng=rng, synchronous=synchronous, monotonic=monotonic, read_only=read_only
    )


async def inspect_store(db: Location) -> FileState:
    """What the existing database at ``db`` is, without changing it: never created, migrated or chmod-ed.

    A file: its identity, journal mode and integrity (which reads every
    page); raises ``Unavailable`` when it cannot be opened, ``Busy`` when it
    stays locked. A PostgreSQL URL: its schema version and whether it is
    ours or empty (PostgreSQL checks its own pages).
    """
    if backend(db) == POSTGRESQL:
        from .postgres.store import inspect_url

        return await asyncio.to_thread(inspect_url, str(db))
    from .sqlite.store import inspect_file

    return await asyncio.to_thread(inspect_file, Path(db))
