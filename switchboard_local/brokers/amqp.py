"""RabbitMQ (AMQP 0-9-1): consume a named queue, basic.ack only after the commit.

The reader consumes the queue with manual acks and a prefetch of --batch, so
the broker never has more than a batch delivered and unacked to it. After the
commit it acks what was stored: one ``basic.ack`` with ``multiple`` for the
run of stored deliveries at the front of what this channel holds, one each
for the rest (a multiple ack would also settle a delivery held back before
them). A message that cannot be stored at all is ``basic.nack``ed without
requeue when the queue dead-letters (--amqp-dead-letter-exchange: AMQP cannot
tell a consumer whether a queue has a dead-letter exchange, so the operator
says so), else it is left unacked and logged: never acked. A closed channel,
a lost connection or a broker restart is a fault; the loop backs off and
makes a new reader, and the broker returns everything unacked to the queue
by its own rules. The queue is only ever declared passively: its arguments
(type, dead-lettering, limits) are its owner's.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage, AbstractQueue
from aio_pika.exceptions import AMQPError, ChannelInvalidStateError, ChannelNotFoundEntity

from ..core import adapters
from ..core.adapters import Backlog, Option
from ..core.errors import InvalidArgument
from ..core.events import body_hash
from ..core.sources import Source
from . import options as shared_options
from .reader import Message

log = logging.getLogger("switchboard_local.brokers")

NAME = "amqp"
DESCRIPTION = "RabbitMQ (AMQP 0-9-1): consumes a queue with manual acks, basic.ack after the commit"
# Named apart from the shared --queue, which is the switchboard queue the todos go to.
QUEUE = Option(
    "amqp_queue",
    "the broker's queue to consume (declared by its owner: the adapter never creates it).",
    required=True,
    metavar="NAME",
)
DEAD_LETTER = Option(
    "amqp_dead_letter_exchange",
    "the dead-letter exchange the queue is set up with (its x-dead-letter-exchange, by argument or policy): a "
    "message that cannot be stored is nacked to it; without it, such a message stays unacked.",
    metavar="EXCHANGE",
)
OPTIONS = (QUEUE, DEAD_LETTER)

MAX_NAME_BYTES = 255  # queue and exchange names are AMQP short strings
SCHEMES = ("amqp", "amqps")
WAIT = 1.0  # how long one read may wait for a first message: also how soon a stop is noticed
LINGER = 0.005  # after the first message, how long a quiet moment ends the batch (deliveries come in bursts)
CONNECT_TIMEOUT = 10.0


class Unreachable(Exception):
    """The broker cannot be asked at all: its URL's variable is unset, its queue or exchange is missing."""


def configure(options: Mapping[str, Any]) -> dict[str, Any]:
    """`adapter add`'s options validated into the stored config; no network I/O, no URL quoted."""
    config = shared_options.shared(options)  # its largest --batch fits basic.qos' 16-bit prefetch-count
    if "url" in config:
        check_url(config["url"])
    config[QUEUE.name] = _name(QUEUE, options.get(QUEUE.name))  # required: never None
    exchange = _name(DEAD_LETTER, options.get(DEAD_LETTER.name))
    if exchange is not None:
        config[DEAD_LETTER.name] = exchange
    return config


def check_url(url: str) -> None:
    """An amqp:// or amqps:// URL with a host and a valid port, its path one virtual host. No message quotes it."""
    parts = shared_options.url_parts(url, SCHEMES, "amqp://USER:PASSWORD@HOST[:PORT][/VHOST]")
    if "/" in parts.path[1:]:
        raise InvalidArgument("--url: the path is the virtual host, one segment (percent-encode a '/' in it as %2F)")


def _name(option: Option, value: Any) -> str | None:
    """A queue's or an exchange's name: one plain line, an AMQP short string."""
    name = shared_options.text(option, value)
    if name is not None and len(name.encode()) > MAX_NAME_BYTES:
        raise InvalidArgument(f"{option.flag} must be at most {MAX_NAME_BYTES} bytes (an AMQP short string)")
    return name


def guarantee(config: Mapping[str, Any]) -> str:
    exchange = config.get("amqp_dead_letter_exchange")
    unstorable = (f"nacked to dead-letter exchange {exchange!r}" if exchange
                  else "left unacked (no dead-letter exchange given)")  # fmt: skip
    return ("durable: basic.ack only after the commit; unacked deliveries return to the queue on a reconnect; "
            f"a message that cannot be stored is {unstorable}")  # fmt: skip


def cannot_hold(config: Mapping[str, Any]) -> str:
    """Why a queue's deliveries cannot wait unacked for their todos (--ack on-complete)."""
    return ("RabbitMQ delivers a consumer at most its prefetch window (--batch) unacked, so --batch messages waiting "
            "on their todos would stop its deliveries; and it closes a channel whose delivery stays unacked past "
            "its consumer_timeout (30 minutes by default), returning every held message to the queue")  # fmt: skip


def where(config: Mapping[str, Any]) -> str:
    text = f"queue {config.get('amqp_queue')!r}"
    if config.get("amqp_dead_letter_exchange"):
        text += f" dead-letter exchange {config['amqp_dead_letter_exchange']!r}"
    return text


def env(config: Mapping[str, Any]) -> list[str]:
    name = adapters.url_env(config)
    return [name] if name else []


def url_of(config: Mapping[str, Any], environ: Mapping[str, str]) -> str:
    """The broker's URL: in the config, or in the named environment variable (``Unreachable`` when unset)."""
    url = adapters.url(config, environ)
    if url is None:
        raise Unreachable(f"environment variable {adapters.url_env(config)} is not set")
    return url


def passwords(url: str) -> tuple[str, ...]:
    """The URL's password as written and as sent (percent-decoded): both are masked in messages."""
    try:
        raw = urlsplit(url).password or ""
    except ValueError:
        return ()
    return tuple(p for p in dict.fromkeys((raw, unquote(raw))) if p)


def _said(exc: BaseException, url: str) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    for password in passwords(url):
        text = text.replace(password, "****")
    return text


async def probe(config: Mapping[str, Any], environ: Mapping[str, str], timeout: float) -> Backlog:
    """Ready messages, from a passive declare of the queue; never raises, never creates anything.

    AMQP tells a consumer how many messages are ready and how many consumers
    a queue has, not how many are delivered and unacked: ``unacked`` is None
    (``rabbitmqctl list_queues messages_unacknowledged`` or the management
    API tell it).
    """
    queue = config.get("amqp_queue")
    try:
        url = url_of(config, environ)
    except Unreachable as exc:
        return Backlog(reachable=False, error=str(exc))
    try:
        async with asyncio.timeout(timeout * 3):  # connect, open a channel, declare: a hard cap over all three
            connection = await aio_pika.connect(url, timeout=timeout)
            try:
                channel = await connection.channel(publisher_confirms=False)
                try:
                    declared = await channel.declare_queue(queue, passive=True)
                except ChannelNotFoundEntity:
                    return Backlog(reachable=True, error=f"no queue {queue!r} on the broker (declare it: the adapter "
                                                         "never does)")  # fmt: skip
                found = declared.declaration_result
                note = (f"{found.consumer_count} consumer(s); AMQP does not tell unacked deliveries "
                        "(rabbitmqctl list_queues messages_unacknowledged does)")  # fmt: skip
                return Backlog(reachable=True, waiting=found.message_count, unacked=None, note=note)
            finally:
                await _close(connection)
    except Exception as exc:  # noqa: BLE001 (a probe never raises: whatever the URL or the broker did, it is said)
        return Backlog(reachable=False, error=_said(exc, url))


async def _close(connection: AbstractConnection) -> None:
    try:
        await connection.close()
    except (AMQPError, ChannelInvalidStateError, OSError):
        pass


Connect = Callable[[str], Awaitable[AbstractConnection]]


async def new_connection(url: str) -> AbstractConnection:
    """aio-pika's plain connection (not its robust one: the consumer loop does the reconnecting)."""
    return await aio_pika.connect(url, timeout=CONNECT_TIMEOUT)


class Reader:
    """One AMQP queue, consumed with manual acks; made without I/O, connected on the first read."""

    faults: tuple[type[Exception], ...] = (AMQPError, ChannelInvalidStateError, OSError, Unreachable)

    def __init__(self, source: Source, connect: Connect | None = None) -> None:
        self.name = source.name
        self.queue: str = source.config["amqp_queue"]
        self.batch: int = source.config["batch"]
        self.dead_letter: str | None = source.config.get("amqp_dead_letter_exchange")
        self.origin = f"amqp queue {self.queue!r}"
        self._url = url_of(source.config, os.environ)
        self.secrets = passwords(self._url)
        self._connect = connect or new_connection
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._inbox: asyncio.Queue[AbstractIncomingMessage | None] = asyncio.Queue()  # None: the channel closed
        # Delivered on this channel and not yet settled, by delivery tag: what a multiple ack would settle.
        self._held: dict[int, AbstractIncomingMessage] = {}
        self._closed_by: BaseException | None = None

    async def read(self) -> list[Message]:
        if self._channel is None:
            await self._start()
        first = await self._next(WAIT)
        if first is None:
            return []
        batch = [first]
        while len(batch) < self.batch and (more := await self._next(LINGER)) is not None:
            batch.append(more)
        return [self._message(delivery) for delivery in batch]

    async def ack(self, messages: list[Message], stored: list[bool]) -> None:
        channel = self._channel
        if channel is None or channel.is_closed:  # settled by nobody: the broker requeues them
            raise self._fault()
        done = {m.receipt.delivery_tag for m, ok in zip(messages, stored) if ok}
        front = None  # the last of the held deliveries, oldest first, that are all stored
        for tag in sorted(self._held):
            if tag not in done:
                break
            front = tag
        if front is not None:
            await self._held[front].ack(multiple=front != min(self._held))
            for tag in [t for t in self._held if t <= front]:
                del self._held[tag]
        for tag in sorted(done & self._held.keys()):  # behind a held-back delivery: one by one
            await self._held.pop(tag).ack()
        for message, ok in zip(messages, stored):
            if not ok:
                await self._unstorable(message)

    async def _unstorable(self, message: Message) -> None:
        if self.dead_letter is not None:
            await self._held.pop(message.receipt.delivery_tag).nack(requeue=False)
            log.error("adapter %s: message %s cannot be stored; nacked to dead-letter exchange %r", self.name,
                      message.external_id, self.dead_letter)  # fmt: skip
        else:
            log.error("adapter %s: message %s cannot be stored; left unacked (no dead-letter exchange given): the "
                      "broker redelivers it after a reconnect", self.name, message.external_id)  # fmt: skip

    async def close(self) -> None:
        """Close the connection: whatever is unacked goes back to the queue (the broker's rule)."""
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None:
            await _close(connection)

    async def _start(self) -> None:
        self._connection = await self._connect(self._url)
        channel = await self._connection.channel(publisher_confirms=False)
        channel.close_callbacks.add(self._on_close)
        await channel.set_qos(prefetch_count=self.batch)
        queue = await self._declared(channel)
        # The broker cancels a consumer whose queue is deleted; the channel stays open and would idle forever.
        (await channel.get_underlay_channel()).on_consumer_cancel_callbacks.add(self._on_cancel)
        await queue.consume(self._deliver)
        self._channel = channel

    async def _declared(self, channel: AbstractChannel) -> AbstractQueue:
        try:
            if self.dead_letter is not None:
                await channel.get_exchange(self.dead_letter, ensure=True)
        except ChannelNotFoundEntity:
            raise Unreachable(f"no exchange {self.dead_letter!r} (the --amqp-dead-letter-exchange)") from None
        try:
            return await channel.declare_queue(self.queue, passive=True)
        except ChannelNotFoundEntity:
            raise Unreachable(f"no queue {self.queue!r} on the broker (declare it: the adapter never does)") from None

    async def _deliver(self, delivery: AbstractIncomingMessage) -> None:
        self._inbox.put_nowait(delivery)

    def _on_close(self, _channel: Any, exc: BaseException | None) -> None:
        self._closed_by = exc
        self._inbox.put_nowait(None)  # wakes a read waiting for a message

    def _on_cancel(self, _frame: Any) -> None:
        self._closed_by = Unreachable(f"the broker cancelled the consumer of queue {self.queue!r} (was it deleted?)")
        self._inbox.put_nowait(None)

    async def _next(self, timeout: float) -> AbstractIncomingMessage | None:
        """The next delivery, None after ``timeout`` s without one; a closed channel raises."""
        try:
            delivery = await asyncio.wait_for(self._inbox.get(), timeout) if self._inbox.empty() \
                else self._inbox.get_nowait()  # fmt: skip
        except TimeoutError:
            return None
        if delivery is None:
            raise self._fault()
        self._held[delivery.delivery_tag] = delivery
        return delivery

    def _fault(self) -> Exception:
        if isinstance(self._closed_by, self.faults):
            return self._closed_by
        return ChannelInvalidStateError(f"the channel on queue {self.queue!r} closed")

    def _message(self, delivery: AbstractIncomingMessage) -> Message:
        headers = {"amqp-queue": self.queue, "amqp-exchange": delivery.exchange or "",
                   "amqp-routing-key": delivery.routing_key or ""}  # fmt: skip
        return Message(
            external_id=delivery.message_id or body_hash(delivery.body),
            body=delivery.body,
            type=delivery.type or delivery.routing_key or self.queue,
            headers=headers,
            receipt=delivery,
        )
