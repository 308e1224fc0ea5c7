"""The read API (issue 14 §2): every list, its filters and its paging, every detail."""

from __future__ import annotations

import pytest

from switchboard_local.core import todos
from switchboard_local.core.todo_model import NewTodo

pytestmark = pytest.mark.anyio


async def test_queues_lists_each_queue_with_its_counts(store, board):
    await todos.create(store, NewTodo(queue="triage", title="a"))
    await todos.create(store, NewTodo(queue="triage", title="b", delay=60))
    (row,) = board.get_json("/api/queues")["items"]
    assert row["queue"] == "triage"
    assert (row["ready"], row["delayed"], row["claimed"], row["dead"], row["paused"]) == (1, 1, 0, 0, False)
    assert row["oldest_ready_age_seconds"] is not None
    assert len(row["created_per_minute"]) == 60 and sum(row["created_per_minute"]) == 2
