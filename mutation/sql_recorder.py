"""pytest plugin: which named statements of queries.sql each test executes.

Loaded by mutation/sql.py (``-p sql_recorder``, $SQL_RECORDER_OUT names the
output file). It wraps Transaction's one/all/run/many, maps the SQL text back
to its name through queries.Q and notes it under the test that is running
(setup and teardown included). Statements run by a subprocess a test starts
are not seen.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Any

import pytest

from switchboard_local.core.store.queries import Q
from switchboard_local.core.store.sqlite import group_commit
from switchboard_local.core.store.sqlite import store as sqlite

_names = {text: name for name, text in vars(Q).items()}
_current: str | None = None
_statements: defaultdict[str, set[str]] = defaultdict(set)
_durations: defaultdict[str, float] = defaultdict(float)


def _wrap(method: Any) -> Any:
    def recorded(self: Any, sql: str, *args: Any, **kwargs: Any) -> Any:
        name = _names.get(sql)
        if name is not None and _current is not None:
            _statements[name].add(_current)
        return method(self, sql, *args, **kwargs)

    return recorded


def _wrap_read(method: Any) -> Any:
    async def recorded(self: Any, sql: str, *args: Any, **kwargs: Any) -> Any:
        name = _names.get(sql)
        if name is not None and _current is not None:
            _statements[name].add(_current)
        return await method(self, sql, *args, **kwargs)

    return recorded


for _method in ("one", "all", "run", "many"):  # inside a write (or a peek)
    setattr(group_commit.SQLiteTransaction, _method, _wrap(getattr(group_commit.SQLiteTransaction, _method)))
sqlite.SQLiteStore._read = _wrap_read(sqlite.SQLiteStore._read)  # read_one / read_all


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    global _current
    _current = item.nodeid
    try:
        return (yield)
    finally:
        _current = None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _durations[report.nodeid] += report.duration


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    out = os.environ.get("SQL_RECORDER_OUT")
    if out:
        data = {"statements": {k: sorted(v) for k, v in sorted(_statements.items())}, "durations": dict(_durations)}
        with open(out, "w") as f:
            json.dump(data, f, indent=1)
