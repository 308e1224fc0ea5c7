"""The AMQP reader on its own, against a real RabbitMQ node: what it reads, and
exactly what it settles when told which messages were stored.

The broker's own counts (``rabbitmqctl list_queues``) are the evidence: a
delivery acked is gone, one held back is unacknowledged while the reader's
channel is open and ready again once it closes.
"""

from __future__ import annotations

import json

import pytest

from switchboard_local.brokers import amqp
from switchboard_local.core.events import body_hash

from support.amqp import amqp_source, new_queue, read_at_least
from support.waits import until_async

pytestmark = pytest.mark.anyio


def bodies(n: int) -> list[bytes]:
    return [json.dumps({"n": i}).encode() for i in range(n)]


async def test_the_message_id_property_is_the_event_id_else_the_hash_of_the_body(rabbitmq) -> None:
    queue = new_queue(rabbitmq)
    rabbitmq.admin.publish(queue, [b'{"order": 7}'], message_id="order-7")
    rabbitmq.admin.publish(queue, [b'{"order": 8}'])
    reader = amqp.Reader(amqp_source(rabbitmq.url, queue))
    try:
        first, second = await read_at_least(reader, 2)
    finally:
        await reader.close()
    assert (first.external_id, first.body) == ("order-7", b'{"order": 7}')
    assert (second.external_id, second.body) == (body_hash(b'{"order": 8}'), b'{"order": 8}')


async def test_the_event_type_is_the_type_property_else_the_routing_key_and_where_it_was_read_is_kept(
    rabbitmq,
) -> None:
    queue = new_queue(rabbitmq)
    rabbitmq.admin.publish(queue, [b"{}"], type="order.created")
    rabbitmq.admin.publish(queue, [b"{}"])
    reader = amqp.Reader(amqp_source(rabbitmq.url, queue))
    try:
        typed, untyped = await read_at_least(reader, 2)
    finally:
        await reader.close()
    assert (typed.type, untyped.type) == ("order.created", queue)  # the default exchange routes by queue name
    assert untyped.headers == {"amqp-queue": queue, "amqp-exchange": "", "amqp-routing-key": queue}


async def test_the_broker_delivers_at_most_batch_messages_before_an_ack(rabbitmq) -> None:
    queue = new_queue(rabbitmq)
    rabbitmq.admin.publish(queue, bodies(10))
    reader = amqp.Reader(amqp_source(rabbitmq.url, queue, batch=3))
    try:
        first = await reader.read()
        assert 1 <= len(first) <= 3
        # The prefetch holds the rest back: three delivered (one read, the others on their way), seven ready.
        await until_async(lambda: rabbitmq.list_queues()[queue], (7, 3))
        await reader.ack(first, [True] * len(first))
        await until_async(lambda: rabbitmq.list_queues()[queue], (7 - len(first), 3))
    finally:
        await reader.close()


async def test_only_the_stored_messages_are_acked_even_after_a_held_back_one(rabbitmq) -> None:
    queue = new_queue(rabbitmq)
    rabbitmq.admin.publish(queue, [b'"one"', b'"poison"', b'"three"', b'"four"'])
    reader = amqp.Reader(amqp_source(rabbitmq.url, queue, batch=16))
    try:
        messages = await read_at_least(reader, 4)
        await reader.ack(messages, [m.body != b'"poison"' for m in messages])
        # A multiple ack of "four" would have settled "poison" too: it is still delivered, unacked.
        assert rabbitmq.list_queues()[queue] == (0, 1)
    finally:
        await reader.close()
    assert rabbitmq.list_queues()[queue] == (1, 0)  # back in the queue once the channel closed
    assert rabbitmq.admin.take(queue) == [b'"poison"']


async def test_a_run_of_stored_messages_is_acked_and_a_later_batch_behind_a_held_one_too(rabbitmq) -> None:
    queue = new_queue(rabbitmq)
    rabbitmq.admin.publish(queue, bodies(6))
    reader = amqp.Reader(amqp_source(rabbitmq.url, queue, batch=16))
    try:
        messages = await read_at_least(reader, 6)
        await reader.ack(messages[:3], [True, False, True])  # the second is held back
        await reader.ack(messages[3:], [True, True, True])
        assert rabbitmq.list_queues()[queue] == (0, 1)
        await reader.ack(messages[1:2], [True])  # stored at last (a later batch of a redelivery would be)
        assert rabbitmq.list_queues()[queue] == (0, 0)
    finally:
        await reader.close()


async def test_nothing_is_acked_when_nothing_was_stored_and_all_of_it_returns_on_close(rabbitmq) -> None:
    queue = new_queue(rabbitmq)
    rabbitmq.admin.publish(queue, bodies(5))
    reader = amqp.Reader(amqp_source(rabbitmq.url, queue, batch=16))
    try:
        messages = await read_at_least(reader, 5)
        await reader.ack(messages, [False] * 5)
        assert rabbitmq.list_queues()[queue] == (0, 5)
    finally:
        await reader.close()
    assert rabbitmq.list_queues()[queue] == (5, 0)


async def test_with_a_dead_letter_exchange_an_unstorable_message_is_nacked_to_it(rabbitmq) -> None:
    rabbitmq.admin.declare_dead_letter("dead-letters", "dead")
    queue = new_queue(rabbitmq, {"x-dead-letter-exchange": "dead-letters"})
    rabbitmq.admin.take("dead")  # what another test left there
    rabbitmq.admin.publish(queue, [b'"one"', b'"poison"', b'"three"'])
    reader = amqp.Reader(amqp_source(rabbitmq.url, queue, amqp_dead_letter_exchange="dead-letters"))
    try:
        messages = await read_at_least(reader, 3)
        await reader.ack(messages, [m.body != b'"poison"' for m in messages])
        assert rabbitmq.list_queues()[queue] == (0, 0)
    finally:
        await reader.close()
    assert rabbitmq.admin.take("dead") == [b'"poison"']


async def test_a_queue_that_does_not_exist_is_a_broker_fault_naming_it_and_is_never_created(rabbitmq) -> None:
    reader = amqp.Reader(amqp_source(rabbitmq.url, "never-declared"))
    try:
        with pytest.raises(amqp.Unreachable, match="no queue 'never-declared'"):
            await reader.read()
    finally:
        await reader.close()
    assert "never-declared" not in rabbitmq.list_queues()
    assert amqp.Unreachable in amqp.Reader.faults


async def test_a_dead_letter_exchange_that_does_not_exist_is_a_broker_fault_naming_it(rabbitmq) -> None:
    queue = new_queue(rabbitmq)
    reader = amqp.Reader(amqp_source(rabbitmq.url, queue, amqp_dead_letter_exchange="nowhere"))
    try:
        with pytest.raises(amqp.Unreachable, match="no exchange 'nowhere'"):
            await reader.read()
    finally:
        await reader.close()
