"""An operator's verbs on the todos (issue 12): cancel, forced release, bulk
cancel, purge of cancelled todos, and direct creates traced to an event.

Each is recorded in the audit trail (events of source ``operator``) in the
transaction that does it; a refused verb changes nothing and records nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from switchboard_local.core import todos
from switchboard_local.core.errors import Conflict, InvalidArgument, NotFound
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease, NextClaim

from support.sql import count, rows

pytestmark = pytest.mark.anyio


async def new(store, title="t", queue="q", **fields):
    todo, created = await todos.create(store, NewTodo(queue=queue, title=title, **fields))
    assert created
    return todo


def audited(db_path: Path, action: str) -> list[dict]:
    """The bodies of the audit events of one action, oldest first."""
    found = rows(db_path, "SELECT body FROM events WHERE source = 'operator' AND type = ? ORDER BY id", [action])
    return [json.loads(bytes(body)) for (body,) in found]


# ---------------------------------------------------------------- cancel


async def test_cancelling_a_pending_todo_finishes_it_with_who_and_why(store, db_path) -> None:
    todo = await new(store)
    cancelled = await todos.cancel(store, todo.id, by="alice", reason="bad deploy")
    assert (cancelled.state, cancelled.visible_at, cancelled.cancelled_by, cancelled.cancel_reason) == (
        "cancelled", None, "alice", "bad deploy")  # fmt: skip
    assert await todos.claim_next(store, owner="w") is None
    assert audited(db_path, "todo.cancel") == [
        {"by": "alice", "action": "todo.cancel", "subject": todo.id, "queue": "q", "reason": "bad deploy"}
    ]


async def test_a_cancelled_todo_frees_its_idempotency_key(store) -> None:
    first = await new(store, idempotency_key="k")
    await todos.cancel(store, first.id, by="alice")
    again, created = await todos.create(store, NewTodo(queue="q", title="again", idempotency_key="k"))
    assert created and again.id != first.id


async def test_the_holder_of_a_cancelled_todo_is_told_it_was_cancelled_by_whom_and_why(store) -> None:
    await new(store)
    held = await todos.claim_next(store, owner="agent-1")
    await todos.cancel(store, held.id, by="alice", reason="duplicate work")
    for verb in (
        lambda: todos.heartbeat(store, Lease.of(held)),
        lambda: todos.complete(store, Lease.of(held), result={"done": True}),
        lambda: todos.fail(store, Lease.of(held), error="x"),
        lambda: todos.release(store, Lease.of(held)),
    ):
        with pytest.raises(Conflict) as refused:
            await verb()
        assert refused.value.message == (
            f"todo {held.id} was cancelled by alice (duplicate work); stop working on it"
        )
    got = await todos.get(store, held.id)
    assert got.state == "cancelled" and got.result is None
    assert [(a.outcome, a.error) for a in got.attempts] == [("cancelled", "duplicate work")]


async def test_cancelling_a_claimed_todo_whose_lease_lapsed_takes_the_todo_the_claim_would_find(store, clock) -> None:
    await new(store, max_attempts=3)
    held = await todos.claim_next(store, owner="crashed", lease=60)
    clock.advance(61)
    cancelled = await todos.cancel(store, held.id, by="alice")
    assert cancelled.state == "cancelled"
    assert [a.outcome for a in (await todos.get(store, held.id)).attempts] == ["lease_expired"]


@pytest.mark.parametrize(
    ("into", "shown"), [("done", "done"), ("dead", "a dead letter"), ("cancelled", "cancelled")]
)
async def test_only_pending_or_claimed_todos_can_be_cancelled_and_a_refusal_records_nothing(
    store, db_path, into, shown
) -> None:
    todo = await new(store, max_attempts=1)
    if into == "cancelled":
        await todos.cancel(store, todo.id, by="alice")
    else:
        held = await todos.claim(store, todo.id, owner="w")
        if into == "done":
            await todos.complete(store, Lease.of(held))
        else:
            await todos.fail(store, Lease.of(held), error="e")
    before = len(audited(db_path, "todo.cancel"))
    with pytest.raises(Conflict) as refused:
        await todos.cancel(store, todo.id, by="bob")
    assert refused.value.message == f"todo {todo.id} is {shown}; only pending or claimed todos can be cancelled"
    assert len(audited(db_path, "todo.cancel")) == before


async def test_cancelling_an_unknown_todo_is_not_found(store) -> None:
    with pytest.raises(NotFound):
        await todos.cancel(store, 4242, by="alice")


@pytest.mark.parametrize(
    ("by", "reason", "message"),
    [("", None, "by must be a non-empty string"),
     ("alice", 42, "reason must be a string"),
     ("alice", "x" * 1001, "reason is longer than 1000 characters")],
    ids=["nobody", "a reason not text", "a reason too long"],
)  # fmt: skip
async def test_a_cancel_names_who_and_at_most_1000_characters_of_why_or_is_refused(store, by, reason, message):
    todo = await new(store)
    with pytest.raises(InvalidArgument) as refused:
        await todos.cancel(store, todo.id, by=by, reason=reason)
    assert refused.value.message == message
    with pytest.raises(InvalidArgument) as bulk:
        await todos.cancel_many(store, queue="q", by=by, reason=reason)
    assert bulk.value.message == message
    assert (await todos.get(store, todo.id)).state == "pending"
    longest = await todos.cancel(store, todo.id, by="alice", reason="x" * 1000)
    assert longest.cancel_reason == "x" * 1000


async def test_a_cancel_reason_is_one_line_of_text(store) -> None:
    todo = await new(store)
    cancelled = await todos.cancel(store, todo.id, by="alice", reason="  two\nlines  ")
    assert cancelled.cancel_reason == "two lines"
    other = await new(store)
    with pytest.raises(InvalidArgument, match="reason holds a control character"):
        await todos.cancel(store, other.id, by="alice", reason="bell\x07")
    assert (await todos.get(store, other.id)).state == "pending"


async def test_claiming_a_cancelled_todo_by_id_says_it_was_cancelled(store) -> None:
    todo = await new(store)
    await todos.cancel(store, todo.id, by="alice", reason="typo")
    with pytest.raises(Conflict) as refused:
        await todos.claim(store, todo.id, owner="w")
    assert refused.value.message == f"todo {todo.id} was cancelled by alice (typo)"


async def test_a_todo_cancelled_without_a_reason_is_refused_naming_only_who(store) -> None:
    todo = await new(store)
    held = await todos.claim(store, todo.id, owner="w")
    await todos.cancel(store, todo.id, by="alice")
    with pytest.raises(Conflict) as refused:
        await todos.complete(store, Lease.of(held))
    assert refused.value.message == f"todo {todo.id} was cancelled by alice; stop working on it"
    with pytest.raises(Conflict) as claiming:
        await todos.claim(store, todo.id, owner="w")
    assert claiming.value.message == f"todo {todo.id} was cancelled by alice"


# ---------------------------------------------------------------- redrive


async def test_a_redrive_by_someone_is_recorded_with_its_todo_and_queue_and_one_by_nobody_is_not(store, db_path):
    dead = []
    for title in ("first", "second"):
        todo = await new(store, title, max_attempts=1)
        claimed = await todos.claim(store, todo.id, owner="w")
        await todos.fail(store, Lease.of(claimed), error="boom")
        dead.append(todo.id)
    assert (await todos.redrive(store, dead[0])).state == "pending"
    assert (await todos.redrive(store, dead[1], by="alice")).state == "pending"
    assert audited(db_path, "todo.redrive") == [
        {"by": "alice", "action": "todo.redrive", "subject": dead[1], "queue": "q"}
    ]
    (at,) = rows(db_path, "SELECT received_at FROM events WHERE type = 'todo.redrive'")
    assert at == rows(db_path, "SELECT updated_at FROM todos WHERE id = ?", [dead[1]])[0]  # in the redrive's own time


# ---------------------------------------------------------------- forced release


async def test_a_forced_release_puts_the_todo_back_at_once_refunding_the_attempt(store, db_path) -> None:
    todo = await new(store)
    held = await todos.claim_next(store, owner="lost-token")
    released = await todos.force_release(store, todo.id, by="alice")
    assert (released.state, released.attempt, released.owner) == ("pending", 0, None)
    again = await todos.claim_next(store, owner="w")
    assert again.id == held.id and again.attempt == 1
    history = (await todos.get(store, todo.id)).attempts
    assert [(a.owner, a.outcome) for a in history] == [("lost-token", "released_by_operator"), ("w", None)]
    assert audited(db_path, "todo.release") == [
        {"by": "alice", "action": "todo.release", "subject": todo.id, "queue": "q", "holder": "lost-token"}
    ]


async def test_the_old_holders_token_is_refused_after_a_forced_release(store) -> None:
    await new(store)
    held = await todos.claim_next(store, owner="hung")
    await todos.force_release(store, held.id, by="alice")
    with pytest.raises(Conflict) as refused:
        await todos.complete(store, Lease.of(held))
    assert refused.value.message == f"todo {held.id} was released by an operator; the lease token is void"
    assert (await todos.get(store, held.id)).state == "pending"


async def test_the_old_holders_token_after_a_forced_release_and_a_new_claim_meets_the_new_holder(store) -> None:
    await new(store)
    held = await todos.claim_next(store, owner="hung")
    await todos.force_release(store, held.id, by="alice")
    await todos.claim_next(store, owner="rescuer")
    with pytest.raises(Conflict) as refused:
        await todos.complete(store, Lease.of(held))
    held_by = f"the lease token does not match the current lease on todo {held.id} (held by rescuer)"
    assert refused.value.message == held_by


async def test_only_a_claimed_todo_can_be_released_by_force(store, db_path) -> None:
    todo = await new(store)
    with pytest.raises(Conflict) as refused:
        await todos.force_release(store, todo.id, by="alice")
    assert refused.value.message == f"todo {todo.id} is pending; only claimed todos can be released"
    assert audited(db_path, "todo.release") == []


# ---------------------------------------------------------------- bulk cancel


async def test_bulk_cancel_takes_a_queues_pending_todos_a_batch_per_transaction(store, db_path) -> None:
    pending = [(await new(store, f"p{i}")).id for i in range(5)]
    held = await new(store, "held")
    await todos.claim(store, held.id, owner="w")
    elsewhere = await new(store, "elsewhere", queue="other")
    assert await todos.count_pending(store, queue="q") == 5
    seen: list[int] = []
    done = await todos.cancel_many(store, queue="q", by="alice", reason="bad deploy", batch=2, progress=seen.append)
    assert done == 5 and seen == [2, 4, 5]
    assert audited(db_path, "todo.cancel") == [
        {"by": "alice", "action": "todo.cancel", "subject": "q", "ids": ids, "reason": "bad deploy"}
        for ids in (pending[:2], pending[2:4], pending[4:])
    ]
    assert (await todos.get(store, held.id)).state == "claimed"
    assert (await todos.get(store, elsewhere.id)).state == "pending"
    assert {t.cancel_reason for t in await todos.list_todos(store, state="cancelled")} == {"bad deploy"}


async def test_bulk_cancel_filters_by_kind_and_by_creation_time(store, clock) -> None:
    await new(store, "old deploy", kind="deploy")
    clock.advance(600)
    cutoff = clock.now_ms()
    await new(store, "new build", kind="build")
    bad = await new(store, "new deploy", kind="deploy")
    assert await todos.count_pending(store, queue="q", kind="deploy", since=cutoff) == 1
    assert await todos.cancel_many(store, queue="q", by="alice", kind="deploy", since=cutoff) == 1
    assert [t.id for t in await todos.list_todos(store, state="cancelled")] == [bad.id]


async def test_bulk_cancel_of_nothing_records_nothing(store, db_path) -> None:
    assert await todos.cancel_many(store, queue="empty", by="alice") == 0
    assert audited(db_path, "todo.cancel") == []


async def test_bulk_cancel_takes_a_todo_whose_lease_lapsed_with_attempts_left(store, clock) -> None:
    todo = await new(store, max_attempts=3)
    await todos.claim(store, todo.id, owner="crashed", lease=60)
    clock.advance(61)
    assert await todos.cancel_many(store, queue="q", by="alice") == 1
    assert (await todos.get(store, todo.id)).state == "cancelled"


async def test_a_bulk_jobs_batch_is_between_1_and_1000_todos_per_transaction(store, db_path) -> None:
    pending = [(await new(store, f"p{i}")).id for i in range(3)]
    for batch in (0, 1001):
        with pytest.raises(InvalidArgument) as refused:
            await todos.cancel_many(store, queue="q", by="alice", batch=batch)
        assert refused.value.message == f"batch must be between 1 and 1000, got {batch}"
    assert audited(db_path, "todo.cancel") == []
    seen: list[int] = []
    assert await todos.cancel_many(store, queue="q", by="alice", batch=1, progress=seen.append) == 3
    assert seen == [1, 2, 3]
    assert [a["ids"] for a in audited(db_path, "todo.cancel")] == [[todo_id] for todo_id in pending]


@pytest.mark.parametrize(
    ("verb", "arguments", "message"),
    [
        ("cancel_many", {"queue": "", "by": "alice"}, "queue must be a non-empty string"),
        ("cancel_many", {"queue": "q", "by": "alice", "kind": " "}, "kind must be a non-empty string"),
        ("redrive_many", {"queue": "q", "kind": ""}, "kind must be a non-empty string"),
        ("purge", {"queue": "", "state": "cancelled"}, "queue must be a non-empty string"),
        (
            "purge",
            {"queue": "q", "state": "pending"},
            "only finished todos can be purged: state must be one of done, failed, cancelled",
        ),
    ],
    ids=["cancel-queue", "cancel-kind", "redrive-kind", "purge-queue", "purge-state"],
)
async def test_a_bulk_job_refuses_a_bad_filter_naming_it_and_changes_nothing(store, verb, arguments, message) -> None:
    todo = await new(store)
    with pytest.raises(InvalidArgument) as refused:
        await getattr(todos, verb)(store, **arguments)
    assert refused.value.message == message
    assert (await todos.get(store, todo.id)).state == "pending"


# ---------------------------------------------------------------- purge of cancelled todos


async def test_purge_deletes_cancelled_todos_and_leaves_the_rest(store) -> None:
    cancelled = await new(store, "cancelled")
    await todos.cancel(store, cancelled.id, by="alice")
    kept = await new(store, "kept")
    assert await todos.count_purgeable(store, queue="q", state="cancelled") == 1
    assert await todos.purge(store, queue="q", state="cancelled") == 1
    assert [t.id for t in await todos.list_todos(store)] == [kept.id]


async def test_purge_records_each_batch_with_its_state_count_and_first_and_last_ids(store, db_path) -> None:
    cancelled = []
    for i in range(5):
        todo = await new(store, f"c{i}")
        await todos.cancel(store, todo.id, by="alice")
        cancelled.append(todo.id)
    seen: list[int] = []
    assert await todos.purge(store, queue="q", state="cancelled", by="bob", batch=3, progress=seen.append) == 5
    assert seen == [3, 5]
    batch = {"by": "bob", "action": "todo.purge", "subject": "q", "state": "cancelled"}
    assert audited(db_path, "todo.purge") == [
        {**batch, "count": 3, "first_id": cancelled[0], "last_id": cancelled[2]},
        {**batch, "count": 2, "first_id": cancelled[3], "last_id": cancelled[4]},
    ]


async def test_purge_takes_only_todos_last_touched_before_the_cutoff(store, clock) -> None:
    old = await new(store, "old")
    await todos.cancel(store, old.id, by="alice")
    clock.advance(60)
    cutoff = clock.now_ms()
    recent = await new(store, "recent")
    await todos.cancel(store, recent.id, by="alice")
    assert await todos.count_purgeable(store, queue="q", state="cancelled", before=cutoff) == 1
    assert await todos.purge(store, queue="q", state="cancelled", before=cutoff) == 1
    assert [t.id for t in await todos.list_todos(store, state="cancelled")] == [recent.id]


# ---------------------------------------------------------------- direct creates come from an event


async def test_a_direct_create_by_someone_comes_from_an_event_of_the_audit_trail(store, db_path) -> None:
    made, created = await todos.create(store, NewTodo(queue="q", title="by hand"), by="alice")
    assert created and made.event_id is not None
    (event,) = rows(db_path, "SELECT id, source, family, type, body FROM events")
    assert event[:4] == (made.event_id, "operator", "operator", "todo.create")
    assert json.loads(bytes(event[4])) == {
        "by": "alice", "action": "todo.create", "subject": made.id, "queue": "q", "title": "by hand"
    }  # fmt: skip
    assert (await todos.get(store, made.id)).event_id == made.event_id


async def test_a_direct_create_that_finds_the_key_held_records_no_event(store, db_path) -> None:
    await todos.create(store, NewTodo(queue="q", title="first", idempotency_key="k"), by="alice")
    _, created = await todos.create(store, NewTodo(queue="q", title="again", idempotency_key="k"), by="alice")
    assert not created and count(db_path, "events") == 1


async def test_a_create_with_nobody_named_records_no_event(store, db_path) -> None:
    made = await new(store)
    assert made.event_id is None and count(db_path, "events") == 0


async def test_a_failed_attempt_with_attempts_left_is_listed_as_pending_and_as_delayed(store) -> None:
    await new(store, max_attempts=2)
    held = await todos.claim_next(store, owner="w")
    await todos.fail(store, Lease.of(held), error="flaky", then=NextClaim("w"))
    assert [t.id for t in await todos.list_todos(store, state="pending", timing="delayed")] == [held.id]
    assert await todos.list_todos(store, state="failed") == []
