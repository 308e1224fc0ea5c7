"""Which database backends a folder's tests run on (tests/conftest.py's ``backend`` fixture)."""

from __future__ import annotations

from pathlib import Path

import pytest

from switchboard_local.core.store.shared import is_url

PASSWORD = "hunter2-in-the-url"

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def parametrize_backends(metafunc: pytest.Metafunc) -> None:
    """Run a test that uses the database on both backends, unless it is marked sqlite_only.

    Called from a folder's ``pytest_generate_tests`` (tests/core/conftest.py).
    The PostgreSQL variant is marked ``postgres`` (``-m 'not postgres'``
    leaves it out).
    """
    definition = metafunc.definition
    if definition.get_closest_marker("both_backends") is not None:
        return  # parametrized by parametrize_marked (tests/conftest.py), once
    if "backend" in metafunc.fixturenames and definition.get_closest_marker("sqlite_only") is None:
        metafunc.parametrize("backend", BACKENDS, indirect=True)


def parametrize_marked(metafunc: pytest.Metafunc) -> None:
    """Run a test marked ``both_backends`` on SQLite and on PostgreSQL (tests/conftest.py, every folder).

    The edges (tests/http, mcp, cli, brokers, dashboard) run on SQLite; the
    few tests of theirs that drive the store through the edge, one per promise
    that matters across backends, are marked to run on PostgreSQL too.
    """
    if metafunc.definition.get_closest_marker("both_backends") is not None:
        if "backend" not in metafunc.fixturenames:
            raise pytest.UsageError(f"{metafunc.definition.nodeid} is marked both_backends but uses no database")
        metafunc.parametrize("backend", BACKENDS, indirect=True)


def with_password(db: Path | str) -> Path | str:
    """``db`` as the user may give it: a PostgreSQL URL with a password in it (the test server
    trusts loopback, so any password opens it), to show that output never carries the password;
    an SQLite path as it is."""
    if not is_url(db):
        return db
    scheme, rest = str(db).split("://", 1)
    user, host = rest.split("@", 1)
    return f"{scheme}://{user}:{PASSWORD}@{host}"
