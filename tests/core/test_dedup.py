"""Deduplication that holds against replays and outlives pruning, and ids that
count only what was stored (hardening issue §4, §5, §17)."""

from __future__ import annotations

import pytest

from switchboard_local.core import retention, routing, sources, todos, webhook_config
from switchboard_local.core.errors import InvalidArgument
from switchboard_local.core.events import NewEvent
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease

from support.sql import count, rows

pytestmark = pytest.mark.anyio

DAY = 86_400.0
BODY = b'{"action": "opened", "number": 7}'


def delivery(external_id: str, *, body: bytes = BODY, type: str = "pull_request", window: float = DAY,
             verified: bool = True) -> NewEvent:  # fmt: skip
    return NewEvent(source="gh", family="webhook", type=type, external_id=external_id, trust_mode="github",
                    verified=verified, body=body, content_type="application/json", replay_window=window)  # fmt: skip


@pytest.fixture
async def gh(store):
    return await sources.add(store, "gh", family="webhook", kind="github", trust_mode="github",
                              config=webhook_config.source_config("github", {}), secrets=[{"value": "s"}])  # fmt: skip


def ids(db_path, table: str) -> list[int]:
    return [r[0] for r in rows(db_path, f"SELECT id FROM {table} ORDER BY id")]


# ---------------------------------------------------------------- the replay window


async def test_a_captured_body_reposted_under_a_new_delivery_id_is_a_duplicate_within_the_window(store, gh, clock,
                                                                                                 db_path):  # fmt: skip
    first = await routing.deliver(store, delivery("d-1"))
    clock.advance(DAY - 1)
    replayed = await routing.deliver(store, delivery("forged-2"))
    assert (replayed.duplicate, replayed.event_id, replayed.todo_ids) == (True, first.event_id, first.todo_ids)
    assert ids(db_path, "events") == [first.event_id] and len(ids(db_path, "todos")) == 1


async def test_the_same_body_after_the_replay_window_is_a_new_delivery(store, gh, clock):
    first = await routing.deliver(store, delivery("d-1"))
    clock.advance(DAY + 1)
    later = await routing.deliver(store, delivery("d-2"))
    assert later.duplicate is False and later.event_id != first.event_id


async def test_a_replay_after_the_window_renews_it_from_the_new_delivery(store, gh, clock):
    await routing.deliver(store, delivery("d-1"))
    clock.advance(DAY + 1)
    second = await routing.deliver(store, delivery("d-2"))
    clock.advance(DAY - 1)
    third = await routing.deliver(store, delivery("d-3"))
    assert (third.duplicate, third.event_id) == (True, second.event_id)


async def test_the_same_body_under_another_type_is_not_a_replay(store, gh):
    await routing.deliver(store, delivery("d-1", type="pull_request"))
    other = await routing.deliver(store, delivery("d-2", type="pull_request_review"))
    assert other.duplicate is False


async def test_without_a_replay_window_the_same_body_under_a_new_id_is_a_new_delivery(store, gh):
    await routing.deliver(store, delivery("d-1", window=0))
    again = await routing.deliver(store, delivery("d-2", window=0))
    assert again.duplicate is False


async def test_an_unverified_delivery_is_never_taken_for_a_replay(store, gh):
    await routing.deliver(store, delivery("d-1", verified=False))
    again = await routing.deliver(store, delivery("d-2", verified=False))
    assert again.duplicate is False


def test_schemes_that_do_not_sign_the_delivery_id_have_a_replay_window_by_default():
    windows = {kind: webhook_config.source_config(kind, {"header": "x-sig"} if kind in ("hmac",) else {})["replay_window"]
               for kind in webhook_config.KINDS}  # fmt: skip
    assert {k for k, w in windows.items() if w == DAY} == {"github", "gitea", "gitlab", "hmac", "token"}
    assert {k for k, w in windows.items() if w == 0} == {"stripe", "slack", "standard", "open"}


def test_a_replay_window_is_at_most_the_default_dedup_horizon():
    assert webhook_config.source_config("github", {"replay_window": 7 * 86400})["replay_window"] == 7 * 86400
    with pytest.raises(InvalidArgument, match="7 days"):
        webhook_config.source_config("github", {"replay_window": 7 * 86400 + 1})


# ---------------------------------------------------------------- the dedup horizon


async def test_a_redelivery_after_its_event_was_pruned_by_the_cap_is_still_a_duplicate(store, gh, clock, db_path):
    first = await routing.deliver(store, delivery("d-1", window=0))
    done = await todos.claim(store, first.todo_ids[0], owner="w")
    await todos.complete(store, Lease.of(done))
    pruned = await retention.prune(store, max_events=0)
    assert pruned.events == 1 and ids(db_path, "events") == []
    clock.advance(3 * DAY)
    again = await routing.deliver(store, delivery("d-1", window=0))
    assert (again.duplicate, again.event_id, again.todo_ids) == (True, first.event_id, ())
    assert ids(db_path, "events") == [] and ids(db_path, "todos") == [done.id]


async def test_a_redelivery_after_the_dedup_horizon_is_a_new_delivery(store, gh, clock, db_path):
    first = await routing.deliver(store, delivery("d-1", window=0))
    done = await todos.claim(store, first.todo_ids[0], owner="w")
    await todos.complete(store, Lease.of(done))
    await retention.prune(store, max_events=0)
    clock.advance(7 * DAY + 1)
    forgotten = await retention.prune(store, max_events=0)
    assert forgotten.delivery_keys == 1
    again = await routing.deliver(store, delivery("d-1", window=0))
    assert again.duplicate is False and again.event_id != first.event_id


async def test_an_event_pruned_past_the_horizon_leaves_no_key_behind(store, gh, clock, db_path):
    await routing.deliver(store, delivery("d-1", window=0))
    (todo_id,) = ids(db_path, "todos")
    done = await todos.claim(store, todo_id, owner="w")
    await todos.complete(store, Lease(todo_id, done.lease_token))
    clock.advance(31 * DAY)
    await retention.prune(store)
    assert count(db_path, "delivery_keys") == 0


# ---------------------------------------------------------------- ids


async def test_duplicate_creates_do_not_use_up_todo_ids(store):
    made = []
    for key in ("a", "a", "b", "b", "b", "c"):
        todo, created = await todos.create(store, NewTodo(queue="q", title=key, idempotency_key=key))
        if created:
            made.append(todo.id)
    assert made == [1, 2, 3]


async def test_duplicate_deliveries_do_not_use_up_event_or_todo_ids(store, gh, db_path):
    for external_id in ("d-1", "d-1", "d-2", "d-2", "d-3"):
        await routing.deliver(store, delivery(external_id, body=external_id.encode(), window=0))
    assert ids(db_path, "events") == [1, 2, 3]
    assert ids(db_path, "todos") == [1, 2, 3]


async def test_the_same_body_exactly_at_the_end_of_the_replay_window_is_still_a_duplicate(store, gh, clock, db_path):
    first = await routing.deliver(store, delivery("d-1"))
    clock.advance(DAY)
    replayed = await routing.deliver(store, delivery("forged-2"))
    assert (replayed.duplicate, replayed.event_id) == (True, first.event_id)
    clock.advance(0.001)
    assert (await routing.deliver(store, delivery("forged-3"))).duplicate is False


async def test_a_pruned_delivery_key_is_kept_until_exactly_the_dedup_horizon(store, gh, clock, db_path):
    first = await routing.deliver(store, delivery("d-1", window=0))
    done = await todos.claim(store, first.todo_ids[0], owner="w")
    await todos.complete(store, Lease.of(done))
    await retention.prune(store, max_events=0)
    clock.advance(7 * DAY)
    assert (await retention.prune(store, max_events=0)).delivery_keys == 0
    assert (await routing.deliver(store, delivery("d-1", window=0))).duplicate is True
    clock.advance(0.001)
    assert (await retention.prune(store, max_events=0)).delivery_keys == 1


async def test_a_replay_window_of_one_second_still_catches_a_replay_within_it(store, gh, clock):
    first = await routing.deliver(store, delivery("d-1", window=1))
    clock.advance(0.5)
    replayed = await routing.deliver(store, delivery("forged-2", window=1))
    assert (replayed.duplicate, replayed.event_id) == (True, first.event_id)


# ---------------------------------------------------------------- each source its own deliveries


def from_source(source: str, external_id: str, body: bytes = BODY) -> NewEvent:
    return NewEvent(source=source, family="webhook", type="pull_request", external_id=external_id,
                    trust_mode="github", verified=True, body=body, content_type="application/json",
                    replay_window=DAY)  # fmt: skip


@pytest.fixture
async def two_sources(store, gh):
    return await sources.add(store, "gh2", family="webhook", kind="github", trust_mode="github",
                              config=webhook_config.source_config("github", {}), secrets=[{"value": "s"}])  # fmt: skip


async def test_a_duplicate_answers_with_its_own_sources_event_when_another_source_used_the_same_id(store, two_sources):
    await routing.deliver(store, from_source("gh", "d-1", b'{"n": 1}'))
    second = await routing.deliver(store, from_source("gh2", "d-1", b'{"n": 2}'))
    assert second.duplicate is False
    again = await routing.deliver(store, from_source("gh2", "d-1", b'{"n": 2}'))
    assert (again.duplicate, again.event_id) == (True, second.event_id)


async def test_a_pruned_or_replayed_delivery_of_one_source_is_no_duplicate_for_another(store, two_sources, clock):
    first = await routing.deliver(store, from_source("gh", "d-1"))
    done = await todos.claim(store, first.todo_ids[0], owner="w")
    await todos.complete(store, Lease.of(done))
    await retention.prune(store, max_events=0)  # gh's d-1 is kept as a key only, and its body as a replay key
    other = await routing.deliver(store, from_source("gh2", "d-1"))
    assert other.duplicate is False


async def test_a_duplicate_of_a_pruned_delivery_answers_with_that_deliverys_event(store, gh, clock):
    events = []
    for n in range(3):
        result = await routing.deliver(store, from_source("gh", f"d-{n}", f'{{"n": {n}}}'.encode()))
        done = await todos.claim(store, result.todo_ids[0], owner="w")
        await todos.complete(store, Lease.of(done))
        events.append(result.event_id)
    await retention.prune(store, max_events=0)
    clock.advance(DAY + 1)  # the bodies are past their replay window; the ids are kept to the horizon
    again = await routing.deliver(store, from_source("gh", "d-1", b'{"n": 1}'))
    assert (again.duplicate, again.event_id) == (True, events[1])


async def test_a_replayed_body_answers_with_the_event_it_repeats(store, gh, clock):
    events = [(await routing.deliver(store, from_source("gh", f"d-{n}", f'{{"n": {n}}}'.encode()))).event_id
              for n in range(3)]  # fmt: skip
    replayed = await routing.deliver(store, from_source("gh", "forged", b'{"n": 2}'))
    assert (replayed.duplicate, replayed.event_id) == (True, events[2])


async def test_a_redelivery_of_a_pruned_delivery_answers_with_its_own_event_not_a_later_one_with_the_same_body(
    store, gh, clock
):
    first = await routing.deliver(store, from_source("gh", "d-1"))
    clock.advance(DAY + 1)  # past the replay window: the same body under a new id is a new delivery
    later = await routing.deliver(store, from_source("gh", "d-2"))
    assert later.duplicate is False
    for result in (first, later):
        done = await todos.claim(store, result.todo_ids[0], owner="w")
        await todos.complete(store, Lease.of(done))
    await retention.prune(store, max_events=0)
    again = await routing.deliver(store, from_source("gh", "d-1"))
    assert (again.duplicate, again.event_id) == (True, first.event_id)


async def test_each_source_keeps_its_own_pruned_delivery_ids(store, two_sources):
    results = {}
    for source in ("gh", "gh2"):
        results[source] = await routing.deliver(store, from_source(source, "d-1", source.encode()))
        done = await todos.claim(store, results[source].todo_ids[0], owner="w")
        await todos.complete(store, Lease.of(done))
    await retention.prune(store, max_events=0)
    again = await routing.deliver(store, from_source("gh2", "d-1", b"gh2"))
    assert (again.duplicate, again.event_id) == (True, results["gh2"].event_id)
