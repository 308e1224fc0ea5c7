"""Pruning removes old events and finished todos, never live work or its events."""

from __future__ import annotations

from pathlib import Path

import pytest

from switchboard_local.core import retention, todos
from switchboard_local.core.errors import InvalidArgument
from switchboard_local.core.events import NewEvent
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease

from support.ingest import ingest
from support.sql import count, rows

pytestmark = pytest.mark.anyio
DAY = 86_400


def new_event(n: int) -> NewEvent:
    return NewEvent(source="src", family="webhook", type="t", external_id=f"e{n}", trust_mode="open",
                    verified=False, body=b"{}")  # fmt: skip


def ids_in(db_path: Path, table: str) -> list[int]:
    return [r[0] for r in rows(db_path, f"SELECT id FROM {table} ORDER BY id")]


async def test_prune_keeps_live_todos_and_the_events_they_point_to(store, clock, db_path: Path) -> None:
    done_event = await ingest(store, new_event(1), [NewTodo(queue="q", title="finished")])
    live_event = await ingest(store, new_event(2), [NewTodo(queue="q", title="still pending")])
    claimed_event = await ingest(store, new_event(3), [NewTodo(queue="q2", title="being worked on")])
    dead_event = await ingest(store, new_event(4), [NewTodo(queue="q3", title="dead", max_attempts=1)])
    finished = await todos.claim_next(store, owner="a", queues=["q"])
    await todos.complete(store, Lease.of(finished))
    await todos.claim_next(store, owner="a", queues=["q2"], lease=12 * 3600)
    dead = await todos.claim_next(store, owner="a", queues=["q3"])
    await todos.fail(store, Lease.of(dead), error="boom")

    clock.advance(31 * DAY)
    pruned = await retention.prune(store, older_than_days=30)

    assert (pruned.events, pruned.todos) == (2, 2)
    assert ids_in(db_path, "events") == [live_event.event_id, claimed_event.event_id]
    assert ids_in(db_path, "todos") == [live_event.todo_ids[0], claimed_event.todo_ids[0]]
    assert done_event.event_id not in ids_in(db_path, "events") and dead_event.event_id not in ids_in(db_path, "events")


async def test_prune_keeps_recent_finished_work(store, clock, db_path: Path) -> None:
    await ingest(store, new_event(1), [NewTodo(queue="q", title="t")])
    claimed = await todos.claim_next(store, owner="a")
    await todos.complete(store, Lease.of(claimed))
    clock.advance(29 * DAY)
    assert await retention.prune(store, older_than_days=30) == retention.Pruned(events=0, todos=0, delivery_keys=0)
    assert len(ids_in(db_path, "events")) == 1 and len(ids_in(db_path, "todos")) == 1


async def test_prune_caps_the_number_of_events_oldest_first(store, db_path: Path) -> None:
    ids = [(await ingest(store, new_event(n), [])).event_id for n in range(5)]
    pruned = await retention.prune(store, older_than_days=30, max_events=2)
    assert pruned.events == 3
    assert ids_in(db_path, "events") == ids[-2:]


async def test_a_finished_todo_outlives_its_pruned_event_without_a_dangling_reference(store, clock, db_path: Path) -> None:
    result = await ingest(store, new_event(1), [NewTodo(queue="q", title="t")])
    claimed = await todos.claim_next(store, owner="a")
    await todos.complete(store, Lease.of(claimed))
    pruned = await retention.prune(store, older_than_days=30, max_events=0)
    assert (pruned.events, pruned.todos) == (1, 0)
    assert (await todos.get(store, result.todo_ids[0])).event_id is None


async def test_prune_keeps_a_todo_awaiting_its_retry_and_the_event_it_came_from(store, clock, db_path: Path) -> None:
    retrying = await ingest(store, new_event(1), [NewTodo(queue="q", title="retry me", max_attempts=3)])
    claimed = await todos.claim_next(store, owner="a")
    await todos.fail(store, Lease.of(claimed), error="later")
    clock.advance(31 * DAY)  # older than the cutoff, and its retry is long due
    pruned = await retention.prune(store, older_than_days=30, max_events=0)
    assert (pruned.events, pruned.todos) == (0, 0)
    assert ids_in(db_path, "todos") == [claimed.id] and ids_in(db_path, "events") == [retrying.event_id]
    assert (await todos.get(store, claimed.id)).state == "pending"


async def test_prune_takes_cancelled_todos_once_older_than_the_cutoff(store, clock, db_path: Path) -> None:
    await todos.create(store, NewTodo(queue="q", title="kept"))
    cancelled, _ = await todos.create(store, NewTodo(queue="q", title="cancelled"))
    await todos.cancel(store, cancelled.id, by="alice")
    clock.advance(31 * DAY)
    pruned = await retention.prune(store, older_than_days=30, max_events=0)
    assert pruned.todos == 1
    assert [t.title for t in await todos.list_todos(store)] == ["kept"]


async def test_prune_keeps_what_is_exactly_as_old_as_the_cutoff_and_takes_what_is_older(store, clock, db_path) -> None:
    await ingest(store, new_event(1), [NewTodo(queue="q", title="t")])
    claimed = await todos.claim_next(store, owner="a")
    await todos.complete(store, Lease.of(claimed))  # event received and todo finished at one instant
    clock.advance(30 * DAY)
    assert await retention.prune(store, older_than_days=30) == retention.Pruned(events=0, todos=0, delivery_keys=0)
    clock.advance(0.001)
    assert await retention.prune(store, older_than_days=30) == retention.Pruned(events=1, todos=1, delivery_keys=0)
    assert ids_in(db_path, "events") == [] and ids_in(db_path, "todos") == []


@pytest.mark.parametrize("keep", [1, 3])
async def test_prune_cap_keeps_the_newest_events(store, db_path: Path, keep: int) -> None:
    ids = [(await ingest(store, new_event(n), [])).event_id for n in range(5)]
    pruned = await retention.prune(store, older_than_days=30, max_events=keep)
    assert pruned.events == 5 - keep
    assert ids_in(db_path, "events") == ids[-keep:]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"older_than_days": -1}, "older-than must be zero or more days"),
        ({"older_than_days": float("nan")}, "older-than must be zero or more days"),
        ({"max_events": -1}, "max-events must be zero or a positive whole number"),
        ({"max_events": True}, "max-events must be zero or a positive whole number"),
        ({"max_events": 1.5}, "max-events must be zero or a positive whole number"),
        ({"dedup_horizon_days": -1}, "dedup-horizon must be zero or more days"),
    ],
)
async def test_prune_refuses_bad_limits_naming_them(store, arguments, message) -> None:
    with pytest.raises(InvalidArgument) as refused:
        await retention.prune(store, **arguments)
    assert refused.value.message == message


async def test_prune_with_zero_days_takes_every_finished_todo_and_keeps_no_key(store, clock, db_path) -> None:
    await ingest(store, new_event(1), [NewTodo(queue="q", title="t")])
    claimed = await todos.claim_next(store, owner="a")
    await todos.complete(store, Lease.of(claimed))
    clock.advance(0.001)
    pruned = await retention.prune(store, older_than_days=0, dedup_horizon_days=0)
    assert (pruned.events, pruned.todos) == (1, 1)
    assert count(db_path, "delivery_keys") == 0


async def test_an_event_pruned_exactly_at_the_dedup_horizon_keeps_its_key(store, clock, db_path) -> None:
    await ingest(store, new_event(1), [])
    clock.advance(7 * DAY)
    assert (await retention.prune(store, max_events=0)).events == 1
    assert rows(db_path, "SELECT key FROM delivery_keys") == [("id:e1",)]
