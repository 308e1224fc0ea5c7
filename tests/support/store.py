"""Test helpers for the store: its thread, many todos at once."""

from __future__ import annotations

import asyncio
import threading

from switchboard_local.core import todos
from switchboard_local.core.store.interface import Store
from switchboard_local.core.todo_model import NewTodo


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


async def create_jobs(store: Store, count: int) -> list[int]:
    """``count`` todos in queue "work", a hundred at a time (concurrent writes: fewer commits to wait for)."""
    made: list[int] = []
    for start in range(0, count, 100):
        jobs = [todos.create(store, NewTodo(queue="work", title=f"job {i}")) for i in range(start, min(count, start + 100))]
        made += [todo.id for todo, _ in await asyncio.gather(*jobs)]
    return made
