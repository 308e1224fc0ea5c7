"""wait_todos: an agent waits on the todos it handed on (or any in its queues) within the 20 s long
poll, and is answered each one's state and result, with finished once all are."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from switchboard_local.core import agents, todos
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease
from switchboard_local.mcp import tools

from support.mcp import call, connect, refused

pytestmark = pytest.mark.anyio


async def new(store, queue: str = "q", title: str = "t", **fields: Any) -> int:
    return (await todos.create(store, NewTodo(queue=queue, title=title, **fields)))[0].id


async def finish(store, todo_id: int, result: Any = None) -> None:
    await todos.complete(store, Lease.of(await todos.claim(store, todo_id, owner="w")), result=result)


async def test_wait_todos_answers_each_ones_end_and_result_at_once_when_all_are_finished(store) -> None:
    done, dead, cancelled = [await new(store, title=t, max_attempts=1) for t in ("done", "dead", "cancelled")]
    await finish(store, done, {"summary": "ok"})
    await todos.fail(store, Lease.of(await todos.claim(store, dead, owner="w")), error="boom")
    await todos.cancel(store, cancelled, by="op", reason="not needed")
    async with connect(store) as client:
        with anyio.fail_after(10):  # 20 s asked: finished todos are answered without waiting
            answer = await call(client, "wait_todos", ids=[cancelled, done, dead], wait_seconds=20)
    assert answer["finished"] is True
    ends = [(t["id"], t["state"], t["dead_letter"], t["result"], t["last_error"], t["cancel_reason"])
            for t in answer["todos"]]  # fmt: skip
    assert ends == [
        (cancelled, "cancelled", False, None, None, "not needed"),
        (done, "done", False, {"summary": "ok"}, None, None),
        (dead, "failed", True, None, "boom", None),
    ]


async def test_wait_todos_returns_when_the_last_todo_finishes(store, monkeypatch) -> None:
    monkeypatch.setattr(todos.waits, "RECHECK_SECONDS", 60.0)  # only a commit can wake it
    first, second = await new(store, title="first"), await new(store, title="second")
    looked, of_ids = anyio.Event(), todos.waits.of_ids

    async def observed(*args: Any, **kwargs: Any) -> Any:
        found = await of_ids(*args, **kwargs)
        looked.set()
        return found

    monkeypatch.setattr(todos.waits, "of_ids", observed)
    answer: dict[str, Any] = {}
    async with connect(store) as client, anyio.create_task_group() as tasks:

        async def wait() -> None:
            answer.update(await call(client, "wait_todos", ids=[first, second], wait_seconds=20))

        tasks.start_soon(wait)
        with anyio.fail_after(10):
            await looked.wait()  # its first look: both pending, it waits
            await finish(store, first, 1)
            await finish(store, second, 2)
    assert answer["finished"] is True
    assert [(t["state"], t["result"]) for t in answer["todos"]] == [("done", 1), ("done", 2)]


async def test_wait_todos_answers_the_todos_as_they_are_when_the_wait_runs_out(store) -> None:
    pending, done = await new(store, title="pending"), await new(store, title="done")
    await finish(store, done)
    async with connect(store) as client:
        answer = await call(client, "wait_todos", ids=[pending, done])  # wait_seconds 0: one look
    assert answer["finished"] is False
    assert [t["state"] for t in answer["todos"]] == ["pending", "done"]


async def test_an_agent_waits_on_what_its_create_for_made_outside_its_queues_and_on_nothing_else(store) -> None:
    agent = await agents.add(store, "lead", queues=["lead"], create_queues=["builds"])
    elsewhere = await new(store, "builds", "someone else's build")
    async with connect(store, agent) as client:
        made = (await call(client, "create_for", title="build it", queue="builds"))["todo"]["id"]
        await finish(store, made, {"artifact": "a.tar"})
        answer = await call(client, "wait_todos", ids=[made])
        hidden = await refused(client, "wait_todos", ids=[made, elsewhere])
        shown = await call(client, "get_todo", id=made)  # the result in full, past wait_todos' size bound
        not_shown = await refused(client, "get_todo", id=elsewhere)
    assert [(t["id"], t["result"]) for t in answer["todos"]] == [(made, {"artifact": "a.tar"})]
    assert hidden == f"not_found: todo {elsewhere} does not exist"
    assert (shown["id"], shown["result"]) == (made, {"artifact": "a.tar"})
    assert not_shown == f"not_found: todo {elsewhere} does not exist"


async def test_a_session_remembers_its_newest_create_for_todos_and_forgets_the_oldest(store, monkeypatch) -> None:
    monkeypatch.setattr(tools, "MAX_CREATED", 2)
    agent = await agents.add(store, "lead", queues=["lead"], create_queues=["builds"])
    async with connect(store, agent) as client:
        made = [(await call(client, "create_for", title=f"build {n}", queue="builds"))["todo"]["id"] for n in range(3)]
        forgotten = await refused(client, "wait_todos", ids=[made[0]])
        remembered = await call(client, "wait_todos", ids=made[1:])
    assert forgotten == f"not_found: todo {made[0]} does not exist"
    assert [t["id"] for t in remembered["todos"]] == made[1:]


async def test_a_result_past_the_answers_size_bound_is_named_not_inlined(store, monkeypatch) -> None:
    monkeypatch.setattr(tools, "BATCH_BUDGET", 100)
    small, large, after = [await new(store, title=t) for t in ("small", "large", "after")]
    await finish(store, small, "x" * 40)
    await finish(store, large, "y" * 200)
    await finish(store, after, "z" * 40)
    async with connect(store) as client:
        answer = await call(client, "wait_todos", ids=[small, large, after])
    shown = [(t["result"], t["result_omitted"]) for t in answer["todos"]]
    assert shown == [("x" * 40, False), (None, True), ("z" * 40, False)]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"ids": []}, "invalid_argument: ids: "),
        ({"ids": list(range(1, todos.MAX_WAITED + 2))}, "invalid_argument: ids: "),
        ({"ids": ["1"]}, "invalid_argument: ids.0: "),
        ({"ids": [0]}, "invalid_argument: ids.0: "),
        ({"ids": [1], "wait_seconds": 21}, "invalid_argument: wait_seconds: "),
    ],
)
async def test_wait_todos_refuses_what_it_cannot_wait_on_saying_which_argument(store, arguments, message) -> None:
    await new(store)
    async with connect(store) as client:
        assert (await refused(client, "wait_todos", **arguments)).startswith(message)
