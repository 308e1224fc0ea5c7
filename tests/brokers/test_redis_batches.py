"""--batch against fakeredis and a real redis-server: at most that many messages per transaction, in every path.

Messages waiting together are stored together (one transaction for up to
--batch of them), and never more: reading new stream entries, re-reading this
consumer's own pending ones, taking over a dead consumer's, moving from a
list, recovering KEY:processing, draining pub/sub. Each batch is seen where the
edge hands it to the core: routing.deliver_many, the one call that makes a
transaction of it (wrapped here to record its size, then run for real).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from switchboard_local.core import routing

from support.brokers import Running, add_adapter
from support.sql import rows, value
from support.store import hold_the_thread

pytestmark = pytest.mark.anyio

BATCH = 3
MESSAGES = [json.dumps({"n": i}) for i in range(10)]
IN_BATCHES = [3, 3, 3, 1]  # ten messages waiting, three at a time


@pytest.fixture
def batches(monkeypatch) -> list[int]:
    """The size of every batch the adapter stores, in order."""
    sizes: list[int] = []
    deliver_many = routing.deliver_many

    async def recording(store, events, **options):  # noqa: ANN001, ANN003, ANN202
        sizes.append(len(events))
        return await deliver_many(store, events, **options)

    monkeypatch.setattr(routing, "deliver_many", recording)
    return sizes


def bodies(db_path) -> list[str]:
    return [bytes(row[0]).decode() for row in rows(db_path, "SELECT body FROM events ORDER BY id")]


async def drain(running: Running, db_path, done) -> None:  # noqa: ANN001
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), len(MESSAGES))
    await running.until(done, True)
    await running.finish()


def stream_of(r, key: str = "orders") -> list[bytes]:  # noqa: ANN001
    return [r.xadd(key, {"payload": m}) for m in MESSAGES]


@pytest.mark.both_backends
async def test_new_stream_entries_are_stored_at_most_batch_at_a_time(real_store, broker, db_path, batches) -> None:
    r = broker.client()
    stream_of(r)
    running = Running(real_store, await add_adapter(real_store, broker.url, "stream", "orders", batch=BATCH),
                      connect=broker.connect)  # fmt: skip
    await drain(running, db_path, lambda: r.xpending("orders", "switchboard")["pending"] == 0)
    assert batches == IN_BATCHES
    assert bodies(db_path) == MESSAGES


async def test_a_consumers_own_pending_entries_are_reread_at_most_batch_at_a_time(real_store, broker, db_path,
                                                                                  batches) -> None:  # fmt: skip
    r = broker.client()
    r.xgroup_create("orders", "switchboard", id="0", mkstream=True)
    stream_of(r)
    r.xreadgroup("switchboard", "me", {"orders": ">"})  # this consumer read them all, then crashed: none acked
    adapter = await add_adapter(real_store, broker.url, "stream", "orders", batch=BATCH, consumer="me")
    running = Running(real_store, adapter, connect=broker.connect)
    await drain(running, db_path, lambda: r.xpending("orders", "switchboard")["pending"] == 0)
    assert batches == IN_BATCHES
    assert bodies(db_path) == MESSAGES


async def test_a_dead_consumers_idle_entries_are_taken_over_at_most_batch_at_a_time(real_store, broker, db_path,
                                                                                    batches) -> None:  # fmt: skip
    r = broker.client()
    r.xgroup_create("orders", "switchboard", id="0", mkstream=True)
    ids = stream_of(r)
    r.xreadgroup("switchboard", "dead", {"orders": ">"})
    r.xclaim("orders", "switchboard", "dead", 0, ids, idle=60_000)  # idle a minute already: past --claim-idle
    adapter = await add_adapter(real_store, broker.url, "stream", "orders", batch=BATCH, claim_idle=1)
    running = Running(real_store, adapter, connect=broker.connect)
    await drain(running, db_path, lambda: r.xpending("orders", "switchboard")["pending"] == 0)
    assert batches == IN_BATCHES
    assert bodies(db_path) == MESSAGES


async def test_a_list_is_moved_and_stored_at_most_batch_at_a_time(real_store, broker, db_path, batches) -> None:
    r = broker.client()
    r.lpush("jobs", *MESSAGES)
    running = Running(real_store, await add_adapter(real_store, broker.url, "list", "jobs", name="jobs", batch=BATCH),
                      connect=broker.connect)  # fmt: skip
    await drain(running, db_path, lambda: r.exists("jobs", "jobs:processing") == 0)
    assert batches == IN_BATCHES
    assert bodies(db_path) == MESSAGES


async def test_what_a_crash_left_in_the_processing_list_is_stored_at_most_batch_at_a_time(real_store, broker,
                                                                                          db_path, batches) -> None:  # fmt: skip
    r = broker.client()
    r.rpush("jobs:processing", *MESSAGES)  # moved before a crash, oldest first, never removed
    running = Running(real_store, await add_adapter(real_store, broker.url, "list", "jobs", name="jobs", batch=BATCH),
                      connect=broker.connect)  # fmt: skip
    await drain(running, db_path, lambda: r.exists("jobs", "jobs:processing") == 0)
    assert batches == IN_BATCHES
    assert bodies(db_path) == MESSAGES


async def test_pubsub_messages_that_queued_up_are_stored_together_at_most_batch_at_a_time(real_store, broker,
                                                                                          db_path, batches) -> None:  # fmt: skip
    r = broker.client()
    running = Running(real_store, await add_adapter(real_store, broker.url, "pubsub", "alerts", name="alerts",
                                                    batch=BATCH), connect=broker.connect)  # fmt: skip
    await running.until(lambda: r.pubsub_numsub("alerts")[0][1], 1)
    gate, held = await hold_the_thread(real_store)  # the adapter's first commit waits: the rest queue up meanwhile
    r.publish("alerts", MESSAGES[0])
    await running.until(lambda: len(batches), 1)
    for m in MESSAGES[1:]:
        r.publish("alerts", m)
    await asyncio.sleep(0.2)  # for them to reach the adapter's socket while it waits on its commit
    gate.set()
    assert await held
    await drain(running, db_path, lambda: True)
    assert sum(batches) == len(MESSAGES) and max(batches) == BATCH
    assert bodies(db_path) == MESSAGES
