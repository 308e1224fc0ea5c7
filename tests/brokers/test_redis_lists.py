"""List mode against fakeredis and a real redis-server: an LPUSH producer's order is kept.

A producer LPUSHes onto the head; the adapter moves from the tail into
KEY:processing, so the oldest message is stored first, and nothing is left in
Redis once drained. The adapter runs in this process (mutation testing sees it).
"""

from __future__ import annotations

import logging
import sqlite3

import pytest

from switchboard_local.core import sources

from support.brokers import Running, add_adapter
from support.sql import rows, value

pytestmark = pytest.mark.anyio


def bodies_in_order(db_path) -> list[str]:
    """Event bodies in the order they were stored."""
    return [bytes(row[0]).decode() for row in rows(db_path, "SELECT body FROM events ORDER BY id")]


async def test_a_list_is_stored_in_the_order_an_lpush_producer_pushed_it(real_store, broker, db_path,
                                                                          caplog) -> None:  # fmt: skip
    caplog.set_level(logging.WARNING, logger="switchboard_local.brokers")
    r = broker.client()
    r.lpush("jobs", '"a"', '"b"', '"c"')  # before the adapter starts: the list reads c, b, a from the head
    running = Running(real_store, await add_adapter(real_store, broker.url, "list", "jobs", name="jobs"),
                      connect=broker.connect)  # fmt: skip
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 3)
    r.lpush("jobs", '"d"', '"e"', '"f"')  # while it runs, waiting in BLMOVE: three at once
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 6)
    await running.until(lambda: r.llen("jobs:processing"), 0)
    await running.finish()

    assert bodies_in_order(db_path) == ['"a"', '"b"', '"c"', '"d"', '"e"', '"f"']
    assert r.keys("*") == []  # drained: no processing list left over, no stray list anywhere
    assert caplog.messages == []  # no fault on the way (a retry would have hidden a wrong read)


async def test_a_batch_whose_commit_failed_is_stored_in_pushed_order_once_the_fault_clears(real_store, broker,
                                                                                          db_path) -> None:  # fmt: skip
    r = broker.client()
    with sqlite3.connect(db_path) as conn:  # a real fault in the real file: no event can be stored
        conn.execute("CREATE TRIGGER boom BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'injected'); END")
    r.lpush("jobs", '"a"', '"b"', '"c"')
    running = Running(real_store, await add_adapter(real_store, broker.url, "list", "jobs", name="jobs"),
                      connect=broker.connect)  # fmt: skip
    await running.until(lambda: value(db_path, "SELECT consecutive_failures FROM sources"), lambda n: n >= 1)
    assert r.llen("jobs:processing") == 3  # moved, not stored, so not removed

    with sqlite3.connect(db_path) as conn:
        conn.execute("DROP TRIGGER boom")
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 3)
    await running.until(lambda: r.llen("jobs:processing"), 0)
    await running.finish()
    assert bodies_in_order(db_path) == ['"a"', '"b"', '"c"']
    assert (await sources.get(real_store, "jobs")).consecutive_failures == 0


# Real server only: fakeredis' BLMOVE answers nil at once instead of waiting out its timeout (2.41), so there is
# no wait to see; and it counts calls and connections with INFO, which fakeredis does not have.
async def test_an_idle_list_adapter_keeps_waiting_on_its_one_connection(real_store, redis_server, db_path) -> None:
    r = redis_server.client()
    connections = r.info("stats")["total_connections_received"]  # this client's own included
    running = Running(real_store, await add_adapter(real_store, redis_server.url, "list", "jobs", name="jobs"))
    # Two BLMOVEs that timed out on the empty list: the adapter has waited a while.
    await running.until(lambda: r.info("commandstats").get("cmdstat_blmove", {}).get("calls", 0), lambda n: n >= 2)
    assert r.info("stats")["total_connections_received"] == connections + 1  # no reconnect between waits
    r.lpush("jobs", '"late"')
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 1)
    await running.finish()
