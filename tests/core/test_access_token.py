"""The dashboard token's file: made once, atomically, whoever races to make it."""

from __future__ import annotations

import multiprocessing
import stat
from pathlib import Path
from typing import Any

import pytest

from switchboard_local.core import access_token
from switchboard_local.core.errors import Unavailable

RACERS = 4
ROUNDS = 150


def _race(folder: str, rounds: int, barrier: Any, results: Any) -> None:
    """One racer: each round, once every racer is at the barrier, read or make the round's token."""
    for n in range(rounds):
        barrier.wait()
        try:
            results.put((n, access_token.read_or_create(Path(folder) / f"round-{n}" / "switchboard.db")))
        except Exception as exc:  # reported to the test, which names it
            results.put((n, f"{type(exc).__name__}: {exc}"))


def test_processes_making_the_token_at_once_all_get_the_same_complete_token(tmp_path):
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(RACERS)
    results = context.Queue()
    racers = [context.Process(target=_race, args=(str(tmp_path), ROUNDS, barrier, results)) for _ in range(RACERS)]
    for racer in racers:
        racer.start()
    try:
        got: dict[int, list[str]] = {}
        for _ in range(RACERS * ROUNDS):
            n, token = results.get(timeout=60)
            got.setdefault(n, []).append(token)
    finally:
        for racer in racers:
            racer.join(timeout=60)
    for n in range(ROUNDS):
        made = (tmp_path / f"round-{n}" / "switchboard.db.dashboard-token").read_text().strip()
        assert got[n] == [made] * RACERS, f"round {n}: {got[n]}"
    assert all(racer.exitcode == 0 for racer in racers)


def test_the_token_file_is_owner_only_and_nothing_else_is_left_beside_it(tmp_path):
    token = access_token.read_or_create(tmp_path / "switchboard.db")
    path = tmp_path / "switchboard.db.dashboard-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == token + "\n"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left behind
    assert access_token.read_or_create(tmp_path / "switchboard.db") == token


def test_an_existing_token_is_never_replaced(tmp_path):
    path = tmp_path / "switchboard.db.dashboard-token"
    path.write_text("k" * 43 + "\n")
    assert access_token.read_or_create(tmp_path / "switchboard.db") == "k" * 43


def test_a_file_that_holds_no_token_is_refused_not_replaced(tmp_path):
    path = tmp_path / "switchboard.db.dashboard-token"
    path.write_text("")
    with pytest.raises(Unavailable, match="holds no token"):
        access_token.read_or_create(tmp_path / "switchboard.db")
    assert path.read_text() == ""
