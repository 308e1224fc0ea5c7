"""Pruning: old events and finished todos go; live work and its events stay."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidArgument
from .queries import Q
from .store import Store, Transaction

DEFAULT_OLDER_THAN_DAYS = 30.0
DEFAULT_MAX_EVENTS = 50_000


@dataclass(frozen=True)
class Pruned:
    events: int
    todos: int


async def prune(
    store: Store, *, older_than_days: float = DEFAULT_OLDER_THAN_DAYS, max_events: int = DEFAULT_MAX_EVENTS
) -> Pruned:
    """Delete finished todos and events older than the cutoff, and events past the cap.

    Never a live todo (pending, claimed, failed awaiting retry), nor an event a
    live todo points to. Finished todos of a pruned event keep their row with
    no event.
    """
    if not older_than_days >= 0:
        raise InvalidArgument("older-than must be zero or more days")
    if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events < 0:
        raise InvalidArgument("max-events must be zero or a positive whole number")

    def body(tx: Transaction) -> Pruned:
        cutoff = store.clock.now_ms() - round(older_than_days * 86_400_000)
        todos = tx.run(Q.prune_finished_todos, {"cutoff": cutoff})
        events = tx.run(Q.prune_events, {"cutoff": cutoff, "max_events": max_events})
        return Pruned(events=events, todos=todos)

    return await store.write(body)
