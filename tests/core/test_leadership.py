"""Ingest leadership (issue 13 §1): one leader at a time, by a lease in the
database; a fence that refuses a deposed leader's batches."""

from __future__ import annotations

import asyncio

import pytest

from switchboard_local.core import leadership, routing, sources, webhook_config
from switchboard_local.core.events import NewEvent
from switchboard_local.core.leadership import Candidate, NotLeader

from support.sql import count, value

pytestmark = pytest.mark.anyio

ALIVE = {"alive": lambda pid: True}  # every leader's process counts as running


def candidate(n: int, host: str = "box") -> Candidate:
    return Candidate(holder=f"holder-{n}", pid=1000 + n, host=host, kind="mcp")


async def test_the_first_process_leads_and_another_stands_by(store) -> None:
    first = await leadership.try_lead(store, candidate(1), **ALIVE)
    assert first is not None and first.fence == 1
    assert await leadership.try_lead(store, candidate(2), **ALIVE) is None
    leader = await leadership.current(store)
    assert (leader.pid, leader.kind, leader.fence) == (1001, "mcp", 1)


async def test_a_leader_not_renewed_for_the_lease_time_is_taken_over_with_a_higher_fence(store, clock) -> None:
    first = await leadership.try_lead(store, candidate(1), **ALIVE)
    clock.advance(leadership.LEASE_SECONDS - 0.001)
    assert await leadership.try_lead(store, candidate(2), **ALIVE) is None
    clock.advance(0.001)
    second = await leadership.try_lead(store, candidate(2), **ALIVE)
    assert second is not None and second.fence == first.fence + 1
    assert await leadership.renew(store, first) is False  # the old leader learns it lost


async def test_a_renewed_lease_keeps_the_leadership(store, clock) -> None:
    first = await leadership.try_lead(store, candidate(1), **ALIVE)
    for _ in range(5):
        clock.advance(leadership.LEASE_SECONDS / 2)
        assert await leadership.renew(store, first) is True
    assert await leadership.try_lead(store, candidate(2), **ALIVE) is None


async def test_a_leader_whose_process_died_on_this_host_is_taken_over_at_once(store) -> None:
    await leadership.try_lead(store, candidate(1), **ALIVE)
    taken = await leadership.try_lead(store, candidate(2), alive=lambda pid: pid != 1001)
    assert taken is not None and taken.fence == 2


async def test_a_leader_on_another_host_is_not_judged_by_a_pid_here(store) -> None:
    await leadership.try_lead(store, candidate(1, host="other"), **ALIVE)
    assert await leadership.try_lead(store, candidate(2), alive=lambda pid: False) is None


async def test_a_released_leadership_is_taken_at_the_next_look(store) -> None:
    first = await leadership.try_lead(store, candidate(1), **ALIVE)
    await leadership.release(store, first)
    assert await leadership.current(store) is None
    assert (await leadership.try_lead(store, candidate(2), **ALIVE)).fence == 2


async def test_a_take_over_asked_for_is_handed_to_the_asker_and_no_other(store) -> None:
    first = await leadership.try_lead(store, candidate(1), **ALIVE)
    assert await leadership.try_lead(store, candidate(2), take_over=True, **ALIVE) is None  # asked
    assert await leadership.renew(store, first) is False  # the leader steps down at its next renewal
    assert await leadership.try_lead(store, candidate(3), **ALIVE) is None  # not to a bystander
    taken = await leadership.try_lead(store, candidate(2), **ALIVE)
    assert taken is not None and taken.fence == 2
    assert await leadership.try_lead(store, candidate(1), **ALIVE) is None


async def test_a_take_over_whose_asker_went_away_is_not_waited_for_forever(store, clock) -> None:
    first = await leadership.try_lead(store, candidate(1), **ALIVE)
    await leadership.try_lead(store, candidate(2), take_over=True, **ALIVE)
    await leadership.renew(store, first)  # steps down; candidate 2 never comes back
    clock.advance(leadership.LEASE_SECONDS)
    assert (await leadership.try_lead(store, candidate(3), **ALIVE)).fence == 2


async def test_of_two_standbys_racing_for_a_free_lead_exactly_one_wins(store) -> None:
    answers = await asyncio.gather(*(leadership.try_lead(store, candidate(n), **ALIVE) for n in range(1, 6)))
    assert sum(a is not None for a in answers) == 1


async def test_a_batch_stored_under_a_deposed_lease_stores_nothing(store, clock, db_path) -> None:
    first = await leadership.try_lead(store, candidate(1), **ALIVE)
    clock.advance(leadership.LEASE_SECONDS)
    await leadership.try_lead(store, candidate(2), **ALIVE)
    event = NewEvent(source="orders", family="queue", type="orders", external_id="m-1", trust_mode="queue",
                     verified=True, body=b'{"n": 1}')  # fmt: skip
    guard = lambda tx, now: leadership.check(tx, first, now)  # noqa: E731
    with pytest.raises(NotLeader):
        await routing.deliver_many(store, [event], guard=guard)
    assert count(db_path, "events") == 0


async def test_a_batch_under_the_current_lease_is_stored(store, db_path) -> None:
    lease = await leadership.try_lead(store, candidate(1), **ALIVE)
    event = NewEvent(source="orders", family="queue", type="orders", external_id="m-1", trust_mode="queue",
                     verified=True, body=b'{"n": 1}')  # fmt: skip
    await routing.deliver_many(store, [event], guard=lambda tx, now: leadership.check(tx, lease, now))
    assert count(db_path, "events") == 1


async def test_a_leader_is_recorded_with_its_receiver_in_the_same_write(store) -> None:
    await leadership.try_lead(store, candidate(1), http="http://127.0.0.1:8765", **ALIVE)
    leader = await leadership.current(store)
    assert (leader.pid, leader.http) == (1001, "http://127.0.0.1:8765")


async def test_a_new_leader_does_not_inherit_the_last_ones_receiver(store, clock) -> None:
    await leadership.try_lead(store, candidate(1), http="http://127.0.0.1:8765", **ALIVE)
    clock.advance(leadership.LEASE_SECONDS + 1)
    await leadership.try_lead(store, candidate(2), **ALIVE)
    assert (await leadership.current(store)).http is None


async def test_standbys_are_listed_while_they_look_and_forgotten_when_they_leave(store, clock) -> None:
    await leadership.try_lead(store, candidate(1), **ALIVE)
    await leadership.seen(store, candidate(2))
    assert sorted(m.pid for m in await leadership.members(store)) == [1001, 1002]
    await leadership.leave(store, candidate(2))
    assert [m.pid for m in await leadership.members(store)] == [1001]
    clock.advance(3 * leadership.MEMBER_SECONDS + 1)
    assert await leadership.members(store) == []


async def add_sources_reading_env(store) -> None:
    """A webhook source whose secret is in $GH_SECRET, and an adapter whose URL is in $ORDERS_URL."""
    await sources.add(store, "gh", family="webhook", kind="github", trust_mode="github",
                      config=webhook_config.source_config("github", {}), secrets=[sources.secret_ref(env="GH_SECRET")])
    await sources.add(store, "orders", family="queue", kind="redis", trust_mode="queue",
                      config={"url_env": "ORDERS_URL", "mode": "list", "key": "orders"})  # fmt: skip


async def test_the_leader_says_which_of_the_sources_variables_it_has_and_never_a_value(store, db_path) -> None:
    await add_sources_reading_env(store)
    environ = {"GH_SECRET": "hunter2-in-the-env", "UNRELATED": "not-named-by-a-source"}
    await leadership.try_lead(store, candidate(1), environ=environ, **ALIVE)
    leader = await leadership.current(store)
    assert dict(leader.env) == {"GH_SECRET": True, "ORDERS_URL": False}
    assert (leader.has("GH_SECRET"), leader.has("ORDERS_URL"), leader.has("UNRELATED")) == (True, False, None)
    row = str(value(db_path, "SELECT env FROM ingest_leader"))
    assert "hunter2" not in row and "UNRELATED" not in row


async def test_a_source_added_while_leading_is_answered_for_at_the_next_renewal(store) -> None:
    lease = await leadership.try_lead(store, candidate(1), environ={"GH_SECRET": "s"}, **ALIVE)
    assert dict((await leadership.current(store)).env) == {}
    await add_sources_reading_env(store)
    assert (await leadership.current(store)).has("GH_SECRET") is None  # not said yet: doctor does not guess
    assert await leadership.renew(store, lease, environ={"GH_SECRET": "s"})
    assert (await leadership.current(store)).has("GH_SECRET") is True
