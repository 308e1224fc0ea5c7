"""Real processes on both backends: every test that uses the database runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest

from support.backends import parametrize_backends


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_backends(metafunc)
