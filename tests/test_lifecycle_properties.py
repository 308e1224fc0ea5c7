"""Random sequences of lifecycle calls keep every invariant of DESIGN §2.

A hypothesis state machine drives a real store (a file on disk, a clock that
it moves) with creates, claims, heartbeats, completions, failures, releases,
redrives and the passing of time, and after every step checks the file:
states and lease fields agree, attempts stay within their budget, a claimed
todo has exactly one open attempt, and a lease token works exactly while it
is the todo's current, unexpired lease (the model says which).
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from switchboard_local import todos
from switchboard_local.clock import ManualClock
from switchboard_local.errors import Conflict, NotFound
from switchboard_local.store import Store
from switchboard_local.todos import NewTodo


class Lifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.path = Path(self.dir.name) / "switchboard.db"
        self.clock = ManualClock()
        self.loop = asyncio.new_event_loop()
        self.store = self.run(Store.open(self.path, clock=self.clock, rng=random.Random(0)))
        self.held: list[tuple[int, str, int]] = []  # every token handed out: (todo id, token, lease end)
        self.current: dict[int, str] = {}  # the model: the token of each todo's current claim

    def run(self, coro):  # noqa: ANN001, ANN201
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.store.close())
        self.loop.close()
        self.dir.cleanup()

    def valid(self, todo_id: int, token: str, lease_end: int) -> bool:
        return self.current.get(todo_id) == token and self.clock.now_ms() < lease_end

    @rule(key=st.sampled_from([None, "a", "b"]), max_attempts=st.integers(1, 3))
    def create(self, key: str | None, max_attempts: int) -> None:
        self.run(todos.create(self.store, NewTodo(queue="q", title="t", idempotency_key=key, max_attempts=max_attempts)))

    @rule(owner=st.sampled_from(["x", "y"]), lease=st.sampled_from([30, 300]))
    def claim_next(self, owner: str, lease: int) -> None:
        claimed = self.run(todos.claim_next(self.store, owner=owner, lease=lease))
        if claimed is not None:
            assert claimed.attempt <= claimed.max_attempts
            self.current[claimed.id] = claimed.lease_token
            self.held.append((claimed.id, claimed.lease_token, claimed.lease_expires_at))

    @precondition(lambda self: self.held)
    @rule(data=st.data(), verb=st.sampled_from(["complete", "fail", "release", "heartbeat"]))
    def use_a_token(self, data: st.DataObject, verb: str) -> None:
        index = data.draw(st.integers(0, len(self.held) - 1))
        todo_id, token, lease_end = self.held[index]
        expected = self.valid(todo_id, token, lease_end)
        before = self.row(todo_id)
        try:
            if verb == "heartbeat":
                beat = self.run(todos.heartbeat(self.store, todo_id, token, lease=60))
                self.held[index] = (todo_id, token, beat.lease_expires_at)
            else:
                self.run(getattr(todos, verb)(self.store, todo_id, token))
                del self.current[todo_id]
        except Conflict:
            assert not expected, f"{verb} refused a current lease"
            assert self.row(todo_id) == before, f"a refused {verb} changed the todo"
        else:
            assert expected, f"{verb} accepted a stale or expired token"

    @rule(seconds=st.sampled_from([1, 29, 31, 301, 1000]))
    def time_passes(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @rule(todo_id=st.integers(1, 12))
    def redrive(self, todo_id: int) -> None:
        try:
            self.run(todos.redrive(self.store, todo_id))
        except (Conflict, NotFound):
            pass

    def row(self, todo_id: int) -> tuple:
        with sqlite3.connect(self.path) as conn:
            return conn.execute("SELECT * FROM todos WHERE id = ?", (todo_id,)).fetchone()

    @invariant()
    def the_file_agrees_with_the_lifecycle(self) -> None:
        with sqlite3.connect(self.path) as conn:
            rows = conn.execute(
                "SELECT id, state, attempt, max_attempts, owner, lease_expires_at, lease_token_hash, visible_at, "
                "(SELECT count(*) FROM attempts WHERE todo_id = todos.id AND ended_at IS NULL) FROM todos"
            ).fetchall()
        for todo_id, state, attempt, max_attempts, owner, lease, token_hash, visible, open_attempts in rows:
            assert state in todos.STATES
            assert 0 <= attempt <= max_attempts
            claimed = state == "claimed"
            assert claimed == (lease is not None) == (token_hash is not None) == (owner is not None)
            assert open_attempts == (1 if claimed else 0), f"todo {todo_id}: {open_attempts} open attempts"
            assert state != "pending" or visible is not None
            assert state not in ("claimed", "done") or visible is None


TestLifecycle = Lifecycle.TestCase
TestLifecycle.settings = settings(max_examples=150, stateful_step_count=30, deadline=None, database=None)
