"""Work that waits for work: a todo may wait for others (its dependencies).

A todo that waits for a todo not yet done is *blocked*: pending, with no
``visible_at``, so outside the ready index and never claimed (no claim statement
knows of dependencies). When the last todo it waits for is done it is ready, in
the completing statement itself (the trigger ``todos_done_unblocks`` in the
schema), whichever verb completed it. A dependency that is cancelled cancels its
blocked dependents, recursively, in the cancelling transaction (``cancel_dependents``
here, called by every cancel); one that is a dead letter keeps them blocked, since
it may yet be redriven.

A todo may only wait for todos that exist when it is created, so no cycle can be
written (the table's CHECK after_id < todo_id says so too).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from .. import settings
from ..errors import Conflict, InvalidArgument, NotFound
from ..store.interface import Transaction
from ..store.queries import Q
from ..todo_model import Dependency, NewTodo, Todo, dump_json


@dataclass(frozen=True)
class Waits:
    """The todos a new todo waits for (ids, oldest first) and how many of them are not done."""

    ids: tuple[int, ...] = ()
    not_done: int = 0


NONE = Waits()


def resolve(
    tx: Transaction, todo: NewTodo, scope: Sequence[str] | None = None, own: Collection[int] = ()
) -> Waits:
    """The todos ``todo`` asks to wait for, checked: each exists (and is in ``scope``, the
    caller's queues, when one is given, unless its id is among ``own``: todos the caller
    made) and is not cancelled; keys name live todos, one each."""
    if not todo.after and not todo.after_keys:
        return NONE
    ids = list(todo.after)
    for key in todo.after_keys:
        holders = tx.all(Q.live_todos_by_key, {"idempotency_key": key})
        if scope is not None:
            holders = [h for h in holders if h["queue"] in scope]
        if not holders:
            raise NotFound(f"no live todo holds the idempotency key {key!r} (after_key)")
        if len(holders) > 1:
            queues = ", ".join(sorted(h["queue"] for h in holders))
            raise InvalidArgument(
                f"the idempotency key {key!r} is held by live todos on several queues ({queues}); wait for one by id"
            )
        ids.append(int(holders[0]["id"]))
    ids = sorted(set(ids))
    rows = {int(r["id"]): r for r in tx.all(Q.dependency_states, {"ids": json.dumps(ids)})}
    not_done = 0
    for todo_id in ids:
        row = rows.get(todo_id)
        if row is None or (scope is not None and row["queue"] not in scope and todo_id not in own):
            raise NotFound(f"todo {todo_id} does not exist: a todo can only wait for todos that exist")
        if row["state"] == "cancelled":
            raise Conflict(f"todo {todo_id} was cancelled: nothing can wait for it")
        not_done += row["state"] != "done"
    return Waits(tuple(ids), not_done)


def made_before(todo: NewTodo, made: Mapping[str, int]) -> NewTodo:
    """A routing chain's ``todo`` waiting for the todos made before it in this transaction, by id
    (``made``: their idempotency keys and ids), whichever queues they are on. A key it names that
    is not among them (a replay kept to some queues made none there) is dropped."""
    if not todo.after_keys:
        return todo
    ids = tuple(made[key] for key in todo.after_keys if key in made)
    return replace(todo, after=(*todo.after, *ids), after_keys=(), checked_json=todo.payload_json)


def add(tx: Transaction, todo_id: int, waits: Waits) -> None:
    """Record that the new todo ``todo_id`` waits for ``waits.ids``."""
    if waits.ids:
        tx.run(Q.add_dependencies, {"id": todo_id, "ids": json.dumps(list(waits.ids))})


def cancel_dependents(tx: Transaction, cancelled: Sequence[int], *, by: str, now: int) -> list[int]:
    """Cancel the blocked todos that wait for ``cancelled`` (directly or through others); their ids.

    A level at a time, each a statement of its own: on PostgreSQL a statement sees the
    dependents whose creates committed before it began, and a create that waits for a
    todo of this level holds it (dependency_states) until it commits, so the next level's
    statement sees it.
    """
    found: list[int] = []
    level = list(cancelled)
    while level:
        rows = tx.all(Q.cancel_dependents, {"ids": json.dumps(level), "by": by, "now": now})
        level = [int(r["id"]) for r in rows]
        found += level
    return found


def with_dependencies(tx: Transaction, todo: Todo, room: list[int] | None = None) -> Todo:
    """``todo`` with what it waits for: each one's id, state and result. The results are
    inlined, oldest first, while they add up to no more than limits.max_payload (and to no
    more than ``room[0]`` bytes, which a batch's todos draw on in turn: what its size budget
    left); a result past that is named (``result_omitted``), not inlined."""
    if not todo.waits_for:
        return todo
    budget = settings.value_in(tx, settings.MAX_PAYLOAD)
    if room is not None:
        budget = min(budget, room[0])
    found, used = [], 0
    for row in tx.all(Q.dependencies_of, {"id": todo.id}):
        text, result = row["result"], None
        size = row["result_bytes"] or 0
        if text is not None and budget < size <= 2 * budget:
            # PostgreSQL prints jsonb with a space after each ',' and ':' (at most doubling it):
            # measured as complete accepted it, compact, it may fit.
            result = json.loads(text)
            size = len(dump_json("result", result).encode("utf-8"))
        fits = text is not None and size <= budget
        if fits:
            budget -= size
            used += size
        if fits and result is None:
            result = json.loads(text)
        found.append(Dependency(int(row["id"]), row["state"], result if fits else None, text is not None and not fits))
    if room is not None:
        room[0] -= used
    return replace(todo, dependencies=tuple(found))
