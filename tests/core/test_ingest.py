"""The ingestion back half (DESIGN §3): one transaction stores an event and its todos."""

from __future__ import annotations

import json
import random

import pytest

from switchboard_local.core import events, retention, routing, rules, sources, todos, webhook_config
from switchboard_local.core.clock import ManualClock
from switchboard_local.core.errors import Conflict, InvalidArgument, NotFound
from switchboard_local.core.events import NewEvent
from switchboard_local.core.store.interface import Store, Transaction
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.store.queries import Q
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease

from support import sql
from support.ingest import ingest
from support.sql import rows

pytestmark = pytest.mark.anyio

# Not UTF-8, with a NUL and CRLF: what arrived must come back byte for byte.
RAW_BODY = b'\x00\xff{"action": "opened",  "n": 1}\r\n'


def push(external_id="delivery-1", source="github", body=RAW_BODY, **fields):
    return NewEvent(
        source=source,
        family="webhook",
        type="push",
        external_id=external_id,
        trust_mode="hmac-sha256",
        verified=True,
        body=body,
        verify_detail="X-Hub-Signature-256 matched",
        content_type="application/json",
        headers={"X-GitHub-Event": "push", "X-Hub-Signature-256": "[redacted]"},
        **fields,
    )


def work(*titles, queue="builds", key_prefix="github:delivery-1"):
    return [NewTodo(queue=queue, title=t, idempotency_key=f"{key_prefix}:{t}") for t in titles]


async def test_new_event_and_its_todos_are_stored_together(store, clock, db_path, row_count):
    got = await ingest(store, push(), work("first", "second"))
    assert got.duplicate is False
    assert len(got.todo_ids) == 2
    event = await events.get_event(store, got.event_id)
    assert event.body == RAW_BODY
    assert event.size == len(RAW_BODY)
    assert event.headers == {"X-GitHub-Event": "push", "X-Hub-Signature-256": "[redacted]"}
    assert (event.source, event.family, event.type, event.external_id) == ("github", "webhook", "push", "delivery-1")
    assert (event.trust_mode, event.verified) == ("hmac-sha256", True)
    assert event.verify_detail == "X-Hub-Signature-256 matched"
    assert (event.content_type, event.received_at) == ("application/json", clock.now_ms())
    # On disk, as bytes (a BLOB, a bytea), not re-encoded text.
    body_type = "pg_typeof(body)::text" if sql.is_url(db_path) else "typeof(body)"
    assert rows(db_path, f"SELECT body, {body_type} FROM events") == [(RAW_BODY, "bytea" if sql.is_url(db_path) else "blob")]
    stored = [await todos.get(store, i) for i in got.todo_ids]
    assert [(t.title, t.event_id, t.state) for t in stored] == [
        ("first", got.event_id, "pending"),
        ("second", got.event_id, "pending"),
    ]
    assert (row_count("events"), row_count("todos")) == (1, 2)


async def test_event_with_no_todos_is_stored_alone(store, row_count):
    got = await ingest(store, push(), [])
    assert (got.duplicate, got.todo_ids) == (False, ())
    assert (row_count("events"), row_count("todos")) == (1, 0)


async def test_redelivery_is_a_duplicate_and_adds_nothing(store, clock, row_count):
    first = await ingest(store, push(), work("first", "second"))
    clock.advance(60)
    again = await ingest(store, push(body=b"a different body"), work("first", "second", "third"))
    assert again.duplicate is True
    assert (again.event_id, again.todo_ids) == (first.event_id, first.todo_ids)
    assert (row_count("events"), row_count("todos")) == (1, 2)
    assert (await events.get_event(store, first.event_id)).body == RAW_BODY


async def test_redelivery_after_the_todos_are_done_adds_nothing(store, row_count):
    first = await ingest(store, push(), work("only"))
    claimed = await todos.claim(store, first.todo_ids[0], owner="w")
    await todos.complete(store, Lease.of(claimed))
    again = await ingest(store, push(), work("only"))
    assert (again.duplicate, again.todo_ids) == (True, first.todo_ids)
    assert (row_count("events"), row_count("todos")) == (1, 1)


async def test_same_external_id_from_another_source_is_a_new_event(store, row_count):
    a = await ingest(store, push(source="hook-a"), work("t", key_prefix="hook-a:delivery-1"))
    b = await ingest(store, push(source="hook-b"), work("t", key_prefix="hook-b:delivery-1"))
    assert b.duplicate is False
    assert b.event_id != a.event_id
    assert set(a.todo_ids).isdisjoint(b.todo_ids)
    assert (row_count("events"), row_count("todos")) == (2, 2)


async def test_todo_whose_key_is_live_collapses_into_the_existing_one(store, row_count):
    existing, _ = await todos.create(store, NewTodo(queue="builds", title="made by hand", idempotency_key="k"))
    got = await ingest(store, push(), [NewTodo(queue="builds", title="from event", idempotency_key="k")])
    assert got.duplicate is False
    assert got.todo_ids == (existing.id,)
    kept = await todos.get(store, existing.id)
    assert (kept.title, kept.event_id) == ("made by hand", None)
    assert (row_count("events"), row_count("todos")) == (1, 1)


async def test_redelivery_answers_with_the_collapsed_todo_ids_too(store, row_count):
    # events.ingest_many promises a redelivery "answers with the first delivery's
    # event id and todo ids"; a todo collapsed into a live one belongs to it.
    existing, _ = await todos.create(store, NewTodo(queue="builds", title="made by hand", idempotency_key="k"))
    todo_list = [NewTodo(queue="builds", title="from event", idempotency_key="k")]
    first = await ingest(store, push(), todo_list)
    again = await ingest(store, push(), todo_list)
    assert again.duplicate is True
    assert (row_count("events"), row_count("todos")) == (1, 1)
    assert again.todo_ids == first.todo_ids == (existing.id,)


async def test_two_todos_of_one_event_with_the_same_key_collapse(store, row_count):
    same = [NewTodo(queue="q", title=t, idempotency_key="k") for t in ("a", "b")]
    got = await ingest(store, push(), same)
    assert got.todo_ids[0] == got.todo_ids[1]
    assert row_count("todos") == 1
    again = await ingest(store, push(), same)
    assert (again.duplicate, again.todo_ids) == (True, got.todo_ids)


async def test_failure_part_way_stores_nothing_and_redelivery_then_succeeds(store, db_path, row_count):
    sql.refuse_inserts(db_path, "fail_second", "todos", "injected fault", when="NEW.title = 'second'")
    with pytest.raises(Conflict, match="injected fault"):
        await ingest(store, push(), work("first", "second"))
    assert (row_count("events"), row_count("todos")) == (0, 0)

    sql.drop_trigger(db_path, "fail_second", "todos")
    stored = await ingest(store, push(), work("first", "second"))
    assert stored.duplicate is False
    again = await ingest(store, push(), work("first", "second"))
    assert (again.duplicate, again.event_id, again.todo_ids) == (True, stored.event_id, stored.todo_ids)
    assert (row_count("events"), row_count("todos")) == (1, 2)
    assert rows(db_path, "SELECT DISTINCT event_id FROM todos") == [(stored.event_id,)]


async def test_store_stays_usable_after_a_failed_ingest(store, db_path):
    sql.refuse_inserts(db_path, "fail_all", "todos", "no")
    with pytest.raises(Conflict):
        await ingest(store, push(), work("first"))
    sql.drop_trigger(db_path, "fail_all", "todos")
    todo, created = await todos.create(store, NewTodo(queue="q", title="after"))
    assert created and (await todos.get(store, todo.id)).title == "after"


# ---------------------------------------------------------------- a batch is its deliveries one by one

DAY = 86_400.0


def signed(external_id: str, body: bytes = b"{}", *, window: float = 0.0, verified: bool = True) -> NewEvent:
    return NewEvent(source="github", family="webhook", type="push", external_id=external_id, trust_mode="hmac-sha256",
                    verified=verified, body=body, content_type="application/json", replay_window=window)  # fmt: skip


def job(title: str, key: str | None = None, **fields) -> NewTodo:
    return NewTodo(queue="builds", title=title, idempotency_key=key, **fields)


def titled_by_its_event(tx: Transaction, event_id: int, event: NewEvent) -> list[NewTodo]:
    """A Derive: the todos are known once the event is (routing's way), and name its id."""
    return [job(f"made for event {event_id}", f"derived:{event.external_id}")]


async def history(store: Store, clock: ManualClock) -> None:
    """What the store saw before the batch: a delivery pruned to its key, one still
    stored (in a replay window), a live todo holding a key, a finished one that
    freed its key, and a claimed todo whose lease lapsed (it keeps its key: it
    has attempts left)."""
    gone = await ingest(store, signed("gone", b"gone"), [job("gone")])
    await todos.complete(store, Lease.of(await todos.claim(store, gone.todo_ids[0], owner="w")))
    await retention.prune(store, max_events=0)
    await ingest(store, signed("old", b"old", window=DAY), [job("old", "old")])
    await todos.create(store, job("holder", "held"))
    finished, _ = await todos.create(store, job("finished", "done"))
    await todos.complete(store, Lease.of(await todos.claim(store, finished.id, owner="w")))
    lapsing, _ = await todos.create(store, job("retried", "lapsed"))
    await todos.claim(store, lapsing.id, owner="w", lease=30)
    clock.advance(60)


BATCHES = {
    "new deliveries and their todos, keyed or not": [
        (signed("a"), [job("a1", "a1"), job("a2"), job("a3")]),
        (signed("b"), []),
        (signed("c"), [job("c1"), job("c2", "c2")]),
    ],
    "repeats within the batch": [
        (signed("a"), [job("a1", "a1")]),
        (signed("a", b"another body"), [job("again", "again")]),
        (signed("b"), [job("b1")]),
        (signed("a"), []),
        (signed("b"), [job("b2")]),
    ],
    "deliveries seen before the batch, stored or pruned": [
        (signed("old", b"old", window=DAY), [job("old again", "old again")]),
        (signed("new"), [job("new")]),
        (signed("gone", b"gone"), [job("gone again")]),
        (signed("old"), []),
    ],
    "the same body under new ids within the replay window": [
        (signed("forged", b"old", window=DAY), [job("forged")]),
        (signed("x", b"X", window=DAY), [job("x", "x")]),
        (signed("forged-x", b"X", window=DAY), [job("forged x")]),
        (signed("y", b"Y", window=DAY), [job("y")]),
        (signed("unverified", b"X", window=DAY, verified=False), [job("unverified")]),
        (signed("outside", b"Y"), [job("outside")]),
    ],
    "a stored delivery again, with the body of a new one of the batch": [
        (signed("n", b"N", window=DAY), [job("n")]),
        (signed("old", b"N", window=DAY), [job("old with n's body")]),
        (signed("m"), [job("m")]),
    ],
    "todo keys held, taken earlier in the batch, or freed": [
        (signed("a"), [job("a1", "held"), job("a2", "shared"), job("a3")]),
        (signed("b"), [job("b1", "shared"), job("b2", "done"), job("b3")]),
        (signed("c"), [job("c1", "lapsed"), job("c2", "twice"), job("c3", "twice"), job("c4")]),
        (signed("d"), [job("d1", "c-less")]),
    ],
    "todos derived once the event is known": [
        (signed("a"), titled_by_its_event),
        (signed("b"), [job("b")]),
        (signed("a"), titled_by_its_event),
        (signed("c"), titled_by_its_event),
    ],
}
STORED = {
    "events": "SELECT * FROM events ORDER BY id",
    # Every column but the lease token's hash: a claim's token is random.
    "todos": (
        "SELECT id, queue, assignee, title, kind, payload, event_id, idempotency_key, state, priority, attempt, "
        "max_attempts, owner, lease_expires_at, visible_at, result, last_error, created_at, updated_at, claimed_at, "
        "completed_at, cancelled_by, cancel_reason FROM todos ORDER BY id"
    ),
    "event_todos": "SELECT * FROM event_todos ORDER BY event_id, position",
    "delivery_keys": "SELECT * FROM delivery_keys ORDER BY source, key",
}


@pytest.mark.parametrize("batch", BATCHES.values(), ids=BATCHES)
async def test_a_batch_answers_and_stores_exactly_what_its_deliveries_one_by_one_would(db_path, other_db_path, batch):
    answers, stored = {}, {}
    for way, database in (("batch", db_path), ("one by one", other_db_path)):
        clock = ManualClock()
        async with await open_store(database, clock=clock, rng=random.Random(0)) as store:
            await history(store, clock)
            if way == "batch":
                answers[way] = await events.ingest_many(store, batch)
            else:
                answers[way] = [await ingest(store, event, todo_list) for event, todo_list in batch]
        stored[way] = {table: rows(database, query) for table, query in STORED.items()}
    assert answers["batch"] == answers["one by one"]
    assert stored["batch"] == stored["one by one"]


async def test_a_batch_todo_whose_key_a_lapsed_last_attempt_held_is_made_for_its_event(store, clock):
    last, _ = await todos.create(store, job("last attempt", "lapsed", max_attempts=1))
    await todos.claim(store, last.id, owner="w", lease=30)
    clock.advance(60)
    batch = [(signed("a"), [job("a1", "lapsed"), job("a2")]), (signed("b"), [job("b1")])]
    a, b = await events.ingest_many(store, batch)
    made = await todos.get(store, a.todo_ids[0])
    assert (made.title, made.event_id, made.state, made.created_at) == ("a1", a.event_id, "pending", clock.now_ms())
    assert made.id not in (last.id, *a.todo_ids[1:], *b.todo_ids)
    assert (await todos.get(store, last.id)).dead_letter


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"family": "email"}, "event family must be one of webhook, queue, schedule, operator, got 'email'"),
        ({"body": "text, not bytes"}, "event body must be bytes"),
        ({"source": ""}, "event source must be a non-empty string"),
        ({"external_id": ""}, "event external_id must be a non-empty string"),
    ],
    ids=["unknown-family", "str-body", "empty-source", "empty-external-id"],
)
async def test_malformed_event_is_refused_naming_the_field_before_anything_is_written(store, row_count, fields, message):
    base = {
        "source": "github",
        "family": "webhook",
        "type": "push",
        "external_id": "d",
        "trust_mode": "open",
        "verified": False,
        "body": b"{}",
    }
    with pytest.raises(InvalidArgument) as refused:
        await ingest(store, NewEvent(**{**base, **fields}), work("t"))
    assert refused.value.message == message
    assert (row_count("events"), row_count("todos")) == (0, 0)


async def test_unknown_event_is_not_found(store):
    with pytest.raises(NotFound):
        await events.get_event(store, 77)


# ---------------------------------------------------------------- listing events


async def test_list_events_filters_by_source_and_type_oldest_first(store):
    ids = {}
    for n, (source, type_) in enumerate([("gh", "push"), ("stripe", "charge"), ("gh", "issues"), ("gh", "push")]):
        event = NewEvent(source=source, family="webhook", type=type_, external_id=f"e{n}", trust_mode="open",
                         verified=False, body=b"{}")  # fmt: skip
        ids[n] = (await ingest(store, event, [])).event_id
    assert [e.id for e in await events.list_events(store, source="gh")] == [ids[0], ids[2], ids[3]]
    assert [e.id for e in await events.list_events(store, source="stripe")] == [ids[1]]
    assert [e.id for e in await events.list_events(store, source="gh", type="push")] == [ids[0], ids[3]]
    assert [e.id for e in await events.list_events(store)] == [ids[0], ids[1], ids[2], ids[3]]


async def test_list_events_since_keeps_those_received_at_or_after_the_instant(store, clock):
    first = (await ingest(store, NewEvent(source="s", family="webhook", type="t", external_id="1",
                                          trust_mode="open", verified=False, body=b"{}"), [])).event_id  # fmt: skip
    clock.advance(1)
    instant = clock.now_ms()
    second = (await ingest(store, NewEvent(source="s", family="webhook", type="t", external_id="2",
                                           trust_mode="open", verified=False, body=b"{}"), [])).event_id  # fmt: skip
    assert [e.id for e in await events.list_events(store, since=instant)] == [second]
    assert [e.id for e in await events.list_events(store, since=instant - 1000)] == [first, second]
    assert await events.list_events(store, since=instant + 1) == []


# ---------------------------------------------------------------- events in play
# Which events still have work in play (``events.in_play``): what an adapter acking on completion
# asks of the messages it holds. An event is in play while a todo it produced is pending or claimed;
# done, a dead letter and cancelled are finished, and an event that produced no todo never is.


async def add_hooks_source(store) -> None:
    await sources.add(store, "hooks", family="webhook", kind="open", trust_mode="open",
                      config=webhook_config.source_config("open", {}))  # fmt: skip


def job_delivery(payload, n: int) -> NewEvent:
    return NewEvent(source="hooks", family="webhook", type="job", external_id=f"d-{n}", trust_mode="open",
                    verified=True, body=json.dumps(payload).encode(), content_type="application/json")  # fmt: skip


async def test_an_event_is_in_play_until_every_todo_it_produced_is_finished(store) -> None:
    await add_hooks_source(store)
    for queue in ("a", "b", "c"):  # each delivery fans out to three todos
        await rules.add(store, source="hooks", queue=queue, max_attempts=1)
    made = await routing.deliver(store, job_delivery({}, 1))
    other = await routing.deliver(store, job_delivery({}, 2))
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
    await add_hooks_source(store)
    await rules.add(store, source="hooks", queue="a", max_attempts=1)
    made = await routing.deliver(store, job_delivery({}, 1))
    await todos.claim(store, made.todo_ids[0], owner="w", lease=30)
    clock.advance(29)
    assert await events.in_play(store, [made.event_id]) == {made.event_id}
    clock.advance(2)  # the lease lapsed on the last attempt: a dead letter
    assert await events.in_play(store, [made.event_id]) == set()
    assert (await todos.get(store, made.todo_ids[0])).state == "failed"


async def test_a_lapsed_lease_with_attempts_left_keeps_its_event_in_play(store, clock) -> None:
    await add_hooks_source(store)
    made = await routing.deliver(store, job_delivery({}, 1))  # the default route: five attempts
    await todos.claim(store, made.todo_ids[0], owner="w", lease=30)
    clock.advance(31)
    assert await events.in_play(store, [made.event_id]) == {made.event_id}  # pending again


async def test_an_event_that_produced_no_todo_is_never_in_play(store) -> None:
    await add_hooks_source(store)
    await rules.add(store, source="hooks", where=["skip=yes"], drop=True)
    dropped = await routing.deliver(store, job_delivery({"skip": "yes"}, 1))
    assert dropped.todo_ids == ()
    assert await events.in_play(store, [dropped.event_id, 999_999]) == set()


async def test_a_replays_todos_keep_the_event_in_play(store) -> None:
    await add_hooks_source(store)
    made = await routing.deliver(store, job_delivery({}, 1))
    await todos.complete(store, Lease.of(await todos.claim(store, made.todo_ids[0], owner="w")))
    assert await events.in_play(store, [made.event_id]) == set()
    (again,) = await routing.replay(store, made.event_id)
    assert await events.in_play(store, [made.event_id]) == {made.event_id}
    await todos.complete(store, Lease.of(await todos.claim(store, again, owner="w")))
    assert await events.in_play(store, [made.event_id]) == set()


async def test_many_events_are_asked_about_in_bounded_reads_and_answered_whole(store, monkeypatch) -> None:
    await add_hooks_source(store)
    monkeypatch.setattr(events, "IN_PLAY_CHUNK", 3)
    made = [await routing.deliver(store, job_delivery({}, n)) for n in range(7)]
    for finished in made[1::2]:
        await todos.cancel(store, finished.todo_ids[0], by="operator")
    ids = [m.event_id for m in made]
    asked: list[list[int]] = []
    read_all = store.read_all

    async def noted(sql, params=()):
        if sql == Q.events_in_play:
            asked.append(json.loads(params["ids"]))
        return await read_all(sql, params)

    monkeypatch.setattr(store, "read_all", noted)
    # The first and the last event in play, each at a chunk's edge (3 + 3 + 1 ids).
    assert await events.in_play(store, [*ids, *ids]) == set(ids[::2])
    assert asked == [ids[0:3], ids[3:6], ids[6:]]  # each id asked about once, in reads of at most the chunk
    asked.clear()
    assert await events.in_play(store, []) == set()
    assert asked == []
