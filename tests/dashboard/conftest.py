"""The dashboard's tests: a store whose clock starts at the real now (the server in
the same test reads the system clock: "the last hour" must mean the same hour)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from switchboard_local.core.clock import ManualClock

from support.dashboard import Board, serving_dashboard


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(time.time_ns() // 1_000_000)


@pytest.fixture
def board(store, db_path: Path) -> Iterator[Board]:
    with serving_dashboard(db_path) as running:
        yield running
