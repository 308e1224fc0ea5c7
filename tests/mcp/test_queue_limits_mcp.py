"""A limited queue through the MCP tools (issue 31 §4): queue_stats shows the limit
and how close the queue is; claim is refused at the limit, naming it; claim_next
takes nothing past it, its long poll included, and wakes when a slot frees."""

from __future__ import annotations

import anyio
import pytest

from switchboard_local.core import queues, todos
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease

from support.mcp import call, connect, refused

pytestmark = pytest.mark.anyio


async def new(store, queue="deploy", title="t"):
    todo, _ = await todos.create(store, NewTodo(queue=queue, title=title))
    return todo


async def test_queue_stats_show_the_limit_and_how_close_the_queue_is(store) -> None:
    await new(store)
    await new(store, "plain")
    await queues.set_limit(store, "deploy", max_claimed=2, max_per_minute=10, by="op")
    await todos.claim_next(store, owner="w", queues=["deploy"])
    async with connect(store) as client:
        stats = await call(client, "queue_stats")
    assert [(q["queue"], q["claimed"], q["max_claimed"], q["claims_last_minute"], q["max_per_minute"])
            for q in stats["queues"]] == [("deploy", 1, 2, 1, 10), ("plain", 0, None, None, None)]  # fmt: skip


async def test_claim_at_the_limit_is_refused_with_conflict_naming_it(store) -> None:
    await todos.claim(store, (await new(store)).id, owner="first")
    waiting = await new(store)
    await queues.set_limit(store, "deploy", max_claimed=1, by="op")
    async with connect(store) as client:
        text = await refused(client, "claim", id=waiting.id)
        answer = await call(client, "claim_next", queue="deploy")
    assert text == (f"conflict: todo {waiting.id} is on queue 'deploy', which is at its limit: "
                    "1 claimed of --max-claimed 1; it waits, ready, until the queue has room")  # fmt: skip
    assert answer == {"todo": None, "empty": True}


async def test_claim_next_with_a_wait_on_a_full_queue_takes_the_todo_a_freed_slot_lets_through(store) -> None:
    first = await todos.claim(store, (await new(store)).id, owner="first")
    waiting = await new(store, title="waits")
    await queues.set_limit(store, "deploy", max_claimed=1, by="op")
    async with connect(store) as client, anyio.create_task_group() as tasks:
        answer = {}

        async def poll() -> None:
            answer.update(await call(client, "claim_next", queue="deploy", wait_seconds=20))

        tasks.start_soon(poll)
        await todos.complete(store, Lease.of(first))
    assert answer["todo"]["id"] == waiting.id
