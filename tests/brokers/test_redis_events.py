"""What a Redis message becomes: the stored event's body and provenance, the
URL taken from the environment, and reads and take-overs that log nothing."""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace

import pytest

from switchboard_local.brokers import loop, redis_list
from switchboard_local.core import events, sources
from switchboard_local.core.errors import Unavailable

from support.brokers import Running, add_adapter, blocked_in, calls
from support.redis_server import FakeBroker, free_port
from support.sql import run, value

pytestmark = pytest.mark.anyio


def stored_body(db_path) -> bytes:  # noqa: ANN001
    return value(db_path, "SELECT body FROM events ORDER BY id LIMIT 1")


async def test_a_stream_entry_is_stored_as_a_verified_queue_event_that_says_where_it_was_read(
    real_store, broker, db_path
) -> None:
    r = broker.client()
    entry = r.xadd("orders", {"payload": '{"n": 1}'}).decode()
    running = Running(real_store, await add_adapter(real_store, broker.url, "stream", "orders"), connect=broker.connect)
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 1)
    await running.finish()
    (event,) = await events.list_events(real_store)
    assert (event.source, event.family, event.type, event.external_id) == ("orders", "queue", "orders", entry)
    assert (event.trust_mode, event.verified, event.content_type) == ("queue", True, None)
    assert event.verify_detail == "read from redis stream 'orders' (trusted by the connection)"
    assert event.headers == {"redis-mode": "stream", "redis-key": "orders"}


async def test_stream_fields_become_compact_utf8_json_with_undecodable_bytes_replaced(real_store, broker,
                                                                                    db_path) -> None:  # fmt: skip
    r = broker.client()
    r.xadd("orders", {"name": "Zoë", b"\xffkey": b"v\xfe"})
    running = Running(real_store, await add_adapter(real_store, broker.url, "stream", "orders"), connect=broker.connect)
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 1)
    await running.finish()
    assert stored_body(db_path) == '{"name":"Zoë","\ufffdkey":"v\ufffd"}'.encode()


async def test_an_adapter_reads_its_url_from_the_environment_variable_it_names(real_store, broker, db_path,
                                                                              monkeypatch) -> None:  # fmt: skip
    monkeypatch.setenv("ORDERS_REDIS_URL", broker.url)
    adapter = await add_adapter(real_store, None, "list", "jobs", redis_url_env="ORDERS_REDIS_URL")
    broker.client().lpush("jobs", b'{"n": 1}')
    running = Running(real_store, adapter, connect=broker.connect)
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 1)
    await running.finish()


# Real server only: it counts the server's XREADGROUP calls with INFO commandstats and sees the blocked read in
# CLIENT LIST, which fakeredis does not have.
async def test_an_idle_stream_adapter_waits_on_the_broker_without_errors(real_store, redis_server, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="switchboard_local.brokers")
    r = redis_server.client()
    running = Running(real_store, await add_adapter(real_store, redis_server.url, "stream", "orders"))
    reads = calls(r, "xreadgroup")
    await running.until(lambda: calls(r, "xreadgroup") >= reads + 3, True)  # reads that waited on an empty stream
    await running.until(lambda: blocked_in(r, "xreadgroup"), True)  # waiting in the broker, not polling it
    await running.finish()
    assert caplog.messages == []


async def test_taking_over_a_dead_consumers_entries_logs_nothing(real_store, broker, db_path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="switchboard_local.brokers")
    r = broker.client()
    r.xgroup_create("orders", "switchboard", id="0", mkstream=True)
    for i in range(3):
        r.xadd("orders", {"payload": f'{{"n": {i}}}'})
    r.xreadgroup("switchboard", "dead", {"orders": ">"})  # read by a consumer that then died
    running = Running(real_store, await add_adapter(real_store, broker.url, "stream", "orders", claim_idle=1),
                      connect=broker.connect)  # fmt: skip
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 3)
    await running.until(lambda: r.xpending("orders", "switchboard")["pending"], 0)
    await running.finish()
    assert caplog.messages == []


async def test_an_adapter_whose_url_variable_is_unset_says_so_in_its_health_and_keeps_retrying(
    real_store, monkeypatch
) -> None:
    monkeypatch.delenv("ORDERS_REDIS_URL", raising=False)
    running = Running(real_store, await add_adapter(real_store, None, "list", "jobs", redis_url_env="ORDERS_REDIS_URL"))

    async def last_error() -> str | None:
        return (await sources.get(real_store, "orders")).last_error

    deadline = asyncio.get_running_loop().time() + 30
    while await last_error() is None:
        assert asyncio.get_running_loop().time() < deadline and not running.task.done()
        await asyncio.sleep(0.05)
    assert await last_error() == "RedisError: environment variable ORDERS_REDIS_URL is not set"
    assert not running.task.done()  # it backs off and tries again; serve goes on
    await running.finish()


async def test_an_adapter_of_a_broker_this_version_lacks_says_so_in_its_health_and_keeps_retrying(
    real_store, db_path
) -> None:
    await add_adapter(real_store, f"redis://127.0.0.1:{free_port()}/0", "list", "jobs")
    # A row from a later version (or edited by hand): a broker this one does not have.
    run(db_path, "UPDATE sources SET config = json_set(config, '$.broker', 'kafka') WHERE name = 'orders'")
    running = Running(real_store, await sources.get(real_store, "orders"))

    async def last_error() -> str | None:
        return (await sources.get(real_store, "orders")).last_error

    deadline = asyncio.get_running_loop().time() + 30
    while await last_error() is None:
        assert asyncio.get_running_loop().time() < deadline and not running.task.done()
        await asyncio.sleep(0.05)
    assert (await last_error() or "").endswith("adapter orders: no broker 'kafka' in this version")
    assert not running.task.done()  # it backs off and tries again; serve goes on
    await running.finish()


async def test_a_broker_that_refuses_connections_is_a_warning_saying_when_it_retries(real_store, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="switchboard_local.brokers")
    running = Running(real_store, await add_adapter(real_store, f"redis://127.0.0.1:{free_port()}/0", "list", "jobs"))
    await running.until(lambda: len(caplog.records) >= 1, True)
    await running.finish()
    first = caplog.records[0]
    assert first.levelno == logging.WARNING
    assert first.getMessage().startswith("adapter orders: ConnectionError: ")
    assert first.getMessage().endswith("; retrying in up to 1 s")


async def test_a_failing_adapter_waits_between_half_and_all_of_a_delay_doubling_from_one_second_to_thirty(
    real_store, monkeypatch, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="switchboard_local.brokers")
    monkeypatch.delenv("ORDERS_REDIS_URL", raising=False)  # every attempt fails at once
    adapter = await add_adapter(real_store, None, "list", "jobs", redis_url_env="ORDERS_REDIS_URL")
    stop = asyncio.Event()
    consumer = loop.Consumer(real_store, adapter, stop)
    waits: list[tuple[float, float]] = []

    class Bounds:  # the jitter's range instead of a draw from it
        def uniform(self, low: float, high: float) -> tuple[float, float]:
            return (low, high)

    async def wait(bounds: tuple[float, float]) -> None:  # no real waiting: the waits are recorded
        waits.append(bounds)
        if len(waits) == 8:
            stop.set()

    consumer.rng = Bounds()  # type: ignore[assignment]
    monkeypatch.setattr(consumer, "_sleep", wait)
    await consumer.run()
    delays = [1, 2, 4, 8, 16, 30, 30, 30]
    assert waits == [(delay / 2, delay) for delay in delays]
    assert [message.rpartition("; ")[2] for message in caplog.messages] == [f"retrying in up to {d} s" for d in delays]


async def test_what_was_stored_since_the_last_health_record_counts_once_the_adapter_stops(real_store, broker,
                                                                                         db_path, monkeypatch) -> None:  # fmt: skip
    monkeypatch.setattr(loop, "HEALTH_EVERY", 3600.0)  # after the first, no record until the stop
    r = broker.client()
    running = Running(real_store, await add_adapter(real_store, broker.url, "list", "jobs"), connect=broker.connect)
    await running.until(lambda: value(db_path, "SELECT count(*) FROM sources WHERE last_poll_at IS NOT NULL"), 1)
    r.lpush("jobs", b'{"n": 1}', b'{"n": 2}', b'{"n": 3}')
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 3)
    await running.finish()
    assert (await sources.get(real_store, "orders")).messages_stored == 3


async def test_the_first_poll_is_recorded_at_once_on_a_host_that_has_just_booted(real_store, broker, db_path,
                                                                                  monkeypatch) -> None:  # fmt: skip
    # time.monotonic() counts from boot on Linux: a clock that starts near 0, as on a host up for less than HEALTH_EVERY.
    booted = time.monotonic()
    monkeypatch.setattr(loop, "time", SimpleNamespace(monotonic=lambda: time.monotonic() - booted))
    monkeypatch.setattr(loop, "HEALTH_EVERY", 3600.0)
    running = Running(real_store, await add_adapter(real_store, broker.url, "list", "jobs"), connect=broker.connect)
    await running.until(lambda: value(db_path, "SELECT count(*) FROM sources WHERE last_poll_at IS NOT NULL"), 1)
    await running.finish()


async def test_a_health_record_that_fails_is_logged_and_its_count_carried_to_the_next(real_store, broker, db_path,
                                                                                    monkeypatch, caplog) -> None:  # fmt: skip
    caplog.set_level(logging.WARNING, logger="switchboard_local.brokers")
    real_record = sources.record_health
    failed = []

    async def fails_once_with_a_count(store, name, *, error=None, stored=0):  # noqa: ANN001, ANN202  (a fault hook)
        if stored and not failed:
            failed.append(stored)
            raise Unavailable("the disk is full")
        await real_record(store, name, error=error, stored=stored)

    monkeypatch.setattr(sources, "record_health", fails_once_with_a_count)
    broker.client().lpush("jobs", b'{"n": 1}', b'{"n": 2}', b'{"n": 3}')
    running = Running(real_store, await add_adapter(real_store, broker.url, "list", "jobs"), connect=broker.connect)
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 3)
    await running.until(lambda: bool(failed), True)
    await running.finish()
    assert caplog.messages == ["adapter orders: cannot record health: unavailable: the disk is full"]
    assert (await sources.get(real_store, "orders")).messages_stored == 3


# fakeredis only: its BLMOVE does not wait out an empty list (see the broker fixture), so polls come without pause.
async def test_an_idle_adapter_records_its_polls_once_per_health_interval_not_on_each_poll(real_store, monkeypatch) -> None:
    monkeypatch.setattr(loop, "HEALTH_EVERY", 3600.0)
    records: list[tuple[str | None, int]] = []
    real_record = sources.record_health

    async def recorded(store, name, *, error=None, stored=0):  # a spy
        records.append((error, stored))
        await real_record(store, name, error=error, stored=stored)

    polls = []
    real_read = redis_list.ListReader.read

    async def counted(self):  # a spy
        polls.append(1)
        return await real_read(self)

    monkeypatch.setattr(sources, "record_health", recorded)
    monkeypatch.setattr(redis_list.ListReader, "read", counted)
    broker = FakeBroker()
    running = Running(real_store, await add_adapter(real_store, broker.url, "list", "jobs"), connect=broker.connect)
    await running.until(lambda: len(polls) >= 5, True)
    await running.finish()
    assert records == [(None, 0)]  # the first poll's, at once; nothing stored since, so none at the stop
