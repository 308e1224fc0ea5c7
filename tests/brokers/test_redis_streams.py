"""Stream mode against fakeredis and a real redis-server: what a consumer's pending entries and idle peers come to."""

from __future__ import annotations

import json
import logging

import pytest
from redis.exceptions import ResponseError

from switchboard_local.brokers.redis_stream import StreamReader

from support.brokers import Running, add_adapter, calls
from support.sql import value
from support.waits import until_async

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


# Real server only: XAUTOCLAIM looks at no more than ten times COUNT pending entries per call (fakeredis at all).
async def test_a_take_over_pages_past_a_long_pending_list_of_busy_entries_then_reads_new_ones(
    real_store, redis_server, db_path
) -> None:
    r = redis_server.client()
    r.xgroup_create("orders", "switchboard", id="0", mkstream=True)
    for n in range(25):
        r.xadd("orders", {"payload": json.dumps({"n": n})})
    r.xreadgroup("switchboard", "busy", {"orders": ">"})  # another consumer's work in progress: not idle
    r.xadd("orders", {"payload": json.dumps({"n": "new"})})
    adapter = await add_adapter(real_store, redis_server.url, "stream", "orders", batch=1, claim_idle=60)
    running = Running(real_store, adapter)  # one entry a page: the first take-over takes three pages
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 1)
    await running.finish()
    assert r.xpending("orders", "switchboard")["consumers"] == [{"name": b"busy", "pending": 25}]  # left alone


class Claims:
    """A client that notes the XCLAIMs and XACKs made through it; its first ``refused`` XCLAIMs are refused
    with a message quoting the URL (as a careless server or proxy might)."""

    def __init__(self, url: str, refused: int = 0) -> None:
        self.url, self.refused, self.claimed, self.acked = url, refused, [], []

    async def xclaim(self, key, group, consumer, min_idle_time, ids, **options) -> list:
        self.claimed.append(ids)
        if len(self.claimed) <= self.refused:
            raise ResponseError(f"cannot claim in {key} at {self.url}")
        return ids

    async def xack(self, key, group, *ids) -> int:
        self.acked += ids
        return len(ids)

    async def aclose(self) -> None:
        pass


async def test_a_refused_renewal_of_held_entries_is_logged_without_the_password_and_tried_again(
    real_store, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="switchboard_local.brokers")
    url = "redis://:hunter2-secret@127.0.0.1:1/0"
    adapter = await add_adapter(real_store, url, "stream", "orders", claim_idle=1)
    client = Claims(url, refused=1)
    reader = StreamReader(adapter, connect=lambda _: client)
    await reader.hold([reader.message("1-0", b"{}", b"1-0"), reader.message("2-0", b"{}", b"2-0")])
    await until_async(lambda: len(client.claimed), lambda n: n >= 3)  # a third of --claim-idle apart
    await reader.close()
    assert client.claimed[:3] == [[b"1-0", b"2-0"]] * 3  # each time, every held entry in one XCLAIM
    assert caplog.messages == ["adapter orders: cannot renew the held entries: "
                               "ResponseError: cannot claim in orders at redis://:****@127.0.0.1:1/0"]  # fmt: skip


async def test_a_held_entry_once_acked_is_claimed_again_no_more(real_store) -> None:
    adapter = await add_adapter(real_store, "redis://127.0.0.1:1/0", "stream", "orders", claim_idle=1)
    client = Claims("redis://127.0.0.1:1/0")
    reader = StreamReader(adapter, connect=lambda _: client)
    first, second = reader.message("1-0", b"{}", b"1-0"), reader.message("2-0", b"{}", b"2-0")
    await reader.hold([first, second])
    await until_async(lambda: len(client.claimed), lambda n: n >= 1)
    await reader.ack([first, second], [True, False])  # the first's todos finished
    renewals = len(client.claimed)
    await until_async(lambda: len(client.claimed), lambda n: n > renewals)
    await reader.close()
    assert (client.acked, client.claimed[0], client.claimed[-1]) == ([b"1-0"], [b"1-0", b"2-0"], [b"2-0"])
