"""A batch of deliveries is stored in a few statements (executemany) with the
answers one-by-one delivery gives; the receiver's concurrent deliveries share
batches; sources and rules are cached, and a change made anywhere applies to
the next delivery (issue 15, part 4)."""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
from typing import Any

import anyio
import pytest

from switchboard_local.core import routing, rules, sources, webhook_config
from switchboard_local.core.errors import Busy, Conflict, Unavailable
from switchboard_local.core.events import Guard, Ingested, NewEvent
from switchboard_local.core.leadership import NotLeader
from switchboard_local.core.store.interface import Store, Transaction
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.store.queries import Q

from support import sql
from support.cli import run_cli
from support.sql import rows, run, value
from support.store import hold_the_thread

pytestmark = pytest.mark.anyio

DAY = 86_400.0
# Why a delivery whose todo the "poison" trigger refuses is kept without todos (Ingested.unroutable).
UNROUTABLE = "Conflict: conflict: the database refused the change: this todo cannot be stored"
TABLES = {
    "events": "SELECT * FROM events WHERE family <> 'operator' ORDER BY id",
    "todos": "SELECT * FROM todos ORDER BY id",
    "event_todos": "SELECT * FROM event_todos ORDER BY event_id, position",
    "delivery_keys": "SELECT * FROM delivery_keys ORDER BY source, key",
}


def delivery(external_id: str, payload: object, *, type: str = "pull_request", source: str = "gh") -> NewEvent:
    return NewEvent(source=source, family="webhook", type=type, external_id=external_id, trust_mode="github",
                    verified=True, body=json.dumps(payload).encode(), content_type="application/json",
                    replay_window=DAY)  # fmt: skip


async def routed_source(store: Store, name: str = "gh") -> sources.Source:
    """A source with rules that fan out, render titles, stop and drop."""
    source = await sources.add(store, name, family="webhook", kind="github", trust_mode="github",
                               config=webhook_config.source_config("github", {}), secrets=[{"value": "s"}])  # fmt: skip
    await rules.add(store, source=name, type="ping", drop=True)
    await rules.add(store, source=name, where=["action=opened"], queue="triage", title="New: {title}")
    await rules.add(store, source=name, where=["action=opened|closed"], queue="log", title="{action} #{n}")
    await rules.add(store, source=name, where=["action=closed"], queue="archive", stop=True)
    await rules.add(store, source=name, where=["action=closed"], queue="never")
    return source


def contents(db_path) -> dict[str, list[tuple]]:
    return {table: rows(db_path, sql) for table, sql in TABLES.items()}


def mixed_batch() -> list[NewEvent]:
    """New deliveries, repeats within the batch, one seen before it, a dropped
    one, a replayed body under a new id, one whose key a live todo holds, and
    events with no, one and two todos."""
    return [
        delivery("d-1", {"action": "opened", "title": "crash", "n": 1}),  # two todos
        delivery("d-2", {"action": "closed", "n": 2}),  # two: log, then archive stops
        delivery("d-1", {"action": "opened", "title": "crash", "n": 1}),  # repeat within the batch
        delivery("d-0", {"action": "opened", "title": "old", "n": 0}),  # seen before the batch
        delivery("d-3", {"zen": "hi"}, type="ping"),  # dropped: an event without todos
        delivery("forged", {"action": "opened", "title": "crash", "n": 1}),  # d-1's body again: a replay
        delivery("d-5", {"action": "edited"}),  # default queue, its key held by a live todo
        delivery("d-6", {"action": "edited", "n": 6}),  # default queue
        delivery("d-2", {"action": "closed", "n": 2}),  # repeat of a repeat's first
    ]


async def prepare(store: Store, db_path) -> sources.Source:
    source = await routed_source(store)
    await routing.deliver(store, delivery("d-0", {"action": "opened", "title": "old", "n": 0}))
    # A live todo holding the key d-5's todo derives (as a todo outliving its pruned event would).
    zero = sql.ms(db_path, 0)
    run(db_path, "INSERT INTO todos (queue, title, idempotency_key, state, visible_at, created_at, updated_at) "
                 f"VALUES ('gh', 'holder', 'event:gh:d-5:default', 'pending', {zero}, {zero}, {zero})")  # fmt: skip
    return source


async def test_a_batch_answers_and_stores_exactly_what_one_by_one_delivery_does(tmp_path, clock) -> None:
    answers: dict[str, list[Ingested]] = {}
    stored = {}
    for way in ("batch", "one_by_one"):
        db_path = tmp_path / f"{way}.db"
        async with await open_store(db_path, clock=clock, rng=random.Random(0)) as store:
            await prepare(store, db_path)
            if way == "batch":
                answers[way] = await routing.deliver_many(store, mixed_batch())
            else:
                answers[way] = [await routing.deliver(store, event) for event in mixed_batch()]
        stored[way] = contents(db_path)
    assert answers["batch"] == answers["one_by_one"]
    assert stored["batch"] == stored["one_by_one"]


async def test_each_delivery_of_a_batch_gets_its_own_answer(store, db_path) -> None:
    await prepare(store, db_path)
    holder = value(db_path, "SELECT id FROM todos WHERE title = 'holder'")
    first_0 = value(db_path, "SELECT id FROM events WHERE external_id = 'd-0'")
    d1, d2, d1_again, d0, ping, forged, d5, d6, d2_again = await routing.deliver_many(store, mixed_batch())

    assert (d1.duplicate, len(d1.todo_ids), d2.duplicate, len(d2.todo_ids)) == (False, 2, False, 2)
    assert d1_again == Ingested(d1.event_id, True, d1.todo_ids)
    assert d2_again == Ingested(d2.event_id, True, d2.todo_ids)
    assert forged == Ingested(d1.event_id, True, d1.todo_ids)
    assert d0.duplicate and d0.event_id == first_0 and len(d0.todo_ids) == 2
    assert ping.duplicate is False and ping.todo_ids == ()
    assert d5 == Ingested(d5.event_id, False, (holder,))
    assert d6.duplicate is False and len(d6.todo_ids) == 1
    queues = {todo_id: queue for todo_id, queue in rows(db_path, "SELECT id, queue FROM todos")}
    assert [queues[t] for t in d1.todo_ids] == ["triage", "log"]
    assert [queues[t] for t in d2.todo_ids] == ["log", "archive"]
    assert rows(db_path, "SELECT title FROM todos WHERE id = ?", [d1.todo_ids[0]]) == [("New: crash",)]
    # Every delivery stored once, every todo linked to the event that made it, in order.
    assert value(db_path, "SELECT count(*) FROM events WHERE family = 'webhook'") == 6
    links = rows(db_path, "SELECT event_id, position, todo_id FROM event_todos WHERE event_id = ?", [d1.event_id])
    assert links == [(d1.event_id, 0, d1.todo_ids[0]), (d1.event_id, 1, d1.todo_ids[1])]


async def test_a_message_that_cannot_be_routed_leaves_the_others_whole_and_nothing_half_written(store,
                                                                                                db_path) -> None:  # fmt: skip
    source = await routed_source(store)
    sql.refuse_inserts(db_path, "poison", "todos", "this todo cannot be stored", payload_like="%poison%")
    batch = [delivery(f"d-{i}", {"action": "opened", "title": "poison" if i == 2 else f"t{i}"}) for i in range(5)]

    answers = await routing.accept(store, source, batch)

    assert all(isinstance(a, Ingested) for a in answers)
    assert [a.unroutable is not None for a in answers] == [False, False, True, False, False]
    poison = value(db_path, "SELECT id FROM events WHERE external_id = 'd-2'")
    assert answers[2] == Ingested(poison, False, (), UNROUTABLE)
    assert [len(a.todo_ids) for a in answers] == [2, 2, 0, 2, 2]
    assert value(db_path, "SELECT count(*) FROM events WHERE family = 'webhook'") == 5
    # Nothing half-written: every todo is linked to its event, no link points nowhere.
    assert value(db_path, "SELECT count(*) FROM todos") == 8
    assert value(db_path, "SELECT count(*) FROM todos WHERE id NOT IN (SELECT todo_id FROM event_todos)") == 0
    assert value(db_path, "SELECT count(*) FROM todos WHERE event_id NOT IN (SELECT id FROM events)") == 0


async def test_a_lone_delivery_that_cannot_be_routed_is_kept_without_todos_saying_why(store, db_path) -> None:
    source = await routed_source(store)
    sql.refuse_inserts(db_path, "poison", "todos", "this todo cannot be stored")
    (answer,) = await routing.accept(store, source, [delivery("d-0", {"action": "opened", "title": "t"})])
    kept = value(db_path, "SELECT id FROM events WHERE external_id = 'd-0'")
    assert answer == Ingested(kept, False, (), UNROUTABLE)
    assert value(db_path, "SELECT count(*) FROM todos") == 0


async def test_a_delivery_that_cannot_be_stored_even_bare_comes_back_as_its_exception_in_its_place(store,
                                                                                                 db_path) -> None:  # fmt: skip
    source = await routed_source(store)
    sql.refuse_inserts(db_path, "unstorable", "events", "this event cannot be stored", when="NEW.external_id = 'd-1'")
    answers = await routing.accept(store, source, [delivery(f"d-{i}", {"action": "edited", "n": i}) for i in range(3)])
    assert [type(a) for a in answers] == [Ingested, Conflict, Ingested]
    assert answers[1].message == "the database refused the change: this event cannot be stored"
    assert [a.unroutable for a in (answers[0], answers[2])] == [None, None]
    assert rows(db_path, "SELECT external_id FROM events WHERE family = 'webhook' ORDER BY id") == [("d-0",), ("d-2",)]


def fence(allowed: int) -> tuple[list[tuple[int, int]], Guard]:
    """A consumer's fence that lets ``allowed`` transactions through, then finds its leadership lost.
    It notes each transaction's time and the last event id it sees there, before anything is stored."""
    checked: list[tuple[int, int]] = []

    def guard(tx: Transaction, now: int) -> None:
        row = tx.one(Q.last_event_id)
        checked.append((now, row["id"]))
        if len(checked) > allowed:
            raise NotLeader("another process leads ingest now")

    return checked, guard


@pytest.mark.sqlite_only  # one transaction per write, each running its guard once
@pytest.mark.parametrize("allowed", [0, 1, 2], ids=["the batch", "a delivery alone", "keeping it bare"])
async def test_a_fence_lost_at_any_transaction_of_a_delivery_stores_nothing_and_is_raised(store, db_path, clock,
                                                                                           allowed):  # fmt: skip
    source = await routed_source(store)
    sql.refuse_inserts(db_path, "poison", "todos", "this todo cannot be stored", payload_like="%poison%")
    checked, guard = fence(allowed)
    fine, poison = delivery("d-0", {"action": "edited"}), delivery("d-1", {"action": "opened", "title": "poison"})
    batch = {0: [fine], 1: [fine, poison], 2: [poison]}[allowed]  # the fence is lost at the transaction named
    with pytest.raises(NotLeader):
        await routing.accept(store, source, batch, guard=guard)
    assert checked == [(clock.now_ms(), 0)] * (allowed + 1)
    assert value(db_path, "SELECT count(*) FROM events WHERE family = 'webhook'") == 0


async def test_concurrent_deliveries_through_the_intake_each_get_their_own_answer(store, db_path) -> None:
    source = await routed_source(store)
    intake = routing.Intake(store)
    events = [delivery(f"d-{i % 12}", {"action": "edited", "n": i % 12}) for i in range(30)]

    answers = await asyncio.gather(*(intake.accept(source, event) for event in events))

    first = {}
    for event, answer in zip(events, answers):
        assert isinstance(answer, Ingested)
        first.setdefault(event.external_id, answer)
        assert (answer.event_id, answer.todo_ids) == (first[event.external_id].event_id, first[event.external_id].todo_ids)
    assert sum(not a.duplicate for a in answers) == 12
    assert value(db_path, "SELECT count(*) FROM events WHERE family = 'webhook'") == 12
    assert value(db_path, "SELECT count(*) FROM todos") == 12


async def test_a_rule_added_by_another_process_applies_to_the_next_delivery(store, db_path) -> None:
    source = await routed_source(store)
    intake = routing.Intake(store)
    before = await intake.accept(await sources.for_delivery(store, "gh", family="webhook"), delivery("a", {"x": 1, "n": "a"}))
    assert rows(db_path, "SELECT queue FROM todos WHERE id = ?", [before.todo_ids[0]]) == [("gh",)]

    added = run_cli("rule", "add", "--source", "gh", "--where", "x=1", "--queue", "elsewhere", "--stop", db=db_path)
    assert added.returncode == 0, added.stderr
    after = await intake.accept(source, delivery("b", {"x": 1, "n": "b"}))
    batch = await routing.accept(store, source, [delivery("c", {"x": 1, "n": "c"}), delivery("d", {"x": 2})])

    assert rows(db_path, "SELECT queue FROM todos WHERE id = ?", [after.todo_ids[0]]) == [("elsewhere",)]
    assert [rows(db_path, "SELECT queue FROM todos WHERE id = ?", [a.todo_ids[0]])[0][0] for a in batch] == ["elsewhere", "gh"]


async def test_a_source_disabled_or_removed_by_another_process_is_seen_at_the_next_delivery(store, db_path) -> None:
    await routed_source(store)
    assert (await sources.for_delivery(store, "gh", family="webhook")).enabled

    assert run_cli("source", "disable", "gh", db=db_path).returncode == 0
    assert (await sources.for_delivery(store, "gh", family="webhook")).enabled is False
    assert run_cli("source", "enable", "gh", db=db_path).returncode == 0
    assert (await sources.for_delivery(store, "gh", family="webhook")).enabled is True
    assert run_cli("source", "remove", "gh", db=db_path).returncode == 0
    with pytest.raises(sources.NotFound):
        await sources.for_delivery(store, "gh", family="webhook")


async def test_a_rule_removed_in_this_process_applies_to_the_next_batch(store, db_path) -> None:
    source = await routed_source(store)
    opened = {"action": "opened", "title": "t"}
    (first,) = await routing.accept(store, source, [delivery("a", {**opened, "n": "a"})])
    triage = next(r for r in await rules.list_rules(store, source="gh") if r.queue == "triage")
    await rules.remove(store, triage.id)
    second, _ = await routing.accept(store, source, [delivery("b", {**opened, "n": "b"}), delivery("c", {**opened, "n": "c"})])

    assert len(first.todo_ids) == 2 and len(second.todo_ids) == 1
    assert rows(db_path, "SELECT queue FROM todos WHERE id = ?", [second.todo_ids[0]]) == [("log",)]


async def test_the_intake_stores_at_most_256_waiting_deliveries_per_transaction(store, db_path) -> None:
    source = await routed_source(store)
    intake = routing.Intake(store)
    before = (await store.data_version())[1]  # this store's commits

    deliveries = [delivery(f"d-{i}", {"action": "edited", "n": i}) for i in range(257)]
    answers = await asyncio.gather(*(intake.accept(source, event) for event in deliveries))

    assert all(isinstance(a, Ingested) and not a.duplicate and len(a.todo_ids) == 1 for a in answers)
    assert (await store.data_version())[1] == before + 2  # 256, then the one left
    assert value(db_path, "SELECT count(*) FROM events WHERE family = 'webhook'") == 257


async def test_a_store_fault_answers_every_delivery_of_its_batch_and_stores_none(tmp_path, clock, monkeypatch) -> None:
    monkeypatch.setenv("SWITCHBOARD_BUSY_TIMEOUT", "0")  # a write that meets another writer's lock is refused at once
    db_path = tmp_path / "s.db"
    async with await open_store(db_path, clock=clock) as store:
        source = await routed_source(store)
        intake = routing.Intake(store)
        holder = sqlite3.connect(db_path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process writing
        try:
            answers = await asyncio.gather(*(intake.accept(source, delivery(f"d-{i}", {"n": i})) for i in range(3)))
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert [type(a) for a in answers] == [Busy] * 3
        assert value(db_path, "SELECT count(*) FROM events WHERE family = 'webhook'") == 0
        assert isinstance(await intake.accept(source, delivery("d-0", {"n": 0})), Ingested)  # the lock gone, it stores


@pytest.mark.sqlite_only  # it holds the SQLite store's write thread
async def test_deliveries_waiting_when_the_process_stops_are_told_they_may_not_be_stored(store, monkeypatch) -> None:
    source = await routed_source(store)
    intake = routing.Intake(store, max_batch=1)
    storing = asyncio.Event()
    deliver_many = routing.deliver_many

    async def observed(*args: Any, **kwargs: Any) -> Any:
        storing.set()
        return await deliver_many(*args, **kwargs)

    monkeypatch.setattr(routing, "deliver_many", observed)
    gate, held = await hold_the_thread(store)
    callers = [asyncio.ensure_future(intake.accept(source, delivery(f"d-{i}", {"n": i}))) for i in range(3)]
    with anyio.fail_after(10):
        await storing.wait()  # the first delivery's batch is being stored; the other two wait
        intake._task.cancel()  # what stopping the process does to it
        answers = await asyncio.gather(*callers, return_exceptions=True)
    gate.set()
    await held
    assert [(type(a), a.message) for a in answers] == [
        (Unavailable, "the process is stopping; the delivery may not be stored")
    ] * 3
    with anyio.fail_after(10):
        again = await intake.accept(source, delivery("d-3", {"n": 3}))  # a new batch, stored
    assert isinstance(again, Ingested) and not again.duplicate
