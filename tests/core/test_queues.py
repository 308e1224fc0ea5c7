"""Pausing a queue (issue 12 §2; DESIGN §2: "A paused queue is never claimed from").

A paused queue keeps receiving todos, but no claim takes from it: claim by id,
claim_next (any queue, one, several) and the then-claim of complete and fail.
Leases held on it keep working. Resume makes its todos claimable again. Stats
and the queue list say which queues are paused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from switchboard_local.core import queues, routing, todos
from switchboard_local.core.errors import Conflict, InvalidArgument
from switchboard_local.core.events import NewEvent
from switchboard_local.core.store.interface import Store
from switchboard_local.core.todo_model import NewTodo, Todo
from switchboard_local.core.todos import Lease, NextClaim

pytestmark = pytest.mark.anyio


async def new(store: Store, queue: str = "q", title: str = "t", **fields) -> Todo:
    todo, _ = await todos.create(store, NewTodo(queue=queue, title=title, **fields))
    return todo


async def held(store: Store) -> Todo:
    """A todo claimed on queue "work", whose finish may claim the next one."""
    return await todos.claim(store, (await new(store, "work", "held")).id, owner="w")


# Each way a claim can take a todo, asked to take from "paused" (alone, or
# among other queues that have nothing); each answers the todo it claimed, or None.
ClaimPath = Callable[[Store], Awaitable[Todo | None]]


async def by_id(store: Store) -> Todo | None:
    (waiting,) = await todos.list_todos(store, queue="paused")
    return await todos.claim(store, waiting.id, owner="w")


async def finish_then(store: Store, verb, queues_: list[str] | None) -> Todo | None:
    finished = await verb(store, Lease.of(await held(store)), then=NextClaim("w", queues_))
    return finished.next


CLAIM_PATHS: dict[str, ClaimPath] = {
    "claim_next any queue": lambda store: todos.claim_next(store, owner="w"),
    "claim_next its queue": lambda store: todos.claim_next(store, owner="w", queues=["paused"]),
    "claim_next several queues": lambda store: todos.claim_next(store, owner="w", queues=["paused", "other"]),
    "claim by id": by_id,
    "complete then any queue": lambda store: finish_then(store, todos.complete, None),
    "complete then its queue": lambda store: finish_then(store, todos.complete, ["paused"]),
    "fail then several queues": lambda store: finish_then(store, todos.fail, ["paused", "other"]),
}


@pytest.mark.parametrize("path", CLAIM_PATHS.values(), ids=CLAIM_PATHS.keys())
async def test_a_paused_queue_is_never_claimed_from(store, path) -> None:
    waiting = await new(store, "paused", "waits")
    await queues.pause(store, "paused", by="op")
    try:
        claimed = await path(store)
    except Conflict:
        claimed = None
    assert claimed is None
    after = await todos.get(store, waiting.id)
    assert (after.state, after.attempt, after.owner) == ("pending", 0, None)


@pytest.mark.parametrize("path", CLAIM_PATHS.values(), ids=CLAIM_PATHS.keys())
async def test_resume_makes_a_paused_queues_todos_claimable_again(store, path) -> None:
    waiting = await new(store, "paused", "waits")
    await queues.pause(store, "paused", by="op")
    resumed = await queues.resume(store, "paused")
    assert (resumed.paused, resumed.changed) == (False, True)
    claimed = await path(store)
    assert claimed is not None and claimed.id == waiting.id


@pytest.mark.parametrize("path", CLAIM_PATHS.values(), ids=CLAIM_PATHS.keys())
async def test_a_pause_holds_back_only_its_own_queue(store, path) -> None:
    waiting = await new(store, "paused", "waits")  # the queue each path claims from, not paused here
    await queues.pause(store, "elsewhere", by="op")
    claimed = await path(store)
    assert claimed is not None and claimed.id == waiting.id


async def test_claims_pass_over_a_paused_queue_to_the_next_claimable_todo(store) -> None:
    await new(store, "paused", "first and most urgent", priority=9)
    other = await new(store, "other", "next")
    await queues.pause(store, "paused", by="op")
    assert (await todos.claim_next(store, owner="w")).id == other.id
    other_again = await new(store, "other", "after")
    assert (await todos.claim_next(store, owner="w", queues=["paused", "other"])).id == other_again.id


async def test_a_lapsed_lease_on_a_paused_queue_is_not_taken_over(store, clock) -> None:
    claimed = await todos.claim(store, (await new(store, "paused")).id, owner="w", lease=10)
    await queues.pause(store, "paused", by="op")
    clock.advance(11)
    assert await todos.claim_next(store, owner="other") is None
    after = await todos.get(store, claimed.id)
    assert (after.state, after.owner) == ("pending", None)


async def test_todos_keep_arriving_on_a_paused_queue(store) -> None:
    for queue in ("direct", "gh", "redis"):
        await queues.pause(store, queue, by="op")
    created, was_created = await todos.create(store, NewTodo(queue="direct", title="made while paused"))
    webhook = await routing.deliver(store, NewEvent(
        source="gh", family="webhook", type="push", external_id="d1", trust_mode="github", verified=True,
        body=b'{"ref": "main"}', content_type="application/json",
    ))  # fmt: skip
    stream = await routing.deliver(store, NewEvent(
        source="redis", family="queue", type="jobs", external_id="1-0", trust_mode="queue", verified=True,
        body=b'{"job": 1}', content_type="application/json",
    ))  # fmt: skip
    assert was_created and created.state == "pending"
    arrived = [await todos.get(store, i) for i in (*webhook.todo_ids, *stream.todo_ids)]
    assert [(t.queue, t.state) for t in arrived] == [("gh", "pending"), ("redis", "pending")]
    assert await todos.claim_next(store, owner="w") is None


LEASED_VERBS = {
    "heartbeat": lambda store, lease: todos.heartbeat(store, lease, lease_seconds=60),
    "complete": lambda store, lease: todos.complete(store, lease, result={"ok": True}),
    "fail": lambda store, lease: todos.fail(store, lease, error="boom"),
    "release": lambda store, lease: todos.release(store, lease),
}
AFTER = {"heartbeat": "claimed", "complete": "done", "fail": "pending", "release": "pending"}  # fail: a retry awaits


@pytest.mark.parametrize("verb", LEASED_VERBS, ids=LEASED_VERBS.keys())
async def test_a_lease_held_on_a_paused_queue_keeps_working(store, verb) -> None:
    claimed = await todos.claim(store, (await new(store, "paused")).id, owner="w")
    await queues.pause(store, "paused", by="op")
    answer = await LEASED_VERBS[verb](store, Lease.of(claimed))
    found = answer.todo if isinstance(answer, todos.Finished) else answer
    assert found.state == AFTER[verb]


async def test_pausing_a_queue_with_no_todos_is_allowed_and_said(store) -> None:
    paused = await queues.pause(store, "later", by="op")
    assert (paused.queue, paused.paused, paused.paused_by, paused.changed, paused.has_todos) == (
        "later",
        True,
        "op",
        True,
        False,
    )
    waiting = await new(store, "later")
    assert await todos.claim_next(store, owner="w", queues=["later"]) is None
    assert (await todos.get(store, waiting.id)).state == "pending"


async def test_pausing_twice_keeps_the_first_pause_and_resuming_an_unpaused_queue_changes_nothing(store, clock) -> None:
    await new(store, "q")
    first = await queues.pause(store, "q", by="alice")
    clock.advance(60)
    again = await queues.pause(store, "q", by="bob")
    assert (again.changed, again.paused_at, again.paused_by, again.has_todos) == (False, first.paused_at, "alice", True)
    await queues.resume(store, "q")
    unchanged = await queues.resume(store, "q")
    assert (unchanged.paused, unchanged.changed) == (False, False)
    never = await queues.resume(store, "never")
    assert (never.paused, never.changed, never.has_todos) == (False, False, False)


async def test_stats_say_which_queues_are_paused(store) -> None:
    await new(store, "a")
    await new(store, "b")
    await queues.pause(store, "b", by="op")
    await queues.pause(store, "empty", by="op")
    listed = await todos.stats(store)
    assert [(s.queue, s.pending, s.paused) for s in listed] == [
        ("a", 1, False),
        ("b", 1, True),
        ("empty", 0, True),
    ]
    empty = listed[2]  # listed with zero counts, each of them
    assert (empty.ready, empty.delayed, empty.claimed, empty.done, empty.dead, empty.cancelled) == (0, 0, 0, 0, 0, 0)
    scoped = await todos.stats(store, queues=["b", "idle"])
    assert [(s.queue, s.paused) for s in scoped] == [("b", True), ("idle", False)]


async def test_list_queues_lists_queues_with_todos_and_paused_ones(store, clock) -> None:
    await new(store, "a")
    done = await todos.claim(store, (await new(store, "a")).id, owner="w")
    await todos.complete(store, Lease.of(done))
    await new(store, "b")
    await queues.pause(store, "b", by="op")
    await queues.pause(store, "empty", by="op")
    await queues.pause(store, "resumed", by="op")
    await queues.resume(store, "resumed")
    listed = await queues.list_queues(store)
    assert [(q.name, q.paused, q.paused_by, q.stats.pending, q.stats.done) for q in listed] == [
        ("a", False, None, 1, 1),
        ("b", True, "op", 1, 0),
        ("empty", True, "op", 0, 0),
    ]
    assert listed[1].paused_at == clock.now_ms()
    assert set(listed[1].to_dict()) >= {"queue", "paused", "paused_at", "paused_by", "ready", "delayed", "dead", "cancelled"}


@pytest.mark.parametrize("queue", ["", " ", "a\nb", 7])
async def test_a_queue_name_must_be_one_line_of_text(store, queue) -> None:
    with pytest.raises(InvalidArgument):
        await queues.pause(store, queue, by="op")
    with pytest.raises(InvalidArgument):
        await queues.resume(store, queue)
