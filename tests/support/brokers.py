"""What the broker tests share: an adapter added as `adapter add` adds it, and
`Running`, an adapter (or the supervisor) running in the test's loop with waits
that fail at once, with the adapters' health, if it ends."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from switchboard_local.brokers.loop import Consumer, Supervisor
from switchboard_local.brokers.registry import BROKERS
from switchboard_local.core import sources
from switchboard_local.core.store.interface import Store

from support.sql import rows
from support.waits import STALL, until_async


async def add_adapter(store: Store, url: str, mode: str, key: str, name: str = "orders", **options) -> sources.Source:
    config = BROKERS.get("redis").configure({"url": url, "mode": mode, "key": key, **options})
    return await sources.add(store, name, family="queue", kind="redis", trust_mode="queue", config=config)


def health(db_path: Path) -> str:
    """The adapters' health as the file holds it: what explains a wait that failed."""
    found = rows(db_path, "SELECT name, enabled, consecutive_failures, messages_stored, last_error FROM sources")
    return "adapters (name, enabled, failures, stored, last error): " + repr(found)


def ended(task: asyncio.Task, what: str) -> Callable[[], str | None]:
    """Why ``task`` can no longer bring a change about (it ended), or None while it runs."""

    def why() -> str | None:
        if not task.done():
            return None
        if task.cancelled():
            return f"{what} was cancelled"
        return f"{what} ended: {task.exception()!r}" if task.exception() else f"{what} returned"

    return why


class Running:
    """An adapter (or the supervisor) running in this loop, and the waits that watch it."""

    def __init__(self, store: Store, adapter: sources.Source | None = None, *, supervisor: Supervisor | None = None,
                 connect: Any = None):  # fmt: skip
        self.path = store.path
        self.stop = asyncio.Event()
        if supervisor is not None:
            self.what, runner = "the supervisor", supervisor.run(self.stop)
        else:
            assert adapter is not None
            self.what, runner = f"adapter {adapter.name}", Consumer(store, adapter, self.stop, connect=connect).run()
        self.task = asyncio.create_task(runner)

    async def until(self, look: Callable[[], Any], want: Any) -> None:
        """Until ``look()`` is ``want`` (see waits.py); a failure at once if what runs has ended."""
        await until_async(look, want, dead=ended(self.task, self.what), context=lambda: health(self.path))

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, timeout=STALL)


def calls(r, command: str) -> int:
    """How many times the server ran ``command`` (all clients)."""
    return r.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0)


def blocked_in(r, command: str) -> bool:
    """Whether a client of the server waits in ``command``, blocked (CLIENT LIST's flag b)."""
    return any(client["cmd"] == command and "b" in client["flags"] for client in r.client_list())
