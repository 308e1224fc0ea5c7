"""The backlog probe (`status`, `doctor`, the dashboard) against a real RabbitMQ node:
what AMQP tells (messages ready), what it cannot (unacked deliveries), and that it
never raises, never creates a queue and never shows the URL's password."""

from __future__ import annotations

import socket

import pytest

from switchboard_local.brokers import amqp

from support.amqp import amqp_config, amqp_source, new_queue, read_at_least
from support.redis_server import free_port
from support.waits import until_async

pytestmark = pytest.mark.anyio


async def test_waiting_is_the_messages_ready_and_unacked_is_unknown_over_amqp(rabbitmq) -> None:
    queue = new_queue(rabbitmq)
    rabbitmq.admin.publish(queue, [b"{}"] * 5)
    config = amqp_config(rabbitmq.url, queue, batch=2)
    found = await amqp.probe(config, {}, timeout=5)
    assert (found.reachable, found.waiting, found.unacked, found.error) == (True, 5, None, None)
    assert found.note == ("0 consumer(s); AMQP does not tell unacked deliveries "
                          "(rabbitmqctl list_queues messages_unacknowledged does)")  # fmt: skip

    reader = amqp.Reader(amqp_source(rabbitmq.url, queue, batch=2))
    try:
        await read_at_least(reader, 1)
        await until_async(lambda: rabbitmq.list_queues()[queue], (3, 2))  # the prefetch: two delivered
        found = await amqp.probe(config, {}, timeout=5)
    finally:
        await reader.close()
    assert (found.waiting, found.unacked) == (3, None)
    assert found.note.startswith("1 consumer(s)")


async def test_a_queue_that_does_not_exist_is_said_and_not_created(rabbitmq) -> None:
    found = await amqp.probe(amqp_config(rabbitmq.url, "not-declared"), {}, timeout=5)
    assert (found.reachable, found.waiting) == (True, None)
    assert found.error == "no queue 'not-declared' on the broker (declare it: the adapter never does)"
    assert "not-declared" not in rabbitmq.list_queues()


async def test_a_url_from_an_unset_variable_is_said() -> None:
    config = amqp.configure({"url_env": "SWITCHBOARD_TEST_UNSET_AMQP_URL", "amqp_queue": "orders"})
    found = await amqp.probe(config, {}, timeout=5)
    assert (found.reachable, found.error) == (False, "environment variable SWITCHBOARD_TEST_UNSET_AMQP_URL is not set")


async def test_the_url_in_the_named_variable_is_the_one_probed(rabbitmq) -> None:
    queue = new_queue(rabbitmq)
    config = amqp.configure({"url_env": "RABBITMQ_URL", "amqp_queue": queue})
    found = await amqp.probe(config, {"RABBITMQ_URL": rabbitmq.url}, timeout=5)
    assert (found.reachable, found.waiting) == (True, 0)


async def test_a_broker_that_refuses_the_login_is_said_without_the_password(rabbitmq) -> None:
    url = rabbitmq.url.replace("guest:guest", "guest:hunter2-secret")
    found = await amqp.probe(amqp_config(url, "orders"), {}, timeout=5)
    assert not found.reachable and found.error
    assert "hunter2" not in found.error


async def test_nothing_listening_is_unreachable_without_the_password() -> None:
    url = f"amqp://guest:hunter2-secret@127.0.0.1:{free_port()}/"
    found = await amqp.probe(amqp_config(url, "orders"), {}, timeout=5)
    assert not found.reachable and found.error
    assert "hunter2" not in found.error


async def test_a_server_that_never_answers_is_unreachable_within_the_timeout() -> None:
    with socket.socket() as silent:  # accepts connections (the kernel does) and never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"amqp://guest:guest@127.0.0.1:{silent.getsockname()[1]}/"
        found = await amqp.probe(amqp_config(url, "orders"), {}, timeout=0.5)
    assert not found.reachable and found.error
