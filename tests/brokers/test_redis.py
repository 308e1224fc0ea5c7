"""Redis adapters against fakeredis and a real redis-server (the `broker` fixture): store first, then ack."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from support.redis_server import FakeBroker, free_port, started_redis_server
from support.waits import STALL, until_async
from switchboard_local.core import sources, redis_config, rules, todos
from switchboard_local.core.events import body_hash
from switchboard_local.brokers.loop import Consumer, Supervisor
from switchboard_local.brokers.redis_client import url_password
from switchboard_local.brokers.redis_stream import StreamReader
from switchboard_local.core.store import Store

pytestmark = pytest.mark.anyio


@pytest.fixture
def redis_server(tmp_path: Path):
    """A real redis-server: for what only a real server shows (INFO, restarts, a killed process)."""
    server = started_redis_server(tmp_path)
    yield server
    server.stop()


@pytest.fixture(params=["fakeredis", "redis-server"])
def broker(request: pytest.FixtureRequest, tmp_path: Path):
    """The Redis semantics tests run twice: on fakeredis (no redis-server needed) and on a real server.

    Hand ``broker.connect`` to what runs the consumers (None for the real
    server: redis-py's own client on ``broker.url``). Where fakeredis differs
    from Redis for a test, that test takes ``redis_server`` and says why.
    One difference every list test meets: fakeredis' BLMOVE does not wait out
    its timeout on an empty list (2.41), so an idle list reader polls without
    pause there; what is stored and acked is the same.
    """
    server = FakeBroker() if request.param == "fakeredis" else started_redis_server(tmp_path)
    yield server
    server.stop()


@pytest.fixture
async def real_store(db_path: Path) -> AsyncIterator[Store]:
    """A store on the real clock: the adapter runs in real time against a real broker."""
    async with await Store.open(db_path) as store:
        yield store


async def add_adapter(store: Store, url: str, mode: str, key: str, name: str = "orders", **options) -> sources.Source:
    config = redis_config.adapter_config({"redis_url": url, "mode": mode, "key": key, **options})
    return await sources.add(store, name, family="queue", kind="redis", trust_mode="queue", config=config)


def count(db_path: Path, sql: str) -> int:
    with contextlib.closing(sqlite3.connect(db_path)) as conn:
        return conn.execute(sql).fetchone()[0]


def health(db_path: Path) -> str:
    """The adapters' health as the file holds it: what explains a wait that failed."""
    with contextlib.closing(sqlite3.connect(db_path)) as conn:
        rows = conn.execute(
            "SELECT name, enabled, consecutive_failures, messages_stored, last_error FROM sources"
        ).fetchall()
    return "adapters (name, enabled, failures, stored, last error): " + repr(rows)


def ended(task: asyncio.Task, what: str) -> Callable[[], str | None]:
    """Why ``task`` can no longer bring a change about (it ended), or None while it runs."""

    def why() -> str | None:
        if not task.done():
            return None
        if task.cancelled():
            return f"{what} was cancelled"
        return f"{what} ended: {task.exception()!r}" if task.exception() else f"{what} returned"

    return why


class Running:
    """An adapter (or the supervisor) running in this loop, and the waits that watch it."""

    def __init__(self, store: Store, adapter: sources.Source | None = None, *, supervisor: Supervisor | None = None,
                 connect: Any = None):  # fmt: skip
        self.path = store.path
        self.stop = asyncio.Event()
        if supervisor is not None:
            self.what, runner = "the supervisor", supervisor.run(self.stop)
        else:
            assert adapter is not None
            self.what, runner = f"adapter {adapter.name}", Consumer(store, adapter, self.stop, connect=connect).run()
        self.task = asyncio.create_task(runner)

    async def until(self, look: Callable[[], Any], want: Any) -> None:
        """Until ``look()`` is ``want`` (see waits.py); a failure at once if what runs has ended."""
        await until_async(look, want, dead=ended(self.task, self.what), context=lambda: health(self.path))

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, timeout=STALL)


async def test_ten_thousand_stream_entries_become_exactly_ten_thousand_events_and_todos(real_store, broker, db_path) -> None:
    r = broker.client()
    with r.pipeline(transaction=False) as pipe:
        for i in range(10_000):
            pipe.xadd("orders", {"payload": json.dumps({"order": i})})
        pipe.execute()
    running = Running(real_store, await add_adapter(real_store, broker.url, "stream", "orders"), connect=broker.connect)
    await running.until(lambda: count(db_path, "SELECT count(*) FROM events"), 10_000)
    await running.finish()

    assert count(db_path, "SELECT count(*) FROM todos") == 10_000
    assert count(db_path, "SELECT count(DISTINCT external_id) FROM events") == 10_000
    assert r.xpending("orders", "switchboard")["pending"] == 0
    health = await sources.get(real_store, "orders")
    assert health.messages_stored == 10_000 and health.consecutive_failures == 0


async def test_stream_entry_fields_become_the_body_and_rules_route_on_them(real_store, broker, db_path) -> None:
    r = broker.client()
    await add_adapter(real_store, broker.url, "stream", "orders", queue="fulfilment")
    await rules.add(real_store, source="orders", type="orders", where=["priority=high"], queue="urgent", title="Order {id}")
    r.xadd("orders", {"id": "7", "priority": "high"})
    entry = r.xadd("orders", {"payload": '{"id": 8}'})
    running = Running(real_store, await sources.get(real_store, "orders"), connect=broker.connect)
    await running.until(lambda: count(db_path, "SELECT count(*) FROM todos"), 2)
    await running.finish()

    urgent, default = [await todos.get(real_store, i) for i in (1, 2)]
    assert (urgent.queue, urgent.title, urgent.payload["body"]) == ("urgent", "Order 7", {"id": "7", "priority": "high"})
    assert (default.queue, default.payload["body"]) == ("fulfilment", {"id": 8})
    assert default.idempotency_key == f"event:redis:orders:{entry.decode()}:default"


async def test_list_mode_stores_then_removes_from_the_processing_list(real_store, broker, db_path) -> None:
    r = broker.client()
    r.lpush("jobs", *[json.dumps({"job": i}) for i in range(300)])
    running = Running(real_store, await add_adapter(real_store, broker.url, "list", "jobs", name="jobs"),
                      connect=broker.connect)  # fmt: skip
    await running.until(lambda: count(db_path, "SELECT count(*) FROM todos"), 300)
    await running.finish()
    assert r.llen("jobs") == 0 and r.llen("jobs:processing") == 0
    assert count(db_path, "SELECT count(*) FROM events") == 300


async def test_list_mode_recovers_what_a_crash_left_in_the_processing_list(real_store, broker, db_path) -> None:
    r = broker.client()
    r.lpush("jobs:processing", b'{"left": "behind"}')  # moved before a crash, never removed
    r.lpush("jobs", b'{"fresh": 1}')
    running = Running(real_store, await add_adapter(real_store, broker.url, "list", "jobs", name="jobs"),
                      connect=broker.connect)  # fmt: skip
    await running.until(lambda: count(db_path, "SELECT count(*) FROM todos"), 2)
    await running.finish()
    assert r.llen("jobs:processing") == 0


async def test_pubsub_messages_are_stored_while_subscribed(real_store, broker, db_path) -> None:
    r = broker.client()
    running = Running(real_store, await add_adapter(real_store, broker.url, "pubsub", "alerts", name="alerts"),
                      connect=broker.connect)  # fmt: skip
    await running.until(lambda: r.pubsub_numsub("alerts")[0][1], 1)
    r.publish("alerts", '{"alert": "disk"}')
    await running.until(lambda: count(db_path, "SELECT count(*) FROM todos"), 1)
    await running.finish()


async def test_a_failing_commit_acks_nothing_and_everything_is_stored_once_after(real_store, broker, db_path) -> None:
    r = broker.client()
    with sqlite3.connect(db_path) as conn:  # a real fault in the real file
        conn.execute("CREATE TRIGGER boom BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'injected'); END")
    for i in range(50):
        r.xadd("orders", {"payload": json.dumps({"order": i})})
    running = Running(real_store, await add_adapter(real_store, broker.url, "stream", "orders"), connect=broker.connect)
    await running.until(lambda: count(db_path, "SELECT consecutive_failures FROM sources"), lambda n: n >= 1)

    assert count(db_path, "SELECT count(*) FROM events") == 0
    assert r.xpending("orders", "switchboard")["pending"] > 0  # read, not acked
    assert "injected" in (await sources.get(real_store, "orders")).last_error

    with sqlite3.connect(db_path) as conn:
        conn.execute("DROP TRIGGER boom")
    await running.until(lambda: count(db_path, "SELECT count(*) FROM events"), 50)
    await running.until(lambda: r.xpending("orders", "switchboard")["pending"], 0)
    await running.finish()
    assert count(db_path, "SELECT count(*) FROM todos") == 50


async def test_a_restarted_redis_server_is_survived_and_drained_without_loss(real_store, tmp_path, db_path) -> None:
    server = started_redis_server(tmp_path, durable=True)  # real only: a server stopped mid-run and started again
    try:
        r = server.client()
        with r.pipeline(transaction=False) as pipe:
            for i in range(3000):
                pipe.xadd("orders", {"payload": json.dumps({"order": i})})
            pipe.execute()
        running = Running(real_store, await add_adapter(real_store, server.url, "stream", "orders", batch=1))
        await running.until(lambda: count(db_path, "SELECT count(*) FROM events"), lambda n: n >= 200)
        server.stop()  # mid-run
        await running.until(lambda: count(db_path, "SELECT consecutive_failures FROM sources"), lambda n: n >= 1)
        server.start()
        await running.until(lambda: count(db_path, "SELECT count(*) FROM events"), 3000)
        await running.until(lambda: server.client().xpending("orders", "switchboard")["pending"], 0)
        await running.finish()
        assert count(db_path, "SELECT count(*) FROM todos") == 3000
        assert count(db_path, "SELECT consecutive_failures FROM sources") == 0
    finally:
        server.stop()


async def test_adapters_follow_enable_and_disable_at_runtime(real_store, broker, db_path) -> None:
    r = broker.client()
    await add_adapter(real_store, broker.url, "stream", "orders")
    supervisor = Supervisor(real_store, poll=0.2, connect=broker.connect)
    running = Running(real_store, supervisor=supervisor)
    r.xadd("orders", {"n": "1"})
    await running.until(lambda: count(db_path, "SELECT count(*) FROM events"), 1)

    await sources.set_enabled(real_store, "orders", False)
    await running.until(lambda: sorted(supervisor.running), [])
    r.xadd("orders", {"n": "2"})
    await asyncio.sleep(1.5)  # several polls of the registry: a disabled adapter must not pick it up
    assert count(db_path, "SELECT count(*) FROM events") == 1

    await sources.set_enabled(real_store, "orders", True)
    await running.until(lambda: count(db_path, "SELECT count(*) FROM events"), 2)
    await running.finish()
    assert not supervisor.running


async def test_a_redis_url_password_never_reaches_output_or_health(real_store, db_path) -> None:
    dead = f"redis://:hunter2-secret@127.0.0.1:{free_port()}/0"  # nothing listens there
    adapter = await add_adapter(real_store, dead, "stream", "orders")
    assert "hunter2" not in json.dumps(adapter.to_dict())
    running = Running(real_store, adapter)
    await running.until(lambda: count(db_path, "SELECT consecutive_failures FROM sources"), lambda n: n >= 1)
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
    await running.until(lambda: count(db_path, "SELECT count(*) FROM events"), 5)
    await running.until(lambda: r.xpending("orders", "switchboard")["pending"], 0)
    await running.finish()
    assert count(db_path, "SELECT count(*) FROM todos") == 5


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
    await running.until(lambda: count(db_path, "SELECT count(*) FROM events"), 3)
    await running.until(acked, True)
    await running.finish()
    with sqlite3.connect(db_path) as conn:
        titles = [row[0] for row in conn.execute("SELECT title FROM todos ORDER BY id")]
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
        config=redis_config.adapter_config({"redis_url": url, "mode": "stream", "key": "k"}), secrets=[],
        created_at=0, updated_at=0, last_poll_at=None, last_error=None, consecutive_failures=0, messages_stored=0,
    )  # fmt: skip
    assert url_password(url) == "p@ss:word"
    consumer = Consumer(None, source, asyncio.Event())  # type: ignore[arg-type]
    consumer._secrets = StreamReader(source).secrets  # what the consumer takes from its reader
    assert consumer._describe(RuntimeError("AUTH p@ss:word failed")) == "RuntimeError: AUTH **** failed"
