"""Real processes on both backends: every test that uses the database runs on SQLite and on PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.backends import parametrize_backends
from support.binary import Build

_build: Build | None = None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_backends(metafunc)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start building the binary now if a ``binary`` test is to run: it builds beside the tests before it."""
    global _build
    if _build is None and any(item.get_closest_marker("binary") for item in session.items):
        _build = Build()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _build is not None:
        _build.stop()


@pytest.fixture(scope="session")
def binary() -> Path:
    """The executable, built by the packaging script (support/binary.py) into a folder of this session."""
    global _build
    if _build is None:  # not started at collection (say, the test was selected otherwise)
        _build = Build()
    return _build.wait()
