"""Test helpers for the store's thread."""

from __future__ import annotations

import asyncio
import threading

from switchboard_local.store import Store


async def hold_the_thread(store: Store) -> tuple[threading.Event, asyncio.Task]:
    """Keep the store's thread busy (until the gate is set): writes issued meanwhile queue up together."""
    gate, entered = threading.Event(), threading.Event()

    def wait(tx):  # noqa: ANN001, ANN202
        entered.set()
        gate.wait(10)

    task = asyncio.create_task(store.read(wait))
    await asyncio.to_thread(entered.wait, 10)
    return gate, task
