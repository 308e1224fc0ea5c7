"""SQS adapters against moto's server (aiobotocore unchanged, pointed at it by endpoint URL): store first, then delete.

The queue's own counts (GetQueueAttributes, exact on moto) say what is left:
visible messages wait, not-visible ones are received and neither deleted nor
returned yet. Waits that need a visibility timeout to run out use a timeout of
a few seconds, far under the waits' stall limit.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from switchboard_local.brokers import sqs
from switchboard_local.brokers.loop import Consumer, Faults
from switchboard_local.core import events, sources

from support.brokers import Running, ended
from support.redis_server import free_port
from support.sql import drop_trigger, refuse_inserts, rows, value
from support.sqs_server import added_sqs_adapter
from support.waits import until_async

pytestmark = pytest.mark.anyio


def send(server, queue_url: str, bodies: list[str]) -> list[str]:
    """Send in batches of ten, as a producer would; the MessageIds in order."""
    client, ids = server.client(), []
    for start in range(0, len(bodies), 10):
        chunk = bodies[start : start + 10]
        reply = client.send_message_batch(QueueUrl=queue_url, Entries=[{"Id": str(i), "MessageBody": b}
                                                                      for i, b in enumerate(chunk)])  # fmt: skip
        assert not reply.get("Failed"), reply
        ids += [entry["MessageId"] for entry in sorted(reply["Successful"], key=lambda e: int(e["Id"]))]
    return ids


def count(db_path, table: str = "events") -> int:
    """Rows of ``table``; of events, those read from a queue (`adapter add` records its own in the audit trail)."""
    return value(db_path, f"SELECT count(*) FROM {table}" + (" WHERE family = 'queue'" if table == "events" else ""))


async def test_messages_become_events_and_todos_and_are_deleted_after_their_commit(real_store, sqs_server,
                                                                                   db_path) -> None:  # fmt: skip
    url = sqs_server.create_queue("orders")
    ids = send(sqs_server, url, [json.dumps({"n": i}) for i in range(25)])
    running = Running(real_store, await added_sqs_adapter(real_store, db_path, sqs_server, url))
    await running.until(lambda: count(db_path), 25)
    await running.until(lambda: sqs_server.counts(url), (0, 0))  # every one deleted, none left in flight
    await running.finish()

    assert sorted(r[0] for r in rows(db_path, "SELECT external_id FROM events WHERE family = 'queue'")) == sorted(ids)
    assert count(db_path, "todos") == 25
    event = (await events.list_events(real_store, source="orders", limit=1))[0]
    assert (event.source, event.family, event.type, event.trust_mode, event.verified) == ("orders", "queue", "orders",
                                                                                          "queue", True)  # fmt: skip
    assert event.verify_detail == "read from sqs queue 'orders' (trusted by the connection)"
    assert event.headers["sqs-queue"] == "orders" and event.headers["sqs-message-id"] == event.external_id


async def test_message_attributes_are_kept_as_headers_beside_where_the_message_was_read(real_store, sqs_server,
                                                                                      db_path) -> None:  # fmt: skip
    url = sqs_server.create_queue("orders")
    sqs_server.client().send_message(QueueUrl=url, MessageBody='{"n": 1}', MessageAttributes={
        "kind": {"DataType": "String", "StringValue": "refund"}, "amount": {"DataType": "Number", "StringValue": "12"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00"}})  # fmt: skip
    running = Running(real_store, await added_sqs_adapter(real_store, db_path, sqs_server, url))
    await running.until(lambda: count(db_path), 1)
    await running.finish()
    (event,) = await events.list_events(real_store, source="orders")
    assert event.body == b'{"n": 1}'
    assert {k: v for k, v in event.headers.items() if k.startswith("sqs-attribute-")} == {
        "sqs-attribute-kind": "refund", "sqs-attribute-amount": "12"}  # fmt: skip


@pytest.mark.both_backends
async def test_a_failing_commit_deletes_nothing_and_everything_is_stored_once_after(real_store, sqs_server,
                                                                                    db_path) -> None:  # fmt: skip
    url = sqs_server.create_queue("orders")
    adapter = await added_sqs_adapter(real_store, db_path, sqs_server, url, visibility_timeout=2)
    refuse_inserts(db_path, "boom", "events", "injected")  # a real fault in the real database
    send(sqs_server, url, [json.dumps({"n": i}) for i in range(12)])
    running = Running(real_store, adapter)
    await running.until(lambda: value(db_path, "SELECT consecutive_failures FROM sources"), lambda n: n >= 1)

    assert count(db_path) == 0
    assert sum(sqs_server.counts(url)) == 12  # received maybe, deleted none
    assert "injected" in (await sources.get(real_store, "orders")).last_error

    drop_trigger(db_path, "boom", "events")  # the batches come back when their visibility timeout runs out
    await running.until(lambda: count(db_path), 12)
    await running.until(lambda: sqs_server.counts(url), (0, 0))
    await running.finish()
    assert count(db_path, "todos") == 12


async def test_a_message_that_cannot_be_stored_is_not_deleted_and_the_rest_are(real_store, sqs_server,
                                                                               db_path) -> None:  # fmt: skip
    url = sqs_server.create_queue("orders")
    refuse_inserts(db_path, "unstorable", "events", "this message cannot be stored",
                   when="CAST(NEW.body AS TEXT) LIKE '%poison%'")  # fmt: skip
    send(sqs_server, url, ['"one"', '"poison"', '"three"', '"four"'])
    running = Running(real_store, await added_sqs_adapter(real_store, db_path, sqs_server, url))
    await running.until(lambda: count(db_path), 3)
    await running.until(lambda: sqs_server.counts(url), (0, 1))  # the three deleted; the poison still hidden
    await running.finish()

    assert sorted(bytes(r[0]).decode() for r in rows(db_path, "SELECT body FROM events WHERE family = 'queue'")) == [
        '"four"',
        '"one"',
        '"three"',
    ]
    assert sqs_server.counts(url) == (0, 1)  # never deleted: SQS delivers it again when its timeout runs out


async def test_a_batch_stored_but_never_deleted_comes_back_after_its_timeout_and_collapses_into_its_todos(
    real_store, sqs_server, db_path
) -> None:
    url = sqs_server.create_queue("orders")
    send(sqs_server, url, [json.dumps({"n": i}) for i in range(5)])
    adapter = await added_sqs_adapter(real_store, db_path, sqs_server, url, visibility_timeout=2)
    stop = asyncio.Event()
    crashed = asyncio.create_task(Consumer(real_store, adapter, stop, Faults(pause_after_commit=True)).run())
    # Committed, then paused before the delete: the crash's window.
    await until_async(lambda: count(db_path), 5, dead=ended(crashed, "the consumer"))
    crashed.cancel()  # gone between the commit and the delete
    with pytest.raises(asyncio.CancelledError):
        await crashed
    assert sqs_server.counts(url) == (0, 5)

    running = Running(real_store, adapter)  # a fresh consumer: SQS delivers the five again
    await running.until(lambda: sqs_server.counts(url), (0, 0))
    await running.finish()
    assert (count(db_path), count(db_path, "todos")) == (5, 5)  # each stored once, keyed by its MessageId


async def test_a_batch_stays_hidden_past_its_visibility_timeout_while_it_commits(real_store, sqs_server,
                                                                                 db_path) -> None:  # fmt: skip
    url = sqs_server.create_queue("orders")
    send(sqs_server, url, ['"a"', '"b"', '"c"'])
    adapter = await added_sqs_adapter(real_store, db_path, sqs_server, url, visibility_timeout=5)
    reader = sqs.Reader(adapter)
    try:
        messages = await reader.read()  # and not acked: the loop would be committing them now
        assert len(messages) == 3
        # A marker that becomes visible 8 s from now: once it is, the batch's first 5 s are long past.
        sqs_server.client().send_message(QueueUrl=url, MessageBody='"marker"', DelaySeconds=8)
        await until_async(lambda: sqs_server.counts(url), (1, 3))
        await reader.ack(messages, [True, True, True])
        assert sqs_server.counts(url) == (1, 0)
    finally:
        await reader.close()


async def test_a_fifo_queue_keys_each_message_by_its_deduplication_id(real_store, sqs_server, db_path) -> None:
    url = sqs_server.create_queue("orders.fifo")
    client = sqs_server.client()
    sent = {dedup: client.send_message(QueueUrl=url, MessageBody=json.dumps({"order": dedup}), MessageGroupId="shop",
                                       MessageDeduplicationId=dedup)["MessageId"]
            for dedup in ("order-1", "order-2")}  # fmt: skip
    running = Running(real_store, await added_sqs_adapter(real_store, db_path, sqs_server, url, name="fifo"))
    await running.until(lambda: count(db_path), 2)
    await running.until(lambda: sqs_server.counts(url), (0, 0))
    await running.finish()

    found = {e.external_id: e for e in await events.list_events(real_store, source="fifo")}
    assert sorted(found) == ["order-1", "order-2"]
    for dedup, message_id in sent.items():
        headers = found[dedup].headers
        assert (headers["sqs-message-id"], headers["sqs-group-id"], headers["sqs-queue"]) == (message_id, "shop",
                                                                                              "orders.fifo")  # fmt: skip
    assert sqs.guarantee((await sources.get(real_store, "fifo")).config).endswith("MessageDeduplicationId")


async def test_the_probe_counts_waiting_and_in_flight_messages_and_says_they_are_approximate(real_store, sqs_server,
                                                                                         db_path) -> None:  # fmt: skip
    url = sqs_server.create_queue("orders")
    send(sqs_server, url, [json.dumps({"n": i}) for i in range(5)])
    adapter = await added_sqs_adapter(real_store, db_path, sqs_server, url, batch=3)
    before = await sqs.probe(adapter.config, os.environ, 5)
    assert (before.reachable, before.waiting, before.unacked, before.error) == (True, 5, 0, None)
    assert "approximate" in before.note

    reader = sqs.Reader(adapter)
    try:
        messages = await reader.read()
        reading = await sqs.probe(adapter.config, os.environ, 5)
        assert (reading.waiting, reading.unacked) == (2, 3)
        await reader.ack(messages, [True, True, True])
    finally:
        await reader.close()
    after = await sqs.probe(adapter.config, os.environ, 5)
    assert (after.waiting, after.unacked) == (2, 0)


async def test_the_probe_of_a_missing_queue_or_a_silent_endpoint_says_why_never_with_the_secret(real_store, sqs_server,
                                                                                               db_path) -> None:  # fmt: skip
    url = sqs_server.create_queue("orders")
    adapter = await added_sqs_adapter(real_store, db_path, sqs_server, url)
    missing = await sqs.probe({**adapter.config, "queue_url": url + "-gone"}, os.environ, 5)
    assert (missing.reachable, missing.waiting, missing.unacked) == (True, None, None)
    assert "NonExistentQueue" in missing.error
    silent = await sqs.probe({**adapter.config, "endpoint_url": f"http://127.0.0.1:{free_port()}"}, os.environ, 2)
    assert (silent.reachable, silent.waiting, silent.unacked) == (False, None, None)
    assert "Could not connect" in silent.error
    for said in (missing, silent):
        assert os.environ["AWS_SECRET_ACCESS_KEY"] not in repr(said)


async def test_without_credentials_the_adapter_says_so_in_its_health_and_keeps_retrying(real_store, sqs_server,
                                                                                        db_path, monkeypatch) -> None:  # fmt: skip
    url = sqs_server.create_queue("orders")
    send(sqs_server, url, ['"a"'])
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")  # and no config file, no instance role (the fixture's environment)
    running = Running(real_store, await added_sqs_adapter(real_store, db_path, sqs_server, url))
    await running.until(lambda: value(db_path, "SELECT consecutive_failures FROM sources"), lambda n: n >= 2)
    await running.finish()
    assert "Unable to locate credentials" in (await sources.get(real_store, "orders")).last_error
    assert (count(db_path), sqs_server.counts(url)) == (0, (1, 0))  # nothing read, nothing lost
    probed = await sqs.probe((await sources.get(real_store, "orders")).config, os.environ, 5)
    assert not probed.reachable and "Unable to locate credentials" in probed.error


async def test_a_delete_sqs_refuses_is_an_error_naming_how_many_and_why_never_silent(real_store, sqs_server,
                                                                                     db_path) -> None:  # fmt: skip
    url = sqs_server.create_queue("orders")
    send(sqs_server, url, ['"a"', '"b"'])
    reader = sqs.Reader(await added_sqs_adapter(real_store, db_path, sqs_server, url))
    try:
        messages = await reader.read()
        assert len(messages) == 2
        sqs_server.client().purge_queue(QueueUrl=url)  # their receipt handles now name nothing
        with pytest.raises(sqs.NotDeleted) as refused:
            await reader.ack(messages, [True, True])
    finally:
        await reader.close()
    assert str(refused.value) == ("2 stored messages were not deleted (ReceiptHandleIsInvalid); SQS delivers them "
                                  "again and their keys collapse them")  # fmt: skip
    assert isinstance(refused.value, sqs.Reader.faults)  # the loop backs off and records it in the adapter's health
