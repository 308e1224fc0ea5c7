"""Noticing commits from any process (the long poll's and the doorbell's feed)."""

from __future__ import annotations

import sqlite3

import anyio
import pytest

from switchboard_local.core import todos, watch
from switchboard_local.core.todo_model import NewTodo

pytestmark = pytest.mark.anyio


def commit_elsewhere(db_path) -> None:
    """A write through a separate connection, as another process would make it."""
    with sqlite3.connect(db_path) as conn:
        conn.execute("INSERT INTO agents (name, queues, created_at) VALUES ('other', '[\"q\"]', 0)")


async def test_data_version_changes_when_any_connection_commits_and_only_then(store, db_path) -> None:
    first = await store.data_version()
    assert await store.data_version() == first  # reading changes nothing
    await todos.create(store, NewTodo(queue="q", title="mine"))
    mine = await store.data_version()
    commit_elsewhere(db_path)
    theirs = await store.data_version()
    assert len({first, mine, theirs}) == 3


async def test_changes_wakes_a_waiter_soon_after_another_connection_commits(store, db_path) -> None:
    changes = watch.Changes(store, interval=0.05)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(changes.run)
        await changes.ready.wait()  # commits from here on are counted
        seen = changes.count
        assert await changes.wait(seen, timeout=0.1) == seen  # nothing committed: times out
        commit_elsewhere(db_path)
        assert await changes.wait(seen, timeout=10) == seen + 1
        tasks.cancel_scope.cancel()


async def test_arrivals_are_the_newer_todos_the_agent_could_claim_in_its_queues(store) -> None:
    for queue, assignee in [("a", None), ("b", None), ("a", "someone"), ("a", "me"), ("a", None)]:
        await todos.create(store, NewTodo(queue=queue, title=f"{queue} {assignee}", assignee=assignee))
    found = await watch.arrivals(store, after_id=1, agent="me", queues=["a"])
    assert [(a.id, a.title, a.source) for a in found] == [(4, "a me", None), (5, "a None", None)]
    assert await watch.last_todo_id(store) == 5
