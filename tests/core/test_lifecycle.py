"""The happy paths of DESIGN §2: create, idempotency, claim, heartbeat, complete, release, stats.

Claim order and scope live in test_claim_order.py; failure, dead letters and
fencing in test_failure.py; refusals in test_refusals.py.
"""

from __future__ import annotations

import hashlib
import sqlite3

import pytest

from switchboard_local.core import todos
from switchboard_local.core.errors import Conflict
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease

pytestmark = pytest.mark.anyio

HOUR = 3600.0


async def new(store, title="t", queue="q", **fields):
    todo, created = await todos.create(store, NewTodo(queue=queue, title=title, **fields))
    assert created
    return todo


# ---------------------------------------------------------------- create


async def test_create_stores_a_pending_todo_with_every_field(store, clock):
    todo, created = await todos.create(
        store,
        NewTodo(
            queue="builds",
            title="Fix the build",
            payload={"repo": "a/b", "n": [1, 2]},
            kind="ci",
            assignee="alice",
            priority=7,
            max_attempts=3,
            idempotency_key="gh:123",
        ),
    )
    assert created is True
    assert (todo.queue, todo.title, todo.kind, todo.assignee) == ("builds", "Fix the build", "ci", "alice")
    assert todo.payload == {"repo": "a/b", "n": [1, 2]}
    assert (todo.priority, todo.max_attempts, todo.idempotency_key) == (7, 3, "gh:123")
    assert (todo.state, todo.attempt, todo.dead_letter) == ("pending", 0, False)
    assert todo.visible_at == todo.created_at == todo.updated_at == clock.now_ms()
    assert (todo.owner, todo.lease_expires_at, todo.claimed_at, todo.completed_at) == (None, None, None, None)
    assert (todo.result, todo.last_error, todo.event_id, todo.lease_token) == (None, None, None, None)
    assert await todos.get(store, todo.id) == todo


async def test_create_defaults(store):
    todo = await new(store)
    assert (todo.priority, todo.max_attempts, todo.attempt) == (0, 5, 0)
    assert (todo.payload, todo.kind, todo.assignee, todo.idempotency_key) == (None, None, None, None)


@pytest.mark.parametrize(
    "raw, folded",
    [
        ("fix\nthe build", "fix the build"),
        ("  padded  ", "padded"),
        ("tabs\tand\r\nCRLF  and   runs", "tabs and CRLF and runs"),
    ],
    ids=["newline", "padding", "mixed-whitespace"],
)
async def test_title_is_folded_to_one_line(store, raw, folded):
    todo = await new(store, title=raw)
    assert todo.title == folded
    assert (await todos.get(store, todo.id)).title == folded


# ---------------------------------------------------------------- idempotency


async def _claimed(store, todo):
    return await todos.claim(store, todo.id, owner="w")


async def _failed_awaiting_retry(store, todo):
    claimed = await todos.claim(store, todo.id, owner="w")
    failed = (await todos.fail(store, Lease(todo.id, claimed.lease_token), error="boom")).todo
    assert failed.visible_at is not None
    return failed


async def _left_pending(store, todo):
    return todo


@pytest.mark.parametrize(
    "into_state",
    [_left_pending, _claimed, _failed_awaiting_retry],
    ids=["pending", "claimed", "failed-awaiting-retry"],
)
async def test_same_key_on_a_live_todo_returns_the_existing_one(store, row_count, into_state):
    first = await new(store, title="first", idempotency_key="k")
    await into_state(store, first)
    again, created = await todos.create(store, NewTodo(queue="q", title="second", idempotency_key="k"))
    assert created is False
    assert again.id == first.id
    assert again.title == "first"
    assert row_count("todos") == 1


async def _done(store, todo):
    claimed = await todos.claim(store, todo.id, owner="w")
    await todos.complete(store, Lease(todo.id, claimed.lease_token))


async def _dead_letter(store, todo):
    claimed = await todos.claim(store, todo.id, owner="w")
    dead = (await todos.fail(store, Lease(todo.id, claimed.lease_token), error="boom")).todo
    assert dead.dead_letter


@pytest.mark.parametrize("into_state", [_done, _dead_letter], ids=["done", "dead-letter"])
async def test_done_or_dead_letter_frees_the_key(store, row_count, into_state):
    first = await new(store, idempotency_key="k", max_attempts=1)
    await into_state(store, first)
    again, created = await todos.create(store, NewTodo(queue="q", title="again", idempotency_key="k"))
    assert created is True
    assert again.id != first.id
    assert again.state == "pending"
    assert row_count("todos") == 2


async def test_same_key_answers_with_the_live_todo_not_an_older_finished_one(store):
    old = await new(store, title="old", idempotency_key="k")
    await _done(store, old)
    live = await new(store, title="live", idempotency_key="k")
    again, created = await todos.create(store, NewTodo(queue="q", title="third", idempotency_key="k"))
    assert (again.id, again.title, created) == (live.id, "live", False)


async def test_same_key_on_another_queue_is_a_new_todo(store):
    first = await new(store, queue="a", idempotency_key="k")
    other, created = await todos.create(store, NewTodo(queue="b", title="t", idempotency_key="k"))
    assert created is True
    assert other.id != first.id


async def test_todos_without_a_key_never_collapse(store, row_count):
    await new(store, title="same")
    await new(store, title="same")
    assert row_count("todos") == 2


# ---------------------------------------------------------------- claim, heartbeat, complete


async def test_claim_takes_a_lease_and_counts_the_attempt(store, clock, db_path):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w", lease=60)
    now = clock.now_ms()
    assert (claimed.state, claimed.owner, claimed.attempt) == ("claimed", "w", 1)
    assert (claimed.claimed_at, claimed.lease_expires_at, claimed.visible_at) == (now, now + 60_000, None)
    assert isinstance(claimed.lease_token, str) and len(claimed.lease_token) >= 16
    # The token is shown once and stored only as its hash.
    assert (await todos.get(store, todo.id)).lease_token is None
    conn = sqlite3.connect(db_path)
    stored = conn.execute("SELECT lease_token_hash FROM todos WHERE id = ?", (todo.id,)).fetchone()[0]
    conn.close()
    assert stored == hashlib.sha256(claimed.lease_token.encode()).hexdigest()


async def test_claim_without_lease_uses_the_default_of_five_minutes(store, clock):
    await new(store)
    claimed = await todos.claim_next(store, owner="w")
    assert claimed.lease_expires_at == clock.now_ms() + 300_000


async def test_every_claim_returns_a_fresh_token(store):
    todo = await new(store)
    first = await todos.claim(store, todo.id, owner="w")
    await todos.release(store, Lease(todo.id, first.lease_token))
    second = await todos.claim(store, todo.id, owner="w")
    assert second.lease_token != first.lease_token


async def test_heartbeat_resets_the_lease_to_now_plus_ttl(store, clock):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w", lease=60)
    clock.advance(50)
    beat = await todos.heartbeat(store, Lease(todo.id, claimed.lease_token), lease_seconds=60)
    assert beat.lease_expires_at == clock.now_ms() + 60_000  # not the old expiry + 60 s
    clock.advance(10)
    beat = await todos.heartbeat(store, Lease(todo.id, claimed.lease_token))
    assert beat.lease_expires_at == clock.now_ms() + 300_000


async def test_heartbeat_keeps_the_todo_past_its_first_lease(store, clock):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w", lease=60)
    clock.advance(50)
    await todos.heartbeat(store, Lease(todo.id, claimed.lease_token), lease_seconds=60)
    clock.advance(50)  # past the first lease, inside the renewed one
    assert await todos.claim_next(store, owner="other") is None
    done = (await todos.complete(store, Lease(todo.id, claimed.lease_token))).todo
    assert done.state == "done"


async def test_heartbeat_is_capped_twelve_hours_after_the_claim(store, clock):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w", lease=12 * HOUR)
    clock.advance(11 * HOUR)
    beat = await todos.heartbeat(store, Lease(todo.id, claimed.lease_token), lease_seconds=2 * HOUR)
    assert beat.lease_expires_at == claimed.claimed_at + round(12 * HOUR * 1000)
    clock.advance(1 * HOUR)
    with pytest.raises(Conflict):
        await todos.heartbeat(store, Lease(todo.id, claimed.lease_token), lease_seconds=60)


async def test_complete_marks_the_todo_done_with_its_result(store, clock):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    clock.advance(5)
    done = (await todos.complete(store, Lease(todo.id, claimed.lease_token), result={"pr": 42})).todo
    assert (done.state, done.result, done.completed_at) == ("done", {"pr": 42}, clock.now_ms())
    assert (done.owner, done.lease_expires_at, done.visible_at, done.dead_letter) == (None, None, None, False)
    history = (await todos.get(store, todo.id)).attempts
    assert [(a.outcome, a.owner, a.ended_at) for a in history] == [("completed", "w", clock.now_ms())]


async def test_done_todo_is_never_claimed_again(store, clock):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w", lease=60)
    await todos.complete(store, Lease(todo.id, claimed.lease_token))
    clock.advance(24 * HOUR)
    assert await todos.claim_next(store, owner="w") is None


# ---------------------------------------------------------------- release


async def test_release_returns_the_todo_to_pending_with_the_attempt_refunded(store, clock):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    clock.advance(3)
    released = await todos.release(store, Lease(todo.id, claimed.lease_token))
    assert (released.state, released.attempt, released.visible_at) == ("pending", 0, clock.now_ms())
    assert (released.owner, released.lease_expires_at) == (None, None)
    history = (await todos.get(store, todo.id)).attempts
    assert [(a.attempt, a.outcome, a.ended_at) for a in history] == [(1, "released", clock.now_ms())]
    again = await todos.claim_next(store, owner="w2")
    assert (again.id, again.attempt) == (todo.id, 1)


async def test_release_with_delay_hides_the_todo_until_then(store, clock):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    released = await todos.release(store, Lease(todo.id, claimed.lease_token), delay=30)
    assert released.visible_at == clock.now_ms() + 30_000
    clock.advance(29)
    assert await todos.claim_next(store, owner="w") is None
    clock.advance(1)
    assert (await todos.claim_next(store, owner="w")).id == todo.id


# ---------------------------------------------------------------- reads and stats


async def test_get_returns_the_attempt_history(store, clock):
    todo = await new(store)
    first = await todos.claim(store, todo.id, owner="a")
    t1 = clock.now_ms()
    clock.advance(2)
    await todos.fail(store, Lease(todo.id, first.lease_token), error="flaky")
    t2 = clock.now_ms()
    clock.advance(30)  # the first backoff is at most 30 s
    await todos.claim(store, todo.id, owner="b")
    t3 = clock.now_ms()
    got = await todos.get(store, todo.id)
    assert [(a.attempt, a.owner, a.claimed_at, a.ended_at, a.outcome, a.error) for a in got.attempts] == [
        (1, "a", t1, t2, "failed", "flaky"),
        (2, "b", t3, None, None, None),
    ]


async def test_list_todos_filters_by_queue_and_state_newest_first(store):
    a = await new(store, queue="q1")
    b = await new(store, queue="q1")
    c = await new(store, queue="q2")
    await todos.claim(store, a.id, owner="w")
    assert [t.id for t in await todos.list_todos(store)] == [c.id, b.id, a.id]
    assert [t.id for t in await todos.list_todos(store, queue="q1")] == [b.id, a.id]
    assert [t.id for t in await todos.list_todos(store, queue="q1", state="pending")] == [b.id]
    assert [t.id for t in await todos.list_todos(store, state="claimed")] == [a.id]
    assert [t.id for t in await todos.list_todos(store, limit=1)] == [c.id]


async def test_stats_counts_each_queue_by_state(store, clock):
    q1 = [await new(store, queue="q1", title=str(i), max_attempts=2) for i in range(5)]
    await new(store, queue="q2")
    tokens = {t.id: (await todos.claim(store, t.id, owner="w")).lease_token for t in q1[1:]}
    await todos.complete(store, Lease(q1[2].id, tokens[q1[2].id]))
    await todos.fail(store, Lease(q1[3].id, tokens[q1[3].id]), error="retry me")
    # q1[4] is failed twice: a dead letter.
    await todos.fail(store, Lease(q1[4].id, tokens[q1[4].id]), error="once")
    clock.advance(60)
    again = await todos.claim(store, q1[4].id, owner="w")
    await todos.fail(store, Lease(q1[4].id, again.lease_token), error="twice")
    by_queue = {s.queue: s for s in await todos.stats(store)}
    assert sorted(by_queue) == ["q1", "q2"]
    s1 = by_queue["q1"]
    assert (s1.pending, s1.claimed, s1.done, s1.failed, s1.dead_letters) == (1, 1, 1, 2, 1)
    s2 = by_queue["q2"]
    assert (s2.pending, s2.claimed, s2.done, s2.failed, s2.dead_letters) == (1, 0, 0, 0, 0)


async def test_oldest_pending_age_moves_with_the_clock(store, clock):
    await new(store, queue="q1")
    clock.advance(30)
    await new(store, queue="q1")
    claimed_only = await new(store, queue="q2")
    await todos.claim(store, claimed_only.id, owner="w", lease=12 * HOUR)
    clock.advance(60)
    ages = {s.queue: s.oldest_pending_age_seconds for s in await todos.stats(store)}
    assert ages == {"q1": 90.0, "q2": None}
    clock.advance(10.5)
    ages = {s.queue: s.oldest_pending_age_seconds for s in await todos.stats(store)}
    assert ages["q1"] == 100.5
