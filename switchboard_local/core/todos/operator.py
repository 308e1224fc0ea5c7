"""An operator's verbs on one todo: redrive a dead letter, release a claim without
its token, cancel. Each is recorded in the audit trail (redrive when ``by`` is
given), in the verb's own transaction. The same verbs in bulk are in bulk.py.
"""

from __future__ import annotations

from typing import Any

from .. import audit
from ..errors import Conflict, InvalidArgument, NotFound
from ..store.interface import Store, Transaction
from ..store.queries import Q
from ..todo_model import Todo, require_name, require_text
from . import dependencies
from .claims import recover_lapsed


async def redrive(store: Store, todo_id: int, *, by: str | None = None) -> Todo:
    """A dead letter back to pending with a fresh attempt budget."""

    def body(tx: Transaction) -> Todo:
        now = store.clock.now_ms()
        recover_lapsed(tx, now)  # a lapsed last attempt is the dead letter it will become
        try:
            row = tx.one(Q.redrive, {"id": todo_id, "now": now})
        except Conflict:  # the unique index on live (queue, key)
            raise Conflict(
                f"todo {todo_id} cannot be redriven: a newer live todo holds its idempotency key"
            ) from None
        if row is not None:
            if by is not None:
                audit.record(tx, now, by=by, action="todo.redrive", subject=todo_id, queue=row["queue"])
            return Todo.from_row(row)
        current = tx.one(Q.get_todo, {"id": todo_id})
        if current is None:
            raise NotFound(f"todo {todo_id} does not exist")
        todo = Todo.from_row(current)
        raise Conflict(f"todo {todo_id} is {todo.state}, not a dead letter; only dead letters can be redriven")

    return await store.write(body)


async def force_release(store: Store, todo_id: int, *, by: str) -> Todo:
    """An operator's release of a claimed todo, without its token (a holder lost
    it, or hangs): pending again at once, the attempt refunded and ended as
    ``released_by_operator``; the holder's token is refused from now on."""

    def body(tx: Transaction) -> Todo:
        now = store.clock.now_ms()
        recover_lapsed(tx, now)
        ended = {"id": todo_id, "outcome": "released_by_operator", "error": None}
        holder = tx.one(Q.end_attempt, {**ended, "now": now})
        # No attempt ended, nothing claimed: nothing to release (even should a claim commit in
        # between on PostgreSQL, where each statement sees the latest commits).
        row = None if holder is None else tx.one(Q.force_release, {"id": todo_id, "now": now})
        if row is None:
            raise _not_in(tx, todo_id, ("claimed",), "released")
        audit.record(tx, now, by=by, action="todo.release", subject=todo_id, queue=row["queue"],
                     holder=holder["owner"])  # fmt: skip
        return Todo.from_row(row)

    return await store.write(body)


MAX_REASON_LENGTH = 1000


def cancel_params(by: str, reason: str | None) -> dict[str, Any]:
    """A cancel's ``by`` and ``reason`` checked, the reason on one line (for cancel and cancel_many)."""
    require_name("by", by)
    if reason is not None:
        if not isinstance(reason, str):
            raise InvalidArgument("reason must be a string")
        reason = " ".join(reason.split()) or None  # one line, as a title is
        if reason is not None:
            if len(reason) > MAX_REASON_LENGTH:
                raise InvalidArgument(f"reason is longer than {MAX_REASON_LENGTH} characters")
            require_text("reason", reason)
    return {"by": by, "reason": reason}


async def cancel(store: Store, todo_id: int, *, by: str, reason: str | None = None) -> Todo:
    """A pending or claimed todo → cancelled (an operator's verb): its key is
    freed, and a holder is told on its next heartbeat, complete or fail."""
    params = cancel_params(by, reason)

    def body(tx: Transaction) -> Todo:
        now = store.clock.now_ms()
        recover_lapsed(tx, now)
        # A claimed todo's attempt ends as cancelled (a pending one has none open).
        ended = {"id": todo_id, "outcome": "cancelled", "error": params["reason"]}
        tx.run(Q.end_attempt, {**ended, "now": now})
        row = tx.one(Q.cancel, {**params, "id": todo_id, "now": now})
        if row is None:
            raise _not_in(tx, todo_id, ("pending", "claimed"), "cancelled")
        cascaded = dependencies.cancel_dependents(tx, [todo_id], by=by, now=now)
        audit.record(tx, now, by=by, action="todo.cancel", subject=todo_id, queue=row["queue"],
                     reason=params["reason"], **({"cascaded": cascaded} if cascaded else {}))  # fmt: skip
        return Todo.from_row(row)

    return await store.write(body)


def _not_in(tx: Transaction, todo_id: int, states: tuple[str, ...], verb: str) -> Exception:
    """Why a verb for todos in ``states`` found this one elsewhere."""
    row = tx.one(Q.get_todo, {"id": todo_id})
    if row is None:
        return NotFound(f"todo {todo_id} does not exist")
    todo = Todo.from_row(row)
    state = "a dead letter" if todo.dead_letter else todo.state
    return Conflict(f"todo {todo_id} is {state}; only {' or '.join(states)} todos can be {verb}")
