"""RabbitMQ adapters in the consumer loop, against a real node: store first, then basic.ack.

The broker's own counts are the evidence (``rabbitmqctl list_queues``: ready,
unacknowledged); once an adapter has stopped, its channel is closed and
whatever it left unacked is ready again, so "nothing ready" then means
"everything acked".
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

import pytest

from switchboard_local.brokers import amqp
from switchboard_local.brokers.loop import Consumer, Faults
from switchboard_local.core import rules, sources, todos

from support.amqp import add_amqp_adapter, amqp_source, new_queue
from support.brokers import Running, ended
from support.rabbitmq_server import RabbitMQServer
from support.redis_server import free_port
from support.sql import drop_trigger, refuse_inserts, rows, run, value
from support.waits import until_async

pytestmark = pytest.mark.anyio


def messages(n: int) -> list[bytes]:
    return [json.dumps({"order": i}).encode() for i in range(n)]


def drained(server: RabbitMQServer, queue: str) -> Callable[[], bool]:
    """Whether the broker holds nothing of ``queue``, ready or unacked (asked while the adapter runs)."""
    return lambda: server.list_queues()[queue] == (0, 0)


def bodies(db_path) -> list[bytes]:
    return sorted(bytes(body) for (body,) in rows(db_path, "SELECT body FROM events"))


@pytest.mark.both_backends
async def test_every_message_becomes_one_event_and_one_todo_and_is_acked(real_store, rabbitmq, db_path) -> None:
    queue = new_queue(rabbitmq)
    sent = messages(3000)
    rabbitmq.admin.publish(queue, sent[:1000])
    running = Running(real_store, await add_amqp_adapter(real_store, rabbitmq.url, queue))
    rabbitmq.admin.publish(queue, sent[1000:])  # while it runs
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 3000)
    await running.finish()

    assert bodies(db_path) == sorted(sent)
    assert value(db_path, "SELECT count(*) FROM todos") == 3000
    assert rabbitmq.list_queues()[queue] == (0, 0)
    health = await sources.get(real_store, "orders")
    assert health.messages_stored == 3000 and health.consecutive_failures == 0


async def test_rules_route_on_the_message_type_and_the_rest_go_to_the_adapters_queue(real_store, rabbitmq,
                                                                                     db_path) -> None:  # fmt: skip
    queue = new_queue(rabbitmq)
    await add_amqp_adapter(real_store, rabbitmq.url, queue, queue="fulfilment")
    await rules.add(real_store, source="orders", type="order.urgent", queue="urgent", title="Order {id}")
    rabbitmq.admin.publish(queue, [b'{"id": 7}'], type="order.urgent")
    rabbitmq.admin.publish(queue, [b'{"id": 8}'], message_id="order-8")
    running = Running(real_store, await sources.get(real_store, "orders"))
    await running.until(lambda: value(db_path, "SELECT count(*) FROM todos"), 2)
    await running.finish()

    urgent, default = [await todos.get(real_store, i) for i in (1, 2)]
    assert (urgent.queue, urgent.title, urgent.payload["body"]) == ("urgent", "Order 7", {"id": 7})
    assert (default.queue, default.payload["body"]) == ("fulfilment", {"id": 8})
    assert value(db_path, "SELECT external_id FROM events WHERE id = 2") == "order-8"


@pytest.mark.both_backends
async def test_a_failing_commit_acks_nothing_and_everything_is_stored_once_after(real_store, rabbitmq, db_path) -> None:
    queue = new_queue(rabbitmq)
    refuse_inserts(db_path, "boom", "events", "injected")  # a real fault in the real database
    rabbitmq.admin.publish(queue, messages(50))
    running = Running(real_store, await add_amqp_adapter(real_store, rabbitmq.url, queue, batch=16))
    await running.until(lambda: value(db_path, "SELECT consecutive_failures FROM sources"), lambda n: n >= 1)

    assert value(db_path, "SELECT count(*) FROM events") == 0
    assert sum(rabbitmq.list_queues()[queue]) == 50  # ready or delivered: none acked
    assert "injected" in (await sources.get(real_store, "orders")).last_error

    drop_trigger(db_path, "boom", "events")
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 50)
    await running.finish()
    assert value(db_path, "SELECT count(*) FROM todos") == 50
    assert rabbitmq.list_queues()[queue] == (0, 0)


async def test_what_was_stored_but_never_acked_is_redelivered_and_collapses_into_the_same_todos(
    real_store, rabbitmq, db_path
) -> None:
    queue = new_queue(rabbitmq)
    sent = [*messages(10), *messages(10)[:5]]  # five bodies twice, without a message id: one todo each
    rabbitmq.admin.publish(queue, sent[:10])
    rabbitmq.admin.publish(queue, [b"with-an-id"] * 2, message_id="order-1")  # the same id twice: one todo
    adapter = await add_amqp_adapter(real_store, rabbitmq.url, queue, batch=4)
    consumer = Consumer(real_store, adapter, asyncio.Event(), faults=Faults(pause_after_commit=True))
    crashed = asyncio.create_task(consumer.run())
    await until_async(lambda: value(db_path, "SELECT count(*) FROM events"), lambda n: n > 0,
                      dead=ended(crashed, "the adapter"))  # fmt: skip
    crashed.cancel()  # between the commit and the ack: the connection goes, nothing acked
    with pytest.raises(asyncio.CancelledError):
        await crashed
    stored = value(db_path, "SELECT count(*) FROM events")
    assert 1 <= stored <= 4
    assert rabbitmq.list_queues()[queue] == (12, 0)  # all of it back in the queue

    rabbitmq.admin.publish(queue, sent[10:])
    running = Running(real_store, adapter)
    await running.until(drained(rabbitmq, queue), True)
    await running.finish()
    assert value(db_path, "SELECT count(*) FROM events") == 11  # ten bodies and one id
    assert value(db_path, "SELECT count(*) FROM todos") == 11


async def test_a_message_that_cannot_be_stored_is_never_acked_and_the_rest_are(real_store, rabbitmq, db_path,
                                                                               caplog) -> None:  # fmt: skip
    queue = new_queue(rabbitmq)
    await add_amqp_adapter(real_store, rabbitmq.url, queue, batch=16)
    run(db_path, "CREATE TRIGGER unstorable BEFORE INSERT ON events WHEN CAST(NEW.body AS TEXT) = '\"poison\"' "
                 "BEGIN SELECT RAISE(ABORT, 'this message cannot be stored'); END")  # fmt: skip
    rabbitmq.admin.publish(queue, [b'"one"', b'"poison"', b'"three"', b'"four"'])
    running = Running(real_store, await sources.get(real_store, "orders"))
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 3)
    await running.finish()

    assert bodies(db_path) == [b'"four"', b'"one"', b'"three"']
    assert rabbitmq.list_queues()[queue] == (1, 0)  # back in the queue: never acked
    assert rabbitmq.admin.take(queue) == [b'"poison"']


async def test_a_connection_the_broker_closes_is_reopened_and_nothing_is_lost(real_store, rabbitmq, db_path) -> None:
    queue = new_queue(rabbitmq)
    rabbitmq.admin.publish(queue, messages(2000))
    running = Running(real_store, await add_amqp_adapter(real_store, rabbitmq.url, queue, batch=8))
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), lambda n: n >= 100)
    closed = rabbitmq.ctl("close_all_connections", "closed by the test")
    assert closed.returncode == 0, closed.stderr
    await running.until(lambda: value(db_path, "SELECT consecutive_failures FROM sources"), lambda n: n >= 1)
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 2000)
    await running.until(drained(rabbitmq, queue), True)  # what was stored and not acked at the close, too
    await running.finish()
    assert value(db_path, "SELECT count(*) FROM todos") == 2000
    assert value(db_path, "SELECT consecutive_failures FROM sources") == 0
    assert rabbitmq.list_queues()[queue] == (0, 0)


async def test_a_queue_deleted_under_the_adapter_is_reported_and_read_again_once_declared(real_store, rabbitmq,
                                                                                         db_path) -> None:  # fmt: skip
    queue = new_queue(rabbitmq)
    running = Running(real_store, await add_amqp_adapter(real_store, rabbitmq.url, queue))
    rabbitmq.admin.publish(queue, [b'"before"'])
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 1)
    rabbitmq.admin.delete(queue)  # the broker cancels the adapter's consumer; its channel stays open
    await running.until(lambda: value(db_path, "SELECT last_error FROM sources"),
                        lambda error: error is not None and f"no queue '{queue}' on the broker" in error)  # fmt: skip
    rabbitmq.admin.declare(queue)
    rabbitmq.admin.publish(queue, [b'"after"'])
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 2)
    await running.finish()
    assert bodies(db_path) == [b'"after"', b'"before"']


async def test_a_restarted_broker_is_survived_and_drained_without_loss(real_store, rabbitmq_alone, db_path) -> None:
    server = rabbitmq_alone  # a node of its own: it is stopped mid-run and started again
    queue = new_queue(server)
    server.admin.publish(queue, messages(1000))
    running = Running(real_store, await add_amqp_adapter(real_store, server.url, queue, batch=1))
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), lambda n: n >= 200)
    server.stop()  # mid-run; the queue is durable and its messages persistent
    await running.until(lambda: value(db_path, "SELECT consecutive_failures FROM sources"), lambda n: n >= 1)
    server.start()
    await running.until(lambda: value(db_path, "SELECT count(*) FROM events"), 1000)
    await running.until(drained(server, queue), True)  # what was stored and not acked at the stop, too
    await running.finish()
    assert value(db_path, "SELECT count(*) FROM todos") == 1000
    assert value(db_path, "SELECT consecutive_failures FROM sources") == 0


async def test_the_url_password_never_reaches_the_health_or_the_log(real_store, db_path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="switchboard_local.brokers")
    dead = f"amqp://guest:hunter2%2Fsecret@127.0.0.1:{free_port()}/"  # nothing listens there
    adapter = await add_amqp_adapter(real_store, dead, "orders")
    assert "hunter2" not in json.dumps(adapter.to_dict())
    running = Running(real_store, adapter)
    await running.until(lambda: value(db_path, "SELECT consecutive_failures FROM sources"), lambda n: n >= 1)
    await running.finish()
    assert "hunter2" not in (await sources.get(real_store, "orders")).last_error
    assert caplog.messages and "hunter2" not in caplog.text


def test_both_spellings_of_a_percent_encoded_password_are_masked() -> None:
    source = amqp_source("amqp://guest:p%40ss%3Aword@127.0.0.1:5672/", "orders")
    consumer = Consumer(None, source, asyncio.Event())  # type: ignore[arg-type]
    consumer._secrets = amqp.Reader(source).secrets  # what the consumer takes from its reader
    assert consumer._describe(RuntimeError("login p@ss:word / p%40ss%3Aword")) == "RuntimeError: login **** / ****"
