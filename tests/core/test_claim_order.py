"""Which todo a claim gets (DESIGN §2): priority then FIFO, queue scope, assignee, delay."""

from __future__ import annotations

import asyncio

import pytest

from switchboard_local.core import todos
from switchboard_local.core.errors import Conflict, Forbidden
from switchboard_local.core.store import Store
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease

pytestmark = pytest.mark.anyio


async def new(store, title="t", queue="q", **fields):
    todo, created = await todos.create(store, NewTodo(queue=queue, title=title, **fields))
    assert created
    return todo


# ---------------------------------------------------------------- claim order and scope


async def test_claim_next_takes_highest_priority_then_oldest(store):
    ids = {}
    for title, priority in [("a", 0), ("b", 5), ("c", 5), ("d", -1), ("e", 0)]:
        ids[(await new(store, title=title, priority=priority)).id] = title
    order = []
    while (claimed := await todos.claim_next(store, owner="w")) is not None:
        order.append(ids[claimed.id])
    assert order == ["b", "c", "a", "e", "d"]


async def test_claim_next_on_an_empty_store_returns_none(store):
    assert await todos.claim_next(store, owner="w") is None
    assert await todos.claim_next(store, owner="w", queues=["q"]) is None


async def test_claim_next_in_one_queue_ignores_other_queues(store):
    await new(store, queue="other", priority=100)
    mine = await new(store, queue="mine")
    claimed = await todos.claim_next(store, owner="w", queues=["mine"])
    assert claimed.id == mine.id
    assert await todos.claim_next(store, owner="w", queues=["mine"]) is None


async def test_claim_next_in_one_queue_takes_highest_priority_then_oldest(store):
    ids = {}
    for title, priority in [("a", 0), ("b", 2), ("c", 2), ("d", 1)]:
        ids[(await new(store, title=title, priority=priority)).id] = title
    order = []
    while (claimed := await todos.claim_next(store, owner="w", queues=["q"])) is not None:
        order.append(ids[claimed.id])
    assert order == ["b", "c", "d", "a"]


async def test_claim_next_across_several_queues_keeps_priority_then_fifo_order(store):
    ids = {}
    for queue, title, priority in [("q1", "a", 0), ("q1", "b", 3), ("q2", "c", 3), ("q2", "d", 1), ("q3", "e", 9)]:
        ids[(await new(store, queue=queue, title=title, priority=priority)).id] = title
    order = []
    while (claimed := await todos.claim_next(store, owner="w", queues=["q2", "q1"])) is not None:
        order.append(ids[claimed.id])
    assert order == ["b", "c", "d", "a"]  # never q3's, whatever its priority


@pytest.mark.parametrize("queues", [None, ["q1"], ["q1", "q2"]], ids=["any queue", "one queue", "several queues"])
async def test_every_claim_statement_counts_the_attempt_and_opens_its_history(store, queues):
    todo = await new(store, queue="q1")
    claimed = await todos.claim_next(store, owner="w", queues=queues)
    assert (claimed.id, claimed.attempt, claimed.state, claimed.owner) == (todo.id, 1, "claimed", "w")
    history = (await todos.get(store, todo.id)).attempts
    assert [(a.attempt, a.owner, a.outcome) for a in history] == [(1, "w", None)]


@pytest.mark.parametrize("queues", [None, ["q1"], ["q1", "q2"]], ids=["any queue", "one queue", "several queues"])
async def test_every_claim_statement_leaves_a_delayed_or_backing_off_todo_until_its_time(store, clock, queues):
    delayed = await new(store, queue="q1", title="delayed", delay=60)
    retrying = await new(store, queue="q2" if queues != ["q1"] else "q1", title="retrying", priority=5)
    first = await todos.claim(store, retrying.id, owner="w")
    failed = (await todos.fail(store, Lease(retrying.id, first.lease_token), error="flaky")).todo
    assert failed.visible_at > clock.now_ms() and failed.visible_at - clock.now_ms() < 60_000
    assert await todos.claim_next(store, owner="w", queues=queues) is None
    clock.advance((failed.visible_at - clock.now_ms()) / 1000)
    assert (await todos.claim_next(store, owner="w", queues=queues)).id == retrying.id
    assert await todos.claim_next(store, owner="w", queues=queues) is None  # the delayed one: not yet
    clock.advance(60)
    assert (await todos.claim_next(store, owner="w", queues=queues)).id == delayed.id


@pytest.mark.parametrize("queues", [None, ["q1"], ["q1", "q2"]], ids=["any queue", "one queue", "several queues"])
async def test_every_claim_statement_takes_over_a_lapsed_lease_with_the_next_attempt(store, clock, queues):
    todo = await new(store, queue="q1")
    crashed = await todos.claim_next(store, owner="crashed", queues=queues, lease=60)
    assert await todos.claim_next(store, owner="w", queues=queues) is None  # held
    clock.advance(60)
    taken = await todos.claim_next(store, owner="w", queues=queues)
    assert (taken.id, taken.attempt, taken.owner) == (todo.id, 2, "w") and taken.lease_token != crashed.lease_token


async def test_claim_next_without_queues_drains_every_queue(store):
    a = await new(store, queue="q1")
    b = await new(store, queue="q2", priority=1)
    c = await new(store, queue="q3")
    got = [(await todos.claim_next(store, owner="w")).id for _ in range(3)]
    assert got == [b.id, a.id, c.id]
    assert await todos.claim_next(store, owner="w") is None


# ---------------------------------------------------------------- assignee


@pytest.mark.parametrize("queues", [None, ["q"], ["q", "other"]], ids=["all-queues", "one-queue", "several-queues"])
async def test_assigned_todo_is_claimed_only_by_its_assignee(store, queues):
    todo = await new(store, assignee="alice")
    assert await todos.claim_next(store, owner="bob", queues=queues) is None
    claimed = await todos.claim_next(store, owner="alice", queues=queues)
    assert claimed.id == todo.id
    assert claimed.owner == "alice"


async def test_assignee_matches_the_agent_name_when_given(store):
    todo = await new(store, assignee="alice")
    assert await todos.claim_next(store, owner="alice", agent="bob") is None
    claimed = await todos.claim_next(store, owner="alice-session-2", agent="alice")
    assert claimed.id == todo.id
    assert claimed.owner == "alice-session-2"


@pytest.mark.parametrize("queues", [None, ["q"], ["q", "other"]], ids=["all-queues", "one-queue", "several-queues"])
async def test_others_skip_an_assigned_todo_and_take_the_pool(store, queues):
    await new(store, title="for alice", assignee="alice", priority=10)
    pool = await new(store, title="pool")
    assert (await todos.claim_next(store, owner="bob", queues=queues)).id == pool.id
    assert await todos.claim_next(store, owner="bob", queues=queues) is None


async def test_claim_by_id_of_a_todo_assigned_to_another_is_forbidden(store):
    todo = await new(store, assignee="alice")
    before = await todos.get(store, todo.id)
    with pytest.raises(Forbidden):
        await todos.claim(store, todo.id, owner="bob")
    assert await todos.get(store, todo.id) == before
    assert (await todos.claim(store, todo.id, owner="alice")).state == "claimed"


# ---------------------------------------------------------------- delay


async def test_delayed_todo_is_not_claimable_until_its_time(store, clock):
    start = clock.now_ms()
    todo = await new(store, delay=60)
    assert todo.visible_at == start + 60_000
    assert await todos.claim_next(store, owner="w") is None
    clock.advance(59.999)
    assert await todos.claim_next(store, owner="w") is None
    clock.advance(0.001)
    assert (await todos.claim_next(store, owner="w")).id == todo.id


async def test_claiming_a_delayed_todo_by_id_early_is_a_conflict(store, clock):
    todo = await new(store, delay=60)
    before = await todos.get(store, todo.id)
    with pytest.raises(Conflict):
        await todos.claim(store, todo.id, owner="w")
    assert await todos.get(store, todo.id) == before
    clock.advance(60)
    assert (await todos.claim(store, todo.id, owner="w")).state == "claimed"


# ---------------------------------------------------------------- exclusivity


async def test_concurrent_claims_through_two_connections_never_share_a_todo(store, db_path, clock):
    created = {(await new(store, title=str(i))).id for i in range(5)}
    async with await Store.open(db_path, clock=clock) as other:
        claims = await asyncio.gather(*(todos.claim_next(s, owner=f"w{i}") for i, s in enumerate([store, other] * 6)))
    got = [c.id for c in claims if c is not None]
    assert sorted(got) == sorted(created)  # each todo exactly once, the rest got None
    assert [(await todos.get(store, i)).attempt for i in sorted(created)] == [1] * 5


async def test_claim_across_several_queues_takes_each_queues_oldest_of_equal_priority_first(store):
    older = await new(store, queue="q1", title="older")
    newer = await new(store, queue="q1", title="newer")
    order = [(await todos.claim_next(store, owner="w", queues=["q1", "q2"])).id for _ in range(2)]
    assert order == [older.id, newer.id]
