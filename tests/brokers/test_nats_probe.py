"""The NATS backlog probe (what `status`, `doctor` and the dashboard show) against a real nats-server:
waiting = not yet delivered to the adapter, unacked = delivered and not acked, or why it cannot tell."""

from __future__ import annotations

import nats.js.errors
import pytest

from switchboard_local.brokers import nats_jetstream
from switchboard_local.brokers.registry import BROKERS
from switchboard_local.core.sources import Source

from support.nats_server import add_stream, connected, nats_config, publish, started_nats_server
from support.redis_server import free_port

pytestmark = pytest.mark.anyio


def source(config: dict) -> Source:
    return Source(name="orders", family="queue", kind="nats", trust_mode="queue", enabled=True, config=config,
                  secrets=[], created_at=0, updated_at=0, last_poll_at=None, last_error=None, consecutive_failures=0,
                  messages_stored=0)  # fmt: skip


async def test_waiting_and_unacked_match_what_was_published_read_and_acked(nats_server) -> None:
    config = nats_config(nats_server.url, "ORDERS", subject="orders.>", batch=4)
    async with connected(nats_server.url) as client:
        await add_stream(client, "ORDERS", ["orders.>"])
        await publish(client, "orders.new", [b"{}"] * 10)
    before = await nats_jetstream.probe(config, {}, 1.0)

    reader = nats_jetstream.Reader(source(config))
    try:
        read = await reader.read()
        reading = await nats_jetstream.probe(config, {}, 1.0)
        await reader.ack(read, [True, True, True, False])
        acked = await nats_jetstream.probe(config, {}, 1.0)
    finally:
        await reader.close()

    assert (before.reachable, before.waiting, before.unacked) == (True, 10, 0)
    assert before.note == "no consumer 'switchboard' yet; serve creates it"
    assert (len(read), reading.waiting, reading.unacked, reading.note) == (4, 6, 4, None)
    assert (acked.waiting, acked.unacked) == (6, 1)  # the one not stored stays unacked


async def test_before_the_consumer_exists_only_the_subjects_messages_wait(nats_server) -> None:
    async with connected(nats_server.url) as client:
        await add_stream(client, "EVENTS", ["orders.*", "invoices.*"])
        await publish(client, "orders.new", [b"{}"] * 3)
        await publish(client, "invoices.new", [b"{}"] * 5)
    found = await nats_jetstream.probe(nats_config(nats_server.url, "EVENTS", subject="orders.*"), {}, 1.0)
    whole = await nats_jetstream.probe(nats_config(nats_server.url, "EVENTS"), {}, 1.0)
    assert (found.waiting, whole.waiting) == (3, 8)


async def test_the_probe_only_asks_it_creates_neither_stream_nor_consumer(nats_server) -> None:
    async with connected(nats_server.url) as client:
        await add_stream(client, "ORDERS", ["orders.>"])
        await nats_jetstream.probe(nats_config(nats_server.url, "ORDERS"), {}, 1.0)
        await nats_jetstream.probe(nats_config(nats_server.url, "MISSING", subject="m.>", create_stream=True), {}, 1.0)
        js = client.jetstream()
        with pytest.raises(nats.js.errors.NotFoundError):
            await js.consumer_info("ORDERS", "switchboard")
        with pytest.raises(nats.js.errors.NotFoundError):
            await js.stream_info("MISSING")


async def test_a_missing_stream_is_an_error_unless_serve_will_create_it(nats_server) -> None:
    missing = await nats_jetstream.probe(nats_config(nats_server.url, "ORDERS"), {}, 1.0)
    created = await nats_jetstream.probe(nats_config(nats_server.url, "ORDERS", subject="o.>", create_stream=True),
                                         {}, 1.0)  # fmt: skip
    assert (missing.reachable, missing.waiting, missing.error) == (
        True, None, "no stream 'ORDERS' (create it, or re-add with --create-stream)")  # fmt: skip
    assert (created.waiting, created.unacked, created.note) == (0, 0, "no stream yet; serve creates it")


async def test_an_unreachable_server_is_said_without_the_urls_password() -> None:
    url = f"nats://reader:s3cr3t-pw@127.0.0.1:{free_port()}"
    found = await nats_jetstream.probe(nats_config(url, "ORDERS"), {}, 1.0)
    assert not found.reachable and found.waiting is None
    assert "connect call failed" in found.error.lower() and "s3cr3t" not in found.error
    port = url.rsplit(":", 1)[1]
    assert found.fix == f"start nats-server with JetStream on 127.0.0.1:{port} (nats-server -js -p {port})"


async def test_a_url_from_an_unset_variable_is_said_and_the_variable_named() -> None:
    config = BROKERS.get("nats").configure({"url_env": "ORDERS_NATS_URL", "stream": "ORDERS"})
    found = await nats_jetstream.probe(config, {}, 1.0)
    assert (found.reachable, found.error) == (False, "$ORDERS_NATS_URL is not set here")
    assert nats_jetstream.env(config) == ["ORDERS_NATS_URL"]


async def test_a_server_without_jetstream_is_said(tmp_path) -> None:
    server = started_nats_server(tmp_path, jetstream=False)
    try:
        found = await nats_jetstream.probe(nats_config(server.url, "ORDERS"), {}, 1.0)
    finally:
        server.stop()
    assert (found.reachable, found.error) == (
        True,
        "JetStream does not answer on this server (is it started with -js?)",
    )
