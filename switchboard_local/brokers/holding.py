"""Ack on completion (`adapter add --ack on-complete`): a stored message stays unacked at
its broker until every todo made from it is finished.

The consumer loop hands each committed batch to ``Holding.settle``: a message
that made no todo (a drop rule, a bare event) is acked at once, as on store;
the others are held (the reader's ``hold`` keeps their delivery alive at the
broker). Between reads the loop calls ``release``, which asks the core which
of the held messages' events still have a todo in play (``events.in_play``,
one read by event id) and acks the rest. It asks when a commit somewhere in
the database woke it (``watch.Changes``, as a waiting claim is woken: an
agent's complete in another process counts), at most every WOKEN_GAP, and at
least every RECHECK however quiet the file (a lease can lapse without a
commit). A crash only leaves the messages unacked: the broker delivers them
again, the keys collapse them into the event and todos stored already, and
they are held again, or acked at once when those todos are finished.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import cast

from ..core import adapters, events, watch
from ..core.events import Ingested
from ..core.sources import Source
from ..core.store.interface import Store
from .reader import HoldingReader, Message, Reader
from .registry import BROKERS

log = logging.getLogger("switchboard_local.brokers")

WOKEN_GAP = 0.5  # seconds: the least time between two asks when commits keep waking it (its own among them)
RECHECK = 5.0  # seconds: the most time between two asks, commit or not


class CannotHold(Exception):
    """An adapter set to ack on completion whose broker cannot hold its messages (a row edited by hand)."""


Answer = Ingested | Exception


class Holding:
    """The messages one reader holds until their todos finish, by the broker's id for each (a message
    delivered again takes the place of the one held: the broker's newest delivery is the one to ack;
    two messages sharing an external id, one event, are both held and both acked when its todos finish)."""

    def __init__(self, store: Store, name: str, reader: HoldingReader, changes: watch.Changes) -> None:
        self.store = store
        self.name = name
        self.reader = reader
        self.changes = changes
        self.held: dict[str, tuple[Message, int]] = {}  # Message.held_as -> (message, its event's id)
        self._asked_at = float("-inf")
        self._seen = changes.count

    async def settle(self, messages: list[Message], answers: list[Answer]) -> None:
        """After the commit: hold each stored message that made a todo, ack the other stored ones."""
        keep = [(m, a) for m, a in zip(messages, answers) if isinstance(a, Ingested) and a.todo_ids]
        if keep:
            await self.reader.hold([m for m, _ in keep])  # before the batch's ack: no moment unrenewed
            for message, answer in keep:
                self.held[message.held_as] = (message, answer.event_id)
        await self.reader.ack(messages, [isinstance(a, Ingested) and not a.todo_ids for a in answers])

    async def release(self) -> None:
        """When it is time to ask: ack the held messages whose events have no todo in play any more."""
        if not self.held or not self._due():
            return
        seen = self.changes.count  # before the read: a commit during it wakes the next ask
        in_play = await events.in_play(self.store, [event_id for _, event_id in self.held.values()])
        self._asked_at, self._seen = time.monotonic(), seen
        done = [message for message, event_id in self.held.values() if event_id not in in_play]
        if not done:
            return
        await self.reader.ack(done, [True] * len(done))
        for message in done:
            del self.held[message.held_as]
        log.debug("adapter %s: %d held messages acked, their todos finished; %d held", self.name, len(done),
                  len(self.held))  # fmt: skip

    def _due(self) -> bool:
        waited = time.monotonic() - self._asked_at
        return waited >= RECHECK or (self.changes.count != self._seen and waited >= WOKEN_GAP)


@contextlib.asynccontextmanager
async def holding(store: Store, source: Source, reader: Reader) -> AsyncIterator[Holding | None]:
    """A ``Holding`` for the reader's life when the adapter acks on completion, else None (ack on store)."""
    if adapters.ack_mode(source.config) != adapters.ON_COMPLETE:
        yield None
        return
    if not callable(getattr(reader, "hold", None)):
        entry = BROKERS.of(source)
        why = entry.cannot_hold(source.config) if entry is not None else None
        why = why or "its reader cannot hold a message"
        raise CannotHold(f"--ack on-complete: {why}; re-add it with --ack on-store")
    async with watch.following(store) as changes:
        yield Holding(store, source.name, cast(HoldingReader, reader), changes)
