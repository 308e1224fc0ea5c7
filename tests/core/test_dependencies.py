"""Work that waits for work (issue 31 §1): a todo that waits for others is blocked until they are
done, readied by the commit that completes the last of them, cancelled with them, and claimed
with their results. Every test runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from switchboard_local.core import settings, todos
from switchboard_local.core.errors import Conflict, InvalidArgument, NotFound
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.todo_model import MAX_DEPENDENCIES, NewTodo
from switchboard_local.core.todos import Completion, Lease

from support.sql import count, pg_connection

pytestmark = pytest.mark.anyio

DATA = Path(__file__).parent.parent / "data"


async def new(store, title="t", queue="q", **fields):
    todo, created = await todos.create(store, NewTodo(queue=queue, title=title, **fields))
    assert created
    return todo


async def finish(store, todo_id, result=None):
    claimed = await todos.claim(store, todo_id, owner="w")
    return (await todos.complete(store, Lease.of(claimed), result=result)).todo


# ---------------------------------------------------------------- blocked


async def test_a_todo_that_waits_for_an_unfinished_todo_is_blocked_and_never_claimed(store) -> None:
    first = await new(store, "build")
    review = await new(store, "review", queue="reviews", after=(first.id,))
    assert (review.state, review.blocked, review.blocked_by, review.waits_for) == ("pending", True, 1, 1)
    assert review.visible_at is None
    assert await todos.claim_next(store, owner="w", queues=["reviews"]) is None
    assert await todos.claim_next(store, owner="w", queues=["reviews"], max=10) == []
    with pytest.raises(Conflict, match=f"todo {review.id} is blocked: it waits for 1 todo not done yet"):
        await todos.claim(store, review.id, owner="w")


async def test_completing_the_last_dependency_readies_the_todo_in_the_same_commit(store, clock) -> None:
    a, b = await new(store, "a"), await new(store, "b")
    summary = await new(store, "summary", queue="s", after=(a.id, b.id))
    await finish(store, a.id)
    still = await todos.get(store, summary.id)
    assert (still.blocked, still.blocked_by) == (True, 1)
    clock.advance(5)
    await finish(store, b.id)
    ready = await todos.get(store, summary.id)
    assert (ready.blocked, ready.blocked_by, ready.visible_at) == (False, 0, clock.now_ms())
    assert (await todos.claim_next(store, owner="w", queues=["s"])).id == summary.id


async def test_a_completion_readies_exactly_the_dependents_it_was_the_last_one_of(store) -> None:
    a, b = await new(store, "a"), await new(store, "b")
    only_a = await new(store, "only a", after=(a.id,))
    a_and_b = await new(store, "a and b", after=(a.id, b.id))
    only_b = await new(store, "only b", after=(b.id,))
    await finish(store, a.id)
    blocked = {t.id: t.blocked for t in [await todos.get(store, x.id) for x in (only_a, a_and_b, only_b)]}
    assert blocked == {only_a.id: False, a_and_b.id: True, only_b.id: True}


async def test_a_batch_completion_readies_dependents_as_single_completions_do(store) -> None:
    a, b = await new(store, "a"), await new(store, "b")
    after_both = await new(store, "after both", after=(a.id, b.id))
    claimed = await todos.claim_next(store, owner="w", max=2)
    outcomes = await todos.complete_many(store, [Completion(Lease.of(t), None) for t in claimed])
    assert all(o.ok for o in outcomes)
    assert not (await todos.get(store, after_both.id)).blocked


async def test_a_todo_waiting_only_for_done_todos_is_ready_at_once(store) -> None:
    a = await new(store, "a")
    await finish(store, a.id)
    later = await new(store, "later", after=(a.id,))
    assert (later.blocked, later.blocked_by, later.waits_for, later.visible_at) == (False, 0, 1, later.created_at)


async def test_a_dead_letter_keeps_its_dependents_blocked_until_redriven_and_done(store) -> None:
    a = await new(store, "a", max_attempts=1)
    waiting = await new(store, "waiting", after=(a.id,))
    claimed = await todos.claim(store, a.id, owner="w")
    await todos.fail(store, Lease.of(claimed), error="boom")
    assert (await todos.get(store, a.id)).dead_letter
    assert (await todos.get(store, waiting.id)).blocked
    await todos.redrive(store, a.id)
    assert (await todos.get(store, waiting.id)).blocked
    await finish(store, a.id)
    assert not (await todos.get(store, waiting.id)).blocked


async def test_a_blocked_todo_holds_its_idempotency_key(store) -> None:
    a = await new(store, "a")
    waiting = await new(store, "waiting", after=(a.id,), idempotency_key="k")
    again, created = await todos.create(store, NewTodo(queue="q", title="again", idempotency_key="k"))
    assert (again.id, created) == (waiting.id, False)


# ---------------------------------------------------------------- cancelled


async def test_cancelling_a_dependency_cancels_its_dependents_recursively_naming_why(store) -> None:
    a = await new(store, "a")
    b = await new(store, "b", after=(a.id,))
    c = await new(store, "c", after=(b.id,))
    other = await new(store, "other")
    await todos.cancel(store, a.id, by="ana", reason="wrong repo")
    got_b, got_c = await todos.get(store, b.id), await todos.get(store, c.id)
    assert (got_b.state, got_b.cancelled_by, got_b.cancel_reason) == ("cancelled", "ana", f"dependency {a.id} was cancelled")
    assert (got_c.state, got_c.cancel_reason) == ("cancelled", f"dependency {b.id} was cancelled")
    assert (await todos.get(store, other.id)).state == "pending"


async def test_cancelling_a_claimed_dependency_cancels_its_dependents(store) -> None:
    a = await new(store, "a")
    b = await new(store, "b", after=(a.id,))
    await todos.claim(store, a.id, owner="w")
    await todos.cancel(store, a.id, by="ana")
    assert (await todos.get(store, b.id)).state == "cancelled"


async def test_a_bulk_cancel_cancels_the_dependents_of_what_it_cancels(store) -> None:
    a = await new(store, "a", queue="fetch")
    b = await new(store, "b", queue="summaries", after=(a.id,))
    assert await todos.cancel_many(store, queue="fetch", by="ana") == 1
    got = await todos.get(store, b.id)
    assert (got.state, got.cancel_reason) == ("cancelled", f"dependency {a.id} was cancelled")


async def test_a_bulk_cancel_of_a_queue_takes_its_blocked_todos_too(store) -> None:
    elsewhere = await new(store, "elsewhere", queue="other")
    ready = await new(store, "ready", queue="q")
    blocked = await new(store, "blocked", queue="q", after=(elsewhere.id,))
    assert await todos.count_pending(store, queue="q") == 2
    assert await todos.cancel_many(store, queue="q", by="ana", batch=1) == 2
    states = [(await todos.get(store, t.id)).state for t in (elsewhere, ready, blocked)]
    assert states == ["pending", "cancelled", "cancelled"]


async def test_a_cancelled_dependent_leaves_what_it_waited_for_alone(store) -> None:
    a = await new(store, "a")
    b = await new(store, "b", after=(a.id,))
    await todos.cancel(store, b.id, by="ana")
    assert (await todos.get(store, a.id)).state == "pending"
    assert (await todos.claim_next(store, owner="w")).id == a.id


# ---------------------------------------------------------------- refused at create


async def test_an_unknown_dependency_is_refused_and_nothing_is_written(store, row_count) -> None:
    a = await new(store, "a")
    before = row_count("todos")
    with pytest.raises(NotFound, match="todo 9999 does not exist: a todo can only wait for todos that exist"):
        await todos.create(store, NewTodo(queue="q", title="x", after=(a.id, 9999)))
    assert (row_count("todos"), row_count("todo_deps")) == (before, 0)


async def test_a_cycle_cannot_be_written_a_todo_waits_only_for_todos_older_than_it(store) -> None:
    a = await new(store, "a", idempotency_key="k")
    # Its own id does not exist yet when it is created: no todo can wait for itself or a later one.
    with pytest.raises(NotFound, match=f"todo {a.id + 1} does not exist"):
        await todos.create(store, NewTodo(queue="q", title="x", after=(a.id + 1,)))
    # A create that would collapse onto the holder of its key may not wait for that holder.
    with pytest.raises(InvalidArgument, match=f"todo {a.id} holds this idempotency key already, and cannot wait for itself"):
        await todos.create(store, NewTodo(queue="q", title="x", idempotency_key="k", after=(a.id,)))


async def test_a_cancelled_todo_cannot_be_waited_for(store) -> None:
    a = await new(store, "a")
    await todos.cancel(store, a.id, by="ana")
    with pytest.raises(Conflict, match=f"todo {a.id} was cancelled: nothing can wait for it"):
        await todos.create(store, NewTodo(queue="q", title="x", after=(a.id,)))


def test_a_todo_that_waits_cannot_also_be_delayed() -> None:
    with pytest.raises(InvalidArgument, match="a todo that waits for others cannot also be delayed"):
        NewTodo(queue="q", title="x", after=(1,), delay=5)


def test_a_todo_waits_for_at_most_a_hundred_todos() -> None:
    with pytest.raises(InvalidArgument, match=f"at most {MAX_DEPENDENCIES} todos"):
        NewTodo(queue="q", title="x", after=tuple(range(1, MAX_DEPENDENCIES + 2)))
    with pytest.raises(InvalidArgument, match="after must be an integer"):
        NewTodo(queue="q", title="x", after=("1",))


async def test_a_dependency_outside_the_callers_scope_is_answered_as_unknown(store) -> None:
    secret = await new(store, "secret", queue="private")
    with pytest.raises(NotFound, match=f"todo {secret.id} does not exist"):
        await todos.create(store, NewTodo(queue="q", title="x", after=(secret.id,)), scope=["q"])


# ---------------------------------------------------------------- by key


async def test_after_key_waits_for_the_live_todo_holding_that_key(store) -> None:
    build = await new(store, "build", queue="builds", idempotency_key="build-7")
    review = await new(store, "review", queue="reviews", after_keys=("build-7",))
    assert review.blocked
    assert [d.id for d in (await todos.get(store, review.id)).dependencies] == [build.id]


async def test_after_key_that_no_live_todo_holds_is_refused(store) -> None:
    with pytest.raises(NotFound, match="no live todo holds the idempotency key 'nope'"):
        await todos.create(store, NewTodo(queue="q", title="x", after_keys=("nope",)))


async def test_after_key_held_on_several_queues_is_refused_as_ambiguous(store) -> None:
    await new(store, "one", queue="a", idempotency_key="k")
    await new(store, "two", queue="b", idempotency_key="k")
    with pytest.raises(InvalidArgument, match=r"held by live todos on several queues \(a, b\); wait for one by id"):
        await todos.create(store, NewTodo(queue="q", title="x", after_keys=("k",)))


# ---------------------------------------------------------------- results carried


async def test_a_claimed_todo_carries_its_dependencies_states_and_results(store) -> None:
    a, b = await new(store, "a"), await new(store, "b")
    summary = await new(store, "summary", queue="s", after=(a.id, b.id))
    await finish(store, a.id, {"pages": 3})
    await finish(store, b.id, ["x"])
    claimed = await todos.claim_next(store, owner="w", queues=["s"])
    assert claimed.id == summary.id
    assert claimed.to_dict()["dependencies"] == [
        {"id": a.id, "state": "done", "result": {"pages": 3}}, {"id": b.id, "state": "done", "result": ["x"]}]  # fmt: skip
    by_id = await todos.get(store, summary.id)
    assert [d.result for d in by_id.dependencies] == [{"pages": 3}, ["x"]]


async def test_a_batch_claim_and_a_claim_by_id_carry_dependencies_too(store) -> None:
    a = await new(store, "a")
    b = await new(store, "b", queue="s", after=(a.id,))
    c = await new(store, "c", queue="t", after=(a.id,))
    await finish(store, a.id, 1)
    (batch,) = await todos.claim_next(store, owner="w", queues=["s"], max=5)
    by_id = await todos.claim(store, c.id, owner="w")
    assert [(d.id, d.result) for d in batch.dependencies] == [(a.id, 1)] and batch.id == b.id
    assert [(d.id, d.result) for d in by_id.dependencies] == [(a.id, 1)]


async def test_results_past_the_payload_cap_are_named_not_inlined(store) -> None:
    await settings.set_value(store, settings.MAX_PAYLOAD.name, "1KiB")
    a, b = await new(store, "a"), await new(store, "b")
    waiting = await new(store, "waiting", after=(a.id, b.id))
    await finish(store, a.id, "x" * 600)
    await finish(store, b.id, "y" * 600)
    shown = (await todos.get(store, waiting.id)).to_dict()["dependencies"]
    assert shown == [
        {"id": a.id, "state": "done", "result": "x" * 600},
        {"id": b.id, "state": "done", "result": None, "result_omitted": True},
    ]


async def test_a_todo_without_dependencies_shows_none(store) -> None:
    plain = await new(store, "plain")
    shown = (await todos.get(store, plain.id)).to_dict()
    assert shown["blocked"] is False and "dependencies" not in shown and "waits_for" not in shown


# ---------------------------------------------------------------- the migration


@pytest.fixture
def v10_database(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Path | str:
    """A database as version 10 left it, holding one keyed pending todo (id 1)."""
    row = ("INSERT INTO todos (queue, title, state, visible_at, idempotency_key, created_at, updated_at) "
           "VALUES ('q', 'kept', 'pending', {0}, 'k', {0}, {0})")  # fmt: skip
    if backend == "sqlite":
        path = tmp_path / "switchboard.db"
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.executescript((DATA / "schema-v10.sql").read_text("utf-8"))
            conn.executescript("PRAGMA user_version = 10;\n" + row.format(5) + ";")
        finally:
            conn.close()
        return path
    server = request.getfixturevalue("postgres_server")
    url = server.empty_database()
    request.addfinalizer(lambda: server.drop(url))
    with pg_connection(url) as conn:
        conn.execute((DATA / "schema-v10.postgres.sql").read_text("utf-8"))
        conn.execute("INSERT INTO schema_migrations (version) VALUES (10)")
        conn.execute(row.format("sb_ts(5)").replace("(queue,", "(id, queue,").replace("VALUES (", "VALUES (sb_new_id('todos'), "))
    return url


async def test_a_version_10_database_is_upgraded_keeping_its_todos_and_keys(v10_database, clock) -> None:
    async with await open_store(v10_database, clock=clock) as store:
        kept = await todos.get(store, 1)
        assert (kept.title, kept.blocked, kept.waits_for, kept.visible_at) == ("kept", False, 0, 5)
        again, created = await todos.create(store, NewTodo(queue="q", title="again", idempotency_key="k"))
        assert (again.id, created) == (1, False)
        waiting = await new(store, "waits", after=(1,))
        assert waiting.blocked
        await finish(store, 1)
        assert not (await todos.get(store, waiting.id)).blocked
    assert count(v10_database, "todo_deps") == 1
