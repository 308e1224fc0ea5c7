"""Which events still have work in play (``events.in_play``): what an adapter acking on completion
asks of the messages it holds. An event is in play while a todo it produced is pending or claimed;
done, a dead letter and cancelled are finished, and an event that produced no todo never is."""

from __future__ import annotations

import json

import pytest

from switchboard_local.core import events, routing, rules, sources, todos, webhook_config
from switchboard_local.core.events import NewEvent
from switchboard_local.core.todos import Lease

pytestmark = pytest.mark.anyio


async def add_source(store) -> None:
    await sources.add(store, "hooks", family="webhook", kind="open", trust_mode="open",
                      config=webhook_config.source_config("open", {}))  # fmt: skip


def delivery(payload, n: int) -> NewEvent:
    return NewEvent(source="hooks", family="webhook", type="job", external_id=f"d-{n}", trust_mode="open",
                    verified=True, body=json.dumps(payload).encode(), content_type="application/json")  # fmt: skip


async def test_an_event_is_in_play_until_every_todo_it_produced_is_finished(store) -> None:
    await add_source(store)
    for queue in ("a", "b", "c"):  # each delivery fans out to three todos
        await rules.add(store, source="hooks", queue=queue, max_attempts=1)
    made = await routing.deliver(store, delivery({}, 1))
    other = await routing.deliver(store, delivery({}, 2))
    a, b, c = made.todo_ids
    assert await events.in_play(store, [made.event_id, other.event_id]) == {made.event_id, other.event_id}

    await todos.complete(store, Lease.of(await todos.claim(store, a, owner="w")))  # done
    claimed = await todos.claim(store, b, owner="w")
    assert await events.in_play(store, [made.event_id]) == {made.event_id}  # one pending, one claimed
    await todos.fail(store, Lease.of(claimed), error="no")  # its only attempt: a dead letter
    assert await events.in_play(store, [made.event_id]) == {made.event_id}  # one still pending
    await todos.cancel(store, c, by="operator")
    assert await events.in_play(store, [made.event_id, other.event_id]) == {other.event_id}


async def test_a_last_attempt_whose_lease_lapsed_finishes_its_event_with_no_commit_since(store, clock) -> None:
    await add_source(store)
    await rules.add(store, source="hooks", queue="a", max_attempts=1)
    made = await routing.deliver(store, delivery({}, 1))
    await todos.claim(store, made.todo_ids[0], owner="w", lease=30)
    clock.advance(29)
    assert await events.in_play(store, [made.event_id]) == {made.event_id}
    clock.advance(2)  # the lease lapsed on the last attempt: a dead letter
    assert await events.in_play(store, [made.event_id]) == set()
    assert (await todos.get(store, made.todo_ids[0])).state == "failed"


async def test_a_lapsed_lease_with_attempts_left_keeps_its_event_in_play(store, clock) -> None:
    await add_source(store)
    made = await routing.deliver(store, delivery({}, 1))  # the default route: five attempts
    await todos.claim(store, made.todo_ids[0], owner="w", lease=30)
    clock.advance(31)
    assert await events.in_play(store, [made.event_id]) == {made.event_id}  # pending again


async def test_an_event_that_produced_no_todo_is_never_in_play(store) -> None:
    await add_source(store)
    await rules.add(store, source="hooks", where=["skip=yes"], drop=True)
    dropped = await routing.deliver(store, delivery({"skip": "yes"}, 1))
    assert dropped.todo_ids == ()
    assert await events.in_play(store, [dropped.event_id, 999_999]) == set()


async def test_a_replays_todos_keep_the_event_in_play(store) -> None:
    await add_source(store)
    made = await routing.deliver(store, delivery({}, 1))
    await todos.complete(store, Lease.of(await todos.claim(store, made.todo_ids[0], owner="w")))
    assert await events.in_play(store, [made.event_id]) == set()
    (again,) = await routing.replay(store, made.event_id)
    assert await events.in_play(store, [made.event_id]) == {made.event_id}
    await todos.complete(store, Lease.of(await todos.claim(store, again, owner="w")))
    assert await events.in_play(store, [made.event_id]) == set()


async def test_many_events_are_asked_about_in_bounded_reads_and_answered_whole(store, monkeypatch) -> None:
    await add_source(store)
    monkeypatch.setattr(events, "IN_PLAY_CHUNK", 3)
    made = [await routing.deliver(store, delivery({}, n)) for n in range(8)]
    for finished in made[::2]:
        await todos.cancel(store, finished.todo_ids[0], by="operator")
    ids = [m.event_id for m in made]
    assert await events.in_play(store, [*ids, *ids]) == set(ids[1::2])
    assert await events.in_play(store, []) == set()
