"""Failure and recovery (DESIGN §2): backoff, dead letters, lease lapse, takeover, fencing, redrive."""

from __future__ import annotations

import pytest

from switchboard_local.core import todos
from switchboard_local.core.errors import Conflict, NotFound
from switchboard_local.core.todo_model import NewTodo, QueueStats
from switchboard_local.core.todos import Lease

pytestmark = pytest.mark.anyio

DAY = 24 * 3600.0


async def new(store, title="t", queue="q", **fields):
    todo, created = await todos.create(store, NewTodo(queue=queue, title=title, **fields))
    assert created
    return todo


async def fail_until_attempt(store, clock, todo_id, attempt):
    """Claim and fail ``attempt - 1`` times, waiting out each backoff; claim once more."""
    for _ in range(attempt - 1):
        claimed = await todos.claim(store, todo_id, owner="w")
        failed = (await todos.fail(store, Lease(todo_id, claimed.lease_token), error="again")).todo
        clock.advance((failed.visible_at - clock.now_ms()) / 1000)
    claimed = await todos.claim(store, todo_id, owner="w")
    assert claimed.attempt == attempt
    return claimed


async def make_dead_letter(store, todo):
    claimed = await todos.claim(store, todo.id, owner="w")
    dead = (await todos.fail(store, Lease(todo.id, claimed.lease_token), error="gave up")).todo
    assert dead.dead_letter
    return dead


# ---------------------------------------------------------------- fail and backoff


async def test_failed_todo_is_retried_only_after_its_backoff(store, clock):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    failed = (await todos.fail(store, Lease(todo.id, claimed.lease_token), error="boom")).todo
    assert (failed.state, failed.last_error, failed.dead_letter) == ("failed", "boom", False)
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
    dead = await make_dead_letter(store, todo)
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


async def test_stats_count_a_todo_whose_lease_lapsed_with_attempts_left_as_pending(store, clock):
    todo = await new(store, max_attempts=3)
    await todos.claim(store, todo.id, owner="w", lease=60)
    clock.advance(59)
    (held,) = await todos.stats(store)
    assert (held.pending, held.claimed, held.failed, held.dead_letters) == (0, 1, 0, 0)
    clock.advance(1)  # the lease ends now: the next claim takes it over
    (q,) = await todos.stats(store)
    assert (q.pending, q.claimed, q.failed, q.dead_letters) == (1, 0, 0, 0)
    assert q.oldest_pending_age_seconds == 60


async def test_stats_count_a_todo_whose_last_lease_lapsed_as_a_dead_letter(store, clock):
    todo = await new(store, max_attempts=1)
    await todos.claim(store, todo.id, owner="w", lease=60)
    clock.advance(61)
    (q,) = await todos.stats(store)
    assert (q.claimed, q.failed, q.dead_letters) == (0, 1, 1)


# ---------------------------------------------------------------- takeover and fencing


async def _heartbeat(store, todo_id, token):
    return await todos.heartbeat(store, Lease(todo_id, token))


async def _complete(store, todo_id, token):
    return await todos.complete(store, Lease(todo_id, token), result="late")


async def _fail(store, todo_id, token):
    return await todos.fail(store, Lease(todo_id, token), error="late")


async def _release(store, todo_id, token):
    return await todos.release(store, Lease(todo_id, token))


LEASED_VERBS = pytest.mark.parametrize(
    "verb", [_heartbeat, _complete, _fail, _release], ids=["heartbeat", "complete", "fail", "release"]
)


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


# ---------------------------------------------------------------- redrive


async def test_redrive_gives_a_dead_letter_a_fresh_budget(store, clock):
    todo = await new(store, max_attempts=1)
    await make_dead_letter(store, todo)
    clock.advance(10)
    redriven = await todos.redrive(store, todo.id)
    assert (redriven.state, redriven.attempt, redriven.dead_letter) == ("pending", 0, False)
    assert redriven.visible_at == clock.now_ms()
    claimed = await todos.claim_next(store, owner="w")
    assert (claimed.id, claimed.attempt) == (todo.id, 1)


async def _pending(store, todo):
    pass


async def _claimed(store, todo):
    await todos.claim(store, todo.id, owner="w")


async def _done(store, todo):
    claimed = await todos.claim(store, todo.id, owner="w")
    await todos.complete(store, Lease(todo.id, claimed.lease_token))


async def _awaiting_retry(store, todo):
    claimed = await todos.claim(store, todo.id, owner="w")
    await todos.fail(store, Lease(todo.id, claimed.lease_token), error="e")


@pytest.mark.parametrize(
    "into_state",
    [_pending, _claimed, _done, _awaiting_retry],
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
    await make_dead_letter(store, old)
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


async def test_a_key_held_by_a_lapsed_last_attempt_is_free_for_new_work(store, clock) -> None:
    old, _ = await todos.create(store, NewTodo(queue="q", title="old", idempotency_key="k", max_attempts=1))
    await todos.claim_next(store, owner="crashed", lease=60)
    clock.advance(60)  # its only attempt lapsed (at the expiry itself): a dead letter, though nobody claimed since
    new, created = await todos.create(store, NewTodo(queue="q", title="new", idempotency_key="k"))
    assert created and new.id != old.id
    assert (await todos.get(store, old.id)).dead_letter


async def test_stats_reads_without_writing(store, clock, db_path) -> None:
    import sqlite3

    await todos.create(store, NewTodo(queue="q", title="t", max_attempts=1))
    await todos.claim_next(store, owner="crashed", lease=60)
    clock.advance(61)
    (row,) = await todos.stats(store)
    assert (row.claimed, row.failed, row.dead_letters) == (0, 1, 1)
    with sqlite3.connect(db_path) as conn:  # the file still holds the lapsed claim
        assert conn.execute("SELECT state FROM todos").fetchone()[0] == "claimed"


# ---------------------------------------------------------------- fencing, exactly (mutation pass)


@pytest.mark.parametrize("verb", ["heartbeat", "complete", "fail", "release"])
async def test_a_token_presented_for_another_todo_is_refused_and_changes_neither(store, verb):
    a, b = await new(store, title="a"), await new(store, title="b")
    claimed_a = await todos.claim(store, a.id, owner="w")
    claimed_b = await todos.claim(store, b.id, owner="w")
    with pytest.raises(Conflict):
        await getattr(todos, verb)(store, Lease(a.id, claimed_b.lease_token))
    assert (await todos.get(store, a.id)).state == "claimed" and (await todos.get(store, b.id)).state == "claimed"
    assert (await todos.get(store, b.id)).lease_expires_at == claimed_b.lease_expires_at
    await todos.complete(store, Lease(a.id, claimed_a.lease_token))  # each token still works on its own todo


@pytest.mark.parametrize("verb", ["heartbeat", "complete", "fail", "release"])
async def test_a_lease_ends_at_its_expiry_to_the_millisecond(store, clock, verb):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w", lease=60)
    clock.advance(60)  # now == lease_expires_at: the lease is over
    with pytest.raises(Conflict, match="expired|stale"):
        await getattr(todos, verb)(store, Lease.of(claimed))


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


async def test_redrive_sends_back_only_the_dead_letter_it_names(store):
    one, two = await new(store, title="one", max_attempts=1), await new(store, title="two", max_attempts=1)
    await make_dead_letter(store, one)
    await make_dead_letter(store, two)
    await todos.redrive(store, one.id)
    assert (await todos.get(store, one.id)).state == "pending"
    assert (await todos.get(store, two.id)).dead_letter


class NoJitter:
    """A random source whose jitter factor is always 1: the backoff itself."""

    def uniform(self, low: float, high: float) -> float:
        return high


@pytest.mark.parametrize(("attempt", "seconds"), [(1, 30), (2, 60), (5, 480), (6, 900), (12, 900)])
async def test_without_jitter_a_retry_waits_exactly_thirty_seconds_doubling_up_to_fifteen_minutes(
    store, clock, monkeypatch, attempt, seconds
) -> None:
    monkeypatch.setattr(store, "rng", NoJitter())
    todo = await new(store, max_attempts=20)
    claimed = await fail_until_attempt(store, clock, todo.id, attempt)
    failed = (await todos.fail(store, Lease(todo.id, claimed.lease_token), error="again")).todo
    assert failed.visible_at - clock.now_ms() == seconds * 1000


async def test_a_pending_todo_created_now_is_zero_seconds_old(store) -> None:
    await new(store)
    (stats,) = await todos.stats(store)
    assert stats.oldest_pending_age_seconds == 0


async def test_stats_of_a_scope_lists_its_empty_queues_with_zero_counts(store) -> None:
    await new(store, queue="busy")
    answer = await todos.stats(store, queues=["idle", "busy"])
    assert [s.queue for s in answer] == ["busy", "idle"]
    assert answer[1] == QueueStats("idle", 0, 0, 0, 0, 0, None)
