"""One event through the back half, as a producer's batch of one."""

from __future__ import annotations

from collections.abc import Sequence

from switchboard_local.core.events import Derive, Ingested, NewEvent, ingest_many
from switchboard_local.core.store.interface import Store
from switchboard_local.core.todo_model import NewTodo


async def ingest(store: Store, event: NewEvent, todos: Sequence[NewTodo] | Derive) -> Ingested:
    """``events.ingest_many`` for one event: its answer."""
    (ingested,) = await ingest_many(store, [(event, todos)])
    return ingested
