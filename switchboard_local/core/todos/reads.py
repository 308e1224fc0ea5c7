"""What is read of todos: one with its attempts, a page of them, the counts per queue.

A lapsed lease is recovered before a read of todos (``settle_lapsed``), so
that what is shown is what the next claim would find; ``stats`` counts a
lapsed todo as what it will become, without writing.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import replace

from ..errors import InvalidArgument, NotFound
from ..store.interface import Store
from ..store.queries import Q
from ..todo_model import MAX_LIST_LIMIT, STATES, Attempt, QueueStats, Todo, require_int
from .claims import settle_lapsed
from .dependencies import with_dependencies


async def get(
    store: Store, todo_id: int, *, queues: Sequence[str] | None = None, own: Collection[int] = ()
) -> Todo:
    """One todo with its attempt history (``queues``: a scope it must be in, unless
    its id is among ``own``: todos the caller made, wherever it put them)."""
    await settle_lapsed(store)
    row = await store.read_one(Q.get_todo, {"id": todo_id})
    if row is None or (queues is not None and row["queue"] not in queues and todo_id not in own):
        raise NotFound(f"todo {todo_id} does not exist")
    # A second read, a later snapshot: attempts are only ever added or closed,
    # so the history is at least as new as the todo (never missing its attempt).
    attempts = tuple(
        Attempt(r["attempt"], r["owner"], r["claimed_at"], r["ended_at"], r["outcome"], r["error"])
        for r in await store.read_all(Q.attempts_of_todo, {"todo_id": todo_id})
    )
    todo = replace(Todo.from_row(row), attempts=attempts)
    return await store.peek(lambda tx: with_dependencies(tx, todo)) if todo.waits_for else todo


TIMINGS = ("ready", "delayed", "dead", "blocked")  # list_todos's filter on when a todo can be claimed


async def list_todos(
    store: Store,
    *,
    queue: str | None = None,
    state: str | None = None,
    limit: int = 50,
    queues: Sequence[str] | None = None,
    before_id: int | None = None,
    timing: str | None = None,
) -> list[Todo]:
    """Newest first, optionally filtered by queue and state.

    ``queues`` limits the answer to a scope; ``before_id`` pages backwards
    (the last id of the previous page). ``timing``: ``ready`` (claimable
    now), ``delayed`` (claimable later: a delay, or a retry's backoff) or
    ``dead`` (dead letters).
    """
    if state is not None and state not in STATES:
        raise InvalidArgument(f"state must be one of {', '.join(STATES)}, got {state!r}")
    if timing is not None and timing not in TIMINGS:
        raise InvalidArgument(f"timing must be one of {', '.join(TIMINGS)}, got {timing!r}")
    require_int("limit", limit, low=1, high=MAX_LIST_LIMIT)
    params = {
        "queue": queue,
        "state": state,
        "limit": limit,
        "queues": None if queues is None else json.dumps(list(queues)),
        "before_id": before_id,
        "timing": timing,
        "now": store.clock.now_ms(),
    }
    await settle_lapsed(store)
    rows = await store.read_all(Q.list_todos if queue is None else Q.list_todos_in_queue, params)
    return [Todo.from_row(r) for r in rows]


async def queues_without_todos(store: Store, queues: Sequence[str]) -> list[str]:
    """Which of ``queues`` hold no todo at all, in any state (a misspelt name, often)."""
    return [q for q in queues if await store.read_one(Q.queue_has_todos, {"queue": q}) is None]


async def stats(store: Store, *, queues: Sequence[str] | None = None) -> list[QueueStats]:
    """Counts per queue: ready, delayed, claimed, done, dead, cancelled; the oldest ready todo's age.

    A pure read: a todo whose lease lapsed counts as what the next claim will
    make of it (ready again, or the dead letter it is when that was its last
    attempt). Each queue says whether it is paused; a paused queue is
    listed even with no todos. ``queues`` limits the answer to a scope (each of its
    queues listed, empty ones with zero counts).
    """
    now = store.clock.now_ms()
    found = [QueueStats.from_row(r, now) for r in await store.read_all(Q.stats, {"now": now})]
    if queues is None:
        return found
    by_queue = {s.queue: s for s in found}
    return [by_queue.get(q) or QueueStats.empty(q) for q in sorted(set(queues))]
