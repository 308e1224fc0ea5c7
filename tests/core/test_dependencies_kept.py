"""What a todo waits for is kept for it (issue 31 §1, found by a hostile review): a finished
dependency outlives purges and prunes while a live todo waits for it, a batch's results stay within
its size budget, a result within the cap is inlined on both backends, a retried create is answered
by its key's holder, a cancel's cascade is in the audit trail and reaches a dependent created while
it runs. Every test runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json
import threading

import anyio
import pytest

from switchboard_local.core import events, retention, settings, todos
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease, dependencies

from support.sql import value

pytestmark = pytest.mark.anyio
DAY = 86_400
WAITING_ON_A_LOCK = ("SELECT count(*) FROM pg_stat_activity"
                     " WHERE datname = current_database() AND wait_event_type = 'Lock'")  # fmt: skip


async def new(store, title="t", queue="q", **fields):
    todo, created = await todos.create(store, NewTodo(queue=queue, title=title, **fields))
    assert created
    return todo


async def finish(store, todo_id, result=None):
    claimed = await todos.claim(store, todo_id, owner="w")
    return (await todos.complete(store, Lease.of(claimed), result=result)).todo


async def dead_letter(store, title="dead", queue="q"):
    a = await new(store, title, queue=queue, max_attempts=1)
    claimed = await todos.claim(store, a.id, owner="w")
    await todos.fail(store, Lease.of(claimed), error="boom")
    return a


# ---------------------------------------------------------------- purges and prunes


async def test_a_purge_keeps_a_dead_letter_a_blocked_todo_waits_for_so_a_redrive_can_still_ready_it(store) -> None:
    dead = await dead_letter(store)
    other = await dead_letter(store, "nobody waits for this one")
    waiting = await new(store, "waiting", queue="s", after=(dead.id,))
    assert await todos.purge(store, queue="q", state="failed", by="ana") == 1
    assert [t.id for t in await todos.list_todos(store, queue="q")] == [dead.id]
    assert other.id not in [t.id for t in await todos.list_todos(store, queue="q")]
    await todos.redrive(store, dead.id, by="ana")
    await finish(store, dead.id)
    assert not (await todos.get(store, waiting.id)).blocked


async def test_a_prune_keeps_a_dead_letter_a_blocked_todo_waits_for(store, clock) -> None:
    dead = await dead_letter(store)
    waiting = await new(store, "waiting", queue="s", after=(dead.id,))
    clock.advance(31 * DAY)
    await retention.prune(store, older_than_days=30)
    assert [d.id for d in (await todos.get(store, waiting.id)).dependencies] == [dead.id]


async def test_a_prune_keeps_a_done_dependencys_result_for_the_todo_still_waiting(store, clock) -> None:
    a = await new(store, "fetch a")
    await finish(store, a.id, {"page": "a"})
    clock.advance(31 * DAY)
    b = await new(store, "fetch b")
    summary = await new(store, "summary", queue="s", after=(a.id, b.id))
    await retention.prune(store, older_than_days=30)
    await finish(store, b.id, {"page": "b"})
    claimed = await todos.claim_next(store, owner="w", queues=["s"])
    assert claimed.id == summary.id
    assert [(d.id, d.result) for d in claimed.dependencies] == [(a.id, {"page": "a"}), (b.id, {"page": "b"})]


async def test_once_nothing_waits_for_it_a_finished_dependency_is_pruned_as_any(store, clock) -> None:
    a = await new(store, "fetch a")
    summary = await new(store, "summary", queue="s", after=(a.id,))
    await finish(store, a.id)
    await finish(store, summary.id)
    clock.advance(31 * DAY)
    assert (await retention.prune(store, older_than_days=30)).todos == 2


async def test_a_purge_of_a_queues_done_todos_keeps_the_inputs_of_todos_waiting_on_other_queues(store) -> None:
    a = await new(store, "a", queue="fetch")
    b = await new(store, "b", queue="fetch")
    summary = await new(store, "summary", queue="summaries", after=(a.id, b.id))
    await finish(store, a.id, "input a")
    assert await todos.purge(store, queue="fetch", state="done", by="ana") == 0
    await finish(store, b.id, "input b")
    claimed = await todos.claim_next(store, owner="w", queues=["summaries"])
    assert claimed.id == summary.id
    assert [d.result for d in claimed.dependencies] == ["input a", "input b"]


# ---------------------------------------------------------------- results carried


async def test_a_batch_claims_size_budget_bounds_the_results_it_inlines_too(store) -> None:
    await settings.set_value(store, settings.MAX_PAYLOAD.name, "4KiB")
    for n in range(5):
        dep = await new(store, f"fetch {n}")
        await finish(store, dep.id, "x" * 3000)
        await new(store, f"use {n}", queue="s", after=(dep.id,))
    budget = 7000
    claimed = await todos.claim_next_many(store, todos.NextClaim("w", ["s"], budget=budget), 5)
    assert len(claimed) == 5  # their payloads (null) weigh 4 bytes each: all five fit
    carried = [d.result is not None for t in claimed for d in t.dependencies]
    omitted = [d.result_omitted for t in claimed for d in t.dependencies]
    assert carried == [True, True, False, False, False] and omitted == [False, False, True, True, True]


async def test_a_dependency_result_within_the_cap_is_inlined_on_both_backends(store) -> None:
    # PostgreSQL prints a jsonb result with a space after each ',' and ':': it is measured compact,
    # as complete accepted it.
    await settings.set_value(store, settings.MAX_PAYLOAD.name, "1KiB")
    a = await new(store, "a")
    waiting = await new(store, "waiting", queue="s", after=(a.id,))
    result = [1] * 450  # 901 bytes of JSON, under the 1,024-byte cap
    await finish(store, a.id, result)
    claimed = await todos.claim_next(store, owner="w", queues=["s"])
    assert claimed.id == waiting.id
    assert claimed.to_dict()["dependencies"] == [{"id": a.id, "state": "done", "result": result}]


# ---------------------------------------------------------------- idempotency


async def test_a_retried_create_is_answered_by_its_keys_holder_whatever_became_of_what_it_waits_for(store) -> None:
    build = await new(store, "build", idempotency_key="build-42")
    review = await new(store, "review", queue="reviews", idempotency_key="review-42", after_keys=("build-42",))
    other = await new(store, "other", idempotency_key="other-7")
    pruned_next = await new(store, "lint", queue="lints", idempotency_key="lint-42", after=(other.id,))
    await finish(store, build.id)  # its key is no longer held
    again, created = await todos.create(
        store, NewTodo(queue="reviews", title="review", idempotency_key="review-42", after_keys=("build-42",)))
    assert (again.id, created) == (review.id, False)
    again, created = await todos.create(
        store, NewTodo(queue="lints", title="lint", idempotency_key="lint-42", after=(other.id + 100,)))
    assert (again.id, created) == (pruned_next.id, False)  # an id that no longer exists: answered all the same


# ---------------------------------------------------------------- cancel cascades


async def test_a_cancel_cascade_names_every_todo_it_cancelled_in_the_audit_trail(store) -> None:
    a = await new(store, "a")
    b = await new(store, "b", after=(a.id,))
    c = await new(store, "c", after=(b.id,))
    d, e = await new(store, "d", queue="bulk"), await new(store, "e", queue="later")
    f = await new(store, "f", queue="later", after=(d.id,))
    await todos.cancel(store, a.id, by="ana", reason="wrong repo")
    await todos.cancel_many(store, queue="bulk", by="ana")
    trail = [json.loads(x.body) for x in await events.list_events(store, source="operator") if x.type == "todo.cancel"]
    assert [(t["subject"], t.get("ids"), t.get("cascaded")) for t in trail] == [
        (a.id, None, [b.id, c.id]), ("bulk", [d.id], [f.id])]  # fmt: skip
    assert (await todos.get(store, e.id)).state == "pending"


async def test_a_dependent_created_while_a_cascade_runs_is_cancelled_too(store, backend, db_path, monkeypatch) -> None:
    # PostgreSQL: C's create holds B (FOR SHARE) until it commits; the cascade from A waits for B's
    # row, then must see C: a level at a time, each a statement of its own. (SQLite's one writer
    # makes the two one after the other: the same result, nothing to race.)
    a = await new(store, "a")
    b = await new(store, "b", after=(a.id,))
    if backend == "sqlite":  # one writer: the create commits before the cancel begins, or after it ends
        c = await new(store, "c", after=(b.id,))
        await todos.cancel(store, a.id, by="ana")
        assert [(await todos.get(store, x.id)).state for x in (a, b, c)] == ["cancelled"] * 3
        return
    inserted, go_on = threading.Event(), threading.Event()
    add = dependencies.add

    def held_add(tx, todo_id, waits):  # the create of C, held open once its rows are written
        add(tx, todo_id, waits)
        if b.id in waits.ids:
            inserted.set()
            go_on.wait(10)

    monkeypatch.setattr(dependencies, "add", held_add)
    made: list = []

    async def create_c() -> None:
        made.append(await new(store, "c", after=(b.id,)))

    async def cancel_a() -> None:
        await todos.cancel(store, a.id, by="ana")

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(create_c)
        await anyio.to_thread.run_sync(inserted.wait, 10)
        tasks.start_soon(cancel_a)
        with anyio.fail_after(10):  # the cascade waits on B's lock, before C's create commits
            while value(db_path, WAITING_ON_A_LOCK) < 1:
                await anyio.sleep(0.01)
        go_on.set()
    (c,) = made
    assert [(await todos.get(store, x.id)).state for x in (a, b, c)] == ["cancelled"] * 3
