"""A paused queue through the MCP tools (issue 12 §2): agents cannot pause, but
claim and claim_next (its long poll included) never take from a paused queue,
and queue_stats says which queues are paused."""

from __future__ import annotations

import anyio
import pytest

from switchboard_local.core import queues, todos
from switchboard_local.core.todo_model import NewTodo

from support.mcp import call, claim_attempts, connect, refused

pytestmark = pytest.mark.anyio


async def new(store, queue="q", title="t"):
    todo, _ = await todos.create(store, NewTodo(queue=queue, title=title))
    return todo


async def test_queue_stats_show_paused_per_queue(store) -> None:
    await new(store, "a")
    await new(store, "b")
    await queues.pause(store, "b", by="op")
    async with connect(store) as client:
        stats = await call(client, "queue_stats")
    assert [(q["queue"], q["pending"], q["paused"]) for q in stats["queues"]] == [("a", 1, False), ("b", 1, True)]


async def test_claim_of_a_todo_on_a_paused_queue_is_refused_with_conflict_saying_so(store) -> None:
    todo = await new(store, "held")
    await queues.pause(store, "held", by="op")
    async with connect(store) as client:
        text = await refused(client, "claim", id=todo.id)
    assert (
        text
        == f"conflict: todo {todo.id} is on queue 'held', which is paused: nothing is claimed from it until it is resumed"
    )


@pytest.mark.parametrize("queue", [None, "held"], ids=["any queue", "its queue"])
async def test_claim_next_takes_nothing_from_a_paused_queue(store, queue) -> None:
    todo = await new(store, "held")
    await queues.pause(store, "held", by="op")
    async with connect(store) as client:
        answer = await call(client, "claim_next", **({} if queue is None else {"queue": queue}))
    assert answer == {"todo": None, "empty": True}
    assert (await todos.get(store, todo.id)).state == "pending"


async def test_complete_with_claim_next_takes_nothing_from_a_paused_queue(store) -> None:
    work = await todos.claim(store, (await new(store, "work")).id, owner="w")
    await new(store, "held")
    await queues.pause(store, "held", by="op")
    async with connect(store) as client:
        finished = await call(client, "complete", id=work.id, lease_token=work.lease_token, claim_next=True)
    assert finished["state"] == "done" and finished["next"] is None


async def test_a_long_poll_is_not_satisfied_by_a_todo_landing_on_a_paused_queue(store, monkeypatch) -> None:
    # Only the change feed wakes the poll: each commit below makes it look again.
    monkeypatch.setattr(todos.claims, "RECHECK_SECONDS", 60.0)
    await queues.pause(store, "held", by="op")
    tried = claim_attempts(monkeypatch)
    async with connect(store) as client:
        answer = {}
        async with anyio.create_task_group() as tasks:

            async def wait_for_work() -> None:
                answer.update(await call(client, "claim_next", wait_seconds=15))

            tasks.start_soon(wait_for_work)
            with anyio.fail_after(10):
                await tried.wait()
            on_paused = await new(store, "held", "first, on the paused queue")
            on_open = await new(store, "open", "then on another")
    assert answer["todo"]["id"] == on_open.id
    assert (await todos.get(store, on_paused.id)).state == "pending"


async def test_a_long_poll_on_a_paused_queue_answers_empty(store) -> None:
    await queues.pause(store, "held", by="op")
    answer = {}
    async with connect(store) as client, anyio.create_task_group() as tasks:

        async def wait_for_work() -> None:
            answer.update(await call(client, "claim_next", queue="held", wait_seconds=0.5))

        tasks.start_soon(wait_for_work)
        landed = await new(store, "held", "lands while paused")
    assert answer == {"todo": None, "empty": True}
    assert (await todos.get(store, landed.id)).state == "pending"


async def test_a_long_poll_is_woken_by_resume(store, monkeypatch) -> None:
    monkeypatch.setattr(todos.claims, "RECHECK_SECONDS", 60.0)
    waiting = await new(store, "held")
    await queues.pause(store, "held", by="op")
    tried = claim_attempts(monkeypatch)
    async with connect(store) as client:
        answer = {}
        async with anyio.create_task_group() as tasks:

            async def wait_for_work() -> None:
                answer.update(await call(client, "claim_next", queue="held", wait_seconds=15))

            tasks.start_soon(wait_for_work)
            with anyio.fail_after(10):
                await tried.wait()
            await queues.resume(store, "held")
    assert answer["todo"]["id"] == waiting.id


async def test_a_lease_held_on_a_paused_queue_keeps_working(store) -> None:
    claimed = await todos.claim(store, (await new(store, "held")).id, owner="w")
    await queues.pause(store, "held", by="op")
    async with connect(store) as client:
        beat = await call(client, "heartbeat", id=claimed.id, lease_token=claimed.lease_token)
        released = await call(client, "release", id=claimed.id, lease_token=claimed.lease_token)
    assert beat["state"] == "claimed" and released["state"] == "pending"
