"""Noticing commits from any process: the long poll's wake-up, the doorbell's feed, the live views.

SQLite has no cross-process notifications, but ``PRAGMA data_version`` is a
cheap read that changes whenever another connection commits. ``Changes`` polls
it (plus this store's own commit count) on a short interval, never holding a
transaction open, and wakes whoever waits for the next commit (a poll the store
cannot answer wakes them too: each meets the outage in its own read rather
than waiting on). Several waiters in one process share one poller. ``follow`` turns it into a feed of new rows
by id (``todo watch``; ``events tail`` through events.follow_events): ids only grow, and every write holds
the one write lock, so once an id is committed every smaller one is committed
too or never will be, and a cursor on the last id seen misses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Protocol, TypeVar

from .errors import StoreFault
from .store.interface import Store
from .store.queries import Q
from .todo_model import Todo

POLL_INTERVAL_SECONDS = 0.1
# With no commit for this long a feed yields an empty batch: its reader may look around.
IDLE_SECONDS = 1.0
FOLLOW_BATCH = 100


class Changes:
    """A counter that moves (and wakes waiters) after anything commits to the file.

    Run ``run()`` as a background task for as long as waiters may wait.
    """

    def __init__(self, store: Store, *, interval: float = POLL_INTERVAL_SECONDS) -> None:
        self._store = store
        self._interval = interval
        self._changed = asyncio.Event()
        self.count = 0
        self.ready = asyncio.Event()  # set once the starting version is read: later commits count

    async def run(self) -> None:
        seen = await self._version()
        self.ready.set()
        while True:
            await asyncio.sleep(self._interval)
            version = await self._version()
            if version is None or version != seen:
                seen = version
                self.count += 1
                # Wake everyone waiting on this event; later waiters get a fresh one.
                changed, self._changed = self._changed, asyncio.Event()
                changed.set()

    async def _version(self) -> tuple[int, int] | None:
        """The file's data version; None when the store cannot say (an outage, a listener's
        connection lost). Then every poll wakes the waiters, as if something committed: each
        looks for itself, and its own read either meets the fault (answered as that fault,
        never a hang) or finds the store back."""
        try:
            return await self._store.data_version()
        except StoreFault:
            return None

    async def wait(self, after: int, timeout: float) -> int:
        """Wait until the count passes ``after`` or ``timeout`` seconds pass; return the count.

        Read ``count`` before looking at the data, then pass it here: a commit
        that lands between the look and the wait is not missed.
        """
        if self.count != after:
            return self.count
        changed = self._changed
        try:
            await asyncio.wait_for(changed.wait(), timeout=max(0.0, timeout))
        except TimeoutError:
            pass
        return self.count


@contextlib.asynccontextmanager
async def following(store: Store) -> AsyncIterator[Changes]:
    """``Changes`` running for as long as the block runs (from the first version read)."""
    changes = Changes(store)
    poller = asyncio.create_task(changes.run())
    try:
        await changes.ready.wait()
        yield changes
    finally:
        poller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await poller


@dataclass(frozen=True)
class Arrival:
    """A todo that landed: what a doorbell may say about it (never its payload)."""

    id: int
    queue: str
    title: str
    state: str
    source: str | None  # the source of the event it came from ('operator' for a direct create); None: no event
    paused: bool = False  # its queue is paused: nothing can claim it for now
    blocked: bool = False  # it waits for todos not done yet: nothing can claim it until they are


async def last_todo_id(store: Store) -> int:
    row = await store.read_one(Q.last_todo_id)
    return 0 if row is None else int(row["id"])


async def arrivals(
    store: Store, *, after_id: int, agent: str, queues: Sequence[str] | None = None, limit: int = 50
) -> list[Arrival]:
    """Todos created after ``after_id`` that ``agent`` could claim, oldest first.

    ``queues`` is the agent's scope (None: every queue); a todo assigned to
    someone else is left out.
    """
    params = {
        "after_id": after_id,
        "agent": agent,
        "queues": None if queues is None else json.dumps(list(queues)),
        "limit": limit,
    }
    rows = await store.read_all(Q.todo_arrivals, params)
    return [Arrival(r["id"], r["queue"], r["title"], r["state"], r["source"], bool(r["paused"]), bool(r["blocked"]))
            for r in rows]  # fmt: skip


async def readiness(store: Store, ids: Sequence[int]) -> tuple[list[int], list[int]]:
    """Of the blocked todos ``ids``: those ready now (pending, no longer blocked), and those that
    will never be (finished, claimed already, or gone). The others still wait."""
    rows = await store.read_all(Q.readiness, {"ids": json.dumps(sorted(ids))})
    found = {int(r["id"]): r for r in rows}
    ready = [i for i, r in found.items() if r["state"] == "pending" and not r["blocked"]]
    over = [i for i in ids if i not in found or found[i]["state"] != "pending"]
    return ready, over


# ---------------------------------------------------------------- the live views


class _HasId(Protocol):
    @property
    def id(self) -> int: ...


Row = TypeVar("Row", bound=_HasId)


async def follow(
    store: Store,
    read: Callable[[int], Awaitable[Sequence[Row]]],
    *,
    after_id: int,
    idle: float = IDLE_SECONDS,
    interval: float = POLL_INTERVAL_SECONDS,
) -> AsyncIterator[list[Row]]:
    """What ``read`` finds after ``after_id``, batch by batch, for as long as the caller iterates.

    ``read(after)`` answers rows with ids above ``after``, oldest first; the
    cursor moves past each batch. Between looks it waits on ``Changes`` for a
    commit from any process. When none comes within ``idle`` seconds it yields
    an empty batch, so that the caller can look around (is its reader still
    there?). A read that fails ends the feed with its error. Iterate
    it inside ``contextlib.aclosing``: its poller stops when the feed is closed.
    """
    changes = Changes(store, interval=interval)
    poller = asyncio.create_task(changes.run())
    ready = asyncio.create_task(changes.ready.wait())
    try:
        await asyncio.wait({poller, ready}, return_when=asyncio.FIRST_COMPLETED)
        while True:
            if poller.done():
                poller.result()  # it can only have failed: raise its error here
            seen = changes.count  # before the look: a commit during it still wakes the wait below
            batch = list(await read(after_id))
            if batch:
                after_id = batch[-1].id
                yield batch  # and look again at once: a full batch may have more behind it
            elif await changes.wait(seen, timeout=idle) == seen:
                yield []
    finally:
        ready.cancel()
        poller.cancel()
        if poller.done() and not poller.cancelled():
            poller.exception()  # retrieved: a failure already raised is not logged again


async def todos_after(
    store: Store, *, after_id: int, queue: str | None = None, limit: int = FOLLOW_BATCH
) -> list[Todo]:
    """Todos created after ``after_id``, oldest first, as they are now; ``queue`` None: every queue."""
    params = {"after_id": after_id, "queue": queue, "limit": limit}
    return [Todo.from_row(r) for r in await store.read_all(Q.todos_after, params)]


async def follow_todos(
    store: Store, *, from_id: int | None = None, queue: str | None = None, idle: float = IDLE_SECONDS
) -> AsyncIterator[list[Todo]]:
    """New todos as they land, from any process (``follow``), each once, in the state it had when read.

    ``from_id``: start with that id (included) and go on from there; None:
    only the todos created from now on.
    """
    after_id = from_id - 1 if from_id is not None else await last_todo_id(store)

    async def read(after: int) -> list[Todo]:
        return await todos_after(store, after_id=after, queue=queue)

    async with aclosing(follow(store, read, after_id=after_id, idle=idle)) as batches:
        async for batch in batches:
            yield batch
