"""Pruning: old events and finished todos go; live work and its events stay.

Deduplication outlives the events: the key of an event pruned younger than
the dedup horizon is kept (a few dozen bytes) until the horizon passes it, so
a provider's redelivery days later still collapses into the first delivery.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidArgument
from .store.interface import Store, Transaction
from .store.queries import Q

DEFAULT_OLDER_THAN_DAYS = 30.0
DEFAULT_MAX_EVENTS = 50_000
# Beyond the redelivery window of every major provider (GitHub's manual
# redelivery and Stripe's retries reach 3 days; Svix's about 5).
DEFAULT_DEDUP_HORIZON_DAYS = 7.0
DAY_MS = 86_400_000


@dataclass(frozen=True)
class Pruned:
    events: int
    todos: int
    delivery_keys: int  # kept keys forgotten because the dedup horizon passed them


async def prune(
    store: Store,
    *,
    older_than_days: float = DEFAULT_OLDER_THAN_DAYS,
    max_events: int = DEFAULT_MAX_EVENTS,
    dedup_horizon_days: float = DEFAULT_DEDUP_HORIZON_DAYS,
) -> Pruned:
    """Delete finished todos and events older than the cutoff, and events past the cap.

    Never a live todo (pending or claimed), nor an event a
    live todo points to. Finished todos of a pruned event keep their row with
    no event. A pruned event's key is kept until ``dedup_horizon_days`` after
    it arrived.
    """
    if not older_than_days >= 0:
        raise InvalidArgument("older-than must be zero or more days")
    if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events < 0:
        raise InvalidArgument("max-events must be zero or a positive whole number")
    if not dedup_horizon_days >= 0:
        raise InvalidArgument("dedup-horizon must be zero or more days")

    def body(tx: Transaction) -> Pruned:
        now = store.clock.now_ms()
        cutoff = now - round(older_than_days * DAY_MS)
        horizon = now - round(dedup_horizon_days * DAY_MS)
        todos = tx.run(Q.prune_finished_todos, {"cutoff": cutoff})
        pruned = tx.all(Q.prune_events, {"cutoff": cutoff, "max_events": max_events})
        tx.many(
            Q.keep_pruned_delivery,
            [
                {"source": r["source"], "external_id": r["external_id"], "event_id": r["id"],
                 "received_at": r["received_at"]}
                for r in pruned
                if r["received_at"] >= horizon
            ],
        )  # fmt: skip
        forgotten = tx.run(Q.forget_delivery_keys, {"horizon": horizon})
        return Pruned(events=len(pruned), todos=todos, delivery_keys=forgotten)

    return await store.write(body)
