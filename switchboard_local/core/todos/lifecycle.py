"""A todo's life under its lease: created, then (claimed in claims.py) heartbeat,
complete, fail or release, each presenting the lease its claim returned.

Each verb is one transaction around named statements from queries.sql. A verb
whose UPDATE changes no row never reports success: it reads the todo and
raises the error that explains why.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from .. import audit, settings
from ..clock import rfc3339
from ..errors import Conflict, InvalidArgument, NotFound
from ..store.interface import Store, Transaction, needs_transaction
from ..store.queries import Q
from ..todo_model import (
    BACKOFF_BASE_SECONDS,
    BACKOFF_CAP_SECONDS,
    DERIVED_KEY_PREFIX,
    INT64_MAX,
    LEASE_CAP_SECONDS,
    MAX_DELAY_SECONDS,
    NewTodo,
    Todo,
    dump_json,
    hash_token,
    lease_millis,
    require_seconds,
)
from . import dependencies
from .claims import NextClaim, by_and_why, check_scope, claim_next_body, recover_lapsed

# ---------------------------------------------------------------- create


async def create(
    store: Store,
    todo: NewTodo,
    *,
    by: str | None = None,
    scope: Sequence[str] | None = None,
    own: Collection[int] = (),
) -> tuple[Todo, bool]:
    """Create a pending todo directly (CLI, agent); returns it and whether it was created.

    A live todo already holding (queue, idempotency_key) is returned instead,
    with ``False`` (and the todos the new one would have waited for are not
    added to it). Keys in the namespace of todos derived from events are
    refused: a direct producer may not squat a key a delivery will derive.
    With ``by`` (an OS user, an agent) a new todo comes from an event of the
    audit trail (``todo.create``), as a delivered one comes from its delivery.
    A todo that waits for others (``todo.after``, ``todo.after_keys``: in
    ``scope``, the caller's queues, when given, or among ``own``, the todos it
    made) is blocked until they are done.
    """
    if todo.idempotency_key is not None and todo.idempotency_key.startswith(DERIVED_KEY_PREFIX):
        raise InvalidArgument(
            f"idempotency keys starting with {DERIVED_KEY_PREFIX!r} are reserved for todos made from events"
        )

    def body(tx: Transaction) -> tuple[Todo, bool]:
        settings.require_size(tx, "payload", todo.payload_json)
        now = store.clock.now_ms()
        made, created = insert(tx, todo, now=now, scope=scope, own=own)
        if by is None or not created:
            return made, created
        event_id = audit.record(tx, now, by=by, action="todo.create", subject=made.id, queue=made.queue,
                                title=made.title)  # fmt: skip
        return Todo.from_row(tx.one(Q.set_todo_event, {"id": made.id, "event_id": event_id})), True

    return await store.write(body)


def insert(
    tx: Transaction,
    todo: NewTodo,
    *,
    now: int,
    event_id: int | None = None,
    scope: Sequence[str] | None = None,
    own: Collection[int] = (),
) -> tuple[Todo, bool]:
    """The insert behind ``create``: the stored (or live, holding the key) todo, and whether it is new."""
    if (todo.after or todo.after_keys) and todo.idempotency_key is not None:
        # A retried create is answered by the todo holding its key, whatever became of the
        # todos it waits for since (done, their keys free; pruned): they are checked only for
        # a new todo. (A lapsed holder is left to _insert, which recovers it first.)
        holder = tx.one(Q.live_todo_by_key, {"queue": todo.queue, "idempotency_key": todo.idempotency_key})
        if holder is not None and not (holder["state"] == "claimed" and holder["lease_expires_at"] <= now):
            held = Todo.from_row(holder)
            if held.id in todo.after or todo.idempotency_key in todo.after_keys:
                raise InvalidArgument(f"todo {held.id} holds this idempotency key already, and cannot wait for itself")
            return held, False
    waits = dependencies.resolve(tx, todo, scope, own)
    params = insert_params(todo, now=now, event_id=event_id)
    if waits.ids:
        params.update(waits_for=len(waits.ids), blocked_by=waits.not_done)
        if waits.not_done:
            params["visible_at"] = None
    row, created = _insert(tx, Q.insert_todo, todo, params, now)
    made = Todo.from_row(row)
    if created:
        dependencies.add(tx, made.id, waits)
    elif made.id in waits.ids:
        raise InvalidArgument(f"todo {made.id} holds this idempotency key already, and cannot wait for itself")
    return made, created


def insert_id(tx: Transaction, todo: NewTodo, *, now: int, event_id: int | None = None) -> int:
    """``insert`` for the ingestion back half, which needs only the id."""
    if todo.after or todo.after_keys:  # a routing chain's: blocked, with its links
        return insert(tx, todo, now=now, event_id=event_id)[0].id
    row, _created = _insert(tx, Q.insert_todo_id, todo, insert_params(todo, now=now, event_id=event_id), now)
    return int(row["id"])


def insert_params(todo: NewTodo, *, now: int, event_id: int | None) -> dict[str, Any]:
    """The columns an insert of ``todo`` writes, as named parameters."""
    return {
        "queue": todo.queue,
        "assignee": todo.assignee,
        "title": todo.title,
        "kind": todo.kind,
        "payload": todo.payload_json,
        "event_id": event_id,
        "idempotency_key": todo.idempotency_key,
        "priority": todo.priority,
        "max_attempts": todo.max_attempts,
        "visible_at": now + round(todo.delay * 1000),
        "now": now,
        "blocked_by": 0,
        "waits_for": 0,
    }


def _insert(tx: Transaction, sql: str, todo: NewTodo, params: dict[str, Any], now: int) -> tuple[Any, bool]:
    row = tx.one(sql, params)
    if row is not None:
        return row, True
    # A live todo holds the key. It may be a lapsed last attempt, which is a
    # dead letter already (and frees the key) once lapsed leases are recovered.
    holder = {"queue": todo.queue, "idempotency_key": todo.idempotency_key}
    existing = tx.one(Q.live_todo_by_key, holder)
    assert existing is not None, "insert_todo refused a key no live todo holds"
    if existing["state"] == "claimed" and existing["lease_expires_at"] <= now:
        recover_lapsed(tx, now)
        row = tx.one(sql, params)
        if row is not None:
            return row, True
        existing = tx.one(Q.live_todo_by_key, holder)
    return existing, False


# ---------------------------------------------------------------- the leased verbs


@dataclass(frozen=True)
class Lease:
    """What heartbeat, complete, fail and release present: the todo, the token
    its claim returned, and the caller's scope (``queues``: the todo must be on
    one of them, else it is answered exactly like an unknown one; None: any)."""

    todo_id: int
    token: str
    queues: Sequence[str] | None = None

    @classmethod
    def of(cls, claimed: Todo, *, queues: Sequence[str] | None = None) -> Lease:
        """The lease a claim's answer carries (a todo that is not one has no token, and is refused)."""
        return cls(claimed.id, claimed.lease_token or "", queues)


@dataclass(frozen=True)
class Finished:
    """complete's and fail's answer: the finished todo and, when ``then`` was
    given, the next todo claimed in the same transaction (None when nothing was
    claimable, and always when ``then`` was not given)."""

    todo: Todo
    next: Todo | None = None


async def heartbeat(store: Store, lease: Lease, *, lease_seconds: float | None = None) -> Todo:
    """Reset the lease to now + lease_seconds (default 300 s), within the 12 h cap per attempt."""
    params = {"lease_ms": lease_millis(lease_seconds), "lease_cap_ms": round(LEASE_CAP_SECONDS * 1000)}
    return await store.write(_leased_body(store, Q.heartbeat, lease, params), single=True)


async def complete(store: Store, lease: Lease, *, result: Any = None, then: NextClaim | None = None) -> Finished:
    """claimed → done, with an optional JSON result.

    With ``then``, the next todo is claimed in the same transaction: one commit
    per job. A refused finish claims nothing.
    """
    return await _finish(store, completing(store, lease, dump_json("result", result)), then, single=True)


def completing(store: Store, lease: Lease, text: str) -> Callable[[Transaction], Todo]:
    """complete's body, given the result's JSON text."""
    # No history row: the completing attempt stays on the done row (completed_by).
    return _leased_body(store, Q.complete, lease, {"result": text}, sized="result")


async def fail(store: Store, lease: Lease, *, error: str | None = None, then: NextClaim | None = None) -> Finished:
    """claimed → pending after a backoff, or → failed (a dead letter) at the attempt cap.

    ``then`` as for ``complete``.
    """
    return await _finish(store, fail_body(store, lease, error), then)


def fail_body(store: Store, lease: Lease, error: str | None) -> Callable[[Transaction], Todo]:
    """fail's body (its arguments checked now, before the transaction)."""
    if error is not None and not isinstance(error, str):
        raise InvalidArgument("error must be a string")
    params = {
        "error": error,
        "backoff_base_ms": round(BACKOFF_BASE_SECONDS * 1000),
        "backoff_cap_ms": round(BACKOFF_CAP_SECONDS * 1000),
        # Equal jitter: between half and all of the backoff, so the retries
        # of many todos that failed together spread out.
        "jitter": store.rng.uniform(0.5, 1.0),
    }
    return _leased_body(store, Q.fail, lease, params, outcome="failed", sized="error")


async def release(store: Store, lease: Lease, *, delay: float = 0.0) -> Todo:
    """claimed → pending (after ``delay`` seconds), the attempt refunded."""
    require_seconds("delay", delay, low=0.0, high=MAX_DELAY_SECONDS)
    params = {"delay_ms": round(delay * 1000)}
    return await store.write(_leased_body(store, Q.release, lease, params, outcome="released"))


async def _finish(
    store: Store, finish: Callable[[Transaction], Todo], then: NextClaim | None, *, single: bool = False
) -> Finished:
    # Both verbs' arguments are checked before the transaction. In it the finish
    # runs first: the claim sees it, and a refused finish leaves nothing claimed.
    claim = None if then is None else claim_next_body(store, then)
    if claim is None:  # ``single``: the finish changes rows with one statement (complete does; fail does not)
        return await store.write(lambda tx: Finished(finish(tx)), single=single)
    return await store.write(lambda tx: Finished(finish(tx), claim(tx)))


def _leased_body(
    store: Store,
    sql: str,
    lease: Lease,
    params: dict[str, Any],
    *,
    outcome: str | None = None,
    sized: str | None = None,
) -> Callable[[Transaction], Todo]:
    """A verb that needs the current lease; a missing or stale token is refused.

    ``sized`` names the parameter (result, error) that must fit limits.max_payload;
    ``outcome`` (failed, released) ends the attempt into the history.
    """
    todo_id = lease.todo_id
    if not isinstance(todo_id, int) or not 0 < todo_id <= INT64_MAX:  # no todo has it; no database could be asked
        raise NotFound(f"todo {todo_id} does not exist")
    if not lease.token or not isinstance(lease.token, str):
        raise Conflict(f"a lease token is required to change todo {todo_id}")
    token_hash = hash_token(lease.token)

    def body(tx: Transaction) -> Todo:
        check_scope(tx, todo_id, lease.queues)
        if sized is not None:
            settings.require_size(tx, sized, params[sized])
        now = store.clock.now_ms()
        leased = {"id": todo_id, "lease_token_hash": token_hash, "now": now}
        # An attempt that ends other than by completing is written to the
        # history first, while the row still holds its owner (the statement
        # below clears it, under the lease): a refusal takes both back, so
        # both run in one transaction whatever the caller asked.
        if outcome is not None:
            needs_transaction(tx)
            tx.run(Q.end_attempt, {"id": todo_id, "now": now, "outcome": outcome, "error": params.get("error")})
        row = tx.one(sql, {**params, **leased})
        if row is None:
            raise _why_token_refused(tx, todo_id, token_hash)
        return Todo.from_row(row)

    return body


def _why_token_refused(tx: Transaction, todo_id: int, token_hash: str) -> Exception:
    row = tx.one(Q.get_todo, {"id": todo_id})
    if row is None:
        return NotFound(f"todo {todo_id} does not exist")
    todo = Todo.from_row(row)
    if todo.state == "cancelled":
        return Conflict(f"todo {todo_id} was cancelled{by_and_why(todo)}; stop working on it")
    last = tx.one(Q.last_ended_attempt, {"todo_id": todo_id})
    if todo.state != "claimed" and last is not None and last["outcome"] == "released_by_operator":
        return Conflict(f"todo {todo_id} was released by an operator; the lease token is void")
    if todo.state != "claimed":
        return Conflict(f"todo {todo_id} is {todo.state}, not claimed; the lease token is stale")
    if row["lease_token_hash"] != token_hash:
        return Conflict(f"the lease token does not match the current lease on todo {todo_id} (held by {todo.owner})")
    return Conflict(f"the lease on todo {todo_id} expired at {rfc3339(todo.lease_expires_at)}")
