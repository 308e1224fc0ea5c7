"""Queues as an operator sees them: pause, resume, and the list of queues.

A queue exists by having todos; schema.sql's ``queues`` table holds an
operator's setting for one. A paused queue keeps receiving todos (create,
webhooks, brokers) but no claim takes from it: every claim statement in
queries.sql leaves it alone. Leases already held on it keep working.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import audit
from .clock import rfc3339
from .store.interface import Store, Transaction
from .store.queries import Q
from .todo_model import QueueStats, require_name


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


async def list_queues(store: Store) -> list[Queue]:
    """Every queue that has todos or is paused, by name, with its counts."""
    now = store.clock.now_ms()
    rows = await store.read_all(Q.stats, {"now": now})
    return [Queue(QueueStats.from_row(r, now), r["paused_at"], r["paused_by"]) for r in rows]


def _has_todos(tx: Transaction, queue: str) -> bool:
    return tx.one(Q.queue_has_todos, {"queue": queue}) is not None
