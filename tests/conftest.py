"""Shared fixtures: a real SQLite file on disk, a clock that tests move, pinned jitter."""

from __future__ import annotations

import os
import random
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from switchboard_local.core.clock import ManualClock
from switchboard_local.core.store import Store

from support import sql
from support.cli import Result, invoke


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


HANG_SECONDS = 60  # the slowest test takes about 12 s


class Hung(Exception):
    pass


@pytest.fixture(autouse=True)
def fail_a_hung_test_under_mutation_testing() -> Iterator[None]:
    """Under mutation testing (mutmut sets MUTANT_UNDER_TEST) a mutant that hangs
    a test is killed after a minute, not after mutmut's own timeout: five times
    every selected test's time, minutes for the core's mutants."""
    if not os.environ.get("MUTANT_UNDER_TEST") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def hung(signum: int, frame: object) -> None:
        raise Hung(f"the test ran for {HANG_SECONDS} s: a hang")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(HANG_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


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
    return lambda table: sql.count(db_path, table)


@pytest.fixture
def cli(db_path: Path) -> Callable[..., Result]:
    """The command line in this process on ``db_path``: ``cli(*args, input=None, env=None)`` → Result."""
    return lambda *args, **options: invoke(db_path, *args, **options)
