"""Test helpers for the store's thread."""

from __future__ import annotations

import asyncio
import threading

from switchboard_local.core.store import Store


async def hold_the_thread(store: Store) -> tuple[threading.Event, asyncio.Future]:
    """Keep the store's thread busy (until the gate is set): writes issued meanwhile queue up together.

    ``held`` ends True when the gate released it (False: it gave up after 10 s).
    Straight to the write thread, holding the write connection, as a long
    write would (reads run elsewhere, on their own connections).
    """
    gate, entered = threading.Event(), threading.Event()

    def wait(tx):  # noqa: ANN001, ANN202
        entered.set()
        return gate.wait(10)  # True: released by the gate, not by the timeout

    held = asyncio.ensure_future(store._group.run_locked(wait))
    await asyncio.to_thread(entered.wait, 10)
    return gate, held
