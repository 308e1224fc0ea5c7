"""create_for's depends_on: an agent chains work (a summary waits for the fetches it handed on),
the chained todo is blocked until they are done, and its claim carries their results."""

from __future__ import annotations

from typing import Any

import pytest

from switchboard_local.core import agents, todos
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease

from support.mcp import call, connect, refused

pytestmark = pytest.mark.anyio


async def new(store, queue: str = "q", title: str = "t", **fields: Any) -> int:
    return (await todos.create(store, NewTodo(queue=queue, title=title, **fields)))[0].id


async def finish(store, todo_id: int, result: Any = None) -> None:
    await todos.complete(store, Lease.of(await todos.claim(store, todo_id, owner="w")), result=result)


async def test_create_for_depends_on_makes_a_blocked_todo_that_a_claim_gets_with_their_results(store) -> None:
    lead = await agents.add(store, "lead", queues=["summaries"], create_queues=["fetch", "summaries"])
    async with connect(store, lead) as client:
        fetches = [(await call(client, "create_for", title=f"fetch {n}", queue="fetch"))["todo"]["id"] for n in (1, 2)]
        made = await call(client, "create_for", title="summarise", queue="summaries", depends_on=fetches)
        assert made["created"] is True and made["todo"]["blocked"] is True
        assert (await call(client, "claim_next", queues=["summaries"]))["empty"] is True
        stats = {q["queue"]: q for q in (await call(client, "queue_stats"))["queues"]}
        assert (stats["summaries"]["blocked"], stats["summaries"]["ready"]) == (1, 0)
        for n, todo_id in enumerate(fetches):
            await finish(store, todo_id, {"page": n})
        claimed = (await call(client, "claim_next", queues=["summaries"]))["todo"]
        assert claimed["id"] == made["todo"]["id"] and claimed["blocked"] is False
        assert claimed["dependencies"] == [
            {"id": fetches[0], "state": "done", "result": {"page": 0}, "result_omitted": False},
            {"id": fetches[1], "state": "done", "result": {"page": 1}, "result_omitted": False},
        ]
        shown = await call(client, "get_todo", id=claimed["id"])
        assert [d["id"] for d in shown["dependencies"]] == fetches


async def test_depends_on_a_todo_the_agent_can_neither_read_nor_made_is_refused_as_unknown(store) -> None:
    secret = await new(store, queue="private", title="secret")
    lead = await agents.add(store, "lead", queues=["mine"], create_queues=["mine"])
    async with connect(store, lead) as client:
        text = await refused(client, "create_for", title="x", queue="mine", depends_on=[secret])
    assert f"todo {secret} does not exist" in text
    assert [t.title for t in await todos.list_todos(store, queue="mine")] == []


async def test_a_todo_without_dependencies_answers_no_dependencies_field(store) -> None:
    plain = await new(store, title="plain")
    async with connect(store) as client:
        shown = await call(client, "get_todo", id=plain)
        claimed = (await call(client, "claim_next"))["todo"]
    assert "dependencies" not in shown and "dependencies" not in claimed and shown["blocked"] is False
