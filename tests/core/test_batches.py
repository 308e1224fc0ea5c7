"""Batch verbs, as SQS has them: many single verbs in one transaction, each item
answered on its own (DESIGN §2).

1. claim_next_many (and claim_next with max): claim order, one lease token
   per todo, max bounds, lapse takeover, scope.
2. complete_many and fail_many: per-item outcomes with the single verbs'
   refusals; a refused item changes nothing, the others commit; argument
   checks per item.
3. Fused: finishing a batch and claiming the next one in the same transaction.
4. One transaction: a batch is one commit; the savepoint of the store's
   transaction undoes a refused part alone.
"""

from __future__ import annotations

import pytest

from switchboard_local.core import queues as queues_module
from switchboard_local.core import todos, watch
from switchboard_local.core.errors import Conflict, InvalidArgument, NotFound, StoreFault
from switchboard_local.core.store.interface import Store
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.store.shared import is_url
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Completion, Failure, Lease, NextClaim

pytestmark = pytest.mark.anyio


async def new(store, title="t", queue="q", **fields):
    todo, created = await todos.create(store, NewTodo(queue=queue, title=title, **fields))
    assert created
    return todo


async def commits(store: Store) -> int:
    return (await store.data_version())[1]


async def snapshot(store, ids):
    return [await todos.get(store, i) for i in ids]


# ================================================================ 1. claiming many


async def test_a_batch_claim_takes_todos_in_claim_next_order(store, clock):
    low = await new(store, "low", priority=0)
    clock.advance(1)
    high_late = await new(store, "high late", priority=5)
    clock.advance(1)
    low_late = await new(store, "low late", priority=0)
    high_early = await new(store, "high early", priority=5)  # same time as low_late, later id
    claimed = await todos.claim_next_many(store, NextClaim("w"), 10)
    assert [t.id for t in claimed] == [high_late.id, high_early.id, low.id, low_late.id]


async def test_a_batch_claim_orders_as_the_same_number_of_single_claims_would(db_path, other_db_path, clock):
    """The same todos drained by claim_next one by one and by one claim_next_many
    come out in the same order."""
    import random

    twin = other_db_path
    start = clock.now_ms()
    for database in (db_path, twin):  # the same todos, made at the same times, in both
        clock.advance((start - clock.now_ms()) / 1000)
        async with await open_store(database, clock=clock, rng=random.Random(0)) as store:
            for i in range(12):
                await new(store, f"t{i}", priority=i % 3)
                clock.advance(0.5 if i % 2 else 0)
    async with await open_store(db_path, clock=clock, rng=random.Random(0)) as store:
        many = [t.id for t in await todos.claim_next_many(store, NextClaim("w"), 12)]
    async with await open_store(twin, clock=clock, rng=random.Random(0)) as store:
        single = [(await todos.claim_next(store, owner="w")).id for _ in range(12)]
    assert many == single


@pytest.mark.parametrize("queues", [None, ["b"], ["a", "c"]], ids=["any queue", "one queue", "several queues"])
async def test_a_batch_claim_takes_what_single_claims_in_a_row_would_in_each_form(store, clock, queues):
    """One statement claims the batch (claim_next): the same todos, in the same
    order, as ``max`` claim_next calls in a row, with queues named or not and a
    paused queue left alone."""
    for i in range(18):
        await new(store, f"t{i}", queue="abcd"[i % 4], priority=(i * 7) % 3)
        clock.advance(0.25 if i % 2 else 0)
    await queues_module.pause(store, "d", by="op")
    many = await todos.claim_next_many(store, NextClaim("w", queues), 5)
    for todo in many:
        await todos.release(store, Lease.of(todo))  # pending again, visible now, in the same place in the order
    single = [await todos.claim_next(store, owner="w", queues=queues) for _ in range(5)]
    assert [t.id for t in many] == [t.id for t in single if t is not None]
    assert len(many) == 5 and all(t.queue != "d" for t in many)


async def test_a_batch_claim_naming_a_queue_twice_claims_as_many_as_single_claims(store):
    for i in range(10):
        await new(store, f"t{i}", queue="a")
    await new(store, "elsewhere", queue="b")
    many = await todos.claim_next_many(store, NextClaim("w", ["a", "a"]), 5)
    assert len({t.id for t in many}) == 5


async def test_each_todo_of_a_batch_claim_has_its_own_lease_token_and_attempt(store):
    made = [await new(store, f"t{i}") for i in range(5)]
    claimed = await todos.claim_next_many(store, NextClaim("w", lease=60), 5)
    assert sorted(t.id for t in claimed) == sorted(t.id for t in made)
    tokens = [t.lease_token for t in claimed]
    assert all(tokens) and len(set(tokens)) == 5
    assert all((t.state, t.owner, t.attempt) == ("claimed", "w", 1) for t in claimed)
    for todo in claimed:  # each token fences its own todo, and only it
        history = (await todos.get(store, todo.id)).attempts
        assert [(a.owner, a.outcome) for a in history] == [("w", None)]
    other = claimed[1]
    with pytest.raises(Conflict, match="does not match"):
        await todos.complete(store, Lease(claimed[0].id, other.lease_token))
    assert (await todos.complete(store, Lease.of(claimed[0]))).todo.state == "done"


async def test_a_batch_claim_takes_what_there_is_and_nothing_is_not_an_error(store):
    await new(store)
    await new(store)
    assert len(await todos.claim_next_many(store, NextClaim("w"), 10)) == 2
    nothing = await todos.claim_next_many(store, NextClaim("w"), 10)
    assert (nothing, nothing.over_budget) == ([], 0)


async def test_a_batch_claim_holds_its_todos_for_the_lease_it_asks_for(store, clock):
    for i in range(4):
        await new(store, f"t{i}")
    asked = await todos.claim_next_many(store, NextClaim("w", lease=60), 2)
    default = await todos.claim_next_many(store, NextClaim("w"), 2)
    assert [t.lease_expires_at for t in asked] == [clock.now_ms() + 60_000] * 2
    assert [t.lease_expires_at for t in default] == [clock.now_ms() + 300_000] * 2  # five minutes


async def test_a_batch_claims_budget_is_a_number_of_bytes_from_zero_up(store):
    todo = await new(store, payload="x" * 100)
    for budget in (-1, 2**63):
        with pytest.raises(InvalidArgument) as refused:
            await todos.claim_next_many(store, NextClaim("w", budget=budget), 5)
        assert refused.value.message == f"budget must be between 0 and {2**63 - 1}, got {budget}"
    assert (await todos.get(store, todo.id)).state == "pending"
    claimed = await todos.claim_next_many(store, NextClaim("w", budget=0), 5)
    assert ([t.id for t in claimed], claimed.over_budget) == ([todo.id], 0)  # the first is taken, however big


@pytest.mark.parametrize("queues", [["q"], ["q", "other"]], ids=["one queue", "several queues"])
async def test_a_batch_claim_of_two_from_named_queues_takes_two(store, queues):
    for i in range(3):
        await new(store, f"t{i}")
    assert len(await todos.claim_next_many(store, NextClaim("w", queues), 2)) == 2


async def test_a_batch_claim_takes_no_more_than_max(store):
    for i in range(5):
        await new(store, f"t{i}")
    assert len(await todos.claim_next_many(store, NextClaim("w"), 3)) == 3
    assert len(await todos.claim_next_many(store, NextClaim("w"), 3)) == 2


@pytest.mark.parametrize("max", [0, -1, 101, 1.5, "3", True, None])
async def test_max_must_be_between_1_and_100(store, max):
    await new(store)
    with pytest.raises(InvalidArgument, match="max must be"):
        await todos.claim_next_many(store, NextClaim("w"), max)
    assert (await todos.get(store, 1)).state == "pending"


async def test_max_at_its_bounds_is_taken(store):
    for i in range(101):
        await new(store, f"t{i}")
    assert len(await todos.claim_next_many(store, NextClaim("a"), 1)) == 1
    assert len(await todos.claim_next_many(store, NextClaim("b"), 100)) == 100


async def test_claim_next_with_max_answers_a_list_and_without_it_one_todo(store):
    for i in range(3):
        await new(store, f"t{i}")
    one = await todos.claim_next(store, owner="w")
    assert one is not None and one.lease_token
    listed = await todos.claim_next(store, owner="w", max=5)
    assert isinstance(listed, list) and len(listed) == 2
    assert await todos.claim_next(store, owner="w", max=5) == []
    assert await todos.claim_next(store, owner="w") is None


async def test_claim_next_with_max_keeps_to_its_queues_lease_and_agent(store, clock):
    mine = await new(store, "the agent's", queue="a", assignee="bot")
    await new(store, "elsewhere", queue="b")
    listed = await todos.claim_next(store, owner="bot-1", queues=["a"], lease=60, agent="bot", max=5)
    assert [(t.id, t.owner, t.lease_expires_at) for t in listed] == [(mine.id, "bot-1", clock.now_ms() + 60_000)]


async def test_a_batch_claim_takes_over_lapsed_leases_with_the_next_attempt(store, clock):
    first = await new(store, "first")
    second = await new(store, "second")
    held = await todos.claim(store, first.id, owner="crashed", lease=60)
    assert [t.id for t in await todos.claim_next_many(store, NextClaim("b"), 10)] == [second.id]
    clock.advance(60)
    taken = await todos.claim_next_many(store, NextClaim("b"), 10)
    assert [(t.id, t.owner, t.attempt) for t in taken] == [(first.id, "b", 2)]
    with pytest.raises(Conflict):
        await todos.complete(store, Lease.of(held))
    history = (await todos.get(store, first.id)).attempts
    assert [(a.owner, a.outcome) for a in history] == [("crashed", "lease_expired"), ("b", None)]


async def test_a_batch_claim_keeps_to_its_queues_assignees_and_skips_paused_queues(store):
    from switchboard_local.core import queues as queue_verbs

    mine = await new(store, "mine", queue="a")
    await new(store, "elsewhere", queue="b")
    await new(store, "someone else's", queue="a", assignee="other")
    await new(store, "paused", queue="c")
    await queue_verbs.pause(store, "c", by="op")
    claimed = await todos.claim_next_many(store, NextClaim("w", queues=["a", "c"]), 10)
    assert [t.id for t in claimed] == [mine.id]


async def test_the_long_poll_with_max_answers_a_list_as_soon_as_one_is_claimable(store):
    await new(store)
    await new(store)
    async with watch.following(store) as changes:
        got = await todos.claim_next_waiting(store, NextClaim("w"), wait=5, changes=changes, max=10)
        assert len(got) == 2
        assert await todos.claim_next_waiting(store, NextClaim("w"), wait=0, changes=changes, max=10) == []
        with pytest.raises(InvalidArgument, match="max must be"):
            await todos.claim_next_waiting(store, NextClaim("w"), wait=0, changes=changes, max=0)


@pytest.mark.parametrize("limited", [False, True], ids=["", "limited queue"])
@pytest.mark.parametrize("queues", [None, ["q"], ["q", "other"]], ids=["any queue", "one queue", "several queues"])
async def test_a_batch_claim_with_a_budget_takes_todos_in_order_while_their_sizes_fit(store, queues, limited):
    """A payload's size is its JSON's bytes ('"xx…"': two more than the string);
    what does not fit is left pending, unclaimed, and counted in over_budget.
    A limited queue with room (claimed its own way) keeps to the budget alike."""
    if limited:
        await queues_module.set_limit(store, "q", by="op", max_claimed=100)
    made = [await new(store, f"t{i}", payload="x" * 98) for i in range(5)]  # 100 bytes each
    claimed = await todos.claim_next_many(store, NextClaim("w", queues, budget=300), 5)
    assert [t.id for t in claimed] == [t.id for t in made[:3]]
    assert claimed.over_budget == 2
    assert [(await todos.get(store, t.id)).state for t in made] == ["claimed"] * 3 + ["pending"] * 2
    rest = await todos.claim_next_many(store, NextClaim("w", queues, budget=300), 5)
    assert ([t.id for t in rest], rest.over_budget) == ([t.id for t in made[3:]], 0)


@pytest.mark.parametrize("limited", [False, True], ids=["", "limited queue"])
async def test_a_batch_claim_always_takes_its_first_todo_however_big(store, limited):
    if limited:
        await queues_module.set_limit(store, "q", by="op", max_claimed=100)
    big = await new(store, "big", payload="x" * 1000)
    small = await new(store, "small")
    claimed = await todos.claim_next_many(store, NextClaim("w", budget=10), 5)
    assert ([t.id for t in claimed], claimed.over_budget) == ([big.id], 1)
    assert (await todos.get(store, small.id)).state == "pending"


@pytest.mark.parametrize("limited", [False, True], ids=["", "limited queue"])
async def test_a_batch_claim_counts_an_error_text_six_times_as_json_may_escape_each_byte(store, clock, limited):
    if limited:
        await queues_module.set_limit(store, "q", by="op", max_claimed=100)
    failed = []
    for i in range(2):
        todo = await new(store, f"t{i}")  # payload null: 4 bytes
        claimed = await todos.claim(store, todo.id, owner="w")
        failed.append((await todos.fail(store, Lease.of(claimed), error="\x01" * 100)).todo)
    clock.advance(3600)  # past the retries' backoff
    one = await todos.claim_next_many(store, NextClaim("w", budget=4 + 600 + 4 + 599), 5)
    assert ([t.id for t in one], one.over_budget) == ([failed[0].id], 1)
    await todos.release(store, Lease.of(one[0]))  # its error stays: both wait again
    two = await todos.claim_next_many(store, NextClaim("w", budget=2 * (4 + 600)), 5)
    assert ([t.id for t in two], two.over_budget) == ([t.id for t in failed], 0)  # exactly the budget: both fit


async def test_a_batch_claim_without_a_budget_takes_up_to_max_whatever_the_sizes(store):
    for i in range(3):
        await new(store, f"t{i}", payload="x" * 100_000)
    claimed = await todos.claim_next_many(store, NextClaim("w"), 5)
    assert (len(claimed), claimed.over_budget) == (3, 0)


async def test_a_batch_claim_is_one_commit(store):
    for i in range(10):
        await new(store, f"t{i}")
    before = await commits(store)
    await todos.claim_next_many(store, NextClaim("w"), 10)
    assert await commits(store) == before + 1


# ================================================================ 2. finishing many


async def test_complete_many_completes_each_item_with_its_result(store):
    for i in range(3):
        await new(store, f"t{i}")
    claimed = await todos.claim_next_many(store, NextClaim("w"), 3)
    outcomes = await todos.complete_many(store, [Completion(Lease.of(t), {"n": t.id}) for t in claimed])
    assert [o.todo_id for o in outcomes] == [t.id for t in claimed]
    assert all(o.ok and o.error is None for o in outcomes)
    assert [(o.todo.state, o.todo.result) for o in outcomes] == [("done", {"n": t.id}) for t in claimed]
    assert (outcomes.next, outcomes.next.over_budget, outcomes.refused) == ([], 0, [])  # no then: nothing claimed
    for t in claimed:
        history = (await todos.get(store, t.id)).attempts
        assert [a.outcome for a in history] == ["completed"]


async def test_a_stale_token_refuses_only_its_item(store, clock):
    a, b, c = [await new(store, name) for name in "abc"]
    ca, cc = [await todos.claim(store, t.id, owner="w", lease=600) for t in (a, c)]
    cb = await todos.claim(store, b.id, owner="w", lease=60)
    clock.advance(61)
    retaken = await todos.claim(store, b.id, owner="other")  # b's lease lapsed and b was taken over
    before_b = await todos.get(store, b.id)
    outcomes = await todos.complete_many(store, [Completion(Lease.of(t), "r") for t in (ca, cb, cc)])
    assert [o.ok for o in outcomes] == [True, False, True]
    refused = outcomes[1]
    assert (refused.todo_id, refused.todo) == (b.id, None)
    assert isinstance(refused.error, Conflict)
    with pytest.raises(Conflict) as single:
        await todos.complete(store, Lease.of(cb))
    assert refused.error.message == single.value.message  # the single verb's own words
    after_b = await todos.get(store, b.id)
    assert after_b == before_b and after_b.attempts == before_b.attempts
    assert (await todos.complete(store, Lease.of(retaken))).todo.state == "done"
    assert [o.todo.state for o in outcomes if o.ok] == ["done", "done"]


async def test_each_refusal_of_a_batch_is_the_single_verbs(store):
    pending = await new(store, "pending")
    claimed_todo = await new(store, "claimed")
    claimed = await todos.claim(store, claimed_todo.id, owner="w")
    released = await new(store, "released")
    r = await todos.claim(store, released.id, owner="w")
    await todos.release(store, Lease.of(r))
    items = [
        Completion(Lease(4242, "x")),  # no such todo
        Completion(Lease(pending.id, "x")),  # not claimed
        Completion(Lease.of(r)),  # released: its token is stale
        Completion(Lease(claimed.id, "")),  # no token at all
        Completion(Lease.of(claimed), result=float("nan")),  # a result JSON cannot hold
        Completion(Lease.of(claimed)),
    ]
    outcomes = await todos.complete_many(store, items)
    kinds = [type(o.error).__name__ if o.error else "ok" for o in outcomes]
    assert kinds == ["NotFound", "Conflict", "Conflict", "Conflict", "InvalidArgument", "ok"]
    assert "does not exist" in outcomes[0].error.message
    assert "not claimed" in outcomes[1].error.message
    assert "lease token is required" in outcomes[3].error.message
    assert outcomes[5].todo.state == "done"


async def test_a_todo_twice_in_one_batch_is_finished_once(store):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    outcomes = await todos.complete_many(store, [Completion(Lease.of(claimed), 1), Completion(Lease.of(claimed), 2)])
    assert [o.ok for o in outcomes] == [True, False]
    assert isinstance(outcomes[1].error, Conflict)
    assert (await todos.get(store, todo.id)).result == 1


async def test_a_todo_twice_in_one_batch_first_with_a_stale_token_is_finished_by_the_second(store):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    stale = Lease(todo.id, "not the token")
    outcomes = await todos.complete_many(store, [Completion(stale, 1), Completion(Lease.of(claimed), 2)])
    assert [(o.todo_id, o.ok) for o in outcomes] == [(todo.id, False), (todo.id, True)]
    assert (await todos.get(store, todo.id)).result == 2


async def test_an_id_past_the_databases_range_refuses_only_its_item(store):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    outcomes = await todos.complete_many(store, [Completion(Lease(2**63, "x"), 1), Completion(Lease.of(claimed), 2)])
    assert [o.ok for o in outcomes] == [False, True]
    assert isinstance(outcomes[0].error, NotFound)
    assert (await todos.get(store, todo.id)).result == 2


async def test_a_result_the_database_cannot_hold_refuses_only_its_item(store, db_path):
    """PostgreSQL's JSON holds no NUL character (SQLite's does: there both complete)."""
    first, second = await new(store), await new(store)
    a = await todos.claim(store, first.id, owner="w")
    b = await todos.claim(store, second.id, owner="w")
    outcomes = await todos.complete_many(store, [Completion(Lease.of(a), "nul \u0000 here"), Completion(Lease.of(b), 2)])
    assert outcomes[1].ok and (await todos.get(store, second.id)).result == 2
    if is_url(db_path):
        assert isinstance(outcomes[0].error, InvalidArgument)
        assert (await todos.get(store, first.id)).state == "claimed"
    else:
        assert outcomes[0].ok


async def test_a_batch_with_every_item_refused_changes_nothing(store, db_path):
    from support.sql import rows

    todo = await new(store)
    await todos.claim(store, todo.id, owner="w")
    dump = rows(db_path, "SELECT * FROM todos"), rows(db_path, "SELECT * FROM attempts")
    outcomes = await todos.complete_many(store, [Completion(Lease(todo.id, "wrong")), Completion(Lease(99, "x"))])
    assert not any(o.ok for o in outcomes) and len(outcomes.refused) == 2
    assert (rows(db_path, "SELECT * FROM todos"), rows(db_path, "SELECT * FROM attempts")) == dump


async def test_fail_many_fails_each_item_as_fail_would(store):
    retry = await new(store, "retry", max_attempts=3)
    last = await new(store, "last", max_attempts=1)
    stale = await new(store, "stale")
    cr, cl = [await todos.claim(store, t.id, owner="w") for t in (retry, last)]
    outcomes = await todos.fail_many(
        store, [Failure(Lease.of(cr), "flaky"), Failure(Lease(stale.id, "x"), "?"), Failure(Lease.of(cl), "broken")]
    )
    assert [(o.todo_id, o.ok) for o in outcomes] == [(retry.id, True), (stale.id, False), (last.id, True)]
    assert isinstance(outcomes[1].error, Conflict) and "not claimed" in outcomes[1].error.message
    again, dead = outcomes[0].todo, outcomes[2].todo
    assert (again.state, again.dead_letter, again.last_error) == ("pending", False, "flaky")
    assert again.visible_at is not None
    assert (dead.state, dead.dead_letter, dead.last_error) == ("failed", True, "broken")
    assert (await todos.get(store, stale.id)).state == "pending"


async def test_fail_many_refuses_an_error_that_is_not_text_for_that_item_only(store):
    a, b = await new(store, "a"), await new(store, "b")
    ca, cb = [await todos.claim(store, t.id, owner="w") for t in (a, b)]
    outcomes = await todos.fail_many(store, [Failure(Lease.of(ca), 42), Failure(Lease.of(cb), "ok")])  # type: ignore[arg-type]
    assert isinstance(outcomes[0].error, InvalidArgument) and "error must be a string" in outcomes[0].error.message
    assert outcomes[1].todo.last_error == "ok"
    assert (await todos.get(store, a.id)).state == "claimed"


async def test_an_item_out_of_the_lease_scope_is_answered_like_an_unknown_one(store):
    inside, outside = await new(store, "in", queue="mine"), await new(store, "out", queue="theirs")
    ci, co = [await todos.claim(store, t.id, owner="w") for t in (inside, outside)]
    scope = ["mine"]
    outcomes = await todos.complete_many(
        store, [Completion(Lease(ci.id, ci.lease_token, scope)), Completion(Lease(co.id, co.lease_token, scope))]
    )
    assert outcomes[0].ok
    assert isinstance(outcomes[1].error, NotFound) and "does not exist" in outcomes[1].error.message
    assert (await todos.get(store, outside.id)).state == "claimed"


async def test_a_result_json_cannot_hold_is_refused_in_completes_words_and_its_todo_stays_claimed(store):
    a, b = await new(store, "a"), await new(store, "b")
    ca, cb = [await todos.claim(store, t.id, owner="w") for t in (a, b)]
    items = [Completion(Lease.of(ca), float("nan")), Completion(Lease.of(cb), "fine")]
    outcomes = await todos.complete_many(store, items)
    with pytest.raises(InvalidArgument) as single:
        await todos.complete(store, Lease.of(ca), result=float("nan"))
    assert (outcomes[0].todo_id, outcomes[0].todo, outcomes[0].error.message) == (a.id, None, single.value.message)
    assert outcomes[1].ok and outcomes[1].todo.result == "fine"
    assert (await todos.get(store, a.id)).state == "claimed"


async def test_a_result_over_the_payload_cap_refuses_that_item_only(store):
    from switchboard_local.core import settings

    await settings.set_value(store, "limits.max_payload", "1KiB")
    a, b = await new(store, "a"), await new(store, "b")
    ca, cb = [await todos.claim(store, t.id, owner="w") for t in (a, b)]
    outcomes = await todos.complete_many(store, [Completion(Lease.of(ca), "x" * 2000), Completion(Lease.of(cb), "small")])
    assert isinstance(outcomes[0].error, InvalidArgument)
    assert outcomes[1].ok
    assert (await todos.get(store, a.id)).state == "claimed"


@pytest.mark.parametrize(
    "items, message",
    [
        ([], "items must hold between 1 and 100 items, got 0"),
        ("abc", "items must be a list"),
        ([Failure(Lease(1, "x"))], "items[0] must be a Completion"),
    ],
    ids=["empty", "a string", "the wrong kind"],
)
async def test_complete_many_refuses_a_malformed_list_whole(store, items, message):
    with pytest.raises(InvalidArgument) as refused:
        await todos.complete_many(store, items)
    assert refused.value.message == message


async def test_a_batch_holds_at_most_100_items(store):
    with pytest.raises(InvalidArgument, match="between 1 and 100 items, got 101"):
        await todos.fail_many(store, [Failure(Lease(1, "x"))] * 101)
    outcomes = await todos.fail_many(store, [Failure(Lease(1, "x"))] * 100)
    assert len(outcomes) == 100 and all(isinstance(o.error, NotFound) for o in outcomes)


async def test_a_finished_batch_is_one_commit(store):
    for i in range(10):
        await new(store, f"t{i}")
    claimed = await todos.claim_next_many(store, NextClaim("w"), 10)
    before = await commits(store)
    outcomes = await todos.complete_many(store, [Completion(Lease.of(t)) for t in claimed])
    assert all(o.ok for o in outcomes)
    assert await commits(store) == before + 1


async def test_outcomes_read_as_json(store):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    outcomes = await todos.complete_many(store, [Completion(Lease.of(claimed), 7), Completion(Lease(99, "x"))])
    ok, refused = [o.to_dict() for o in outcomes]
    assert (ok["id"], ok["ok"], ok["todo"]["state"], ok["todo"]["result"]) == (todo.id, True, "done", 7)
    assert refused == {"id": 99, "ok": False, "error": {"code": "not_found", "message": "todo 99 does not exist"}}


# ================================================================ 3. fused: finish a batch, claim the next


async def test_complete_many_then_claims_the_next_batch_in_the_same_commit(store):
    for i in range(6):
        await new(store, f"t{i}")
    first = await todos.claim_next_many(store, NextClaim("w"), 3)
    before = await commits(store)
    outcomes = await todos.complete_many(store, [Completion(Lease.of(t)) for t in first], then=NextClaim("w"))
    assert await commits(store) == before + 1
    assert all(o.ok for o in outcomes)
    assert len(outcomes.next) == 3  # as many as were finished, by default
    assert {t.id for t in outcomes.next}.isdisjoint(t.id for t in first)
    assert len({t.lease_token for t in outcomes.next}) == 3
    assert all(t.state == "claimed" and t.lease_token for t in outcomes.next)


async def test_the_fused_claim_takes_max_and_sees_the_finishes(store):
    retry = await new(store, "retry", priority=9, max_attempts=3)
    for i in range(4):
        await new(store, f"t{i}")
    claimed = await todos.claim(store, retry.id, owner="w")
    outcomes = await todos.fail_many(store, [Failure(Lease.of(claimed), "again")], then=NextClaim("w"), max=10)
    assert outcomes[0].todo.state == "pending"
    assert retry.id not in [t.id for t in outcomes.next]  # its backoff holds it back
    assert len(outcomes.next) == 4


async def test_the_fused_claim_still_claims_when_an_item_is_refused(store):
    await new(store)
    outcomes = await todos.complete_many(store, [Completion(Lease(99, "x"))], then=NextClaim("w"), max=5)
    assert isinstance(outcomes[0].error, NotFound)
    assert len(outcomes.next) == 1


async def test_the_fused_claim_keeps_to_the_budget_of_its_next_claim(store):
    first = await new(store, "first")
    rest = [await new(store, f"t{i}", payload="x" * 98) for i in range(3)]
    claimed = await todos.claim(store, first.id, owner="w")
    outcomes = await todos.complete_many(store, [Completion(Lease.of(claimed))], then=NextClaim("w", budget=250), max=3)
    assert ([t.id for t in outcomes.next], outcomes.next.over_budget) == ([rest[0].id, rest[1].id], 1)
    assert (await todos.get(store, rest[2].id)).state == "pending"


async def test_max_goes_with_then_and_within_its_bounds(store):
    with pytest.raises(InvalidArgument) as alone:
        await todos.complete_many(store, [Completion(Lease(1, "x"))], max=3)
    assert alone.value.message == "max goes with then (the next claim)"
    with pytest.raises(InvalidArgument, match="max must be between 1 and 100"):
        await todos.complete_many(store, [Completion(Lease(1, "x"))], then=NextClaim("w"), max=101)


# ================================================================ 4. the savepoint underneath


async def test_a_savepoint_undoes_its_part_alone_and_the_rest_commits(store, row_count):
    def body(tx):
        todos.insert(tx, NewTodo(queue="q", title="kept"), now=store.clock.now_ms())
        tx.memo["note"] = "kept"
        with pytest.raises(Conflict):
            with tx.savepoint():
                todos.insert(tx, NewTodo(queue="q", title="undone"), now=store.clock.now_ms())
                tx.memo["note"] = "undone"
                raise Conflict("refused")
        with tx.savepoint():  # one after another, and one inside another
            with tx.savepoint():
                todos.insert(tx, NewTodo(queue="q", title="nested"), now=store.clock.now_ms())
        return tx.memo["note"]

    assert await store.write(body) == "kept"
    assert [t.title for t in await todos.list_todos(store)] == ["nested", "kept"]


async def test_a_store_fault_inside_a_batch_commits_nothing_of_it(store):
    """A refusal is the item's; the database failing is the batch's."""
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")

    def fault(tx):
        raise StoreFault("the disk said no")

    items = [(Lease.of(claimed), todos.lifecycle.completing(store, Lease.of(claimed), "null")), (Lease(2, "x"), fault)]
    with pytest.raises(StoreFault):
        await todos.batches._finish_many(store, items, None, None)
    assert (await todos.get(store, todo.id)).state == "claimed"
