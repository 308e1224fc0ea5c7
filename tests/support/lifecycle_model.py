"""What the store should hold: the todo lifecycle in plain Python, for test_lifecycle_properties.py.

The rules are those of DESIGN §2 as queries.sql states them: a claim takes
the highest priority, then the oldest, visible todo in the asked queues whose
assignee is nobody or the claimer, and counts an attempt; fail waits out an
exponential backoff, pending all the while (base doubling per attempt,
capped, times the store's jitter), or makes a dead letter (failed) at the
cap; release refunds the attempt, and so does an operator's forced release;
cancel finishes a pending or claimed todo; a lapsed lease is taken back by
the next claim or read (pending again, visible since its lease ended, or a
dead letter after the last attempt). A todo that waits for others (after) is
blocked, with no visible_at, while any is not done; the completion of the last
one makes it visible at once; a cancel cancels the blocked todos that wait for
the cancelled one, and theirs. A limited queue gives a claim no todo while it
has max_claimed claimed, or max_per_minute claims since a minute ago (counted
from when that limit was set; a limit given alone keeps the other; clearing
removes both).
"""

from __future__ import annotations

import copy
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from switchboard_local.core.clock import ManualClock
from switchboard_local.core.todo_model import (
    BACKOFF_BASE_SECONDS,
    BACKOFF_CAP_SECONDS,
    DEFAULT_LEASE_SECONDS,
    LEASE_CAP_SECONDS,
    QueueStats,
)

BACKOFF_BASE_MS = round(BACKOFF_BASE_SECONDS * 1000)
BACKOFF_CAP_MS = round(BACKOFF_CAP_SECONDS * 1000)
LEASE_CAP_MS = round(LEASE_CAP_SECONDS * 1000)


def ms(seconds: float) -> int:
    return round(seconds * 1000)


@dataclass
class Modeled:
    """One todo as the store should hold it."""

    id: int
    queue: str
    priority: int
    assignee: str | None
    max_attempts: int
    key: str | None
    visible_at: int | None
    created_at: int
    state: str = "pending"
    attempt: int = 0
    owner: str | None = None
    lease_end: int | None = None
    claimed_at: int | None = None
    token: str | None = None
    history: list[list[Any]] = field(default_factory=list)  # one [attempt, owner, outcome] per claim
    after: tuple[int, ...] = ()  # the todos it waits for
    blocked_by: int = 0  # how many of them are not done

    def claimable(self, now: int) -> bool:
        return self.visible_at is not None and self.visible_at <= now

    def live(self) -> bool:
        """Holds its idempotency key: pending or claimed."""
        return self.state in ("pending", "claimed")

    def dead_letter(self) -> bool:
        return self.state == "failed"

    def held_by(self, token: str, now: int) -> bool:
        return self.token == token and self.lease_end is not None and self.lease_end > now

    def end_attempt(self, outcome: str) -> None:
        self.history[-1][2] = outcome
        self.owner = self.lease_end = self.token = None


@dataclass
class Limit:
    """A queue's limits (None: none), and its claims since max_per_minute was set:
    (instant, the max_per_minute in force then), oldest first."""

    max_claimed: int | None = None
    max_per_minute: int | None = None
    claims: list[tuple[int, int]] = field(default_factory=list)


class Model:
    """Every todo the store should hold, and the verbs that move them, at the clock's time."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.todos: dict[int, Modeled] = {}
        self.limits: dict[str, Limit] = {}

    def set_limit(self, queue: str, max_claimed: int | None, max_per_minute: int | None, clear: bool) -> Limit:
        limit = self.limits.setdefault(queue, Limit())
        if clear:
            max_claimed = max_per_minute = None
        else:
            max_claimed = limit.max_claimed if max_claimed is None else max_claimed
            max_per_minute = limit.max_per_minute if max_per_minute is None else max_per_minute
        limit.max_claimed, limit.max_per_minute = max_claimed, max_per_minute
        if max_per_minute is None:
            limit.claims = []  # nothing counts them
        return limit

    def claimed_on(self, queue: str) -> int:
        return sum(1 for t in self.todos.values() if t.queue == queue and t.state == "claimed")

    def last_minute(self, queue: str) -> int:
        limit = self.limits.get(queue)
        return 0 if limit is None else sum(1 for at, _ in limit.claims if at > self.now - 60_000)

    def has_room(self, queue: str) -> bool:
        """Whether a claim may take one more of ``queue``'s todos (lapsed leases recovered first)."""
        limit = self.limits.get(queue)
        if limit is None:
            return True
        if limit.max_claimed is not None and self.claimed_on(queue) >= limit.max_claimed:
            return False
        return limit.max_per_minute is None or self.last_minute(queue) < limit.max_per_minute

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    def snapshot(self) -> dict[int, Modeled]:
        return copy.deepcopy(self.todos)

    def restore(self, snapshot: dict[int, Modeled]) -> None:
        """A refused verb: the store rolled back its transaction, recovery of lapsed leases included."""
        self.todos = snapshot

    def recover(self) -> None:
        """Lapsed leases taken back: pending again, or a dead letter after the last attempt."""
        for t in self.todos.values():
            if t.state == "claimed" and t.lease_end is not None and t.lease_end <= self.now:
                spent = t.attempt >= t.max_attempts
                t.state, t.visible_at = ("failed", None) if spent else ("pending", t.lease_end)
                t.end_attempt("lease_expired")

    def holder(self, queue: str, key: str | None) -> Modeled | None:
        if key is None:
            return None
        return next((t for t in self.todos.values() if (t.queue, t.key) == (queue, key) and t.live()), None)

    def next_for(self, queues: Sequence[str] | None, agent: str) -> Modeled | None:
        ready = [
            t
            for t in self.todos.values()
            if t.claimable(self.now) and (queues is None or t.queue in queues) and t.assignee in (None, agent)
            and self.has_room(t.queue)
        ]
        return max(ready, key=lambda t: (t.priority, -t.id), default=None)

    def create(self, queue: str, priority: int, assignee: str | None, max_attempts: int, key: str | None,
               delay: float, after: tuple[int, ...] = ()) -> Modeled:  # fmt: skip
        blocked_by = sum(self.todos[a].state != "done" for a in set(after))
        t = Modeled(len(self.todos) + 1, queue, priority, assignee, max_attempts, key,
                    visible_at=None if blocked_by else self.now + ms(delay), created_at=self.now,
                    after=tuple(sorted(set(after))), blocked_by=blocked_by)  # fmt: skip
        self.todos[t.id] = t
        return t

    def dependents(self, t: Modeled) -> list[Modeled]:
        """The blocked todos that wait for ``t``."""
        return [d for d in self.todos.values() if t.id in d.after and d.state == "pending" and d.blocked_by > 0]

    def claim(self, t: Modeled, owner: str, lease: float | None, token: str) -> None:
        t.state, t.attempt, t.owner, t.visible_at, t.token = "claimed", t.attempt + 1, owner, None, token
        t.lease_end, t.claimed_at = self.now + ms(lease or DEFAULT_LEASE_SECONDS), self.now
        t.history.append([t.attempt, owner, None])
        limit = self.limits.get(t.queue)
        if limit is not None and limit.max_per_minute is not None:
            limit.claims.append((self.now, limit.max_per_minute))

    def heartbeat(self, t: Modeled, lease: float) -> None:
        assert t.claimed_at is not None
        t.lease_end = min(self.now + ms(lease), t.claimed_at + LEASE_CAP_MS)

    def complete(self, t: Modeled) -> None:
        t.state = "done"
        t.end_attempt("completed")
        for d in self.dependents(t):
            d.blocked_by -= 1
            if d.blocked_by == 0:
                d.visible_at = self.now

    def fail(self, t: Modeled, jitter: float) -> None:
        backoff = int(min(BACKOFF_BASE_MS << min(t.attempt - 1, 20), BACKOFF_CAP_MS) * jitter)
        t.state, t.visible_at = ("failed", None) if t.attempt >= t.max_attempts else ("pending", self.now + backoff)
        t.end_attempt("failed")

    def release(self, t: Modeled, delay: float) -> None:
        t.state, t.attempt, t.visible_at = "pending", t.attempt - 1, self.now + ms(delay)
        t.end_attempt("released")

    def redrive(self, t: Modeled) -> None:
        t.state, t.attempt, t.visible_at = "pending", 0, self.now

    def force_release(self, t: Modeled) -> None:
        t.state, t.attempt, t.visible_at = "pending", t.attempt - 1, self.now
        t.end_attempt("released_by_operator")

    def cancel(self, t: Modeled) -> None:
        if t.state == "claimed":
            t.end_attempt("cancelled")
        t.state, t.visible_at = "cancelled", None
        for d in self.dependents(t):
            self.cancel(d)


def count_as_the_next_claim_sees(rows: list[sqlite3.Row], model: Model) -> list[QueueStats]:
    """Stats from the rows: a lapsed lease counts as ready again, or a dead letter after the last
    attempt; each queue's limits and claims in the last minute, from the model."""
    now = model.now
    counts: dict[str, list[int]] = {q: [0] * 7 for q, limit in model.limits.items()
                                    if limit.max_claimed is not None or limit.max_per_minute is not None}  # fmt: skip
    oldest: dict[str, int] = {}
    for r in rows:
        lapsed = r["state"] == "claimed" and r["lease_expires_at"] <= now
        spent = r["attempt"] >= r["max_attempts"]
        ready = (r["state"] == "pending" and r["visible_at"] is not None and r["visible_at"] <= now) or (lapsed and not spent)
        blocked = r["state"] == "pending" and r["blocked_by"] > 0
        c = counts.setdefault(r["queue"], [0] * 7)
        c[0] += ready
        c[1] += r["state"] == "pending" and not ready and not blocked
        c[2] += r["state"] == "claimed" and not lapsed
        c[3] += r["state"] == "done"
        c[4] += r["state"] == "failed" or (lapsed and spent)
        c[5] += r["state"] == "cancelled"
        c[6] += blocked
        if ready:
            oldest[r["queue"]] = min(oldest.get(r["queue"], r["created_at"]), r["created_at"])
    return [
        QueueStats(queue, *c[:6], None if queue not in oldest else max(0, now - oldest[queue]) / 1000, blocked=c[6],
                   **_limits(model, queue))  # fmt: skip
        for queue, c in sorted(counts.items())
    ]


def _limits(model: Model, queue: str) -> dict[str, Any]:
    limit = model.limits.get(queue) or Limit()
    return {"max_claimed": limit.max_claimed, "max_per_minute": limit.max_per_minute,
            "claims_last_minute": None if limit.max_per_minute is None else model.last_minute(queue)}  # fmt: skip
