"""Noticing commits from any process (the long poll's, the doorbell's and the live views' feeds), and
waiting on todos until they finish (todos.wait_finished: `todo wait`, wait_todos)."""

from __future__ import annotations

import math
import re
from contextlib import aclosing
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from switchboard_local.core import events, queues, todos, watch
from switchboard_local.core.errors import InvalidArgument, NotFound, Unavailable
from switchboard_local.core.events import NewEvent
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease

from support import sql

pytestmark = pytest.mark.anyio


def commit_elsewhere(db_path) -> None:
    """A write through a separate connection, as another process would make it."""
    sql.run(db_path, f"INSERT INTO agents (name, queues, created_at) VALUES ('other', '[\"q\"]', {sql.ms(db_path, 0)})")


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


async def test_arrivals_say_whether_their_queue_is_paused_now(store) -> None:
    for queue in ("held", "resumed", "open"):
        await todos.create(store, NewTodo(queue=queue, title=queue))
    await queues.pause(store, "held", by="op")
    await queues.pause(store, "resumed", by="op")
    await queues.resume(store, "resumed")
    found = await watch.arrivals(store, after_id=0, agent="me")
    assert [(a.queue, a.paused) for a in found] == [("held", True), ("resumed", False), ("open", False)]


# ---------------------------------------------------------------- the live views' feeds


def todo_elsewhere(db_path, title: str, queue: str = "q") -> None:
    """A todo committed through a separate connection, as another process would commit it."""
    zero = sql.ms(db_path, 0)
    sql.run(db_path, "INSERT INTO todos (queue, title, state, visible_at, created_at, updated_at) "
                     f"VALUES (?, ?, 'pending', {zero}, {zero}, {zero})", [queue, title])  # fmt: skip


async def next_rows(feed) -> list:
    """The next batch that has rows in it (an idle feed yields empty ones meanwhile)."""
    with anyio.fail_after(30):
        async for batch in feed:
            if batch:
                return batch
    raise AssertionError("the feed ended")


async def test_todos_after_are_the_newer_todos_oldest_first_in_their_state_now(store) -> None:
    for queue, title in [("a", "one"), ("b", "two"), ("a", "three"), ("a", "four")]:
        await todos.create(store, NewTodo(queue=queue, title=title))
    await todos.claim(store, 3, owner="me")
    assert [(t.id, t.state) for t in await watch.todos_after(store, after_id=1)] == [
        (2, "pending"), (3, "claimed"), (4, "pending"),
    ]  # fmt: skip
    assert [t.title for t in await watch.todos_after(store, after_id=1, queue="a")] == ["three", "four"]
    assert [t.id for t in await watch.todos_after(store, after_id=0, limit=2)] == [1, 2]


async def test_follow_todos_from_now_brings_only_todos_committed_later_by_any_connection(store, db_path) -> None:
    await todos.create(store, NewTodo(queue="q", title="before"))
    async with aclosing(watch.follow_todos(store, idle=0.05)) as feed:
        assert await anext(feed) == []  # it has started: "now" is taken
        todo_elsewhere(db_path, "from another connection")
        assert [t.title for t in await next_rows(feed)] == ["from another connection"]
        await todos.create(store, NewTodo(queue="q", title="from this store"))
        assert [t.title for t in await next_rows(feed)] == ["from this store"]


async def test_follow_todos_from_an_id_starts_with_that_todo_and_keeps_to_its_queue(store, db_path) -> None:
    for title in ("one", "two", "three"):
        await todos.create(store, NewTodo(queue="q", title=title))
    async with aclosing(watch.follow_todos(store, from_id=2, queue="q", idle=0.05)) as feed:
        assert [t.title for t in await next_rows(feed)] == ["two", "three"]
        todo_elsewhere(db_path, "elsewhere", queue="other")
        todo_elsewhere(db_path, "four")
        assert [t.title for t in await next_rows(feed)] == ["four"]


async def test_a_quiet_feed_yields_empty_batches_so_its_reader_can_look_around(store) -> None:
    async with aclosing(watch.follow_todos(store, idle=0.01)) as feed:
        with anyio.fail_after(30):
            assert await anext(feed) == []


def event(delivery: str, source: str = "gh") -> NewEvent:
    return NewEvent(source=source, family="webhook", type="push", external_id=delivery, trust_mode="github",
                    verified=True, body=b"{}")  # fmt: skip


async def test_follow_events_brings_events_stored_by_another_store_on_the_file(store, db_path) -> None:
    await events.ingest_many(store, [(event("d-0"), [])])
    async with aclosing(events.follow_events(store, source="gh", idle=0.05)) as feed:
        assert await anext(feed) == []  # it has started: "now" is taken
        async with await open_store(db_path) as other:
            await events.ingest_many(other, [(event("d-1", source="elsewhere"), [])])
            await events.ingest_many(other, [(event("d-2"), [])])
        assert [e.external_id for e in await next_rows(feed)] == ["d-2"]
    async with aclosing(events.follow_events(store, from_id=1, idle=0.05)) as feed:
        assert [e.external_id for e in await next_rows(feed)] == ["d-0", "d-1", "d-2"]
    assert await events.last_event_id(store) == 3


async def test_follow_events_from_an_id_brings_the_backlog_from_that_event_a_bounded_batch_at_a_time(store) -> None:
    stored = await events.ingest_many(store, [(event(f"d-{n}"), []) for n in range(watch.FOLLOW_BATCH + 2)])
    async with aclosing(events.follow_events(store, from_id=stored[1].event_id, idle=0.05)) as feed:
        first, second = await next_rows(feed), await next_rows(feed)
    assert (len(first), len(second)) == (watch.FOLLOW_BATCH, 1)
    assert [e.id for e in first + second] == [s.event_id for s in stored[1:]]


async def test_a_long_poll_tries_again_when_a_commit_lands_and_not_before(store, monkeypatch) -> None:
    monkeypatch.setattr(todos.claims, "RECHECK_SECONDS", 60.0)  # only a commit can wake it
    claim_next, found = todos.claims.claim_next, []
    tried = anyio.Event()

    async def observed(*args: Any, **kwargs: Any) -> Any:
        found.append(await claim_next(*args, **kwargs))
        tried.set()
        return found[-1]

    monkeypatch.setattr(todos.claims, "claim_next", observed)
    async with watch.following(store) as changes, anyio.create_task_group() as tasks:
        answer: dict[str, Any] = {}

        async def poll() -> None:
            answer["todo"] = await todos.claim_next_waiting(store, todos.NextClaim("w"), wait=30, changes=changes)

        tasks.start_soon(poll)
        with anyio.fail_after(10):
            await tried.wait()  # its first try found nothing: it waits
        created, _ = await todos.create(store, NewTodo(queue="q", title="late"))
    assert [todo.id if todo else None for todo in found] == [None, created.id]
    assert answer["todo"].id == created.id


class Outage:
    """The store, but its data_version fails from its ``fails_from``-th call on (a listener's connection lost)."""

    def __init__(self, store: Any, fails_from: int) -> None:
        self.store, self.fails_from, self.calls = store, fails_from, 0

    async def data_version(self) -> Any:
        self.calls += 1
        if self.calls >= self.fails_from:
            raise Unavailable("the database server is unreachable")
        return await self.store.data_version()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def test_a_wait_on_a_store_that_cannot_be_polled_ends_at_its_timeout_rather_than_never(store) -> None:
    created, _ = await todos.create(store, NewTodo(queue="q", title="t"))
    with anyio.fail_after(10):
        async with watch.following(Outage(store, fails_from=1)) as changes:
            (found,) = await todos.wait_finished(store, [created.id], wait=0, changes=changes)
    assert found.state == "pending"


async def test_a_poll_that_fails_wakes_the_waiters_to_look_for_themselves(store) -> None:
    outage = Outage(store, fails_from=2)  # the first poll reads the version; the next ones fail
    with anyio.fail_after(10):  # the wait asks for 60 s: only a wake-up ends it sooner
        async with watch.following(outage) as changes:
            seen = changes.count
            assert await changes.wait(seen, timeout=60) > seen
    assert outage.calls >= 2


# ---------------------------------------------------------------- waiting for todos to finish
# (here, not in a file of their own: the core's mutation runs select this file, mutation/run.py)


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


async def test_a_wait_looks_again_only_when_something_commits(store, monkeypatch) -> None:
    monkeypatch.setattr(todos.waits, "RECHECK_SECONDS", 60.0)  # only a commit can wake it
    (todo_id,) = await made(store, "t")
    looks = 0
    looked = anyio.Event()
    of_ids = todos.waits.of_ids

    async def observed(*args: Any, **kwargs: Any) -> Any:
        nonlocal looks
        looks += 1  # counted as it starts
        found = await of_ids(*args, **kwargs)
        looked.set()
        return found

    monkeypatch.setattr(todos.waits, "of_ids", observed)
    answer: dict[str, Any] = {}
    async with watch.following(store) as changes, anyio.create_task_group() as tasks:

        async def wait() -> None:
            answer["todos"] = await todos.wait_finished(store, [todo_id], wait=30, changes=changes)

        tasks.start_soon(wait)
        with anyio.fail_after(10):
            await looked.wait()  # its first look: pending
            assert looks == 1  # nothing committed since: it waits rather than looking again
            await todos.complete(store, Lease.of(await todos.claim(store, todo_id, owner="w")))
    assert [t.state for t in answer["todos"]] == ["done"]


async def test_a_wait_that_runs_out_answers_the_todos_as_they_are(store) -> None:
    pending, claimed, done = await made(store, "pending", "claimed", "done")
    await todos.claim(store, claimed, owner="w")
    await todos.complete(store, Lease.of(await todos.claim(store, done, owner="w")))
    async with watch.following(store) as changes:
        found = await todos.wait_finished(store, [pending, claimed, done], wait=0, changes=changes)
    assert [t.state for t in found] == ["pending", "claimed", "done"]
    assert [todos.finished(t) for t in found] == [False, False, True]


async def test_a_wait_of_under_a_second_still_waits_for_the_commit_that_finishes_its_todo(store, monkeypatch) -> None:
    # The wait's clock stands still: its half second never runs out, so only the commit can end it.
    monkeypatch.setattr(todos.waits, "time", SimpleNamespace(monotonic=lambda: 1000.0))
    (todo_id,) = await made(store, "t")
    looked = anyio.Event()
    of_ids = todos.waits.of_ids

    async def observed(*args: Any, **kwargs: Any) -> Any:
        found = await of_ids(*args, **kwargs)
        looked.set()
        return found

    monkeypatch.setattr(todos.waits, "of_ids", observed)
    answer: dict[str, Any] = {}
    async with watch.following(store) as changes, anyio.create_task_group() as tasks:

        async def wait() -> None:
            answer["todos"] = await todos.wait_finished(store, [todo_id], wait=0.5, changes=changes)

        tasks.start_soon(wait)
        with anyio.fail_after(10):
            await looked.wait()  # its first look: pending
            await todos.complete(store, Lease.of(await todos.claim(store, todo_id, owner="w")))
    assert [t.state for t in answer["todos"]] == ["done"]


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


async def test_a_wait_answers_what_the_caller_made_outside_its_scope_and_refuses_the_rest(store) -> None:
    (mine,) = await made(store, "mine", queue="mine")
    handed_on, other = await made(store, "handed on", "someone else's", queue="theirs")
    scope: dict[str, Any] = {"queues": ["mine"], "own": {handed_on}}
    async with watch.following(store) as changes:
        found = await todos.wait_finished(store, [mine, handed_on], wait=0, changes=changes, **scope)
        assert [(t.id, t.queue) for t in found] == [(mine, "mine"), (handed_on, "theirs")]
        with pytest.raises(NotFound, match=rf"todo {other} does not exist$"):
            await todos.wait_finished(store, [mine, other], wait=0, changes=changes, **scope)


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
