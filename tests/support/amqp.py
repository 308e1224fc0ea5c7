"""What the AMQP tests share: an adapter on a queue of the test's own, added as
`adapter add --broker amqp` will add it."""

from __future__ import annotations

import secrets
from typing import Any

from switchboard_local.brokers import amqp
from switchboard_local.brokers.reader import Message
from switchboard_local.brokers.registry import BROKERS
from switchboard_local.core import sources
from switchboard_local.core.store.interface import Store

from support.rabbitmq_server import RabbitMQServer
from support.waits import STALL


def new_queue(server: RabbitMQServer, arguments: dict[str, Any] | None = None) -> str:
    """A durable queue no other test uses (the node is shared by the session)."""
    name = f"work-{secrets.token_hex(4)}"
    server.admin.declare(name, arguments)
    return name


def amqp_config(url: str, amqp_queue: str, **options: Any) -> dict[str, Any]:
    """The config `adapter add --broker amqp` stores."""
    return BROKERS.get("amqp").configure({"url": url, "amqp_queue": amqp_queue, **options})


async def add_amqp_adapter(store: Store, url: str, amqp_queue: str, name: str = "orders",
                           **options: Any) -> sources.Source:  # fmt: skip
    """``options``: the broker's and the shared ones (``queue``: the switchboard queue todos go to)."""
    config = amqp_config(url, amqp_queue, **options)
    return await sources.add(store, name, family="queue", kind="amqp", trust_mode="queue", config=config)


def amqp_source(url: str, amqp_queue: str, name: str = "orders", **options: Any) -> sources.Source:
    """A source row as the store would hand it to a reader, for a test of the reader on its own."""
    return sources.Source(
        name=name, family="queue", kind="amqp", trust_mode="queue", enabled=True,
        config=amqp_config(url, amqp_queue, **options), secrets=[], created_at=0, updated_at=0, last_poll_at=None,
        last_error=None, consecutive_failures=0, messages_stored=0,
    )  # fmt: skip


async def read_at_least(reader: amqp.Reader, count: int) -> list[Message]:
    """Read until ``count`` messages came (each read returns what has come, up to the batch), or fail on a stall."""
    got: list[Message] = []
    idle = 0
    while len(got) < count:
        batch = await reader.read()  # waits up to a second for a first message
        got.extend(batch)
        idle = 0 if batch else idle + 1
        assert idle < STALL, f"no message for {STALL:g} reads; got {len(got)} of {count}"
    return got
