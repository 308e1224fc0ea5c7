"""Redis adapters against fakeredis and a real redis-server (the `broker` fixture): store first, then ack."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
from collections.abc import Callable

import pytest

from switchboard_local.brokers.loop import Consumer, Faults, Supervisor
from switchboard_local.brokers.redis_client import url_password
from switchboard_local.brokers.redis_stream import StreamReader
from switchboard_local.brokers.registry import BROKERS
from switchboard_local.core import leadership, rules, sources, todos
from switchboard_local.core.events import body_hash

from support.brokers import Running, add_adapter
from support.redis_server import free_port, started_redis_server
from support.sql import drop_trigger, refuse_inserts, rows, value
from support.waits import until_async

pytestmark = pytest.mark.anyio


async def test_ten_thousand_stream_entries_become_exactly_ten_thousand_events_and_todos(real_store, broker, db_path) -> None:
    r = broker.client()
    with r.pipeline(transaction=False) as pipe:
        for i in range(10_000):
            pipe.xadd("orders", {"payload": json.dumps({"order": i})})
        pipe.execute()
    running = Running(real_store, await add_adapter(real_store, broker.url, "stream", "orders"), connect=broker.connect)
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 10_000)
    await running.finish()

    assert value(db_path, "SELECT count(*) FROM todos") == 10_000
    assert value(db_path, "SELECT count(DISTINCT external_id) FROM events") == 10_000
    assert r.xpending("orders", "switchboard")["pending"] == 0
    health = await sources.get(real_store, "orders")
    assert health.messages_stored == 10_000 and health.consecutive_failures == 0


@pytest.mark.both_backends
async def test_stream_entry_fields_become_the_body_and_rules_route_on_them(real_store, broker, db_path) -> None:
    r = broker.client()
    await add_adapter(real_store, broker.url, "stream", "orders", queue="fulfilment")
    await rules.add(real_store, source="orders", type="orders", where=["priority=high"], queue="urgent", title="Order {id}")
    r.xadd("orders", {"id": "7", "priority": "high"})
    entry = r.xadd("orders", {"payload": '{"id": 8}'})
    running = Running(real_store, await sources.get(real_store, "orders"), connect=broker.connect)
    await running.until(lambda: value(db_path, "SELECT count(*) FROM todos"), 2)
    await running.finish()

    urgent, default = [await todos.get(real_store, i) for i in (1, 2)]
    assert (urgent.queue, urgent.title, urgent.payload["body"]) == ("urgent", "Order 7", {"id": "7", "priority": "high"})
    assert (default.queue, default.payload["body"]) == ("fulfilment", {"id": 8})
    assert default.idempotency_key == f"event:orders:{entry.decode()}:default"  # one form for every source


@pytest.mark.both_backends
async def test_list_mode_stores_then_removes_from_the_processing_list(real_store, broker, db_path) -> None:
    r = broker.client()
    r.lpush("jobs", *[json.dumps({"job": i}) for i in range(300)])
    running = Running(real_store, await add_adapter(real_store, broker.url, "list", "jobs", name="jobs"),
                      connect=broker.connect)  # fmt: skip
    await running.until(lambda: value(db_path, "SELECT count(*) FROM todos"), 300)
    await running.finish()
    assert r.llen("jobs") == 0 and r.llen("jobs:processing") == 0
    assert value(db_path, "SELECT count(*) FROM events") == 300


async def test_list_mode_recovers_what_a_crash_left_in_the_processing_list(real_store, broker, db_path) -> None:
    r = broker.client()
    r.lpush("jobs:processing", b'{"left": "behind"}')  # moved before a crash, never removed
    r.lpush("jobs", b'{"fresh": 1}')
    running = Running(real_store, await add_adapter(real_store, broker.url, "list", "jobs", name="jobs"),
                      connect=broker.connect)  # fmt: skip
    await running.until(lambda: value(db_path, "SELECT count(*) FROM todos"), 2)
    await running.finish()
    assert r.llen("jobs:processing") == 0


@pytest.mark.both_backends
async def test_pubsub_messages_are_stored_while_subscribed(real_store, broker, db_path) -> None:
    r = broker.client()
    running = Running(real_store, await add_adapter(real_store, broker.url, "pubsub", "alerts", name="alerts"),
                      connect=broker.connect)  # fmt: skip
    await running.until(lambda: r.pubsub_numsub("alerts")[0][1], 1)
    r.publish("alerts", '{"alert": "disk"}')
    await running.until(lambda: value(db_path, "SELECT count(*) FROM todos"), 1)
    await running.finish()


@pytest.mark.both_backends
async def test_a_failing_commit_acks_nothing_and_everything_is_stored_once_after(real_store, broker, db_path) -> None:
    r = broker.client()
    refuse_inserts(db_path, "boom", "events", "injected")  # a real fault in the real database
    for i in range(50):
        r.xadd("orders", {"payload": json.dumps({"order": i})})
    running = Running(real_store, await add_adapter(real_store, broker.url, "stream", "orders"), connect=broker.connect)
    await running.until(lambda: value(db_path, "SELECT consecutive_failures FROM sources"), lambda n: n >= 1)

    assert value(db_path, "SELECT count(*) FROM events") == 0
    assert r.xpending("orders", "switchboard")["pending"] > 0  # read, not acked
    assert "injected" in (await sources.get(real_store, "orders")).last_error

    drop_trigger(db_path, "boom", "events")
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 50)
    await running.until(lambda: r.xpending("orders", "switchboard")["pending"], 0)
    await running.finish()
    assert value(db_path, "SELECT count(*) FROM todos") == 50


async def test_a_restarted_redis_server_is_survived_and_drained_without_loss(real_store, tmp_path, db_path) -> None:
    server = started_redis_server(tmp_path, durable=True)  # real only: a server stopped mid-run and started again
    try:
        r = server.client()
        with r.pipeline(transaction=False) as pipe:
            for i in range(3000):
                pipe.xadd("orders", {"payload": json.dumps({"order": i})})
            pipe.execute()
        running = Running(real_store, await add_adapter(real_store, server.url, "stream", "orders", batch=1))
        await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), lambda n: n >= 200)
        server.stop()  # mid-run
        await running.until(lambda: value(db_path, "SELECT consecutive_failures FROM sources"), lambda n: n >= 1)
        server.start()
        await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 3000)
        await running.until(lambda: server.client().xpending("orders", "switchboard")["pending"], 0)
        await running.finish()
        assert value(db_path, "SELECT count(*) FROM todos") == 3000
        assert value(db_path, "SELECT consecutive_failures FROM sources") == 0
    finally:
        server.stop()


async def test_adapters_follow_enable_and_disable_at_runtime(real_store, broker, db_path) -> None:
    r = broker.client()
    await add_adapter(real_store, broker.url, "stream", "orders")
    supervisor = Supervisor(real_store, poll=0.2, connect=broker.connect)
    running = Running(real_store, supervisor=supervisor)
    r.xadd("orders", {"n": "1"})
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 1)

    await sources.set_enabled(real_store, "orders", False)
    await running.until(lambda: sorted(supervisor.running), [])
    r.xadd("orders", {"n": "2"})
    await asyncio.sleep(1.5)  # several polls of the registry: a disabled adapter must not pick it up
    assert value(db_path, "SELECT count(*) FROM events") == 1

    await sources.set_enabled(real_store, "orders", True)
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 2)
    await running.finish()
    assert not supervisor.running


async def test_a_redis_url_password_never_reaches_output_or_health(real_store, db_path) -> None:
    dead = f"redis://:hunter2-secret@127.0.0.1:{free_port()}/0"  # nothing listens there
    adapter = await add_adapter(real_store, dead, "stream", "orders")
    assert "hunter2" not in json.dumps(adapter.to_dict())
    running = Running(real_store, adapter)
    await running.until(lambda: value(db_path, "SELECT consecutive_failures FROM sources"), lambda n: n >= 1)
    await running.finish()
    assert "hunter2" not in (await sources.get(real_store, "orders")).last_error


async def test_entries_left_pending_by_a_dead_consumer_are_taken_over_after_claim_idle(real_store, broker, db_path) -> None:
    r = broker.client()
    r.xgroup_create("orders", "switchboard", id="0", mkstream=True)
    for i in range(5):
        r.xadd("orders", {"payload": json.dumps({"order": i})})
    r.xreadgroup("switchboard", "dead-consumer", {"orders": ">"}, count=5)  # read, then it died: never acked
    assert r.xpending("orders", "switchboard")["pending"] == 5

    running = Running(real_store, await add_adapter(real_store, broker.url, "stream", "orders", claim_idle=1),
                      connect=broker.connect)  # fmt: skip
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 5)
    await running.until(lambda: r.xpending("orders", "switchboard")["pending"], 0)
    await running.finish()
    assert value(db_path, "SELECT count(*) FROM todos") == 5


@pytest.mark.parametrize("mode", ["stream", "list"])
async def test_a_message_that_cannot_be_routed_is_kept_bare_and_never_blocks_the_rest(mode, real_store, broker,
                                                                                      db_path, caplog) -> None:  # fmt: skip
    r = broker.client()
    await add_adapter(real_store, broker.url, mode, "orders")
    await rules.add(real_store, source="orders", queue="q", title="{name}")
    with sqlite3.connect(db_path) as conn:  # a todo that can never be stored, for this one message
        conn.execute("CREATE TRIGGER poison BEFORE INSERT ON todos WHEN NEW.title = 'poison' "
                     "BEGIN SELECT RAISE(ABORT, 'poisoned'); END")  # fmt: skip
    if mode == "stream":
        ids = {name: r.xadd("orders", {"name": name}).decode() for name in ("first", "poison", "third")}
        acked = lambda: r.xpending("orders", "switchboard")["pending"] == 0  # noqa: E731
    else:
        messages = {name: json.dumps({"name": name}).encode() for name in ("first", "poison", "third")}
        ids = {name: body_hash(m) for name, m in messages.items()}
        r.lpush("orders", *messages.values())
        acked = lambda: r.exists("orders", "orders:processing") == 0  # noqa: E731
    running = Running(real_store, await sources.get(real_store, "orders"), connect=broker.connect)
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 3)
    await running.until(acked, True)
    await running.finish()
    titles = [row[0] for row in rows(db_path, "SELECT title FROM todos ORDER BY id")]
    assert titles == ["first", "third"]  # the poison message is an event without todos
    # The operator learns which message, of which adapter, and why.
    (told,) = [m for m in caplog.messages if "kept without todos" in m]
    assert told.startswith(f"adapter orders: message {ids['poison']} kept without todos: Conflict: "), told
    assert told.endswith("poisoned"), told  # the database's own reason
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [told]  # and no retry hid a fault


def test_the_password_is_masked_in_health_even_when_percent_encoded() -> None:
    url = "redis://:p%40ss%3Aword@127.0.0.1:6379/0"
    source = sources.Source(
        name="a", family="queue", kind="redis", trust_mode="queue", enabled=True,
        config=BROKERS.get("redis").configure({"url": url, "mode": "stream", "key": "k"}), secrets=[],
        created_at=0, updated_at=0, last_poll_at=None, last_error=None, consecutive_failures=0, messages_stored=0,
    )  # fmt: skip
    assert url_password(url) == "p@ss:word"
    consumer = Consumer(None, source, asyncio.Event())  # type: ignore[arg-type]
    consumer._secrets = StreamReader(source).secrets  # what the consumer takes from its reader
    assert consumer._describe(RuntimeError("AUTH p@ss:word failed")) == "RuntimeError: AUTH **** failed"


async def test_batches_are_stored_under_the_ingest_lease_and_none_once_another_process_leads(
    real_store, broker, db_path, caplog
) -> None:
    caplog.set_level(logging.DEBUG, logger="switchboard_local.brokers")
    r = broker.client()
    adapter = await add_adapter(real_store, broker.url, "stream", "orders")
    events = lambda: value(db_path, "SELECT count(*) FROM events")  # noqa: E731
    pending = lambda: r.xpending("orders", "switchboard")["pending"]  # noqa: E731
    first = await leadership.try_lead(real_store, leadership.Candidate("holder-1", 1001, "box", "serve"))

    async def consume(lease: leadership.Lease, until: Callable[[], bool], faults: Faults = Faults()) -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(Consumer(real_store, adapter, stop, faults, broker.connect, lease).run())
        await until_async(until, True)
        if faults.pause_after_commit:
            task.cancel()  # paused after the commit: the process dies before the ack
        else:
            stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    r.xadd("orders", {"payload": json.dumps({"n": 1})})
    await consume(first, lambda: events() == 1, Faults(pause_after_commit=True))
    r.xadd("orders", {"payload": json.dumps({"n": 2})})
    await consume(first, lambda: (events(), pending()) == (2, 0))  # the first again (a duplicate), then the second

    await leadership.release(real_store, first)
    second = await leadership.try_lead(real_store, leadership.Candidate("holder-2", 1002, "box", "serve"))
    r.xadd("orders", {"payload": json.dumps({"n": 3})})
    failures = "SELECT consecutive_failures FROM sources WHERE name = 'orders'"
    await consume(first, lambda: value(db_path, failures) >= 1)  # the lease it stores under is gone
    assert (events(), pending()) == (2, 1)  # nothing stored, nothing acked
    assert value(db_path, "SELECT last_error FROM sources") == (
        f"NotLeader: not_leader: this process no longer leads ingest (fence {first.fence}); the batch was not stored")
    await consume(second, lambda: (events(), pending()) == (3, 0))

    assert caplog.messages.count("fault hook: committed 1 messages, pausing before the ack") == 1
    assert [m for m in caplog.messages if "fence" in m and "NotLeader" not in m] == [
        f"adapter orders: batch stored under fence {first.fence}: events [1]",
        f"adapter orders: batch stored under fence {first.fence}: events []",  # a redelivery made no event
        f"adapter orders: batch stored under fence {first.fence}: events [2]",
        f"adapter orders: batch stored under fence {second.fence}: events [3]",
    ]
