"""Shared fixtures: a real database (an SQLite file on disk, or a PostgreSQL database on a real
server), a clock that tests move, pinned jitter.

``backend`` is "sqlite" unless a folder's conftest parametrizes it (tests/core
and tests/processes: both backends, the ``postgres`` variant marked
``postgres``; a test marked ``sqlite_only`` runs on SQLite alone) or the test
is marked ``both_backends`` (the edges' smoke on PostgreSQL: ``pytest_generate_tests`` here). ``db_path`` is then the SQLite file's
path, or the URL of a fresh PostgreSQL database of the test's own.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from switchboard_local.core.clock import ManualClock
from switchboard_local.core.store.interface import Store
from switchboard_local.core.store.opener import open_store

from support import sql
from support.backends import parametrize_marked
from support.cli import Result, invoke
from support.postgres import PostgresServer


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_marked(metafunc)


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
def backend(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the session; its template database holds the schema.

    fsync off: no test crashes the server's machine, the one thing fsync guards
    against (a killed server, or a killed client, loses no commit without it:
    the WAL is still written at each commit), and each commit's flush is
    time no test needs (some 5-10% of tests/core's PostgreSQL variants on
    this disk). bench/ keeps it on."""
    import asyncio

    server = PostgresServer(fsync=False).start()
    try:

        def create_schema(url: str) -> None:
            async def opened_once() -> None:
                await (await open_store(url)).close()

            asyncio.run(opened_once())

        server.prepare_template(create_schema)
        yield server
    finally:
        server.stop()


def _database(tmp_path: Path, backend: str, request: pytest.FixtureRequest, name: str) -> Path | str:
    if backend == "sqlite":
        return tmp_path / name
    server: PostgresServer = request.getfixturevalue("postgres_server")
    # A PostgreSQL store keeps its local files (the dashboard token) in the user data dir.
    request.getfixturevalue("monkeypatch").setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    url = server.fresh_database()
    request.addfinalizer(lambda: server.release(url))
    return url


@pytest.fixture
def db_path(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> Path | str:
    """The test's database: an SQLite file's path, or a fresh PostgreSQL database's URL."""
    return _database(tmp_path, backend, request, "switchboard.db")


@pytest.fixture
def other_db_path(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> Path | str:
    """A second database of the same backend, apart from ``db_path``'s."""
    return _database(tmp_path, backend, request, "other.db")


@pytest.fixture
async def store(db_path: Path | str, clock: ManualClock) -> AsyncIterator[Store]:
    opened = await open_store(db_path, clock=clock, rng=random.Random(0))
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def row_count(db_path: Path | str) -> Callable[[str], int]:
    """Count a table's rows through a separate connection: what is committed on disk."""
    return lambda table: sql.count(db_path, table)


@pytest.fixture
def cli(db_path: Path | str) -> Callable[..., Result]:
    """The command line in this process on ``db_path``: ``cli(*args, input=None, env=None)`` → Result."""
    return lambda *args, **options: invoke(db_path, *args, **options)
