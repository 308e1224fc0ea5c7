"""Pub/sub mode against a real redis-server: an idle adapter stays subscribed.

Pub/sub keeps nothing for a subscriber that is away: a re-subscription after
every quiet second would lose what is published in between.
"""

from __future__ import annotations

import pytest

from support.brokers import Running, add_adapter
from support.sql import value

pytestmark = pytest.mark.anyio


# Real server only: it counts SUBSCRIBE calls and connections with INFO, which fakeredis does not have.
async def test_an_idle_pubsub_adapter_stays_subscribed_on_its_one_connection(real_store, redis_server, db_path) -> None:
    r = redis_server.client()
    connections = r.info("stats")["total_connections_received"]  # this client's own included
    running = Running(real_store, await add_adapter(real_store, redis_server.url, "pubsub", "alerts", name="alerts"))
    await running.until(lambda: r.pubsub_numsub("alerts")[0][1], 1)
    # Two polls recorded in health (at most one a second): its waits for a message ran out, more than once.
    polls: set[int | None] = set()

    def polls_seen() -> int:
        polls.add(value(db_path, "SELECT last_poll_at FROM sources"))
        return len(polls - {None})

    await running.until(polls_seen, 2)
    assert r.info("commandstats")["cmdstat_subscribe"]["calls"] == 1
    assert r.info("stats")["total_connections_received"] == connections + 1
    r.publish("alerts", '{"alert": "disk"}')
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 1)
    await running.finish()
