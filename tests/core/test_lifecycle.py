"""The todo lifecycle of DESIGN §2, in the order the section tells it.

1. Create and idempotency: the fields a todo is stored with, title folding; a
   live todo holds its (queue, key), done and dead letters free it.
2. Claim: the lease a claim takes; which todo it gets (priority then FIFO,
   queue scope, the three claim statements); assignee; delay; exclusivity.
3. Leases and heartbeat: a heartbeat resets the lease to now + TTL, under a cap.
4. Finishing: complete, release, and finishing with the next claim in the same
   commit (complete or fail plus ``then=NextClaim``); a plain fail is in 5.
5. Failure and recovery: backoff, dead letters, lease lapse and takeover,
   fencing (stale, missing and foreign tokens), redrive.
6. Reads and stats: get's attempt history, list filters and limits, per-queue
   counts as the next claim would see them.
7. Refusals: transitions not in the diagram, unknown ids, invalid arguments
   (and the limits just inside them), refusals that say why. A refused call
   raises and leaves the database as it was.

The helpers come first: ``new``, the state builders, the verbs fencing is
tested with, and the constants and parametrize tables more than one test uses.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from switchboard_local.core import events, settings, todos
from switchboard_local.core import queues as queues_module
from switchboard_local.core.errors import Conflict, Forbidden, InvalidArgument, NotFound
from switchboard_local.core.store.interface import Store
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.todo_model import NewTodo, QueueStats, Todo
from switchboard_local.core.todos import Lease, NextClaim

from support import sql
from support.cli import as_json
from support.sql import rows

pytestmark = pytest.mark.anyio

HOUR = 3600.0
DAY = 24 * HOUR
UNKNOWN_ID = 4242

# The three forms of the claim statement (claim_next: any queue, one queue, several queues), each with the todo's
# queue q1 in scope...
EVERY_CLAIM_STATEMENT = pytest.mark.parametrize(
    "queues", [None, ["q1"], ["q1", "q2"]], ids=["any queue", "one queue", "several queues"]
)
# ... and with queue q, where new() puts a todo by default.
EVERY_CLAIM_STATEMENT_ON_Q = pytest.mark.parametrize(
    "queues", [None, ["q"], ["q", "other"]], ids=["all-queues", "one-queue", "several-queues"]
)

# The verbs that must present a lease token.
LEASE_VERB_NAMES = ["heartbeat", "complete", "fail", "release"]


# ================================================================ helpers


async def new(store, title="t", queue="q", **fields):
    todo, created = await todos.create(store, NewTodo(queue=queue, title=title, **fields))
    assert created
    return todo


async def commits(store: Store) -> int:
    return (await store.data_version())[1]


async def fail_until_attempt(store, clock, todo_id, attempt):
    """Claim and fail ``attempt - 1`` times, waiting out each backoff; claim once more."""
    for _ in range(attempt - 1):
        claimed = await todos.claim(store, todo_id, owner="w")
        failed = (await todos.fail(store, Lease(todo_id, claimed.lease_token), error="again")).todo
        clock.advance((failed.visible_at - clock.now_ms()) / 1000)
    claimed = await todos.claim(store, todo_id, owner="w")
    assert claimed.attempt == attempt
    return claimed


class NoJitter:
    """A random source whose jitter factor is always 1: the backoff itself."""

    def uniform(self, low: float, high: float) -> float:
        return high


# ---------------------------------------------------------------- state builders
# Each brings a pending todo into a state (claiming it as "w") and returns it as it now is.


async def _pending(store, todo):
    return todo


async def _claimed(store, todo):
    return await todos.claim(store, todo.id, owner="w")


async def _done(store, todo):
    claimed = await todos.claim(store, todo.id, owner="w")
    return (await todos.complete(store, Lease(todo.id, claimed.lease_token))).todo


async def _failed_awaiting_retry(store, todo):
    claimed = await todos.claim(store, todo.id, owner="w")
    failed = (await todos.fail(store, Lease(todo.id, claimed.lease_token), error="boom")).todo
    assert failed.visible_at is not None
    return failed


async def _dead_letter(store, todo, error: str | None = "gave up"):
    """Needs a todo with one attempt left (``max_attempts=1`` on a new one)."""
    claimed = await todos.claim(store, todo.id, owner="w")
    dead = (await todos.fail(store, Lease(todo.id, claimed.lease_token), error=error)).todo
    assert dead.dead_letter
    return dead


# ---------------------------------------------------------------- setups of the refusal table
# Unlike the builders above, each makes its own todo (the first in the store: id 1) and
# returns (id, token): the token of its last claim, which the refused call presents.


async def pending_with_stale_token(store):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    await todos.release(store, Lease(todo.id, claimed.lease_token))
    return todo.id, claimed.lease_token


async def claimed_with_live_token(store):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    return todo.id, claimed.lease_token


async def done_with_stale_token(store):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    await todos.complete(store, Lease(todo.id, claimed.lease_token))
    return todo.id, claimed.lease_token


async def retrying_with_stale_token(store):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    await todos.fail(store, Lease(todo.id, claimed.lease_token), error="e")
    return todo.id, claimed.lease_token


async def dead_letter_with_stale_token(store):
    todo = await new(store, max_attempts=1)
    claimed = await todos.claim(store, todo.id, owner="w")
    await todos.fail(store, Lease(todo.id, claimed.lease_token), error="e")
    return todo.id, claimed.lease_token


# ---------------------------------------------------------------- the leased verbs, given a token


async def _heartbeat(store, todo_id, token):
    return await todos.heartbeat(store, Lease(todo_id, token))


async def _complete(store, todo_id, token):
    return await todos.complete(store, Lease(todo_id, token), result="late")


async def _fail(store, todo_id, token):
    return await todos.fail(store, Lease(todo_id, token), error="late")


async def _release(store, todo_id, token):
    return await todos.release(store, Lease(todo_id, token))


LEASED_VERBS = pytest.mark.parametrize("verb", [_heartbeat, _complete, _fail, _release], ids=LEASE_VERB_NAMES)


# ================================================================ 1. create and idempotency


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


def test_every_column_of_a_todo_row_reaches_the_field_of_its_name():
    columns = [f.name for f in dataclasses.fields(Todo) if f.name not in ("lease_token", "attempts", "dependencies")]
    row = {name: f"value of {name}" for name in columns}
    row["payload"], row["result"] = '{"in": "payload"}', '{"in": "result"}'
    todo = Todo.from_row(row, lease_token="the token")
    for name in columns:
        if name not in ("payload", "result"):
            assert getattr(todo, name) == f"value of {name}", name
    assert (todo.payload, todo.result, todo.lease_token) == ({"in": "payload"}, {"in": "result"}, "the token")
    null_row = {**row, "payload": "null", "result": None}
    assert (Todo.from_row(null_row).payload, Todo.from_row(null_row).result) == (None, None)


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


async def test_a_title_keeps_ordinary_unicode_and_folds_its_whitespace(store) -> None:
    todo = await new(store, title="Réviser\tla PR\n42 — 🚀")
    assert todo.title == "Réviser la PR 42 — 🚀"


# ---------------------------------------------------------------- idempotency


@pytest.mark.parametrize(
    "into_state",
    [_pending, _claimed, _failed_awaiting_retry],
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
    # Each queue answers a repeat with its own todo holding the key.
    for queue, holder in (("a", first), ("b", other)):
        again, created = await todos.create(store, NewTodo(queue=queue, title="again", idempotency_key="k"))
        assert (again.id, created) == (holder.id, False)


async def test_todos_without_a_key_never_collapse(store, row_count):
    await new(store, title="same")
    await new(store, title="same")
    assert row_count("todos") == 2


async def test_a_key_held_by_a_lapsed_last_attempt_is_free_for_new_work(store, clock) -> None:
    old, _ = await todos.create(store, NewTodo(queue="q", title="old", idempotency_key="k", max_attempts=1))
    await todos.claim_next(store, owner="crashed", lease=60)
    clock.advance(60)  # its only attempt lapsed (at the expiry itself): a dead letter, though nobody claimed since
    new, created = await todos.create(store, NewTodo(queue="q", title="new", idempotency_key="k"))
    assert created and new.id != old.id
    assert (await todos.get(store, old.id)).dead_letter


async def test_a_key_held_by_a_lapsed_lease_with_attempts_left_is_still_held_by_that_todo(store, clock) -> None:
    old, _ = await todos.create(store, NewTodo(queue="q", title="old", idempotency_key="k", max_attempts=2))
    await todos.claim_next(store, owner="crashed", lease=60)
    clock.advance(60)  # its lease lapsed: pending again, and still live
    again, created = await todos.create(store, NewTodo(queue="q", title="new", idempotency_key="k"))
    assert not created and (again.id, again.title, again.state) == (old.id, "old", "pending")


# ================================================================ 2. claim


# ---------------------------------------------------------------- the lease a claim takes


async def test_claim_takes_a_lease_and_counts_the_attempt(store, clock, db_path):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w", lease=60)
    now = clock.now_ms()
    assert (claimed.state, claimed.owner, claimed.attempt) == ("claimed", "w", 1)
    assert (claimed.claimed_at, claimed.lease_expires_at, claimed.visible_at) == (now, now + 60_000, None)
    assert isinstance(claimed.lease_token, str) and len(claimed.lease_token) >= 16
    # The token is shown once and stored only as its hash.
    assert (await todos.get(store, todo.id)).lease_token is None
    stored = sql.value(db_path, "SELECT lease_token_hash FROM todos WHERE id = ?", [todo.id])
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


@pytest.mark.parametrize("max", [None, 3], ids=["one", "a batch"])
async def test_a_claim_is_timed_from_the_call_to_its_committed_answer_found_or_not(store, monkeypatch, max):
    ticks = iter([10.0, 10.25, 20.0, 20.5])  # perf_counter at each claim's call and at its answer

    class Time:
        @staticmethod
        def perf_counter() -> float:
            return next(ticks)

    monkeypatch.setattr(todos.claims, "time", Time)
    await new(store)
    assert await todos.claim_next(store, owner="w", max=max)
    assert not await todos.claim_next(store, owner="w", max=max)  # nothing left: timed all the same
    _, total, count = store.tally.histograms()["claim_seconds"]
    assert (total, count) == (0.75, 2)


# ---------------------------------------------------------------- order and scope


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


async def test_claim_across_several_queues_takes_each_queues_oldest_of_equal_priority_first(store):
    older = await new(store, queue="q1", title="older")
    newer = await new(store, queue="q1", title="newer")
    order = [(await todos.claim_next(store, owner="w", queues=["q1", "q2"])).id for _ in range(2)]
    assert order == [older.id, newer.id]


async def test_claim_next_without_queues_drains_every_queue(store):
    a = await new(store, queue="q1")
    b = await new(store, queue="q2", priority=1)
    c = await new(store, queue="q3")
    got = [(await todos.claim_next(store, owner="w")).id for _ in range(3)]
    assert got == [b.id, a.id, c.id]
    assert await todos.claim_next(store, owner="w") is None


@EVERY_CLAIM_STATEMENT
async def test_every_claim_statement_counts_the_attempt_and_opens_its_history(store, queues):
    todo = await new(store, queue="q1")
    claimed = await todos.claim_next(store, owner="w", queues=queues)
    assert (claimed.id, claimed.attempt, claimed.state, claimed.owner) == (todo.id, 1, "claimed", "w")
    history = (await todos.get(store, todo.id)).attempts
    assert [(a.attempt, a.owner, a.outcome) for a in history] == [(1, "w", None)]


@EVERY_CLAIM_STATEMENT
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


@EVERY_CLAIM_STATEMENT
async def test_every_claim_statement_takes_over_a_lapsed_lease_with_the_next_attempt(store, clock, queues):
    todo = await new(store, queue="q1")
    crashed = await todos.claim_next(store, owner="crashed", queues=queues, lease=60)
    assert await todos.claim_next(store, owner="w", queues=queues) is None  # held
    clock.advance(60)
    taken = await todos.claim_next(store, owner="w", queues=queues)
    assert (taken.id, taken.attempt, taken.owner) == (todo.id, 2, "w") and taken.lease_token != crashed.lease_token


@pytest.mark.parametrize("queues", ["by id", None, ["q1"], ["q1", "q2"]],
                         ids=["by id", "any queue", "one queue", "several queues"])  # fmt: skip
async def test_every_claim_at_a_leases_expiry_takes_it_back_first_in_its_own_commit(store, clock, queues):
    """To the millisecond of the expiry, whatever it claims: the lapsed attempt ends then, not at a
    later read, and a claim of the next in line takes the lapsed todo (the oldest) before a newer one."""
    lapsed = await new(store, "lapsed", queue="q1")
    await todos.claim(store, lapsed.id, owner="crashed", lease=60)
    newer = await new(store, "newer", queue="q1")
    clock.advance(60)
    expiry = clock.now_ms()
    if queues == "by id":
        taken = await todos.claim(store, newer.id, owner="w")
    else:
        taken = await todos.claim_next(store, owner="w", queues=queues)
    assert taken.id == (newer.id if queues == "by id" else lapsed.id)
    clock.advance(5)  # a read takes back what is lapsed still, at its own time
    first = (await todos.get(store, lapsed.id)).attempts[0]
    assert (first.owner, first.outcome, first.ended_at) == ("crashed", "lease_expired", expiry)


# ---------------------------------------------------------------- assignee


@EVERY_CLAIM_STATEMENT_ON_Q
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


async def test_an_assigned_todo_is_claimed_by_id_under_the_assignees_agent_name(store) -> None:
    todo = await new(store, assignee="alice")
    claimed = await todos.claim(store, todo.id, owner="alice-session-2", agent="alice")
    assert (claimed.id, claimed.owner) == (todo.id, "alice-session-2")


@EVERY_CLAIM_STATEMENT_ON_Q
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
    async with await open_store(db_path, clock=clock) as other:
        claims = await asyncio.gather(*(todos.claim_next(s, owner=f"w{i}") for i, s in enumerate([store, other] * 6)))
    got = [c.id for c in claims if c is not None]
    assert sorted(got) == sorted(created)  # each todo exactly once, the rest got None
    assert [(await todos.get(store, i)).attempt for i in sorted(created)] == [1] * 5


# ================================================================ 3. leases and heartbeat


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


# ================================================================ 4. finishing


# ---------------------------------------------------------------- complete


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


# ---------------------------------------------------------------- finishing and claiming the next in one commit


async def test_complete_then_claim_finishes_and_claims_the_next_in_one_commit(store) -> None:
    for title in ("first", "second"):
        await todos.create(store, NewTodo(queue="q", title=title))
    first = await todos.claim_next(store, owner="w", queues=["q"])
    before = await commits(store)
    finished = await todos.complete(store, Lease.of(first), result={"ok": True}, then=NextClaim("w", ["q"]))
    assert await commits(store) - before == 1
    assert (finished.todo.state, finished.todo.result) == ("done", {"ok": True})
    following = finished.next
    assert following.title == "second" and following.state == "claimed" and following.lease_token
    last = await todos.complete(store, Lease.of(following), then=NextClaim("w", ["q"]))
    assert last.todo.state == "done" and last.next is None


async def test_finishing_without_then_claims_nothing(store) -> None:
    for title in ("first", "second"):
        await todos.create(store, NewTodo(queue="q", title=title))
    first = await todos.claim_next(store, owner="w", queues=["q"])
    finished = await todos.complete(store, Lease.of(first))
    assert finished.todo.state == "done" and finished.next is None
    assert [t.state for t in await todos.list_todos(store)] == ["pending", "done"]


async def test_fail_then_claim_fails_and_claims_the_next(store) -> None:
    for title in ("flaky", "next"):
        await todos.create(store, NewTodo(queue="q", title=title))
    flaky = await todos.claim_next(store, owner="w")
    finished = await todos.fail(store, Lease.of(flaky), error="boom", then=NextClaim("w"))
    assert (finished.todo.state, finished.todo.last_error, finished.todo.dead_letter) == ("pending", "boom", False)
    assert finished.next.title == "next"  # the failed one waits out its backoff


async def test_a_stale_token_claims_nothing_either(store) -> None:
    for title in ("held", "waiting"):
        await todos.create(store, NewTodo(queue="q", title=title))
    held = await todos.claim_next(store, owner="w")
    with pytest.raises(Conflict):
        await todos.complete(store, Lease(held.id, "stale"), then=NextClaim("w"))
    assert [t.state for t in await todos.list_todos(store)] == ["pending", "claimed"]


def test_cli_complete_with_claim_next(cli) -> None:
    for title in ("a", "b"):
        as_json(cli, "todo", "create", "--queue", "q", "--title", title)
    claimed = as_json(cli, "todo", "claim", "--queue", "q", "--owner", "me")
    answer = as_json(cli, "todo", "complete", str(claimed["id"]), "--token", claimed["lease_token"], "--claim-next",
                     "--queue", "q", "--owner", "me")  # fmt: skip
    assert answer["todo"]["state"] == "done" and answer["next"]["title"] == "b" and answer["next"]["lease_token"]
    code, _, err, _ = cli("todo", "complete", str(answer["next"]["id"]), "--token", answer["next"]["lease_token"],
                          "--queue", "q", "--json")  # fmt: skip
    assert code == 2 and "--claim-next" in err


def test_claim_next_validation_happens_before_anything_is_written(db_path: Path) -> None:
    async def go() -> None:
        async with await open_store(db_path) as store:
            await todos.create(store, NewTodo(queue="q", title="t"))
            held = await todos.claim_next(store, owner="w")
            with pytest.raises(InvalidArgument):
                await todos.complete(store, Lease.of(held), then=NextClaim("w", "q"))
            assert (await todos.get(store, held.id)).state == "claimed"

    asyncio.run(go())


# ================================================================ 5. failure and recovery


# ---------------------------------------------------------------- fail and backoff


async def test_a_failed_attempt_with_attempts_left_is_pending_again_after_its_backoff(store, clock):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    failed = (await todos.fail(store, Lease(todo.id, claimed.lease_token), error="boom")).todo
    assert (failed.state, failed.last_error, failed.dead_letter) == ("pending", "boom", False)
    assert [t.id for t in await todos.list_todos(store, state="pending")] == [todo.id]
    assert (failed.owner, failed.lease_expires_at) == (None, None)
    assert failed.visible_at > clock.now_ms()
    assert await todos.claim_next(store, owner="w") is None
    with pytest.raises(Conflict):
        await todos.claim(store, todo.id, owner="w")
    clock.advance((failed.visible_at - clock.now_ms() - 1) / 1000)
    assert await todos.claim_next(store, owner="w") is None
    clock.advance(0.001)
    retried = await todos.claim_next(store, owner="w")
    assert (retried.id, retried.state, retried.attempt) == (todo.id, "claimed", 2)
    history = (await todos.get(store, todo.id)).attempts
    assert [(a.outcome, a.error) for a in history] == [("failed", "boom"), (None, None)]


@pytest.mark.parametrize(
    "attempt, low_s, high_s",
    [(1, 15, 30), (2, 30, 60), (3, 60, 120), (5, 240, 480), (6, 450, 900), (12, 450, 900)],
    ids=["attempt-1", "attempt-2", "attempt-3", "attempt-5", "attempt-6-capped", "attempt-12-capped"],
)
async def test_backoff_doubles_per_attempt_with_jitter_and_a_cap(store, clock, attempt, low_s, high_s):
    todo = await new(store, max_attempts=20)
    claimed = await fail_until_attempt(store, clock, todo.id, attempt)
    now = clock.now_ms()
    failed = (await todos.fail(store, Lease(todo.id, claimed.lease_token), error="x")).todo
    assert now + low_s * 1000 <= failed.visible_at <= now + high_s * 1000


@pytest.mark.parametrize(("attempt", "seconds"), [(1, 30), (2, 60), (5, 480), (6, 900), (12, 900)])
async def test_without_jitter_a_retry_waits_exactly_thirty_seconds_doubling_up_to_fifteen_minutes(
    store, clock, monkeypatch, attempt, seconds
) -> None:
    monkeypatch.setattr(store, "rng", NoJitter())
    todo = await new(store, max_attempts=20)
    claimed = await fail_until_attempt(store, clock, todo.id, attempt)
    failed = (await todos.fail(store, Lease(todo.id, claimed.lease_token), error="again")).todo
    assert failed.visible_at - clock.now_ms() == seconds * 1000


async def test_jitter_spreads_retries_of_todos_failed_together(store, clock):
    retry_times = set()
    for i in range(6):
        todo = await new(store, title=str(i))
        claimed = await todos.claim(store, todo.id, owner="w")
        retry_times.add((await todos.fail(store, Lease(todo.id, claimed.lease_token))).todo.visible_at)
    assert len(retry_times) > 1


# ---------------------------------------------------------------- dead letters


async def test_fail_at_max_attempts_makes_a_dead_letter(store, clock):
    todo = await new(store, max_attempts=2)
    claimed = await fail_until_attempt(store, clock, todo.id, 2)
    dead = (await todos.fail(store, Lease(todo.id, claimed.lease_token), error="final error")).todo
    assert (dead.state, dead.visible_at, dead.dead_letter) == ("failed", None, True)
    assert (dead.attempt, dead.last_error) == (2, "final error")
    clock.advance(DAY)
    assert await todos.claim_next(store, owner="w") is None
    with pytest.raises(Conflict):
        await todos.claim(store, todo.id, owner="w")
    got = await todos.get(store, todo.id)
    assert got.dead_letter and got.last_error == "final error"
    assert [(a.outcome, a.error) for a in got.attempts] == [("failed", "again"), ("failed", "final error")]


async def test_one_attempt_budget_dead_letters_on_the_first_failure(store):
    todo = await new(store, max_attempts=1)
    dead = await _dead_letter(store, todo)
    assert dead.attempt == 1


async def test_repeated_lease_expiry_dead_letters_the_todo(store, clock):
    todo = await new(store, max_attempts=3)
    for i in range(3):
        claimed = await todos.claim_next(store, owner=f"crasher-{i}", lease=60)
        assert (claimed.id, claimed.attempt) == (todo.id, i + 1)
        clock.advance(61)  # the claimer crashed: the lease lapses
    assert await todos.claim_next(store, owner="w") is None
    got = await todos.get(store, todo.id)
    assert (got.state, got.visible_at, got.dead_letter, got.attempt) == ("failed", None, True, 3)
    assert "lease expired" in got.last_error
    assert [(a.attempt, a.owner, a.outcome) for a in got.attempts] == [
        (1, "crasher-0", "lease_expired"),
        (2, "crasher-1", "lease_expired"),
        (3, "crasher-2", "lease_expired"),
    ]
    assert all(a.ended_at is not None for a in got.attempts)
    clock.advance(DAY)
    assert await todos.claim_next(store, owner="w") is None


# ---------------------------------------------------------------- lease lapse and takeover


async def test_lapsed_lease_is_taken_over_by_another_owner(store, clock):
    todo = await new(store)
    old = await todos.claim(store, todo.id, owner="a", lease=60)
    assert await todos.claim_next(store, owner="b") is None  # live lease: not yet
    clock.advance(60)
    new_claim = await todos.claim_next(store, owner="b")
    assert (new_claim.id, new_claim.owner, new_claim.attempt) == (todo.id, "b", 2)
    assert new_claim.lease_token != old.lease_token
    done = (await todos.complete(store, Lease(todo.id, new_claim.lease_token))).todo
    assert done.state == "done"
    history = (await todos.get(store, todo.id)).attempts
    assert [(a.owner, a.outcome) for a in history] == [("a", "lease_expired"), ("b", "completed")]


async def test_lapsed_lease_can_be_taken_over_by_id(store, clock):
    todo = await new(store)
    await todos.claim(store, todo.id, owner="a", lease=60)
    with pytest.raises(Conflict):
        await todos.claim(store, todo.id, owner="b")
    clock.advance(61)
    taken = await todos.claim(store, todo.id, owner="b")
    assert (taken.owner, taken.attempt) == ("b", 2)


async def test_a_read_at_the_expiry_shows_the_lapsed_todo_as_the_next_claim_will_find_it(store, clock):
    todo = await new(store, max_attempts=3)
    await todos.claim(store, todo.id, owner="w", lease=60)
    clock.advance(59.999)
    assert (await todos.get(store, todo.id)).state == "claimed"
    clock.advance(0.001)
    shown = await todos.get(store, todo.id)
    assert (shown.state, shown.owner, shown.dead_letter) == ("pending", None, False)
    assert [t.state for t in await todos.list_todos(store)] == ["pending"]


async def test_recovering_a_lapsed_lease_ends_only_the_open_attempt(store, clock):
    todo = await new(store, max_attempts=3)
    first = await todos.claim(store, todo.id, owner="first")
    failed = (await todos.fail(store, Lease(todo.id, first.lease_token), error="first failure")).todo
    clock.advance((failed.visible_at - clock.now_ms()) / 1000)
    await todos.claim(store, todo.id, owner="second", lease=60)
    clock.advance(61)
    history = (await todos.get(store, todo.id)).attempts
    assert [(a.owner, a.outcome, a.error) for a in history] == [
        ("first", "failed", "first failure"),
        ("second", "lease_expired", None),
    ]
    assert history[0].ended_at < history[1].claimed_at


async def test_the_attempts_table_numbers_each_todos_ended_attempts_one_two_three(store, clock, db_path):
    """schema.sql: seq orders the attempts that ended, 1, 2, … per todo, whether its holder ended one
    (fail, release) or a recovery did (a lapsed lease), and whatever other todos ended. A live lease
    meanwhile has no row: its attempt has not ended."""
    first, second = await new(store, "first"), await new(store, "second")
    await todos.claim(store, (await new(store, "live")).id, owner="w", lease=3 * HOUR)
    failed = await todos.claim(store, first.id, owner="w")
    await todos.fail(store, Lease.of(failed), error="boom")
    clock.advance(HOUR)  # past the backoff
    await todos.release(store, Lease.of(await todos.claim(store, first.id, owner="w")))
    await todos.claim(store, first.id, owner="w", lease=60)
    await todos.claim(store, second.id, owner="w", lease=60)
    clock.advance(60)  # both lapse: one recovery ends both attempts
    again = await todos.claim(store, second.id, owner="w")
    await todos.fail(store, Lease.of(again), error="boom")
    assert rows(db_path, "SELECT todo_id, seq, outcome FROM attempts ORDER BY todo_id, seq") == [
        (first.id, 1, "failed"), (first.id, 2, "released"), (first.id, 3, "lease_expired"),
        (second.id, 1, "lease_expired"), (second.id, 2, "failed"),
    ]  # fmt: skip


# ---------------------------------------------------------------- fencing


@LEASED_VERBS
async def test_stale_lease_token_is_refused_after_takeover(store, clock, verb):
    todo = await new(store)
    old = await todos.claim(store, todo.id, owner="a", lease=60)
    clock.advance(61)
    current = await todos.claim_next(store, owner="b")
    before = await todos.get(store, todo.id)
    with pytest.raises(Conflict):
        await verb(store, todo.id, old.lease_token)
    after = await todos.get(store, todo.id)
    assert after == before
    assert after.attempts == before.attempts
    assert (after.state, after.owner) == ("claimed", "b")
    assert (await todos.complete(store, Lease(todo.id, current.lease_token))).todo.state == "done"


@LEASED_VERBS
async def test_token_is_refused_once_its_lease_lapsed_even_if_nobody_reclaimed(store, clock, verb):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="a", lease=60)
    clock.advance(60)
    before = await todos.get(store, todo.id)
    with pytest.raises(Conflict):
        await verb(store, todo.id, claimed.lease_token)
    after = await todos.get(store, todo.id)
    assert after == before and after.attempts == before.attempts


@LEASED_VERBS
@pytest.mark.parametrize("token", ["", None, "not-the-token"], ids=["empty", "missing", "wrong"])
async def test_missing_or_wrong_token_is_a_conflict(store, verb, token):
    todo = await new(store)
    await todos.claim(store, todo.id, owner="a")
    before = await todos.get(store, todo.id)
    with pytest.raises(Conflict):
        await verb(store, todo.id, token)
    after = await todos.get(store, todo.id)
    assert after == before and after.attempts == before.attempts


@pytest.mark.parametrize("verb", LEASE_VERB_NAMES)
async def test_a_token_presented_for_another_todo_is_refused_and_changes_neither(store, verb):
    a, b = await new(store, title="a"), await new(store, title="b")
    claimed_a = await todos.claim(store, a.id, owner="w")
    claimed_b = await todos.claim(store, b.id, owner="w")
    with pytest.raises(Conflict):
        await getattr(todos, verb)(store, Lease(a.id, claimed_b.lease_token))
    assert (await todos.get(store, a.id)).state == "claimed" and (await todos.get(store, b.id)).state == "claimed"
    assert (await todos.get(store, b.id)).lease_expires_at == claimed_b.lease_expires_at
    await todos.complete(store, Lease(a.id, claimed_a.lease_token))  # each token still works on its own todo


@pytest.mark.parametrize("verb", LEASE_VERB_NAMES)
async def test_a_lease_ends_at_its_expiry_to_the_millisecond(store, clock, verb):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w", lease=60)
    clock.advance(60)  # now == lease_expires_at: the lease is over
    with pytest.raises(Conflict, match="expired|stale"):
        await getattr(todos, verb)(store, Lease.of(claimed))


# ---------------------------------------------------------------- redrive


async def test_redrive_gives_a_dead_letter_a_fresh_budget(store, clock):
    todo = await new(store, max_attempts=1)
    await _dead_letter(store, todo)
    clock.advance(10)
    redriven = await todos.redrive(store, todo.id)
    assert (redriven.state, redriven.attempt, redriven.dead_letter) == ("pending", 0, False)
    assert redriven.visible_at == clock.now_ms()
    claimed = await todos.claim_next(store, owner="w")
    assert (claimed.id, claimed.attempt) == (todo.id, 1)


async def test_redrive_sends_back_only_the_dead_letter_it_names(store):
    one, two = await new(store, title="one", max_attempts=1), await new(store, title="two", max_attempts=1)
    await _dead_letter(store, one)
    await _dead_letter(store, two)
    await todos.redrive(store, one.id)
    assert (await todos.get(store, one.id)).state == "pending"
    assert (await todos.get(store, two.id)).dead_letter


async def test_a_todo_whose_last_lease_lapsed_can_be_redriven_at_once(store, clock) -> None:
    todo = await new(store, max_attempts=1)
    await todos.claim(store, todo.id, owner="w", lease=60)
    clock.advance(60)  # nobody read or claimed since: the lapse is noticed by the redrive itself
    redriven = await todos.redrive(store, todo.id)
    assert (redriven.state, redriven.attempt) == ("pending", 0)


@pytest.mark.parametrize(
    "into_state",
    [_pending, _claimed, _done, _failed_awaiting_retry],
    ids=["pending", "claimed", "done", "failed-awaiting-retry"],
)
async def test_redrive_of_anything_but_a_dead_letter_is_a_conflict(store, into_state):
    todo = await new(store, max_attempts=3)
    await into_state(store, todo)
    before = await todos.get(store, todo.id)
    with pytest.raises(Conflict):
        await todos.redrive(store, todo.id)
    assert await todos.get(store, todo.id) == before


async def test_redrive_of_an_unknown_todo_is_not_found(store):
    with pytest.raises(NotFound):
        await todos.redrive(store, 999)


async def test_redrive_is_refused_while_a_newer_live_todo_holds_the_key(store):
    old = await new(store, idempotency_key="k", max_attempts=1)
    await _dead_letter(store, old)
    newer = await new(store, idempotency_key="k")
    before = await todos.get(store, old.id)
    with pytest.raises(Conflict):
        await todos.redrive(store, old.id)
    assert await todos.get(store, old.id) == before
    assert (await todos.get(store, newer.id)).state == "pending"
    # Once the newer todo is done, the key is free again.
    claimed = await todos.claim(store, newer.id, owner="w")
    await todos.complete(store, Lease(newer.id, claimed.lease_token))
    assert (await todos.redrive(store, old.id)).state == "pending"


# ================================================================ 6. reads and stats


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


@pytest.mark.parametrize("queue", [None, "q"], ids=["every queue", "one queue"])
async def test_list_todos_filters_by_when_a_todo_can_be_claimed_to_the_millisecond(store, clock, queue):
    """ready: claimable now (visible from this very millisecond); delayed: claimable later (a delay, a
    retry's backoff); dead: the dead letters. A claimed or done todo is none of them."""
    await new(store, "ready")
    await new(store, "visible now", delay=1)
    await new(store, "later", delay=2)
    retry, dead = await new(store, "retry"), await new(store, "dead", max_attempts=1)
    for todo in (retry, dead):
        await todos.fail(store, Lease.of(await todos.claim(store, todo.id, owner="w")), error="boom")
    done = await new(store, "done")
    await todos.complete(store, Lease.of(await todos.claim(store, done.id, owner="w")))
    await todos.claim(store, (await new(store, "claimed")).id, owner="w", lease=HOUR)
    clock.advance(1)  # "visible now" is visible from this millisecond on

    async def listed(timing: str) -> list[str]:
        return [t.title for t in await todos.list_todos(store, queue=queue, timing=timing)]

    assert await listed("ready") == ["visible now", "ready"]
    assert await listed("delayed") == ["retry", "later"]
    assert await listed("dead") == ["dead"]


async def test_a_list_of_one_queue_keeps_to_the_callers_queues_and_pages_back_from_a_cursor(store):
    made = [await new(store, f"a{i}", queue="a") for i in range(3)]
    await new(store, "b", queue="b")
    assert await todos.list_todos(store, queue="a", queues=["b"]) == []  # outside the scope: as if empty
    in_scope = await todos.list_todos(store, queue="a", queues=["a", "b"])
    assert [t.title for t in in_scope] == ["a2", "a1", "a0"]
    assert [t.title for t in await todos.list_todos(store, queue="a", before_id=made[2].id)] == ["a1", "a0"]


async def test_lists_give_fifty_by_default(store) -> None:
    for n in range(51):
        await new(store, title=f"t{n}")
        await events.ingest_many(store, [(events.NewEvent(source="s", family="webhook", type="t", external_id=f"e{n}",
                                                          trust_mode="open", verified=False, body=b"{}"), [])])  # fmt: skip
    assert len(await todos.list_todos(store)) == 50
    assert len(await events.list_events(store)) == 50
    assert len(await events.recent_events(store)) == 50


async def test_stats_counts_each_queue_by_state(store, clock):
    q1 = [await new(store, queue="q1", title=str(i), max_attempts=2) for i in range(5)]
    await new(store, queue="q2")
    q2_done = await todos.claim(store, (await new(store, queue="q2")).id, owner="w")
    await todos.complete(store, Lease.of(q2_done))  # done, and no dead letter there: the two counts apart
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
    # q1[0] is ready, and so is q1[3]: its retry's backoff has passed.
    assert (s1.ready, s1.delayed, s1.claimed, s1.done, s1.dead, s1.cancelled) == (2, 0, 1, 1, 1, 0)
    s2 = by_queue["q2"]
    assert (s2.ready, s2.delayed, s2.claimed, s2.done, s2.dead, s2.cancelled) == (1, 0, 0, 1, 0, 0)


async def test_stats_count_cancelled_todos_and_delayed_ones_apart_from_ready(store, clock):
    await new(store, queue="q")
    await todos.create(store, NewTodo(queue="q", title="later", delay=60))
    await todos.cancel(store, (await new(store, queue="q")).id, by="alice")
    (q,) = await todos.stats(store)
    assert (q.ready, q.delayed, q.pending, q.cancelled) == (1, 1, 2, 1)
    clock.advance(60)
    (q,) = await todos.stats(store)
    assert (q.ready, q.delayed) == (2, 0)


async def test_stats_of_a_scope_lists_its_empty_queues_with_zero_counts(store) -> None:
    await new(store, queue="busy")
    answer = await todos.stats(store, queues=["idle", "busy"])
    assert [s.queue for s in answer] == ["busy", "idle"]
    assert answer[1] == QueueStats.empty("idle")


async def test_queues_without_todos_names_the_queues_holding_no_todo_in_any_state(store) -> None:
    await new(store, queue="busy")
    finished = await new(store, queue="finished")
    await todos.cancel(store, finished.id, by="alice")
    assert await todos.queues_without_todos(store, ["typo", "busy", "finished", "other"]) == ["typo", "other"]
    assert await todos.queues_without_todos(store, ["busy"]) == []


async def test_oldest_ready_age_moves_with_the_clock(store, clock):
    await new(store, queue="q1")
    clock.advance(30)
    await new(store, queue="q1")
    claimed_only = await new(store, queue="q2")
    await todos.claim(store, claimed_only.id, owner="w", lease=12 * HOUR)
    clock.advance(60)
    ages = {s.queue: s.oldest_ready_age_seconds for s in await todos.stats(store)}
    assert ages == {"q1": 90.0, "q2": None}
    clock.advance(10.5)
    ages = {s.queue: s.oldest_ready_age_seconds for s in await todos.stats(store)}
    assert ages["q1"] == 100.5


async def test_a_pending_todo_created_now_is_zero_seconds_old(store) -> None:
    await new(store)
    (stats,) = await todos.stats(store)
    assert stats.oldest_ready_age_seconds == 0


async def test_a_delayed_todo_has_no_ready_age_until_it_is_claimable(store, clock) -> None:
    await todos.create(store, NewTodo(queue="q", title="later", delay=60))
    (stats,) = await todos.stats(store)
    assert stats.oldest_ready_age_seconds is None
    clock.advance(90)
    (stats,) = await todos.stats(store)
    assert stats.oldest_ready_age_seconds == 90


async def test_stats_count_a_todo_whose_lease_lapsed_with_attempts_left_as_ready(store, clock):
    todo = await new(store, max_attempts=3)
    await todos.claim(store, todo.id, owner="w", lease=60)
    clock.advance(59)
    (held,) = await todos.stats(store)
    assert (held.ready, held.claimed, held.dead) == (0, 1, 0)
    clock.advance(1)  # the lease ends now: the next claim takes it over
    (q,) = await todos.stats(store)
    assert (q.ready, q.delayed, q.claimed, q.dead) == (1, 0, 0, 0)
    assert q.oldest_ready_age_seconds == 60


async def test_stats_count_a_todo_whose_last_lease_lapsed_as_a_dead_letter(store, clock):
    todo = await new(store, max_attempts=1)
    await todos.claim(store, todo.id, owner="w", lease=60)
    clock.advance(61)
    (q,) = await todos.stats(store)
    assert (q.ready, q.claimed, q.dead) == (0, 0, 1)


async def test_stats_reads_without_writing(store, clock, db_path) -> None:
    await todos.create(store, NewTodo(queue="q", title="t", max_attempts=1))
    await todos.claim_next(store, owner="crashed", lease=60)
    clock.advance(61)
    (row,) = await todos.stats(store)
    assert (row.claimed, row.dead) == (0, 1)
    assert sql.value(db_path, "SELECT state FROM todos") == "claimed"  # the database still holds the lapsed claim


# ================================================================ 7. refusals


# ---------------------------------------------------------------- transitions not in the diagram
# Each case: a setup (with the helpers above) that brings a todo to a state and
# returns (id, token), then the refused call.


REFUSED = [
    (pending_with_stale_token, lambda s, i, t: todos.complete(s, Lease(i, t)), "complete-a-pending-todo",
     "todo 1 is pending, not claimed; the lease token is stale"),
    (done_with_stale_token, lambda s, i, t: todos.complete(s, Lease(i, t)), "complete-a-done-todo",
     "todo 1 is done, not claimed; the lease token is stale"),
    (done_with_stale_token, lambda s, i, t: todos.fail(s, Lease(i, t), error="x"), "fail-a-done-todo",
     "todo 1 is done, not claimed; the lease token is stale"),
    (done_with_stale_token, lambda s, i, t: todos.heartbeat(s, Lease(i, t)), "heartbeat-a-done-todo",
     "todo 1 is done, not claimed; the lease token is stale"),
    (pending_with_stale_token, lambda s, i, t: todos.release(s, Lease(i, t)), "release-a-pending-todo",
     "todo 1 is pending, not claimed; the lease token is stale"),
    (done_with_stale_token, lambda s, i, t: todos.claim(s, i, owner="w"), "claim-a-done-todo",
     "todo 1 is done"),
    (claimed_with_live_token, lambda s, i, t: todos.claim(s, i, owner="other"), "claim-a-claimed-todo",
     "todo 1 is claimed by w until 2026-01-01T00:05:00.000Z"),
    (claimed_with_live_token, lambda s, i, t: todos.claim(s, i, owner="w"), "reclaim-own-live-lease",
     "todo 1 is claimed by w until 2026-01-01T00:05:00.000Z"),
    (retrying_with_stale_token, lambda s, i, t: todos.heartbeat(s, Lease(i, t)), "heartbeat-a-retrying-todo",
     "todo 1 is pending, not claimed; the lease token is stale"),
    (retrying_with_stale_token, lambda s, i, t: todos.complete(s, Lease(i, t)), "complete-a-retrying-todo",
     "todo 1 is pending, not claimed; the lease token is stale"),
    (retrying_with_stale_token, lambda s, i, t: todos.release(s, Lease(i, t)), "release-a-retrying-todo",
     "todo 1 is pending, not claimed; the lease token is stale"),
    (dead_letter_with_stale_token, lambda s, i, t: todos.claim(s, i, owner="w"), "claim-a-dead-letter",
     "todo 1 is a dead letter after 1 attempt; redrive it first"),
    (dead_letter_with_stale_token, lambda s, i, t: todos.fail(s, Lease(i, t)), "fail-a-dead-letter",
     "todo 1 is failed, not claimed; the lease token is stale"),
]


@pytest.mark.parametrize("setup, call, message", [(s, c, m) for s, c, _, m in REFUSED], ids=[i for _, _, i, _ in REFUSED])
async def test_transition_not_in_the_diagram_is_refused_saying_why_and_changes_nothing(store, setup, call, message):
    todo_id, token = await setup(store)
    before = await todos.get(store, todo_id)
    with pytest.raises(Conflict) as refused:
        await call(store, todo_id, token)
    assert refused.value.message == message
    after = await todos.get(store, todo_id)
    assert after == before
    assert after.attempts == before.attempts


# ---------------------------------------------------------------- unknown ids


VERBS_ON_AN_ID = [
    (lambda s, i: todos.get(s, i), "get",
     "todo 4242 does not exist"),
    (lambda s, i: todos.claim(s, i, owner="w"), "claim",
     "todo 4242 does not exist"),
    (lambda s, i: todos.heartbeat(s, Lease(i, "token")), "heartbeat",
     "todo 4242 does not exist"),
    (lambda s, i: todos.complete(s, Lease(i, "token")), "complete",
     "todo 4242 does not exist"),
    (lambda s, i: todos.fail(s, Lease(i, "token"), error="e"), "fail",
     "todo 4242 does not exist"),
    (lambda s, i: todos.release(s, Lease(i, "token")), "release",
     "todo 4242 does not exist"),
    (lambda s, i: todos.redrive(s, i), "redrive",
     "todo 4242 does not exist"),
    (lambda s, i: todos.cancel(s, i, by="alice"), "cancel",
     "todo 4242 does not exist"),
    (lambda s, i: todos.force_release(s, i, by="alice"), "force-release",
     "todo 4242 does not exist"),
]


@pytest.mark.parametrize("todo_id", [0, -1, 2**63], ids=["zero", "negative", "past int64"])
@LEASED_VERBS
async def test_an_id_no_todo_can_have_is_not_found_by_the_leased_verbs(store, row_count, verb, todo_id):
    await new(store)
    with pytest.raises(NotFound) as refused:
        await verb(store, todo_id, "token")
    assert refused.value.message == f"todo {todo_id} does not exist"
    assert (row_count("todos"), row_count("attempts")) == (1, 0)


@pytest.mark.parametrize("call", [c for c, _, _ in VERBS_ON_AN_ID], ids=[i for _, i, _ in VERBS_ON_AN_ID])
async def test_unknown_id_is_not_found_for_every_verb(store, row_count, call):
    await new(store)  # something else exists, untouched
    with pytest.raises(NotFound) as refused:
        await call(store, UNKNOWN_ID)
    assert refused.value.message == f"todo {UNKNOWN_ID} does not exist"
    assert (row_count("todos"), row_count("attempts")) == (1, 0)


# ---------------------------------------------------------------- invalid arguments
# Each call gets the store, a claimed todo's id and its token.


INVALID = [
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", delay=-1)), "negative-delay",
     "delay must be between 0 and 31536000 seconds, got -1"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", delay=float("nan"))), "nan-delay",
     "delay must be a finite number of seconds"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", delay=float("inf"))), "infinite-delay",
     "delay must be a finite number of seconds"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", delay=1e20)), "delay-beyond-int64-ms",
     "delay must be between 0 and 31536000 seconds, got 1e+20"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", max_attempts=0)), "max-attempts-0",
     "max_attempts must be between 1 and 1000, got 0"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", priority=2**63)), "priority-beyond-int64",
     "priority must be between -9223372036854775808 and 9223372036854775807, got 9223372036854775808"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", priority=1.5)), "float-priority",
     "priority must be an integer"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", priority="1")), "str-priority",
     "priority must be an integer"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", priority=True)), "bool-priority",
     "priority must be an integer"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", payload={1, 2})), "set-payload",
     "payload is not JSON-serialisable: Object of type set is not JSON serializable"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", payload=float("inf"))), "inf-payload",
     "payload is not JSON-serialisable: Out of range float values are not JSON compliant"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="", title="t")), "empty-queue",
     "queue must be a non-empty string"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="  ", title="t")), "blank-queue",
     "queue must be a non-empty string"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title=" \n ")), "blank-title",
     "title must not be empty"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="x" * 1001)), "title-too-long",
     "title is longer than 1000 characters"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", assignee="")), "empty-assignee",
     "assignee must be a non-empty string"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", idempotency_key="")), "empty-key",
     "idempotency_key must be a non-empty string"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q\x1b[2J", title="t")), "escape-in-queue",
     "queue holds a control character (\\x1b)"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t\x07")), "bell-in-title",
     "title holds a control character (\\x07)"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t\x00x")), "nul-in-title",
     "title holds a control character (\\x00)"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t\x9b31m")), "c1-csi-in-title",
     "title holds a control character (\\x9b)"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="\u202egnp.exe")), "bidi-override-in-title",
     "title holds a control character (\\u202e)"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", assignee="bob\n")), "newline-in-assignee",
     "assignee holds a control character (\\x0a)"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", kind="k\x1b")), "escape-in-kind",
     "kind holds a control character (\\x1b)"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", idempotency_key="k\r")), "cr-in-key",
     "idempotency_key holds a control character (\\x0d)"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", idempotency_key="event:gh:d-1:default")),
     "key-in-the-namespace-of-events",
     "idempotency keys starting with 'event:' are reserved for todos made from events"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", payload="x" * 1024 * 1024)), "payload-over-cap",
     "payload is 1048578 bytes, over the cap of 1 MiB (setting limits.max_payload)"),
    (lambda s, i, t: todos.complete(s, Lease(i, t), result=["y" * 1024 * 1024]), "result-over-cap",
     "result is 1048580 bytes, over the cap of 1 MiB (setting limits.max_payload)"),
    (lambda s, i, t: todos.fail(s, Lease(i, t), error="z" * (1024 * 1024 + 1)), "error-over-cap",
     "error is 1048577 bytes, over the cap of 1 MiB (setting limits.max_payload)"),
    (lambda s, i, t: todos.claim(s, i, owner="w\x1b]0;pwned\x07"), "escape-in-owner",
     "owner holds a control character (\\x1b)"),
    (lambda s, i, t: todos.claim(s, i, owner="w", lease=0), "claim-lease-0",
     "lease must be between 1 and 43200 seconds, got 0"),
    (lambda s, i, t: todos.claim(s, i, owner="w", lease=12 * 3600 + 1), "claim-lease-over-12h",
     "lease must be between 1 and 43200 seconds, got 43201"),
    (lambda s, i, t: todos.claim(s, i, owner=""), "claim-empty-owner",
     "owner must be a non-empty string"),
    (lambda s, i, t: todos.claim_next(s, owner=""), "claim-next-empty-owner",
     "owner must be a non-empty string"),
    (lambda s, i, t: todos.claim_next(s, owner="w", lease=0), "claim-next-lease-0",
     "lease must be between 1 and 43200 seconds, got 0"),
    (lambda s, i, t: todos.claim_next(s, owner="w", queues=[]), "claim-next-no-queues",
     "queues must name at least one queue (or be omitted for all)"),
    (lambda s, i, t: todos.claim_next(s, owner="w", queues=[""]), "claim-next-empty-queue",
     "queue must be a non-empty string"),
    (lambda s, i, t: todos.heartbeat(s, Lease(i, t), lease_seconds=0), "heartbeat-lease-0",
     "lease must be between 1 and 43200 seconds, got 0"),
    (lambda s, i, t: todos.heartbeat(s, Lease(i, t), lease_seconds=12 * 3600 + 1), "heartbeat-lease-over-12h",
     "lease must be between 1 and 43200 seconds, got 43201"),
    (lambda s, i, t: todos.complete(s, Lease(i, t), result={1}), "complete-set-result",
     "result is not JSON-serialisable: Object of type set is not JSON serializable"),
    (lambda s, i, t: todos.fail(s, Lease(i, t), error=42), "fail-non-string-error",
     "error must be a string"),
    (lambda s, i, t: todos.release(s, Lease(i, t), delay=-1), "release-negative-delay",
     "delay must be between 0 and 31536000 seconds, got -1"),
    (lambda s, i, t: todos.release(s, Lease(i, t), delay=float("inf")), "release-infinite-delay",
     "delay must be a finite number of seconds"),
    (lambda s, i, t: todos.list_todos(s, state="open"), "list-unknown-state",
     "state must be one of pending, claimed, done, failed, cancelled, got 'open'"),
    (lambda s, i, t: todos.claim_next(s, owner="w", queues="q"), "claim-next-queues-a-string",
     "queues must be a list of queue names, not a string"),
    (lambda s, i, t: todos.release(s, Lease(i, t), delay=365 * 86400 + 1), "release-delay-over-a-year",
     "delay must be between 0 and 31536000 seconds, got 31536001"),
    (lambda s, i, t: todos.list_todos(s, limit=1001), "list-limit-over-1000",
     "limit must be between 1 and 1000, got 1001"),
    (lambda s, i, t: events.list_events(s, limit=0), "events-limit-0", "limit must be between 1 and 1000, got 0"),
    (lambda s, i, t: events.list_events(s, limit=1001), "events-limit-over-1000",
     "limit must be between 1 and 1000, got 1001"),
    (lambda s, i, t: events.list_events(s, limit=True), "events-bool-limit", "limit must be between 1 and 1000, got True"),
    (lambda s, i, t: events.list_events(s, limit="5"), "events-str-limit", "limit must be between 1 and 1000, got '5'"),
    (lambda s, i, t: events.list_events(s, after_id="3"), "events-str-cursor", "after_id must be an integer"),
    (lambda s, i, t: events.list_events(s, after_id=True), "events-bool-cursor", "after_id must be an integer"),
    (lambda s, i, t: events.recent_events(s, limit=0), "recent-events-limit-0",
     "limit must be between 1 and 1000, got 0"),
    (lambda s, i, t: events.recent_events(s, limit=1001), "recent-events-limit-over-1000",
     "limit must be between 1 and 1000, got 1001"),
    (lambda s, i, t: events.recent_events(s, limit=True), "recent-events-bool-limit",
     "limit must be between 1 and 1000, got True"),
    (lambda s, i, t: events.recent_events(s, limit="5"), "recent-events-str-limit",
     "limit must be between 1 and 1000, got '5'"),
    (lambda s, i, t: todos.list_todos(s, limit=0), "list-limit-0",
     "limit must be between 1 and 1000, got 0"),
]


@pytest.mark.parametrize("call, message", [(c, m) for c, _, m in INVALID], ids=[i for _, i, _ in INVALID])
async def test_invalid_argument_is_refused_naming_what_was_wrong_and_writes_nothing(store, row_count, call, message):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    await new(store, title="other pending")
    before = [await todos.get(store, t.id) for t in await todos.list_todos(store)]
    with pytest.raises(InvalidArgument) as refused:
        await call(store, todo.id, claimed.lease_token)
    assert refused.value.message == message
    after = [await todos.get(store, t.id) for t in await todos.list_todos(store)]
    assert after == before
    assert [a.attempts for a in after] == [b.attempts for b in before]
    assert (row_count("todos"), row_count("attempts")) == (2, 0)  # the open attempt lives on its claimed row


async def test_claim_next_refuses_a_bare_string_for_queues(store) -> None:
    await todos.create(store, NewTodo(queue="b", title="would be claimed from queue 'b' of 'builds'"))
    with pytest.raises(InvalidArgument):
        await todos.claim_next(store, owner="o", queues="builds")
    assert (await todos.get(store, 1)).state == "pending"


@pytest.mark.parametrize("separator", ["\u2028", "\u2029"], ids=["line-separator", "paragraph-separator"])
async def test_a_queue_name_with_a_line_or_paragraph_separator_is_refused(store, row_count, separator) -> None:
    # Log viewers and str.splitlines() break lines there: a name could forge a line.
    with pytest.raises(InvalidArgument, match="control character"):
        await todos.create(store, NewTodo(queue=f"q{separator}forged", title="t"))
    assert row_count("todos") == 0


async def test_a_payload_at_the_cap_is_accepted_and_a_raised_cap_takes_more(store) -> None:
    at_cap = "x" * (1024 * 1024 - 2)  # its JSON: two quotes more
    assert (await new(store, payload=at_cap)).payload == at_cap
    with pytest.raises(InvalidArgument, match="limits.max_payload"):
        await new(store, payload=at_cap + "x")
    await settings.set_value(store, "limits.max_payload", "2MiB")
    assert (await new(store, payload=at_cap + "x")).payload == at_cap + "x"


@pytest.mark.parametrize("limit", [1, 1000])
async def test_list_limits_from_one_to_a_thousand_are_accepted(store, limit) -> None:
    await new(store)
    assert len(await todos.list_todos(store, limit=limit)) == 1
    assert await events.list_events(store, limit=limit) == []
    assert await events.recent_events(store, limit=limit) == []


# ---------------------------------------------------------------- refusals that say why


async def test_a_token_that_is_not_a_string_is_refused_as_missing(store) -> None:
    todo = await new(store)
    await todos.claim(store, todo.id, owner="w")
    with pytest.raises(Conflict) as refused:
        await todos.complete(store, Lease(todo.id, 12345))
    assert refused.value.message == f"a lease token is required to change todo {todo.id}"


async def test_the_lease_of_a_todo_read_without_its_token_is_refused_as_missing_one(store) -> None:
    todo = await new(store)
    await todos.claim(store, todo.id, owner="w")
    read = await todos.get(store, todo.id)  # a read carries no token: only the claim's answer does
    assert read.lease_token is None
    with pytest.raises(Conflict) as refused:
        await todos.complete(store, Lease.of(read))
    assert refused.value.message == f"a lease token is required to change todo {todo.id}"
    assert (await todos.get(store, todo.id)).state == "claimed"


async def test_the_token_of_a_lease_taken_over_is_refused_naming_the_new_holder(store, clock) -> None:
    todo = await new(store)
    first = await todos.claim(store, todo.id, owner="w1", lease=60)
    clock.advance(61)
    await todos.claim(store, todo.id, owner="w2")
    with pytest.raises(Conflict) as refused:
        await todos.complete(store, Lease(todo.id, first.lease_token))
    assert refused.value.message == f"the lease token does not match the current lease on todo {todo.id} (held by w2)"


async def test_the_token_of_a_lapsed_lease_is_refused_saying_when_it_expired(store, clock) -> None:
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w", lease=60)
    clock.advance(61)
    with pytest.raises(Conflict) as refused:
        await todos.heartbeat(store, Lease(todo.id, claimed.lease_token))
    assert refused.value.message == f"the lease on todo {todo.id} expired at 2026-01-01T00:01:00.000Z"


async def test_claiming_a_delayed_todo_early_says_when_it_becomes_visible(store) -> None:
    todo = await new(store, delay=90)
    with pytest.raises(Conflict) as refused:
        await todos.claim(store, todo.id, owner="w")
    assert refused.value.message == f"todo {todo.id} is not visible until 2026-01-01T00:01:30.000Z"


async def test_claim_by_id_on_a_paused_queue_is_refused_saying_the_queue_is_paused(store) -> None:
    waiting = await new(store, queue="review")
    await queues_module.pause(store, "review", by="op")
    with pytest.raises(Conflict) as refused:
        await todos.claim(store, waiting.id, owner="w")
    assert str(refused.value) == (
        f"conflict: todo {waiting.id} is on queue 'review', which is paused: "
        "nothing is claimed from it until it is resumed"
    )


async def test_the_assignees_other_session_is_told_the_todo_is_claimed_and_others_that_it_is_not_theirs(store) -> None:
    todo = await new(store, assignee="alice")
    await todos.claim(store, todo.id, owner="alice-1", agent="alice")
    with pytest.raises(Conflict) as busy:
        await todos.claim(store, todo.id, owner="alice-2", agent="alice")
    assert busy.value.message.startswith(f"todo {todo.id} is claimed by alice-1 until ")
    with pytest.raises(Forbidden) as not_theirs:
        await todos.claim(store, todo.id, owner="bob")
    assert not_theirs.value.message == f"todo {todo.id} is assigned to 'alice'"


@pytest.mark.parametrize("verb", [todos.complete, todos.fail], ids=["complete", "fail"])
async def test_finishing_a_todo_outside_the_callers_queues_is_not_found_and_changes_nothing(store, verb) -> None:
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    with pytest.raises(NotFound) as refused:
        await verb(store, Lease.of(claimed, queues=["other"]), then=NextClaim(owner="w"))
    assert refused.value.message == f"todo {todo.id} does not exist"
    assert (await todos.get(store, todo.id)).state == "claimed"


@pytest.mark.parametrize(
    ("into", "detail"), [("pending", "pending"), ("claimed", "claimed"), ("retrying", "pending"),
                         ("done", "done"), ("cancelled", "cancelled")],
)  # fmt: skip
async def test_redriving_anything_but_a_dead_letter_says_what_the_todo_is(store, into, detail) -> None:
    todo = await new(store, max_attempts=3)
    if into == "cancelled":
        await todos.cancel(store, todo.id, by="alice")
    elif into != "pending":
        claimed = await todos.claim(store, todo.id, owner="w")
        if into == "retrying":
            await todos.fail(store, Lease(todo.id, claimed.lease_token), error="later")
        elif into == "done":
            await todos.complete(store, Lease(todo.id, claimed.lease_token))
    with pytest.raises(Conflict) as refused:
        await todos.redrive(store, todo.id)
    assert refused.value.message == f"todo {todo.id} is {detail}, not a dead letter; only dead letters can be redriven"


async def test_redrive_refused_by_a_newer_live_todo_says_it_holds_the_key(store) -> None:
    dead = await new(store, max_attempts=1, idempotency_key="k")
    claimed = await todos.claim(store, dead.id, owner="w")
    await todos.fail(store, Lease(dead.id, claimed.lease_token), error="e")
    await new(store, idempotency_key="k")
    with pytest.raises(Conflict) as refused:
        await todos.redrive(store, dead.id)
    assert refused.value.message == f"todo {dead.id} cannot be redriven: a newer live todo holds its idempotency key"


async def test_claiming_a_dead_letter_counts_its_attempts_in_the_refusal(store, clock) -> None:
    todo = await new(store, max_attempts=2)
    for _ in range(2):
        claimed = await todos.claim(store, todo.id, owner="w")
        await todos.fail(store, Lease(todo.id, claimed.lease_token), error="e")
        clock.advance(3600)  # past the backoff
    with pytest.raises(Conflict) as refused:
        await todos.claim(store, todo.id, owner="w")
    assert refused.value.message == f"todo {todo.id} is a dead letter after 2 attempts; redrive it first"


async def test_list_todos_refuses_an_unknown_timing(store) -> None:
    with pytest.raises(InvalidArgument) as refused:
        await todos.list_todos(store, timing="soon")
    assert refused.value.message == "timing must be one of ready, delayed, dead, blocked, got 'soon'"


# ---------------------------------------------------------------- bulk redrive


async def test_bulk_redrive_works_a_batch_per_transaction_and_records_each_with_its_ids(store, db_path) -> None:
    dead = [(await _dead_letter(store, await new(store, f"dead {i}", max_attempts=1))).id for i in range(5)]
    assert await todos.count_dead_letters(store, queue="q") == 5
    seen: list[int] = []
    done = await todos.redrive_many(store, queue="q", by="alice", batch=2, progress=seen.append)
    assert (done.matched, done.redriven, done.skipped) == (5, 5, 0)
    assert seen == [2, 4, 5]
    bodies = rows(db_path, "SELECT body FROM events WHERE source = 'operator' ORDER BY id")
    audited = [json.loads(bytes(body)) for (body,) in bodies]
    assert [a["ids"] for a in audited] == [dead[:2], dead[2:4], dead[4:]]
    assert {a["by"] for a in audited} == {"alice"}


async def test_bulk_redrive_holds_back_a_dead_letter_whose_key_a_newer_todo_holds(store) -> None:
    old = await _dead_letter(store, await new(store, "old", idempotency_key="k", max_attempts=1))
    newer = await new(store, "newer", idempotency_key="k")
    done = await todos.redrive_many(store, queue="q")
    assert (done.matched, done.redriven, done.skipped) == (1, 0, 1)
    assert (await todos.get(store, old.id)).dead_letter and (await todos.get(store, newer.id)).state == "pending"


async def test_bulk_redrive_counts_a_held_back_dead_letter_once_and_records_each_batch_on_the_queue(store, db_path):
    dead = [(await _dead_letter(store, await new(store, f"dead {i}", idempotency_key=f"k{i}", max_attempts=1))).id
            for i in range(5)]  # fmt: skip
    await new(store, "newer", idempotency_key="k2")  # holds the key of the third dead letter
    done = await todos.redrive_many(store, queue="q", by="alice", batch=3)
    assert (done.matched, done.redriven, done.skipped) == (5, 4, 1)
    bodies = rows(db_path, "SELECT body FROM events WHERE source = 'operator' ORDER BY id")
    assert [json.loads(bytes(body)) for (body,) in bodies] == [
        {"by": "alice", "action": "todo.redrive", "subject": "q", "ids": [dead[0], dead[1]], "skipped": 1},
        {"by": "alice", "action": "todo.redrive", "subject": "q", "ids": [dead[3], dead[4]], "skipped": 0},
    ]
    assert (await todos.get(store, dead[2])).dead_letter


async def test_bulk_redrive_filters_by_kind_and_by_when_the_todo_died(store, clock):
    await _dead_letter(store, await new(store, "old deploy", kind="deploy", max_attempts=1))
    clock.advance(600)
    cutoff = clock.now_ms()
    await _dead_letter(store, await new(store, "new build", kind="build", max_attempts=1))
    bad = await _dead_letter(store, await new(store, "new deploy", kind="deploy", max_attempts=1))
    assert await todos.count_dead_letters(store, queue="q", kind="deploy", since=cutoff) == 1
    done = await todos.redrive_many(store, queue="q", kind="deploy", since=cutoff)
    assert (done.matched, done.redriven, done.skipped) == (1, 1, 0)
    assert [t.id for t in await todos.list_todos(store, state="pending")] == [bad.id]


async def test_a_dead_letter_group_is_redriven_whole_and_only_it_each_batch_recorded_with_its_error(store, db_path):
    boom = [await _dead_letter(store, await new(store, f"boom {i}", max_attempts=1), error="boom") for i in range(3)]
    bang = await _dead_letter(store, await new(store, "bang", max_attempts=1), error="bang")
    elsewhere = await _dead_letter(store, await new(store, "elsewhere", queue="other", max_attempts=1), error="boom")
    done = await todos.redrive_group(store, queue="q", last_error="boom", by="alice", batch=2)
    assert done.to_dict() == {"matched": 3, "redriven": 3, "skipped": 0}
    assert [(await todos.get(store, t.id)).state for t in boom] == ["pending"] * 3
    assert (await todos.get(store, bang.id)).dead_letter and (await todos.get(store, elsewhere.id)).dead_letter
    batch = {"by": "alice", "action": "todo.redrive", "subject": "q", "skipped": 0, "last_error": "boom"}
    assert [json.loads(bytes(body)) for (body,) in rows(db_path, "SELECT body FROM events ORDER BY id")] == [
        {**batch, "ids": [boom[0].id, boom[1].id]},
        {**batch, "ids": [boom[2].id]},
    ]


async def test_the_dead_letter_group_without_an_error_is_redriven_by_null(store, db_path):
    silent = await _dead_letter(store, await new(store, "silent", max_attempts=1), error=None)
    loud = await _dead_letter(store, await new(store, "loud", max_attempts=1))
    done = await todos.redrive_group(store, queue="q", last_error=None)
    assert (done.matched, done.redriven, done.skipped) == (1, 1, 0)
    assert (await todos.get(store, silent.id)).state == "pending" and (await todos.get(store, loud.id)).dead_letter
    assert rows(db_path, "SELECT id FROM events") == []  # recorded only when someone is named


async def test_a_dead_letter_group_holds_back_a_dead_letter_whose_key_a_newer_todo_holds(store, db_path):
    held = await _dead_letter(store, await new(store, "held", idempotency_key="k", max_attempts=1))
    freed = await _dead_letter(store, await new(store, "freed", max_attempts=1))
    await new(store, "newer", idempotency_key="k")
    done = await todos.redrive_group(store, queue="q", last_error="gave up", by="alice")
    assert done.to_dict() == {"matched": 2, "redriven": 1, "skipped": 1}
    assert (await todos.get(store, held.id)).dead_letter and (await todos.get(store, freed.id)).state == "pending"
    ((body,),) = rows(db_path, "SELECT body FROM events")
    assert json.loads(bytes(body)) == {"by": "alice", "action": "todo.redrive", "subject": "q", "ids": [freed.id],
                                       "skipped": 1, "last_error": "gave up"}  # fmt: skip


@pytest.mark.parametrize(
    ("arguments", "message"),
    [({"queue": "", "last_error": "boom"}, "queue must be a non-empty string"),
     ({"queue": "q", "last_error": 7}, "last_error must be a string or null")],
    ids=["no queue", "an error not a string"],
)  # fmt: skip
async def test_a_dead_letter_group_with_a_bad_filter_is_refused_naming_it(store, arguments, message):
    dead = await _dead_letter(store, await new(store, max_attempts=1))
    with pytest.raises(InvalidArgument) as refused:
        await todos.redrive_group(store, **arguments)
    assert refused.value.message == message
    assert (await todos.get(store, dead.id)).dead_letter
