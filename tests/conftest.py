"""Shared fixtures: a real SQLite file on disk, a clock that tests move, pinned jitter."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from switchboard_local.clock import ManualClock
from switchboard_local.store import Store


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "switchboard.db"


@pytest.fixture
async def store(db_path: Path, clock: ManualClock) -> AsyncIterator[Store]:
    opened = await Store.open(db_path, clock=clock, rng=random.Random(0))
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def row_count(db_path: Path) -> Callable[[str], int]:
    """Count a table's rows through a separate connection: what is committed on disk."""

    def count(table: str) -> int:
        conn = sqlite3.connect(db_path)
        try:
            return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        finally:
            conn.close()

    return count
