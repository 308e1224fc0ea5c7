"""What the consumer loop asks of a broker: a reader.

The loop (``loop.py``) knows no broker. It asks a reader for messages, stores
them, and tells the reader which ones are stored; the reader alone speaks the
broker's protocol. Adding a broker means one file with its reader (and the
rest of its entry: registry.py says what) and one line in
``registry.MODULES``; the loop and the supervisor do not change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core.sources import Source


@dataclass(frozen=True)
class Message:
    """One message as read, before it is stored: what its event is made of, and what acks it."""

    external_id: str  # unique within the source: the broker's own id, else sha256 of the body
    body: bytes
    type: str  # the event type rules match on (Redis: the key)
    headers: dict[str, str]  # where it was read, kept with the event
    receipt: Any = field(default=None, compare=False, repr=False)  # what ``ack`` needs to settle it
    # The broker's own id for this message, the same on each redelivery (NATS: the stream sequence;
    # SQS: the MessageId), where the external id may be shared by two messages (a producer's id reused
    # past the broker's duplicate window: one event for both). Empty: the external id is the broker's.
    broker_id: str = field(default="", compare=False)

    @property
    def held_as(self) -> str:
        """What a held message is known by (--ack on-complete): one key per message, whichever delivery."""
        return self.broker_id or self.external_id


class Reader(Protocol):
    """One source's messages, read and acked for the consumer loop.

    The loop calls ``read``, stores what it returns in one transaction, and
    only after the commit calls ``ack`` with which messages are stored. After
    an error anywhere it calls ``close`` and makes a new reader, after a
    backoff. A reader is used by one task, never concurrently. A new broker
    is a new reader (one file, one line in ``registry.MODULES``); the loop
    stays as it is.

    ``origin``: where the messages come from, for the event's provenance
    ("redis stream 'orders'").
    ``secrets``: texts that must never reach a log line or the source's
    health (a URL's password); the loop masks them in error messages.
    """

    origin: str
    secrets: tuple[str, ...]

    async def read(self) -> list[Message]:
        """The next batch (at most the source's --batch), oldest first; [] when idle.

        May block up to about a second waiting for messages (how soon a stop
        is noticed), never longer. Connects on first use. A new reader first
        returns what a previous run read and left un-acked (a stream's
        pending entries, a list's processing list), so that a crash between
        commit and ack only re-delivers. A broker fault raises one of the
        factory's ``faults``.
        """
        ...

    async def ack(self, messages: list[Message], stored: list[bool]) -> None:
        """Settle exactly the messages whose ``stored`` is True (the same order as ``messages``).

        Called only after their commit (and, for a message held, once its
        todos are finished: any number of them). The others stay un-acked: the
        broker keeps them for a later read (a lossy broker has nothing to do here).
        """
        ...

    async def close(self) -> None:
        """Let go of the connection; never raises for a broker fault. Un-acked messages stay with the broker."""
        ...


class HoldingReader(Reader, Protocol):
    """A reader that can also hold stored messages unacked for long (``--ack on-complete``;
    its broker's ``cannot_hold`` answers None).

    After a commit the loop calls ``hold`` with the stored messages that made
    todos, then ``ack`` for the batch with those left out; once every todo
    made from a held message is finished it calls ``ack`` with it (``stored``
    all True). Everything else is as for ``Reader``.
    """

    async def hold(self, messages: list[Message]) -> None:
        """Keep these stored messages unacked at the broker until ``ack`` settles them, however long.

        Renews, in the background, whatever lease the broker puts on a delivery
        (an in-progress ack, a visibility timeout, an idle time) well before it
        runs out, so that the broker never delivers a held message again while
        this reader lives. A message of the same ``external_id`` held already
        (the broker delivered it again) takes its place. ``close`` stops the
        renewals and leaves the held messages with the broker, unacked: they
        are delivered again to the next reader (handed back at once where the
        broker can be told so; else once their lease runs out), and their keys
        collapse them.
        """
        ...


class ReaderFactory(Protocol):
    """Makes a source's reader (a broker's ``Reader``, which the registry finds); a reader class is one.

    ``connect`` is the driver's client factory, ``None`` for the driver's own
    (tests hand in a fake server's). Making a reader does no I/O; it raises
    one of ``faults`` when the source cannot be reached at all (a URL variable
    unset). ``faults``: the driver's exceptions that are broker faults, which
    the loop backs off from with a warning; anything else is logged as a bug
    (and backed off from too).
    """

    faults: tuple[type[Exception], ...]

    def __call__(self, source: Source, connect: Any = None) -> Reader: ...
