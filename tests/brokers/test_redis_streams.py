"""Stream mode against fakeredis and a real redis-server: what a consumer's pending entries and idle peers come to."""

from __future__ import annotations

import json
import logging

import pytest

from support.brokers import Running, add_adapter, calls
from support.sql import value

pytestmark = pytest.mark.anyio


async def test_a_pending_entry_deleted_from_the_stream_is_acked_and_reported(real_store, broker, db_path,
                                                                             caplog) -> None:  # fmt: skip
    caplog.set_level(logging.WARNING, logger="switchboard_local.brokers")
    r = broker.client()
    r.xgroup_create("orders", "switchboard", id="0", mkstream=True)
    ids = [r.xadd("orders", {"payload": json.dumps({"n": i})}) for i in range(3)]
    r.xreadgroup("switchboard", "me", {"orders": ">"})  # read before a crash, never acked
    r.xdel("orders", ids[1])  # then deleted by someone: pending still, with nothing to store
    running = Running(real_store, await add_adapter(real_store, broker.url, "stream", "orders", consumer="me"),
                      connect=broker.connect)  # fmt: skip
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 2)
    await running.until(lambda: r.xpending("orders", "switchboard")["pending"], 0)
    await running.finish()
    assert caplog.messages == ["adapter orders: 1 pending entries were deleted from the stream"]


# Real server only: it counts XREADGROUP and XAUTOCLAIM calls with INFO commandstats, which fakeredis does not have.
async def test_idle_entries_are_taken_over_once_per_claim_idle_not_on_every_read(real_store, redis_server,
                                                                                 db_path) -> None:  # fmt: skip
    r = redis_server.client()
    running = Running(real_store, await add_adapter(real_store, redis_server.url, "stream", "orders", claim_idle=60))
    reads = calls(r, "xreadgroup")
    await running.until(lambda: calls(r, "xreadgroup") >= reads + 3, True)  # reads that waited on an idle stream
    assert calls(r, "xautoclaim") == 1  # at start; the next is due a minute later
    await running.finish()
