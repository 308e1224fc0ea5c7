"""NATS JetStream adapters against a real nats-server: store first, then ack, one ack per stored message."""

from __future__ import annotations

import asyncio
import json

import nats.js.errors
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from switchboard_local.brokers import nats_jetstream
from switchboard_local.brokers.loop import Consumer, Faults
from switchboard_local.brokers.nats_jetstream import new_client
from switchboard_local.core import routing, sources, todos

from support.brokers import Running, ended
from support.nats_server import (
    add_nats_adapter,
    add_stream,
    connected,
    consumer_counts,
    consumer_info,
    publish,
    until_server,
)
from support.sql import drop_trigger, refuse_inserts, rows, value
from support.waits import until_async

pytestmark = pytest.mark.anyio


def stored(db_path) -> int:
    """The events the adapter stored (`adapter add` records an operator's event too)."""
    return value(db_path, "SELECT count(*) FROM events WHERE family = 'queue'")


def bodies(db_path) -> list[str]:
    return sorted(bytes(row[0]).decode() for row in rows(db_path, "SELECT body FROM events WHERE family = 'queue'"))


@pytest.mark.both_backends
async def test_every_published_message_becomes_one_event_and_todo_and_is_acked(
    real_store, nats_server, db_path
) -> None:
    async with connected(nats_server.url) as client:
        await add_stream(client, "ORDERS", ["orders.>"])
        await publish(client, "orders.new", [json.dumps({"order": i}).encode() for i in range(2000)])
        running = Running(
            real_store, await add_nats_adapter(real_store, db_path, nats_server.url, "ORDERS", subject="orders.>")
        )
        await running.until(lambda: stored(db_path), 2000)
        await until_server(lambda: consumer_counts(client, "ORDERS"), (0, 0), running)  # none waiting, none unacked
        await running.finish()

    assert value(db_path, "SELECT count(*) FROM todos") == 2000
    assert value(db_path, "SELECT count(DISTINCT external_id) FROM events WHERE family = 'queue'") == 2000
    health = await sources.get(real_store, "orders")
    assert health.messages_stored == 2000 and health.consecutive_failures == 0


async def test_the_message_id_is_nats_msg_id_when_present_else_the_stream_sequence_kept_in_the_event(
    real_store, nats_server, db_path
) -> None:
    async with connected(nats_server.url) as client:
        await add_stream(client, "ORDERS", ["orders.>"])
        await publish(client, "orders.new", [b'{"id": 1}'], msg_ids=["order-1"])
        await publish(client, "orders.paid", [b'{"id": 2}'])
    running = Running(real_store, await add_nats_adapter(real_store, db_path, nats_server.url, "ORDERS"))
    await running.until(lambda: value(db_path, "SELECT count(*) FROM todos"), 2)
    await running.finish()

    found = rows(db_path, "SELECT external_id, type, headers FROM events WHERE family = 'queue' ORDER BY id")
    assert [(external_id, kind) for external_id, kind, _ in found] == [("order-1", "orders.new"), ("2", "orders.paid")]
    assert [json.loads(headers)["nats-sequence"] for _, _, headers in found] == ["1", "2"]
    first, second = [await todos.get(real_store, i) for i in (1, 2)]
    assert first.idempotency_key == "event:orders:order-1:default"
    assert second.idempotency_key == "event:orders:2:default"


async def test_a_failing_commit_acks_nothing_and_everything_is_stored_once_after(
    real_store, nats_server, db_path
) -> None:
    adapter = await add_nats_adapter(real_store, db_path, nats_server.url, "ORDERS", batch=16)
    refuse_inserts(db_path, "boom", "events", "injected")  # a real fault in the real database
    async with connected(nats_server.url) as client:
        await add_stream(client, "ORDERS", ["orders.>"])
        await publish(client, "orders.new", [json.dumps({"order": i}).encode() for i in range(50)])
        running = Running(real_store, adapter)
        await running.until(lambda: value(db_path, "SELECT consecutive_failures FROM sources"), lambda n: n >= 1)

        assert stored(db_path) == 0
        info = await consumer_info(client, "ORDERS")
        assert info.ack_floor.stream_seq == 0 and info.delivered.stream_seq > 0  # read, never acked
        assert "injected" in (await sources.get(real_store, "orders")).last_error

        drop_trigger(db_path, "boom", "events")
        await running.until(lambda: stored(db_path), 50)
        await until_server(lambda: consumer_counts(client, "ORDERS"), (0, 0), running)
        await running.finish()
    assert value(db_path, "SELECT count(*) FROM todos") == 50


async def test_a_message_that_cannot_be_stored_is_not_acked_and_the_rest_are(real_store, nats_server, db_path) -> None:
    refuse_inserts(
        db_path, "unstorable", "events", "this message cannot be stored", when="CAST(NEW.body AS TEXT) LIKE '%poison%'"
    )
    async with connected(nats_server.url) as client:
        await add_stream(client, "ORDERS", ["orders.>"])
        await publish(client, "orders.new", [b'"one"', b'"poison"', b'"three"', b'"four"'])
        running = Running(real_store, await add_nats_adapter(real_store, db_path, nats_server.url, "ORDERS", batch=16))
        await running.until(lambda: stored(db_path), 3)
        await until_server(lambda: consumer_counts(client, "ORDERS"), (0, 1), running)  # 3 and 4 acked
        info = await consumer_info(client, "ORDERS")
        await running.finish()

    assert info.ack_floor.stream_seq == 1  # the poison (sequence 2) holds the floor: never acked
    assert bodies(db_path) == ['"four"', '"one"', '"three"']
    assert value(db_path, "SELECT count(*) FROM todos") == 3


async def test_a_redelivery_after_a_crash_between_commit_and_ack_collapses_into_the_same_todos(
    real_store, nats_server, db_path
) -> None:
    clients = []

    async def keep(url: str) -> Client:  # the reader's client, to cut its connection as a crash would
        clients.append(await new_client(url))
        return clients[-1]

    async with connected(nats_server.url) as client:
        await add_stream(client, "ORDERS", ["orders.>"])
        await publish(client, "orders.new", [json.dumps({"order": i}).encode() for i in range(10)])
        adapter = await add_nats_adapter(real_store, db_path, nats_server.url, "ORDERS", batch=10, ack_wait=2)
        stop = asyncio.Event()
        crashed = asyncio.create_task(
            Consumer(real_store, adapter, stop, Faults(pause_after_commit=True), connect=keep).run()
        )
        await until_async(lambda: stored(db_path), 10, dead=ended(crashed, "the consumer"))
        keys = sorted(r[0] for r in rows(db_path, "SELECT idempotency_key FROM todos"))
        await clients[0].close()  # the process is gone: its connection closes, nothing acked, nothing nak'd
        crashed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await crashed
        assert await consumer_counts(client, "ORDERS") == (0, 10)  # stored, never acked

        running = Running(real_store, adapter)  # a fresh run: the server redelivers once AckWait has passed
        await until_server(lambda: consumer_counts(client, "ORDERS"), (0, 0), running)
        await running.finish()
        info = await consumer_info(client, "ORDERS")

    assert info.delivered.consumer_seq == 20  # each message delivered twice
    assert stored(db_path) == 10
    assert sorted(r[0] for r in rows(db_path, "SELECT idempotency_key FROM todos")) == keys


async def test_a_batch_committing_longer_than_ack_wait_is_kept_in_progress_not_redelivered(
    real_store, nats_server, db_path, monkeypatch
) -> None:
    renewals = 0
    real_in_progress, real_accept = Msg.in_progress, routing.accept
    release = asyncio.Event()

    async def counted(self: Msg) -> None:
        nonlocal renewals
        renewals += 1
        await real_in_progress(self)

    async def slow_commit(*args, **kwargs):  # a fault hook: the commit waits for the test
        await release.wait()
        return await real_accept(*args, **kwargs)

    monkeypatch.setattr(Msg, "in_progress", counted)
    monkeypatch.setattr(routing, "accept", slow_commit)
    async with connected(nats_server.url) as client:
        await add_stream(client, "ORDERS", ["orders.>"])
        await publish(client, "orders.new", [json.dumps({"order": i}).encode() for i in range(5)])
        running = Running(
            real_store, await add_nats_adapter(real_store, db_path, nats_server.url, "ORDERS", ack_wait=2)
        )
        # Renewed every third of AckWait: 7 renewals of each message span more than two AckWaits, past
        # the server's own check of expired acks (it runs once per AckWait).
        await running.until(lambda: renewals >= 7 * 5, True)
        other = await client.jetstream().pull_subscribe_bind(consumer="switchboard", stream="ORDERS")
        # A second puller on the durable is given nothing back: a timeout, nats-py's own or (when the
        # no-wait probe's answer used up the deadline, as on a loaded machine) asyncio's, a TimeoutError both.
        with pytest.raises(TimeoutError):
            await other.fetch(5, timeout=0.5)
        release.set()
        await running.until(lambda: stored(db_path), 5)
        await until_server(lambda: consumer_counts(client, "ORDERS"), (0, 0), running)
        await running.finish()
        info = await consumer_info(client, "ORDERS")
    assert info.delivered.consumer_seq == 5  # each message delivered once: none was redelivered
    assert value(db_path, "SELECT count(*) FROM todos") == 5


async def test_a_missing_stream_is_an_error_and_is_never_created_without_create_stream(
    real_store, nats_server, db_path
) -> None:
    running = Running(
        real_store, await add_nats_adapter(real_store, db_path, nats_server.url, "ORDERS", subject="orders.>")
    )
    await running.until(lambda: value(db_path, "SELECT consecutive_failures FROM sources"), lambda n: n >= 1)
    assert "no stream 'ORDERS' on the server" in (await sources.get(real_store, "orders")).last_error
    async with connected(nats_server.url) as client:
        with pytest.raises(nats.js.errors.NotFoundError):
            await client.jetstream().stream_info("ORDERS")
        await add_stream(client, "ORDERS", ["orders.>"])  # the operator makes it: the adapter takes it up
        await publish(client, "orders.new", [b'{"late": true}'])
        await running.until(lambda: stored(db_path), 1)
        await until_server(lambda: consumer_counts(client, "ORDERS"), (0, 0), running)
        await running.finish()


async def test_create_stream_makes_the_stream_on_the_subject_and_the_durable_consumer(
    real_store, nats_server, db_path
) -> None:
    adapter = await add_nats_adapter(
        real_store, db_path, nats_server.url, "ORDERS", subject="orders.>", create_stream=True
    )
    running = Running(real_store, adapter)
    async with connected(nats_server.url) as client:
        js = client.jetstream()

        async def made() -> bool:
            try:
                await js.consumer_info("ORDERS", "switchboard")
                return True
            except nats.js.errors.NotFoundError:
                return False

        await until_server(made, True, running)
        stream = await js.stream_info("ORDERS")
        consumer = await js.consumer_info("ORDERS", "switchboard")
        await publish(client, "orders.new", [b'{"n": 1}'])
        await running.until(lambda: stored(db_path), 1)
        await running.finish()
    assert stream.config.subjects == ["orders.>"]
    assert (consumer.config.filter_subject, consumer.config.ack_policy, consumer.config.deliver_policy,
            consumer.config.ack_wait) == ("orders.>", api.AckPolicy.EXPLICIT, api.DeliverPolicy.ALL, 30.0)  # fmt: skip


async def test_an_existing_pull_consumer_is_used_as_it_is_and_what_it_acked_is_not_read_again(
    real_store, nats_server, db_path
) -> None:
    async with connected(nats_server.url) as client:
        js = client.jetstream()
        await add_stream(client, "ORDERS", ["orders.>"])
        await publish(client, "orders.new", [b'"old-1"', b'"old-2"', b'"new-3"'])
        await js.add_consumer("ORDERS", durable_name="switchboard", ack_policy=api.AckPolicy.EXPLICIT,
                              filter_subject="orders.>")  # fmt: skip
        earlier = await js.pull_subscribe_bind(consumer="switchboard", stream="ORDERS")
        for msg in await earlier.fetch(2, timeout=5):
            await msg.ack_sync()
        await earlier.unsubscribe()
        running = Running(
            real_store, await add_nats_adapter(real_store, db_path, nats_server.url, "ORDERS", subject="orders.>")
        )
        await running.until(lambda: stored(db_path), 1)
        await until_server(lambda: consumer_counts(client, "ORDERS"), (0, 0), running)
        await running.finish()
    assert bodies(db_path) == ['"new-3"']


@pytest.mark.parametrize(
    ("consumer", "why"),
    [
        ({"filter_subject": "orders.paid"}, "filters ['orders.paid'], not orders.>"),
        ({"filter_subject": "orders.>", "deliver_subject": "push.here"}, "is a push consumer"),
        ({"filter_subject": "orders.>", "ack_policy": api.AckPolicy.NONE}, "acks none, not explicitly"),
    ],
)
async def test_an_existing_consumer_that_does_not_fit_is_refused_naming_why(consumer, why, real_store, nats_server,
                                                                           db_path) -> None:  # fmt: skip
    async with connected(nats_server.url) as client:
        await add_stream(client, "ORDERS", ["orders.>"])
        await publish(client, "orders.new", [b'"kept"'])
        await client.jetstream().add_consumer("ORDERS", durable_name="switchboard", **consumer)
        running = Running(
            real_store, await add_nats_adapter(real_store, db_path, nats_server.url, "ORDERS", subject="orders.>")
        )
        await running.until(lambda: value(db_path, "SELECT consecutive_failures FROM sources"), lambda n: n >= 1)
        await running.finish()
    assert why in (await sources.get(real_store, "orders")).last_error
    assert stored(db_path) == 0


async def test_a_restarted_nats_server_is_survived_and_drained_without_loss(real_store, nats_server, db_path) -> None:
    async with connected(nats_server.url) as client:
        await add_stream(client, "ORDERS", ["orders.>"])
        await publish(client, "orders.new", [json.dumps({"order": i}).encode() for i in range(3000)])
    adapter = await add_nats_adapter(real_store, db_path, nats_server.url, "ORDERS", batch=1, ack_wait=2)
    running = Running(real_store, adapter)
    await running.until(lambda: stored(db_path), lambda n: n >= 200)
    nats_server.stop()  # mid-run: its JetStream store stays in its folder
    await running.until(lambda: value(db_path, "SELECT consecutive_failures FROM sources"), lambda n: n >= 1)
    nats_server.start()
    await running.until(lambda: stored(db_path), 3000)
    async with connected(nats_server.url) as client:
        await until_server(lambda: consumer_counts(client, "ORDERS"), (0, 0), running)
    await running.finish()
    assert value(db_path, "SELECT count(*) FROM todos") == 3000
    assert value(db_path, "SELECT consecutive_failures FROM sources") == 0


async def test_a_fetch_that_times_out_at_any_point_is_an_idle_poll_not_a_failure(real_store, nats_server, db_path,
                                                                                 monkeypatch) -> None:  # fmt: skip
    # nats-py ends a fetch that found nothing with its own TimeoutError or asyncio's, depending on when the
    # deadline passes; a fetch this short meets both, hundreds of times.
    fetches = 0
    real_fetch = JetStreamContext.PullSubscription.fetch

    async def counted(self, *args, **kwargs):  # counts, then fetches
        nonlocal fetches
        fetches += 1
        return await real_fetch(self, *args, **kwargs)

    monkeypatch.setattr(JetStreamContext.PullSubscription, "fetch", counted)
    monkeypatch.setattr(nats_jetstream, "FETCH_WAIT", 0.002)
    async with connected(nats_server.url) as client:
        await add_stream(client, "ORDERS", ["orders.>"])
    running = Running(real_store, await add_nats_adapter(real_store, db_path, nats_server.url, "ORDERS"))
    await running.until(lambda: fetches >= 500, True)
    await running.finish()
    adapter = await sources.get(real_store, "orders")
    assert (adapter.consecutive_failures, adapter.last_error) == (0, None)
