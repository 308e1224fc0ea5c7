"""Which database backends a folder's tests run on (tests/conftest.py's ``backend`` fixture)."""

from __future__ import annotations

import pytest

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def parametrize_backends(metafunc: pytest.Metafunc) -> None:
    """Run a test that uses the database on both backends, unless it is marked sqlite_only.

    Called from a folder's ``pytest_generate_tests`` (tests/core/conftest.py).
    The PostgreSQL variant is marked ``postgres`` (``-m 'not postgres'``
    leaves it out).
    """
    if "backend" in metafunc.fixturenames and metafunc.definition.get_closest_marker("sqlite_only") is None:
        metafunc.parametrize("backend", BACKENDS, indirect=True)
