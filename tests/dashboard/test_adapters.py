"""Adapters on the dashboard with a real redis-server: the backlog asked of Redis at each read and scrape."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from switchboard_local.brokers.registry import BROKERS
from switchboard_local.core import sources

from support.html import parse
from support.redis_server import free_port, started_redis_server

pytestmark = pytest.mark.anyio


@pytest.fixture
def redis_server(tmp_path: Path):
    server = started_redis_server(tmp_path)
    yield server
    server.stop()


async def test_an_adapter_s_backlog_is_shown_and_exported(store, board, redis_server):
    config = BROKERS.get("redis").configure({"url": redis_server.url, "mode": "list", "key": "jobs", "queue": "work"})
    await sources.add(store, "jobs", family="queue", kind="list", trust_mode="queue", config=config)
    await sources.set_enabled(store, "jobs", False, family="queue")  # nothing drains it: the backlog stays
    redis_server.client().rpush("jobs", b"one", b"two", b"three")

    (shown,) = board.get_json("/api/adapters")["items"]
    assert (shown["name"], shown["enabled"], shown["waiting"], shown["lag_error"]) == ("jobs", False, 3, None)
    assert "password" not in shown["config"].get("url", "")
    assert (shown["broker"], shown["reads"]) == ("redis", "list 'jobs'")  # what its broker's entry says of it
    assert shown["guarantee"].startswith("durable: removed from KEY:processing (LREM) only after the commit")

    scraped = board.get("/metrics").body.decode()
    families = {f.name: f for f in text_string_to_metric_families(scraped)}
    (lag,) = families["switchboard_adapter_lag_messages"].samples
    assert (lag.labels, lag.value) == ({"adapter": "jobs"}, 3)


async def test_the_sources_page_shows_when_each_adapter_acks(store, board):
    port = free_port()  # nothing listens: serve's consumers back off, the page shows them all the same
    for name, mode, ack in (("held", "stream", "on-complete"), ("plain", "list", None)):
        config = BROKERS.get("redis").configure({"url": f"redis://127.0.0.1:{port}/0", "mode": mode, "key": name,
                                                 "ack": ack})  # fmt: skip
        await sources.add(store, name, family="queue", kind="redis", trust_mode="queue", config=config)

    shown = {row["name"]: row for row in board.get_json("/api/adapters")["items"]}
    assert {name: row["ack"] for name, row in shown.items()} == {"held": "on-complete", "plain": "on-store"}
    assert shown["held"]["guarantee"].endswith("held unacked until every todo made from it is finished")
    page = parse(board.get("/sources").body.decode())
    cells = {row.attrs["data-adapter"]: {td.attrs["data-label"]: td.text.strip() for td in row.all("td")}
             for row in page.by_id("adapter-rows").all("tr")}  # fmt: skip
    assert {name: row["Ack"] for name, row in cells.items()} == {"held": "on-complete", "plain": "on-store"}
