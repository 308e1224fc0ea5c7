"""Queues as an operator sees them: pause, resume, limit, and the list of queues.

A queue exists by having todos; schema.sql's ``queues`` table holds an
operator's setting for one. A paused queue keeps receiving todos (create,
webhooks, brokers) but no claim takes from it: every claim statement in
queries.sql leaves it alone. Leases already held on it keep working.

A limited queue (``set_limit``) gives at most ``max_claimed`` of its todos
claimed at once and at most ``max_per_minute`` claims in any rolling 60 s;
its other todos wait, ready. The claim statements enforce it themselves
(todos/claims.py says how). A limit binds the claims that begin after it is
committed: leases held already stay, and the rolling minute counts the claims
made since ``max_per_minute`` was set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import audit
from .clock import rfc3339
from .errors import InvalidArgument
from .store.interface import Store, Transaction
from .store.queries import Q
from .todo_model import QueueStats, require_int, require_name


@dataclass(frozen=True)
class Queue:
    """One queue: its counts (as ``todos.stats`` gives them) and who paused it when."""

    stats: QueueStats
    paused_at: int | None = None
    paused_by: str | None = None

    @property
    def name(self) -> str:
        return self.stats.queue

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    def to_dict(self) -> dict[str, Any]:
        return {**self.stats.to_dict(), "paused_at": rfc3339(self.paused_at), "paused_by": self.paused_by}


@dataclass(frozen=True)
class Paused:
    """pause's and resume's answer: the queue's state now, whether this call
    changed it, and whether the queue has any todo (pausing one with none is
    allowed: todos that arrive later wait)."""

    queue: str
    paused: bool
    paused_at: int | None
    paused_by: str | None
    changed: bool
    has_todos: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "paused": self.paused,
            "paused_at": rfc3339(self.paused_at),
            "paused_by": self.paused_by,
            "changed": self.changed,
            "has_todos": self.has_todos,
        }


async def pause(store: Store, queue: str, *, by: str) -> Paused:
    """Stop every claim from ``queue``; a queue paused already stays as it was."""
    require_name("queue", queue)
    require_name("by", by)

    def body(tx: Transaction) -> Paused:
        before = tx.one(Q.get_queue, {"name": queue})
        now = store.clock.now_ms()
        row = tx.one(Q.pause_queue, {"name": queue, "by": by, "now": now})
        changed = before is None or before["paused_at"] is None
        audit.record(tx, now, by=by, action="queue.pause", subject=queue, changed=changed)
        return Paused(queue, True, row["paused_at"], row["paused_by"], changed, _has_todos(tx, queue))

    return await store.write(body)


async def resume(store: Store, queue: str, *, by: str | None = None) -> Paused:
    """Let claims take from ``queue`` again; a queue not paused stays as it was.

    ``by`` (an operator) is recorded in the audit trail.
    """
    require_name("queue", queue)

    def body(tx: Transaction) -> Paused:
        before = tx.one(Q.get_queue, {"name": queue})
        changed = before is not None and before["paused_at"] is not None
        if changed:
            tx.run(Q.resume_queue, {"name": queue})
        if by is not None:
            audit.record(tx, store.clock.now_ms(), by=by, action="queue.resume", subject=queue, changed=changed)
        return Paused(queue, False, None, None, changed, _has_todos(tx, queue))

    return await store.write(body)


MAX_LIMIT = 1_000_000  # the most either limit may be: far past any claimer count or rate on one store


@dataclass(frozen=True)
class Limit:
    """set_limit's answer: a queue's limits now (None: none) and how close it is to them."""

    queue: str
    max_claimed: int | None
    max_per_minute: int | None
    claimed: int
    claims_last_minute: int

    @property
    def limited(self) -> bool:
        return self.max_claimed is not None or self.max_per_minute is not None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


async def set_limit(
    store: Store,
    queue: str,
    *,
    max_claimed: int | None = None,
    max_per_minute: int | None = None,
    clear: bool = False,
    by: str,
) -> Limit:
    """Limit ``queue``: ``max_claimed`` (at most this many of its todos claimed at once),
    ``max_per_minute`` (at most this many claims in any rolling 60 s), each 1 to MAX_LIMIT;
    a limit not given stays as it was. ``clear``: no limit at all (nothing else may be given).
    """
    require_name("queue", queue)
    require_name("by", by)
    if clear and (max_claimed is not None or max_per_minute is not None):
        raise InvalidArgument("--clear removes both limits: give it alone, or give --max-claimed/--max-per-minute")
    if not clear and max_claimed is None and max_per_minute is None:
        raise InvalidArgument("give --max-claimed N, --max-per-minute N (or both), or --clear")
    for name, value in (("--max-claimed", max_claimed), ("--max-per-minute", max_per_minute)):
        if value is not None:
            require_int(name, value, low=1, high=MAX_LIMIT)

    def body(tx: Transaction) -> Limit:
        now = store.clock.now_ms()
        before = tx.one(Q.get_queue, {"name": queue})
        claimed_max = None if clear else _given(max_claimed, before, "max_claimed")
        minute_max = None if clear else _given(max_per_minute, before, "max_per_minute")
        tx.one(Q.set_queue_limit, {"name": queue, "max_claimed": claimed_max, "max_per_minute": minute_max})
        if minute_max is None:
            tx.run(Q.clear_queue_claims, {"name": queue})  # nothing counts them now
        audit.record(tx, now, by=by, action="queue.limit", subject=queue,
                     max_claimed=claimed_max, max_per_minute=minute_max)  # fmt: skip
        return _limit(tx, queue, now)

    return await store.write(body)


async def get_limit(store: Store, queue: str) -> Limit:
    """``queue``'s limits (None: none) and how close it is to them, now."""
    require_name("queue", queue)
    now = store.clock.now_ms()
    load = await store.read_one(Q.queue_load, {"name": queue, "now": now})
    return _from_load(queue, load)


def _given(value: int | None, before: Any, column: str) -> int | None:
    return value if value is not None else (None if before is None else before[column])


def _limit(tx: Transaction, queue: str, now: int) -> Limit:
    return _from_load(queue, tx.one(Q.queue_load, {"name": queue, "now": now}))


def _from_load(queue: str, load: Any) -> Limit:
    if load is None:
        return Limit(queue, None, None, 0, 0)
    return Limit(queue, load["max_claimed"], load["max_per_minute"], int(load["claimed"]),
                 int(load["claims_last_minute"]))  # fmt: skip


async def list_queues(store: Store) -> list[Queue]:
    """Every queue that has todos, is paused or is limited, by name, with its counts and limits."""
    now = store.clock.now_ms()
    rows = await store.read_all(Q.stats, {"now": now})
    return [Queue(QueueStats.from_row(r, now), r["paused_at"], r["paused_by"]) for r in rows]


def _has_todos(tx: Transaction, queue: str) -> bool:
    return tx.one(Q.queue_has_todos, {"queue": queue}) is not None
