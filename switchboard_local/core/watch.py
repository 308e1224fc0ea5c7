"""Noticing commits from any process: the long poll's wake-up and the doorbell's feed.

SQLite has no cross-process notifications, but ``PRAGMA data_version`` is a
cheap read that changes whenever another connection commits. ``Changes`` polls
it (plus this store's own commit count) on a short interval, never holding a
transaction open, and wakes whoever waits for the next commit. Several waiters
in one process share one poller.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from .queries import Q
from .store import Store

POLL_INTERVAL_SECONDS = 0.1


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
        seen = await self._store.data_version()
        self.ready.set()
        while True:
            await asyncio.sleep(self._interval)
            version = await self._store.data_version()
            if version != seen:
                seen = version
                self.count += 1
                # Wake everyone waiting on this event; later waiters get a fresh one.
                changed, self._changed = self._changed, asyncio.Event()
                changed.set()

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
    source: str | None  # the source of the event it came from; None when created directly


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
    return [Arrival(r["id"], r["queue"], r["title"], r["state"], r["source"]) for r in rows]
