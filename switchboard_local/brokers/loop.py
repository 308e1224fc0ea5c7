"""The consumer loop: store-then-ack from any broker, through a reader.

Each enabled adapter is one asyncio task running a ``Consumer``. It reads a
batch through its reader (``reader.py``; its broker's, from ``registry.py``),
stores it (events and their routed todos) in one transaction, and only after
COMMIT tells the reader which messages to ack. A crash anywhere before the ack
leaves the messages with the broker; the next start re-reads them and the
idempotency keys collapse what was already stored. An adapter that acks on
completion (``--ack on-complete``) holds each stored message that made todos
unacked until they are finished (``holding.py``).

Broker and database faults back off (1 s doubling to 30 s, with jitter) and
resume; they never crash ``serve`` and never ack what did not commit. The
``Supervisor`` runs one consumer per enabled queue source and follows the
registry. Nothing here knows a broker.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from typing import Any

from ..core import leadership, routing, sources
from ..core.errors import StoreFault
from ..core.events import Guard, Ingested, NewEvent
from ..core.sources import Source
from ..core.store.interface import Store
from .holding import CannotHold, holding
from .reader import Message, Reader
from .registry import BROKERS

log = logging.getLogger("switchboard_local.brokers")

BACKOFF_FIRST, BACKOFF_MAX = 1.0, 30.0
HEALTH_EVERY = 1.0


@dataclass(frozen=True)
class Faults:
    """Test hooks, passed in by whoever starts the consumers (never read from the environment here)."""

    pause_after_commit: bool = False  # hold the un-acked window open: a test kills the process there


class Consumer:
    """One adapter's consuming loop; ``run`` returns once ``stop`` is set.

    ``connect`` is handed to the reader: the broker driver's client factory
    (None: the driver's own; tests hand in a fake server's).
    """

    def __init__(
        self,
        store: Store,
        source: Source,
        stop: asyncio.Event,
        faults: Faults = Faults(),
        connect: Any = None,
        lease: leadership.Lease | None = None,
    ) -> None:
        self.store = store
        self.lease = lease
        self.guard: Guard | None = None if lease is None else lambda tx, now: leadership.check(tx, lease, now)
        self.source = source
        self.stop = stop
        self.faults = faults
        self.connect = connect
        self.rng = random.Random()
        self._stored_since_health = 0
        # Never recorded: the first poll is recorded at once. (Not 0.0: time.monotonic()
        # starts near 0 at boot on Linux, so 0.0 would hold the first record back until
        # the host has been up HEALTH_EVERY seconds.)
        self._health_at = float("-inf")
        self._delay = BACKOFF_FIRST
        self._secrets: tuple[str, ...] = ()
        self._broker_faults: tuple[type[Exception], ...] = ()

    async def run(self) -> None:
        self._delay = BACKOFF_FIRST
        while not self.stop.is_set():
            reader: Reader | None = None
            try:
                make = BROKERS.reader(self.source)
                self._broker_faults = make.faults
                reader = make(self.source, self.connect)
                self._secrets = reader.secrets
                await self._consume(reader)
            except Exception as exc:  # broker, database, or a bug: back off, never crash serve
                message = self._describe(exc)
                if isinstance(exc, (*self._broker_faults, OSError, StoreFault, CannotHold)):
                    log.warning("adapter %s: %s; retrying in up to %.0f s", self.source.name, message, self._delay)
                else:  # a bug: its type and place, never a message that might quote the URL
                    log.error("adapter %s: unexpected %s at %s; retrying", self.source.name, type(exc).__name__,
                              _place(exc))  # fmt: skip
                await self._health(error=message)
                await self._sleep(self.rng.uniform(self._delay / 2, self._delay))
                self._delay = min(self._delay * 2, BACKOFF_MAX)
            finally:
                if reader is not None:
                    await reader.close()
        if self._stored_since_health:
            await self._health(force=True)  # what was stored since the last record counts too

    async def _consume(self, reader: Reader) -> None:
        # A stop is noticed between batches: the batch in flight is stored and acked (or held), the rest
        # stays un-acked. Held messages stay with the broker when the reader goes (holding.py).
        async with holding(self.store, self.source, reader) as held:
            while not self.stop.is_set():
                messages = await reader.read()
                if messages:
                    answers = await self._commit([self._event(reader, m) for m in messages])
                    if held is None:
                        await reader.ack(messages, [not isinstance(a, Exception) for a in answers])
                    else:
                        await held.settle(messages, answers)
                if held is not None:
                    await held.release()
                await self._ok()

    def _event(self, reader: Reader, message: Message) -> NewEvent:
        return NewEvent(
            source=self.source.name,
            family="queue",
            type=message.type,
            external_id=message.external_id,
            trust_mode="queue",
            verified=True,
            verify_detail=f"read from {reader.origin} (trusted by the connection)",
            content_type=None,
            headers=message.headers,
            body=message.body,
        )

    async def _commit(self, events: list[NewEvent]) -> list[Ingested | Exception]:
        """Store a batch in one transaction; answer each message's ``Ingested`` (stored: it may be
        acked), or the exception that kept it from being stored.

        A message that cannot be routed is kept as a bare event (the back half
        does that), so it cannot block the ones behind it; one that cannot even
        be kept stays un-acked, and if nothing could be stored the batch backs
        off. A fault of the database raises: back off, retry it all.
        """
        answers = await routing.accept(self.store, self.source, events, guard=self.guard)
        stored = [not isinstance(a, Exception) for a in answers]
        if self.lease is not None:  # the fence each batch was stored under (a test checks they never go back)
            # Only the events this batch made: a redelivery's answer names the event an earlier leader stored.
            ids = [a.event_id for a in answers if not isinstance(a, Exception) and not a.duplicate]
            log.debug("adapter %s: batch stored under fence %d: events %s", self.source.name, self.lease.fence, ids)
        for event, answer in zip(events, answers):
            if not isinstance(answer, Exception) and answer.unroutable is not None:
                log.error("adapter %s: message %s kept without todos: %s", self.source.name, event.external_id,
                          answer.unroutable)  # fmt: skip
        if not any(stored):
            raise next(a for a in answers if isinstance(a, Exception))
        if self.faults.pause_after_commit:
            log.warning("fault hook: committed %d messages, pausing before the ack", len(events))
            await asyncio.Event().wait()  # the test kills the process here
        self._stored_since_health += sum(stored)
        return answers

    async def _ok(self) -> None:
        """A poll or a batch went through: the next fault starts its backoff afresh."""
        self._delay = BACKOFF_FIRST
        await self._health()

    async def _health(self, error: str | None = None, *, force: bool = False) -> None:
        """Record polls at most once a second (each record is a commit), errors at once."""
        now = time.monotonic()
        if error is None and not force and now - self._health_at < HEALTH_EVERY:
            return
        self._health_at = now
        stored, self._stored_since_health = self._stored_since_health, 0
        try:
            await sources.record_health(self.store, self.source.name, error=error, stored=stored)
        except StoreFault as exc:
            self._stored_since_health += stored
            log.warning("adapter %s: cannot record health: %s", self.source.name, exc)

    def _describe(self, exc: BaseException) -> str:
        text = f"{type(exc).__name__}: {exc}"
        for secret in self._secrets:
            text = text.replace(secret, "****")
        return text

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.stop.wait(), timeout=seconds)
        except TimeoutError:
            pass


def _where(source: Source) -> str:
    """What an adapter reads, for the log: its broker's words, or why there are none."""
    try:
        entry = BROKERS.of(source)
        return "no such broker in this version" if entry is None else f"{entry.name} {entry.where(source.config)}"
    except Exception as exc:  # a row edited by hand: the log line must not stop the supervisor
        return f"cannot say ({type(exc).__name__})"


def _place(exc: BaseException) -> str:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else "?"


class Supervisor:
    """Runs every enabled queue adapter; follows enable/disable within a second or two.

    ``lease``: the ingest leadership the consumers store under (each batch is
    fenced by it); None runs them unfenced (tests of the loop alone).
    """

    def __init__(
        self,
        store: Store,
        poll: float = 1.0,
        faults: Faults = Faults(),
        connect: Any = None,
        lease: leadership.Lease | None = None,
    ) -> None:
        self.store = store
        self.lease = lease
        self.poll = poll
        self.faults = faults
        self.connect = connect
        self.running: dict[str, tuple[asyncio.Task[None], asyncio.Event, int]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                try:
                    wanted = {a.name: a for a in await sources.list_sources(self.store, family="queue") if a.enabled}
                    await self._reconcile(wanted)
                except Exception:  # keep supervising whatever happened; say what it was
                    log.exception("adapter supervisor: cannot follow the registry this time")
                try:
                    await asyncio.wait_for(stop.wait(), timeout=self.poll)
                except TimeoutError:
                    pass
        finally:
            await self._stop_all()

    async def _reconcile(self, wanted: dict[str, Source]) -> None:
        for name, (task, _, version) in list(self.running.items()):
            if name not in wanted or wanted[name].updated_at != version or task.done():
                await self._stop(name)
        for name, source in wanted.items():
            if name not in self.running:
                stop = asyncio.Event()
                consumer = Consumer(self.store, source, stop, self.faults, self.connect, self.lease)
                task = asyncio.create_task(consumer.run(), name=f"adapter:{name}")
                self.running[name] = (task, stop, source.updated_at)
                log.info("adapter %s: started (%s)", name, _where(source))

    async def _stop(self, name: str) -> None:
        task, stop, _ = self.running[name]
        stop.set()  # finishes the read and the batch in flight (commit, then ack) and returns
        try:
            await task
        except Exception:
            log.exception("adapter %s: ended with an error", name)
        del self.running[name]  # only now: nothing more can be read for it
        log.info("adapter %s: stopped", name)

    async def _stop_all(self) -> None:
        for name in list(self.running):
            await self._stop(name)
