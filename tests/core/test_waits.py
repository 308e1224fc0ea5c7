"""Results you can wait on: todos.wait_finished answers the todos named once every one is
finished (done, a dead letter, cancelled), or as they are when the wait runs out; a commit
from anywhere wakes it, a lapsed last attempt counts as the dead letter it is."""

from __future__ import annotations

import math
import re
from typing import Any

import anyio
import pytest

from switchboard_local.core import todos, watch
from switchboard_local.core.errors import InvalidArgument, NotFound
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease

pytestmark = pytest.mark.anyio


async def made(store, *titles: str, queue: str = "q", **fields: Any) -> list[int]:
    return [(await todos.create(store, NewTodo(queue=queue, title=t, **fields)))[0].id for t in titles]


async def test_a_wait_on_finished_todos_answers_at_once_with_each_ones_end(store) -> None:
    done, dead, cancelled = await made(store, "done", "dead", "cancelled", max_attempts=1)
    await todos.complete(store, Lease.of(await todos.claim(store, done, owner="w")), result={"n": 1})
    await todos.fail(store, Lease.of(await todos.claim(store, dead, owner="w")), error="boom")
    await todos.cancel(store, cancelled, by="op", reason="not needed")
    async with watch.following(store) as changes:
        with anyio.fail_after(5):  # a wait of an hour: it must not wait at all
            found = await todos.wait_finished(store, [done, dead, cancelled], wait=3600, changes=changes)
    assert [(t.id, t.state) for t in found] == [(done, "done"), (dead, "failed"), (cancelled, "cancelled")]
    assert (found[0].result, found[1].last_error, found[2].cancel_reason) == ({"n": 1}, "boom", "not needed")


async def test_a_wait_returns_when_the_last_of_its_todos_finishes_and_not_before(store, monkeypatch) -> None:
    monkeypatch.setattr(todos.waits, "RECHECK_SECONDS", 60.0)  # only a commit can wake it
    first, second = await made(store, "first", "second")
    looks: list[list[str]] = []
    looked = anyio.Event()
    of_ids = todos.waits.of_ids

    async def observed(*args: Any, **kwargs: Any) -> Any:
        nonlocal looked
        found = await of_ids(*args, **kwargs)
        looks.append([t.state for t in found])
        looked.set()
        return found

    monkeypatch.setattr(todos.waits, "of_ids", observed)
    answer: dict[str, Any] = {}
    async with watch.following(store) as changes, anyio.create_task_group() as tasks:

        async def wait() -> None:
            answer["todos"] = await todos.wait_finished(store, [first, second], wait=30, changes=changes)

        tasks.start_soon(wait)
        with anyio.fail_after(10):
            await looked.wait()  # its first look: both pending
            looked = anyio.Event()
            await todos.complete(store, Lease.of(await todos.claim(store, first, owner="w")))
            await looked.wait()  # woken by those commits: one finished, it waits on
            assert "todos" not in answer
            await todos.complete(store, Lease.of(await todos.claim(store, second, owner="w")))
    assert looks[0] == ["pending", "pending"] and looks[-1] == ["done", "done"]
    assert all(states != ["done", "done"] for states in looks[:-1])
    assert [t.state for t in answer["todos"]] == ["done", "done"]


async def test_a_wait_that_runs_out_answers_the_todos_as_they_are(store) -> None:
    pending, claimed, done = await made(store, "pending", "claimed", "done")
    await todos.claim(store, claimed, owner="w")
    await todos.complete(store, Lease.of(await todos.claim(store, done, owner="w")))
    async with watch.following(store) as changes:
        found = await todos.wait_finished(store, [pending, claimed, done], wait=0, changes=changes)
    assert [t.state for t in found] == ["pending", "claimed", "done"]
    assert [todos.finished(t) for t in found] == [False, False, True]


async def test_a_last_attempt_whose_lease_lapsed_is_waited_on_as_the_dead_letter_it_is(store, clock) -> None:
    (todo_id,) = await made(store, "lapses", max_attempts=1)
    await todos.claim(store, todo_id, owner="crashed", lease=60)
    clock.advance(61)  # nothing commits: the lapse is settled by the wait's own look
    async with watch.following(store) as changes:
        with anyio.fail_after(5):
            (found,) = await todos.wait_finished(store, [todo_id], wait=3600, changes=changes)
    assert (found.state, found.dead_letter) == ("failed", True)


async def test_the_todos_are_answered_in_the_order_named_each_once(store) -> None:
    a, b, c = await made(store, "a", "b", "c")
    assert [t.id for t in await todos.of_ids(store, [c, a, c, b, a])] == [c, a, b]


async def test_a_wait_names_every_todo_that_does_not_exist_and_answers_none(store) -> None:
    (real,) = await made(store, "real")
    with pytest.raises(NotFound, match=r"todo 98 does not exist$"):
        await todos.of_ids(store, [real, 98])
    with pytest.raises(NotFound, match=r"todos 98, 99 do not exist$"):
        await todos.of_ids(store, [98, real, 99])


async def test_a_todo_out_of_the_scope_is_one_that_does_not_exist(store) -> None:
    (mine,) = await made(store, "mine", queue="mine")
    (theirs,) = await made(store, "theirs", queue="theirs")
    assert [t.id for t in await todos.of_ids(store, [mine], queues=["mine"])] == [mine]
    with pytest.raises(NotFound, match=rf"todo {theirs} does not exist$"):
        await todos.of_ids(store, [mine, theirs], queues=["mine"])


async def test_a_todo_the_caller_made_is_answered_wherever_it_put_it(store) -> None:
    (mine,) = await made(store, "mine", queue="mine")
    handed_on, other = await made(store, "handed on", "someone else's", queue="theirs")
    found = await todos.of_ids(store, [mine, handed_on], queues=["mine"], own={handed_on})
    assert [(t.id, t.queue) for t in found] == [(mine, "mine"), (handed_on, "theirs")]
    with pytest.raises(NotFound, match=rf"todo {other} does not exist$"):
        await todos.of_ids(store, [handed_on, other], queues=["mine"], own={handed_on})


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ([], "name at least one todo id"),
        ("12", "name at least one todo id"),
        ([0], "a todo id is a positive integer, got 0"),
        ([True], "a todo id is a positive integer, got True"),
        (["7"], "a todo id is a positive integer, got '7'"),
        (list(range(1, todos.MAX_WAITED + 2)), f"at most {todos.MAX_WAITED} todos in one wait, got 101"),
    ],
)
async def test_bad_ids_are_refused_naming_what_was_wrong(store, ids, message) -> None:
    with pytest.raises(InvalidArgument, match=f": {re.escape(message)}$"):
        await todos.of_ids(store, ids)


async def test_as_many_ids_as_allowed_are_taken(store) -> None:
    ids = await made(store, *(f"t{n}" for n in range(todos.MAX_WAITED)))
    assert len(await todos.of_ids(store, ids)) == todos.MAX_WAITED


@pytest.mark.parametrize("wait", [-1, math.nan, True, "5"])
async def test_a_bad_wait_is_refused_naming_it(store, wait) -> None:
    (todo_id,) = await made(store, "t")
    async with watch.following(store) as changes:
        with pytest.raises(InvalidArgument, match=": the wait is a number of seconds, 0 or more, got "):
            await todos.wait_finished(store, [todo_id], wait=wait, changes=changes)
