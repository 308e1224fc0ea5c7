"""A message that cannot be stored at all, not even as a bare event, in a batch
with others: everything stored is acknowledged, that message is not (it stays
pending in the stream, or in KEY:processing for a list), and nothing is
stored twice. fakeredis and a real redis-server; the fault is a trigger refusing that one
message's event, a fault no real message could cause on demand.
"""

from __future__ import annotations

import sqlite3

import pytest

from switchboard_local.core import sources

from support.brokers import Running, add_adapter
from support.sql import rows, value

pytestmark = pytest.mark.anyio

POISON = "poison"


def refuse_events_of(db_path, body: str) -> None:
    with sqlite3.connect(db_path) as conn:
        conn.execute(
            f"CREATE TRIGGER unstorable BEFORE INSERT ON events WHEN CAST(NEW.body AS TEXT) LIKE '%{body}%' "
            "BEGIN SELECT RAISE(ABORT, 'this message cannot be stored'); END"
        )


def bodies(db_path) -> list[str]:
    return sorted(bytes(row[0]).decode() for row in rows(db_path, "SELECT body FROM events"))


async def test_in_a_stream_only_the_unstorable_entry_stays_pending(real_store, broker, db_path) -> None:
    r = broker.client()
    await add_adapter(real_store, broker.url, "stream", "orders", batch=16)
    refuse_events_of(db_path, POISON)
    ids = {name: r.xadd("orders", {"payload": f'"{name}"'}).decode() for name in ("one", POISON, "three", "four")}
    running = Running(real_store, await sources.get(real_store, "orders"), connect=broker.connect)
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 3)
    await running.until(lambda: r.xpending("orders", "switchboard")["pending"], 1)
    await running.finish()

    pending = r.xpending_range("orders", "switchboard", min="-", max="+", count=10)
    assert [p["message_id"].decode() for p in pending] == [ids[POISON]]
    assert bodies(db_path) == ['"four"', '"one"', '"three"']
    assert value(db_path, "SELECT count(*) FROM todos") == 3


async def test_in_a_list_only_the_unstorable_message_stays_in_the_processing_list(real_store, broker,
                                                                                  db_path) -> None:  # fmt: skip
    r = broker.client()
    await add_adapter(real_store, broker.url, "list", "jobs", name="jobs", batch=16)
    refuse_events_of(db_path, POISON)
    r.lpush("jobs", '"one"', f'"{POISON}"', '"three"', '"four"')
    running = Running(real_store, await sources.get(real_store, "jobs"), connect=broker.connect)
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 3)
    await running.until(lambda: r.llen("jobs:processing"), 1)
    r.lpush("jobs", '"five"')  # what comes after it is read and stored: it blocks nothing (until the next start)
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 4)
    await running.finish()

    assert r.lrange("jobs:processing", 0, -1) == [f'"{POISON}"'.encode()]
    assert r.llen("jobs") == 0
    assert bodies(db_path) == ['"five"', '"four"', '"one"', '"three"']


async def test_an_unstorable_entry_is_stored_once_the_cause_is_gone_and_nothing_twice(real_store, broker,
                                                                                      db_path) -> None:  # fmt: skip
    r = broker.client()
    await add_adapter(real_store, broker.url, "stream", "orders", batch=16)
    refuse_events_of(db_path, POISON)
    for name in ("one", POISON, "three"):
        r.xadd("orders", {"payload": f'"{name}"'})
    running = Running(real_store, await sources.get(real_store, "orders"), connect=broker.connect)
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 2)
    await running.finish()
    with sqlite3.connect(db_path) as conn:
        conn.execute("DROP TRIGGER unstorable")
    again = Running(real_store, await sources.get(real_store, "orders"), connect=broker.connect)  # a restart re-reads its pending entries
    await again.until(lambda: value(db_path, "SELECT count(*) FROM events"), 3)
    await again.until(lambda: r.xpending("orders", "switchboard")["pending"], 0)
    await again.finish()
    assert bodies(db_path) == ['"one"', f'"{POISON}"', '"three"']
