"""Todos and their lifecycle: the verbs every edge calls.

    create ─▶ pending ─claim─▶ claimed ─complete─▶ done
               ▲  ▲ ▲            │  │  │
               │  │ └─ release, ─┘  │  └─ fail, attempts left: pending after a backoff
               │  │   lease lapse   │     fail on the last attempt ─▶ failed (a dead letter)
               │  │                 │                                  │
               │  └──────────── redrive (an operator) ◀────────────────┘
               │
        cancel (an operator, on pending or claimed) ─▶ cancelled

done, failed and cancelled are finished: they free the idempotency key.

Each verb is one ``BEGIN IMMEDIATE`` transaction around named statements from
queries.sql. A verb whose UPDATE changes no row never reports success: it
reads the todo and raises the error that explains why. What a todo is (its
fields and their checks) lives in todo_model.py.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar, overload

from . import audit, settings
from .clock import rfc3339
from .errors import Conflict, Forbidden, InvalidArgument, NotFound, StoreFault, SwitchboardError
from .store.interface import Store, Transaction, needs_transaction
from .store.queries import Q
from .todo_model import (
    BACKOFF_BASE_SECONDS,
    BACKOFF_CAP_SECONDS,
    DERIVED_KEY_PREFIX,
    INT64_MAX,
    LEASE_CAP_SECONDS,
    MAX_DELAY_SECONDS,
    MAX_LIST_LIMIT,
    STATES,
    Attempt,
    NewTodo,
    QueueStats,
    Todo,
    dump_json,
    hash_token,
    lease_millis,
    require_int,
    require_name,
    require_seconds,
    require_text,
)

if TYPE_CHECKING:  # watch reads events, which store todos: a type only, no import at run time
    from .watch import Changes

# ---------------------------------------------------------------- create


async def create(store: Store, todo: NewTodo, *, by: str | None = None) -> tuple[Todo, bool]:
    """Create a pending todo directly (CLI, agent); returns it and whether it was created.

    A live todo already holding (queue, idempotency_key) is returned instead,
    with ``False``. Keys in the namespace of todos derived from events are
    refused: a direct producer may not squat a key a delivery will derive.
    With ``by`` (an OS user, an agent) a new todo comes from an event of the
    audit trail (``todo.create``), as a delivered one comes from its delivery.
    """
    if todo.idempotency_key is not None and todo.idempotency_key.startswith(DERIVED_KEY_PREFIX):
        raise InvalidArgument(
            f"idempotency keys starting with {DERIVED_KEY_PREFIX!r} are reserved for todos made from events"
        )

    def body(tx: Transaction) -> tuple[Todo, bool]:
        settings.require_size(tx, "payload", todo.payload_json)
        now = store.clock.now_ms()
        made, created = insert(tx, todo, now=now)
        if by is None or not created:
            return made, created
        event_id = audit.record(tx, now, by=by, action="todo.create", subject=made.id, queue=made.queue,
                                title=made.title)  # fmt: skip
        return Todo.from_row(tx.one(Q.set_todo_event, {"id": made.id, "event_id": event_id})), True

    return await store.write(body)


def insert(tx: Transaction, todo: NewTodo, *, now: int, event_id: int | None = None) -> tuple[Todo, bool]:
    """The insert behind ``create``: the stored (or live, holding the key) todo, and whether it is new."""
    row, created = _insert(tx, Q.insert_todo, todo, now, event_id)
    return Todo.from_row(row), created


def insert_id(tx: Transaction, todo: NewTodo, *, now: int, event_id: int | None = None) -> int:
    """``insert`` for the ingestion back half, which needs only the id."""
    row, _created = _insert(tx, Q.insert_todo_id, todo, now, event_id)
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
    }


def _insert(tx: Transaction, sql: str, todo: NewTodo, now: int, event_id: int | None) -> tuple[Any, bool]:
    params = insert_params(todo, now=now, event_id=event_id)
    row = tx.one(sql, params)
    if row is not None:
        return row, True
    # A live todo holds the key. It may be a lapsed last attempt, which is a
    # dead letter already (and frees the key) once lapsed leases are recovered.
    holder = {"queue": todo.queue, "idempotency_key": todo.idempotency_key}
    existing = tx.one(Q.live_todo_by_key, holder)
    assert existing is not None, "insert_todo refused a key no live todo holds"
    if existing["state"] == "claimed" and existing["lease_expires_at"] <= now:
        _recover_lapsed(tx, now)
        row = tx.one(sql, params)
        if row is not None:
            return row, True
        existing = tx.one(Q.live_todo_by_key, holder)
    return existing, False


# ---------------------------------------------------------------- reads


async def _settle_lapsed(store: Store) -> None:
    """Before a read: recover lapsed leases, if any, so that what is shown is what
    the next claim would find (a lapsed todo is pending again, or a dead letter).
    A cheap indexed check (todos_leases), so a peek on the caller's own thread:
    no hop to a reader before the read that follows. The write happens only
    when a lease has lapsed."""
    now = store.clock.now_ms()
    if await store.peek(lambda tx: tx.one(Q.any_lapsed_lease, {"now": now})) is not None:
        await store.write(lambda tx: _recover_lapsed(tx, store.clock.now_ms()))


async def get(store: Store, todo_id: int, *, queues: Sequence[str] | None = None) -> Todo:
    """One todo with its attempt history (``queues``: a scope it must be in)."""
    await _settle_lapsed(store)
    row = await store.read_one(Q.get_todo, {"id": todo_id})
    if row is None or (queues is not None and row["queue"] not in queues):
        raise NotFound(f"todo {todo_id} does not exist")
    # A second read, a later snapshot: attempts are only ever added or closed,
    # so the history is at least as new as the todo (never missing its attempt).
    attempts = tuple(
        Attempt(r["attempt"], r["owner"], r["claimed_at"], r["ended_at"], r["outcome"], r["error"])
        for r in await store.read_all(Q.attempts_of_todo, {"todo_id": todo_id})
    )
    return replace(Todo.from_row(row), attempts=attempts)


TIMINGS = ("ready", "delayed", "dead")  # list_todos's filter on when a todo can be claimed


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
    await _settle_lapsed(store)
    rows = await store.read_all(Q.list_todos if queue is None else Q.list_todos_in_queue, params)
    return [Todo.from_row(r) for r in rows]


# ---------------------------------------------------------------- claim


async def claim(
    store: Store,
    todo_id: int,
    *,
    owner: str,
    lease: float | None = None,
    agent: str | None = None,
    queues: Sequence[str] | None = None,
) -> Todo:
    """Claim one todo by id; the answer carries the lease token (shown once).

    ``agent`` is the name an assignee must equal (default: ``owner``);
    ``queues`` is a scope the todo must be in.
    """
    require_name("owner", owner)
    lease_ms = lease_millis(lease)

    def body(tx: Transaction) -> Todo:
        _check_scope(tx, todo_id, queues)
        now = store.clock.now_ms()
        token = secrets.token_urlsafe(24)
        params = {**_claim_params(owner, agent, token, now, lease_ms), "id": todo_id}
        row = _claiming(tx, now, lambda: tx.one(Q.claim_by_id, params))
        if row is None:
            raise _why_not_claimable(tx, todo_id, agent or owner, now)
        return Todo.from_row(row, lease_token=token)  # the open attempt is the claimed row itself

    return await store.write(body, single=True)


@overload
async def claim_next(
    store: Store, *, owner: str, queues: Sequence[str] | None = None, lease: float | None = None,
    agent: str | None = None, max: None = None,
) -> Todo | None: ...  # fmt: skip


@overload
async def claim_next(
    store: Store, *, owner: str, queues: Sequence[str] | None = None, lease: float | None = None,
    agent: str | None = None, max: int,
) -> list[Todo]: ...  # fmt: skip


async def claim_next(
    store: Store,
    *,
    owner: str,
    queues: Sequence[str] | None = None,
    lease: float | None = None,
    agent: str | None = None,
    max: int | None = None,
) -> Todo | None | list[Todo]:
    """Claim the oldest highest-priority visible todo in ``queues`` (all when None).

    Returns None when nothing is claimable; that is not an error. With ``max``
    (1-100): up to that many, as a list (``claim_next_many``).
    """
    if max is not None:
        return await claim_next_many(store, NextClaim(owner, queues, lease, agent), max)
    started = time.perf_counter()
    claimed = await store.write(_claim_next_body(store, NextClaim(owner, queues, lease, agent)), single=True)
    store.tally.claimed(time.perf_counter() - started)  # call to committed answer, found or not
    return claimed


# A waiting claim re-tries at least this often even when nothing commits: a
# delayed todo or a retry after backoff becomes claimable by time alone.
RECHECK_SECONDS = 1.0


@overload
async def claim_next_waiting(
    store: Store, claim: NextClaim, *, wait: float, changes: Changes, max: None = None
) -> Todo | None: ...


@overload
async def claim_next_waiting(
    store: Store, claim: NextClaim, *, wait: float, changes: Changes, max: int
) -> ClaimedBatch: ...


async def claim_next_waiting(
    store: Store, claim: NextClaim, *, wait: float, changes: Changes, max: int | None = None
) -> Todo | None | list[Todo]:
    """``claim_next``, waiting up to ``wait`` seconds for something claimable (a long poll).

    Each commit to the file, from any process, wakes it to try again
    (``changes`` must be running); so does every RECHECK_SECONDS. None when
    nothing became claimable in time. With ``max``: a list of up to ``max``
    todos, answered as soon as one or more could be claimed (empty: none in time).
    """
    if max is not None:
        require_max(max)
    deadline = time.monotonic() + wait
    while True:
        seen = changes.count  # before the attempt: a commit during it still wakes the wait below
        found: Todo | None | list[Todo]
        if max is None:
            found = await claim_next(store, owner=claim.owner, queues=claim.queues, lease=claim.lease, agent=claim.agent)
        else:
            found = await claim_next_many(store, claim, max)
        remaining = deadline - time.monotonic()
        if found or remaining <= 0:  # a todo, or a list with one or more
            return found
        await changes.wait(seen, timeout=min(remaining, RECHECK_SECONDS))


async def queues_without_todos(store: Store, queues: Sequence[str]) -> list[str]:
    """Which of ``queues`` hold no todo at all, in any state (a misspelt name, often)."""
    return [q for q in queues if await store.read_one(Q.queue_has_todos, {"queue": q}) is None]


@dataclass(frozen=True)
class NextClaim:
    """Who claims next, from where: for claim_next, and for finishing a todo and
    claiming the next one in the same transaction (one commit per job)."""

    owner: str
    queues: Sequence[str] | None = None
    lease: float | None = None
    agent: str | None = None
    # A batch's size bound, in bytes of the claimed todos' payloads, results
    # and error texts (an error's counted six times: JSON may escape each byte
    # as \u00XX). The todos are taken in claim order while they fit; the first
    # always is, however big. None: no bound.
    budget: int | None = None


def _claim_statement(claim: NextClaim, *, many: bool) -> tuple[str, dict[str, Any]]:
    """A claim's arguments checked (before its transaction); the statement that
    claims from its queues (one todo, or ``many``) and that statement's queue parameter."""
    queues = _claim_queues(claim)
    if queues is None:
        return (Q.claim_many_any if many else Q.claim_next_any), {}
    if len(queues) == 1:
        return (Q.claim_many_in_queue if many else Q.claim_next_in_queue), {"queue": queues[0]}
    return (Q.claim_many_in_queues if many else Q.claim_next_in_queues), {"queues": json.dumps(queues)}


def _claim_queues(claim: NextClaim) -> list[str] | None:
    """The claim's owner and queues checked; its queues as a list (None: every queue)."""
    require_name("owner", claim.owner)
    queues = claim.queues
    if queues is None:
        return None
    if isinstance(queues, str):  # a bare name would be iterated letter by letter
        raise InvalidArgument("queues must be a list of queue names, not a string")
    queues = list(queues)
    if not queues:
        raise InvalidArgument("queues must name at least one queue (or be omitted for all)")
    for q in queues:
        require_name("queue", q)
    return list(dict.fromkeys(queues))  # a queue named twice is one queue


def _claim_next_body(store: Store, claim: NextClaim) -> Callable[[Transaction], Todo | None]:
    owner, agent = claim.owner, claim.agent
    statement, where = _claim_statement(claim, many=False)
    lease_ms = lease_millis(claim.lease)

    def body(tx: Transaction) -> Todo | None:
        now = store.clock.now_ms()
        token = secrets.token_urlsafe(24)
        params = {**_claim_params(owner, agent, token, now, lease_ms), **where}
        row = _claiming(tx, now, lambda: tx.one(statement, params))
        if row is None:
            return None
        return Todo.from_row(row, lease_token=token)  # the open attempt is the claimed row itself

    return body


def _check_scope(tx: Transaction, todo_id: int, queues: Sequence[str] | None) -> None:
    """A todo outside the caller's scope is answered exactly like an unknown one."""
    if queues is None:
        return
    row = tx.one(Q.get_todo, {"id": todo_id})
    if row is None or row["queue"] not in queues:
        raise NotFound(f"todo {todo_id} does not exist")


def _claim_params(owner: str, agent: str | None, token: str, now: int, lease_ms: int) -> dict[str, Any]:
    return {
        "owner": owner,
        "agent": agent or owner,
        "lease_token_hash": hash_token(token),
        "lease_expires_at": now + lease_ms,
        "now": now,
    }


Claimed = TypeVar("Claimed")  # one row or a list of them


def _claiming(tx: Transaction, now: int, claim: Callable[[], Claimed]) -> Claimed:
    """Run a claim statement. Each claims nothing while a lease has lapsed (one
    look down todos_leases, inside it), so the common claim is one statement;
    one that claimed nothing recovers lapsed leases, if any, and claims again."""
    claimed = claim()
    if not claimed and _recover_lapsed(tx, now):
        claimed = claim()
    return claimed


RECOVERED_AT = "todos.recovered_at"  # in tx.memo: the clock's time of the last recovery in this transaction


def _recover_lapsed(tx: Transaction, now: int) -> bool:
    """Take back lapsed leases: takeover never waits for a sweeper. Whether any was.

    A claim runs it only when its statement claimed nothing (``_claiming``).
    Done already in this transaction at this time or later (the claims that share a group
    commit): nothing more can have lapsed. A claim rolled back to its
    savepoint takes its note in ``tx.memo`` with it.
    """
    recovered_at = tx.memo.get(RECOVERED_AT)
    if recovered_at is not None and now <= recovered_at:
        return False
    lapsed = tx.one(Q.any_lapsed_lease, {"now": now}) is not None
    if lapsed:
        needs_transaction(tx)  # the recovery's changes and the claim's commit together
        tx.run(Q.end_lapsed_attempts, {"now": now})
        tx.run(Q.recover_lapsed_leases, {"now": now})
    tx.memo[RECOVERED_AT] = now
    return lapsed


def _why_not_claimable(tx: Transaction, todo_id: int, agent: str, now: int) -> Exception:
    row = tx.one(Q.get_todo, {"id": todo_id})
    if row is None:
        return NotFound(f"todo {todo_id} does not exist")
    todo = Todo.from_row(row)
    if todo.assignee is not None and todo.assignee != agent:
        return Forbidden(f"todo {todo_id} is assigned to {todo.assignee!r}")
    paused = tx.one(Q.get_queue, {"name": todo.queue})
    if paused is not None and paused["paused_at"] is not None:
        return Conflict(
            f"todo {todo_id} is on queue {todo.queue!r}, which is paused: nothing is claimed from it until it is resumed"
        )
    if todo.state == "claimed":
        return Conflict(f"todo {todo_id} is claimed by {todo.owner} until {rfc3339(todo.lease_expires_at)}")
    if todo.state == "done":
        return Conflict(f"todo {todo_id} is done")
    if todo.state == "cancelled":
        return Conflict(f"todo {todo_id} was cancelled{_by_and_why(todo)}")
    if todo.dead_letter:
        return Conflict(f"todo {todo_id} is a dead letter after {todo.attempt} attempt{'' if todo.attempt == 1 else 's'}; redrive it first")
    assert todo.visible_at is not None and todo.visible_at > now
    return Conflict(f"todo {todo_id} is not visible until {rfc3339(todo.visible_at)}")


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
    return await _finish(store, _complete_body(store, lease, result), then, single=True)


def _complete_body(store: Store, lease: Lease, result: Any) -> Callable[[Transaction], Todo]:
    return _completing(store, lease, dump_json("result", result))


def _completing(store: Store, lease: Lease, text: str) -> Callable[[Transaction], Todo]:
    """complete's body, given the result's JSON text."""
    # No history row: the completing attempt stays on the done row (completed_by).
    return _leased_body(store, Q.complete, lease, {"result": text}, sized="result")


async def fail(store: Store, lease: Lease, *, error: str | None = None, then: NextClaim | None = None) -> Finished:
    """claimed → pending after a backoff, or → failed (a dead letter) at the attempt cap.

    ``then`` as for ``complete``.
    """
    return await _finish(store, _fail_body(store, lease, error), then)


def _fail_body(store: Store, lease: Lease, error: str | None) -> Callable[[Transaction], Todo]:
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
    claim = None if then is None else _claim_next_body(store, then)
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
    if not isinstance(todo_id, int) or not 0 < todo_id <= MAX_ID:  # no todo has it; no database could be asked
        raise NotFound(f"todo {todo_id} does not exist")
    if not lease.token or not isinstance(lease.token, str):
        raise Conflict(f"a lease token is required to change todo {todo_id}")
    token_hash = hash_token(lease.token)

    def body(tx: Transaction) -> Todo:
        _check_scope(tx, todo_id, lease.queues)
        if sized is not None:
            settings.require_size(tx, sized, params[sized])
        now = store.clock.now_ms()
        leased = {"id": todo_id, "lease_token_hash": token_hash, "now": now}
        # An attempt that ends other than by completing is written to the
        # history first, while the row still holds its owner (the statement
        # below clears it); under the same lease, so both or neither change.
        if outcome is not None and tx.one(Q.end_attempt, {**leased, "outcome": outcome,
                                                          "error": params.get("error")}) is None:  # fmt: skip
            raise _why_token_refused(tx, todo_id, token_hash)
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
        return Conflict(f"todo {todo_id} was cancelled{_by_and_why(todo)}; stop working on it")
    last = tx.one(Q.last_ended_attempt, {"todo_id": todo_id})
    if todo.state != "claimed" and last is not None and last["outcome"] == "released_by_operator":
        return Conflict(f"todo {todo_id} was released by an operator; the lease token is void")
    if todo.state != "claimed":
        return Conflict(f"todo {todo_id} is {todo.state}, not claimed; the lease token is stale")
    if row["lease_token_hash"] != token_hash:
        return Conflict(f"the lease token does not match the current lease on todo {todo_id} (held by {todo.owner})")
    return Conflict(f"the lease on todo {todo_id} expired at {rfc3339(todo.lease_expires_at)}")


# ---------------------------------------------------------------- operator verbs


async def redrive(store: Store, todo_id: int, *, by: str | None = None) -> Todo:
    """A dead letter back to pending with a fresh attempt budget."""

    def body(tx: Transaction) -> Todo:
        now = store.clock.now_ms()
        _recover_lapsed(tx, now)  # a lapsed last attempt is the dead letter it will become
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
        _recover_lapsed(tx, now)
        ended = {"id": todo_id, "lease_token_hash": None, "outcome": "released_by_operator", "error": None}
        holder = tx.one(Q.end_attempt, {**ended, "now": now})
        row = tx.one(Q.force_release, {"id": todo_id, "now": now})
        if row is None:
            raise _not_in(tx, todo_id, ("claimed",), "released")
        audit.record(tx, now, by=by, action="todo.release", subject=todo_id, queue=row["queue"],
                     holder=None if holder is None else holder["owner"])  # fmt: skip
        return Todo.from_row(row)

    return await store.write(body)


MAX_REASON_LENGTH = 1000


def _cancel_params(by: str, reason: str | None) -> dict[str, Any]:
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
    params = _cancel_params(by, reason)

    def body(tx: Transaction) -> Todo:
        now = store.clock.now_ms()
        _recover_lapsed(tx, now)
        # A claimed todo's attempt ends as cancelled (a pending one has none open).
        ended = {"id": todo_id, "lease_token_hash": None, "outcome": "cancelled", "error": params["reason"]}
        tx.run(Q.end_attempt, {**ended, "now": now})
        row = tx.one(Q.cancel, {**params, "id": todo_id, "now": now})
        if row is None:
            raise _not_in(tx, todo_id, ("pending", "claimed"), "cancelled")
        audit.record(tx, now, by=by, action="todo.cancel", subject=todo_id, queue=row["queue"],
                     reason=params["reason"])  # fmt: skip
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


def _by_and_why(todo: Todo) -> str:
    by = f" by {todo.cancelled_by}" if todo.cancelled_by else ""
    return by + (f" ({todo.cancel_reason})" if todo.cancel_reason else "")


BULK_BATCH = 500  # todos per transaction of a bulk change: it never holds the write lock for long


@dataclass(frozen=True)
class Redriven:
    """What a bulk redrive did: dead letters matched, redriven, and held back
    (a newer live todo holds the key; each stays a dead letter)."""

    matched: int
    redriven: int
    skipped: int

    def to_dict(self) -> dict[str, int]:
        return {"matched": self.matched, "redriven": self.redriven, "skipped": self.skipped}


def _bulk_filter(queue: str, kind: str | None, since: int | None) -> dict[str, Any]:
    """The filters a bulk redrive or cancel takes: one queue, a kind, a time (ms)."""
    require_name("queue", queue)
    if kind is not None:
        require_name("kind", kind)
    return {"queue": queue, "kind": kind, "since": since}


async def count_dead_letters(store: Store, *, queue: str, kind: str | None = None, since: int | None = None) -> int:
    """How many dead letters of ``queue`` (of ``kind``, dead since ``since`` ms) a bulk redrive would take."""
    await _settle_lapsed(store)
    row = await store.read_one(Q.count_dead_letters, _bulk_filter(queue, kind, since))
    return int(row[0]) if row is not None else 0


async def redrive_many(
    store: Store,
    *,
    queue: str,
    kind: str | None = None,
    since: int | None = None,
    by: str | None = None,
    batch: int = BULK_BATCH,
    progress: Callable[[int], None] | None = None,
) -> Redriven:
    """Every matching dead letter back to pending with a fresh budget, ``batch`` per transaction.

    Each transaction is recorded in the audit trail (with the ids) when ``by``
    is given; ``progress`` hears the running count after each one.
    """
    params = _bulk_filter(queue, kind, since)

    def step(after_id: int) -> Callable[[Transaction], tuple[int, int, int]]:
        def body(tx: Transaction) -> tuple[int, int, int]:
            now = store.clock.now_ms()
            _recover_lapsed(tx, now)
            ids = [r["id"] for r in tx.all(Q.dead_letters, {**params, "after_id": after_id, "limit": batch})]
            done: list[int] = []
            for todo_id in ids:
                try:
                    if tx.one(Q.redrive, {"id": todo_id, "now": now}) is not None:
                        done.append(todo_id)
                except Conflict:  # a newer live todo holds its idempotency key: it stays a dead letter
                    pass
            if by is not None and ids:
                audit.record(tx, now, by=by, action="todo.redrive", subject=queue, ids=done,
                             skipped=len(ids) - len(done))  # fmt: skip
            return len(ids), len(done), ids[-1] if ids else after_id  # past the held-back ones next time

        return body

    matched, redriven = await _in_batches(store, step, batch=batch, progress=progress)
    return Redriven(matched, redriven, matched - redriven)


async def redrive_group(
    store: Store, *, queue: str, last_error: str | None, by: str | None = None, batch: int = BULK_BATCH
) -> Redriven:
    """A queue's dead letters whose last error is ``last_error`` (None: those with none) back to
    pending with a fresh budget, ``batch`` per transaction, each in the audit trail when ``by`` is given."""
    require_name("queue", queue)
    if last_error is not None and not isinstance(last_error, str):
        raise InvalidArgument("last_error must be a string or null")

    def step(after_id: int) -> Callable[[Transaction], tuple[int, int, int]]:
        def body(tx: Transaction) -> tuple[int, int, int]:
            now = store.clock.now_ms()
            _recover_lapsed(tx, now)
            params = {"queue": queue, "last_error": last_error, "after_id": after_id, "limit": batch}
            ids = [r["id"] for r in tx.all(Q.dead_letters_with_error, params)]
            done: list[int] = []
            for todo_id in ids:
                try:
                    if tx.one(Q.redrive, {"id": todo_id, "now": now}) is not None:
                        done.append(todo_id)
                except Conflict:  # a newer live todo holds its idempotency key: it stays a dead letter
                    pass
            if by is not None and ids:
                audit.record(tx, now, by=by, action="todo.redrive", subject=queue, ids=done,
                             skipped=len(ids) - len(done), last_error=last_error)  # fmt: skip
            return len(ids), len(done), ids[-1] if ids else after_id

        return body

    matched, redriven = await _in_batches(store, step, batch=batch, progress=None)
    return Redriven(matched, redriven, matched - redriven)


async def _in_batches(
    store: Store,
    step: Callable[[int], Callable[[Transaction], tuple[int, int, int]]],
    *,
    batch: int,
    progress: Callable[[int], None] | None,
) -> tuple[int, int]:
    """A bulk change, one bounded batch per transaction, until a batch comes back short.

    ``step(cursor)`` makes one batch's body, which answers (taken, done, next
    cursor); the cursor is carried out here, not kept by the body, since a
    body may run more than once (group commit). ``progress`` hears the
    running count done. Answers the totals (taken, done).
    """
    require_int("batch", batch, low=1, high=MAX_LIST_LIMIT)
    taken = done = cursor = 0
    while True:
        n, d, cursor = await store.write(step(cursor))
        taken, done = taken + n, done + d
        if progress is not None and n:
            progress(done)
        if n < batch:
            return taken, done


PURGEABLE = ("done", "failed", "cancelled")  # the finished states: what a purge may delete


def _purge_filter(queue: str, state: str, before: int | None) -> dict[str, Any]:
    require_name("queue", queue)
    if state not in PURGEABLE:
        raise InvalidArgument(f"only finished todos can be purged: state must be one of {', '.join(PURGEABLE)}")
    return {"queue": queue, "state": state, "before": before}


async def count_purgeable(store: Store, *, queue: str, state: str, before: int | None = None) -> int:
    """How many finished todos of ``queue`` in ``state``, last touched before ``before`` (ms), a purge would delete."""
    await _settle_lapsed(store)
    row = await store.read_one(Q.count_purgeable, _purge_filter(queue, state, before))
    return int(row[0]) if row is not None else 0


async def purge(
    store: Store,
    *,
    queue: str,
    state: str,
    before: int | None = None,
    by: str | None = None,
    batch: int = BULK_BATCH,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Delete finished todos (with their attempts), ``batch`` per transaction; how many.

    Each transaction is recorded in the audit trail when ``by`` is given.
    """
    params = _purge_filter(queue, state, before)

    def step(_: int) -> Callable[[Transaction], tuple[int, int, int]]:
        def body(tx: Transaction) -> tuple[int, int, int]:
            now = store.clock.now_ms()
            _recover_lapsed(tx, now)
            ids = [r["id"] for r in tx.all(Q.purge_todos, {**params, "limit": batch})]
            if by is not None and ids:
                audit.record(tx, now, by=by, action="todo.purge", subject=queue, state=state, count=len(ids),
                             first_id=ids[0], last_id=ids[-1])  # fmt: skip
            return len(ids), len(ids), 0  # what is deleted is gone: no cursor needed

        return body

    _, purged = await _in_batches(store, step, batch=batch, progress=progress)
    return purged


async def count_pending(store: Store, *, queue: str, kind: str | None = None, since: int | None = None) -> int:
    """How many pending todos of ``queue`` (of ``kind``, created since ``since`` ms) a bulk cancel would take."""
    await _settle_lapsed(store)
    row = await store.read_one(Q.count_pending, _bulk_filter(queue, kind, since))
    return int(row[0]) if row is not None else 0


async def cancel_many(
    store: Store,
    *,
    queue: str,
    by: str,
    kind: str | None = None,
    since: int | None = None,
    reason: str | None = None,
    batch: int = BULK_BATCH,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Cancel a queue's pending todos (of ``kind``, created since ``since`` ms),
    ``batch`` per transaction, each in the audit trail with its ids; how many."""
    params = {**_bulk_filter(queue, kind, since), **_cancel_params(by, reason), "limit": batch}

    def step(_: int) -> Callable[[Transaction], tuple[int, int, int]]:
        def body(tx: Transaction) -> tuple[int, int, int]:
            now = store.clock.now_ms()
            _recover_lapsed(tx, now)
            ids = sorted(r["id"] for r in tx.all(Q.cancel_pending, {**params, "now": now}))
            if ids:
                audit.record(tx, now, by=by, action="todo.cancel", subject=queue, ids=ids, reason=params["reason"])
            return len(ids), len(ids), 0  # what is cancelled is pending no more: no cursor needed

        return body

    _, cancelled = await _in_batches(store, step, batch=batch, progress=progress)
    return cancelled


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


# ---------------------------------------------------------------- batches
#
# As SQS has them: many single verbs in one transaction, each item answered on
# its own. The items run the very bodies the single verbs run; a finish runs in
# a savepoint of its own, so one that is refused (a stale token, a todo that is
# not claimed or not there) is undone alone and the others commit.

MAX_BATCH = 100  # items of one batch, and todos one batch claim may take
MAX_ID = 2**63 - 1  # the largest id either database holds


@dataclass(frozen=True)
class Completion:
    """One item of ``complete_many``: the lease, and the todo's JSON result."""

    lease: Lease
    result: Any = None


@dataclass(frozen=True)
class Failure:
    """One item of ``fail_many``: the lease, and what went wrong (kept as last_error)."""

    lease: Lease
    error: str | None = None


@dataclass(frozen=True)
class ItemOutcome:
    """One item's answer: ``todo`` (the finished todo) when ``ok``, else ``error``,
    the refusal the single verb would have raised (same kind, same words)."""

    todo_id: int
    todo: Todo | None = None
    error: SwitchboardError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        if self.error is None:
            assert self.todo is not None
            return {"id": self.todo_id, "ok": True, "todo": self.todo.to_dict()}
        return {"id": self.todo_id, "ok": False, "error": {"code": self.error.code, "message": self.error.message}}


class ClaimedBatch(list[Todo]):
    """A batch claim's todos, in claim order; ``over_budget`` counts the todos next
    in line that its size bound (``NextClaim.budget``) left pending, unclaimed."""

    def __init__(self, todos: Sequence[Todo] = (), over_budget: int = 0) -> None:
        super().__init__(todos)
        self.over_budget = over_budget


class Outcomes(list[ItemOutcome]):
    """``complete_many``'s and ``fail_many``'s answer: one outcome per item, in the
    items' order; ``next`` holds the todos claimed in the same transaction when
    ``then`` was given (empty otherwise, and when nothing was claimable)."""

    def __init__(self, outcomes: Sequence[ItemOutcome] = (), next: Sequence[Todo] = ()) -> None:
        super().__init__(outcomes)
        self.next = next if isinstance(next, ClaimedBatch) else ClaimedBatch(next)

    @property
    def refused(self) -> list[ItemOutcome]:
        return [o for o in self if not o.ok]


def require_max(max: object) -> int:
    """A batch claim's ``max``: 1 to MAX_BATCH."""
    require_int("max", max, low=1, high=MAX_BATCH)
    return max  # type: ignore[return-value]


async def claim_next_many(store: Store, claim: NextClaim, max: int) -> ClaimedBatch:
    """Claim up to ``max`` (1-100) todos in one transaction, each under its own lease token.

    The order and the rules are claim_next's, one claim after the other: highest
    priority, then oldest; a lapsed lease is taken over. Fewer (none: an empty
    list) when fewer are claimable, or when ``claim.budget`` stops the batch
    (``over_budget`` says how many it left); that is not an error.
    """
    require_max(max)
    started = time.perf_counter()
    claimed = await store.write(_claim_many_body(store, claim, max), single=True)
    store.tally.claimed(time.perf_counter() - started)
    return claimed


def _claim_many_body(store: Store, claim: NextClaim, max: int) -> Callable[[Transaction], ClaimedBatch]:
    """Up to ``max`` claims in one statement: what ``max`` claim_next calls in a row would claim, in their order."""
    owner, agent, budget = claim.owner, claim.agent, claim.budget
    statement, where = _claim_statement(claim, many=True)
    lease_ms = lease_millis(claim.lease)
    if budget is not None:
        require_int("budget", budget, low=0, high=INT64_MAX)

    def body(tx: Transaction) -> ClaimedBatch:
        now = store.clock.now_ms()
        tokens = {hash_token(token): token for token in (secrets.token_urlsafe(24) for _ in range(max))}
        hashes = list(tokens)
        params = {"owner": owner, "agent": agent or owner, "hashes": json.dumps(hashes), "max": max,
                  "budget": budget, "lease_expires_at": now + lease_ms, "now": now, **where}  # fmt: skip
        rows = _claiming(tx, now, lambda: tx.all(statement, params))
        claimed = [Todo.from_row(row, lease_token=tokens[row["lease_token_hash"]]) for row in rows]
        claimed.sort(key=lambda todo: (-todo.priority, todo.id))  # the order one claim after another takes them
        # A candidate takes the hash at its count of candidates after it, so the
        # last one claimed tells how many the budget left (see claim_many_any).
        position = {h: n for n, h in enumerate(hashes)}
        left = min((position[row["lease_token_hash"]] for row in rows), default=0)
        return ClaimedBatch(claimed, over_budget=left)

    return body


async def complete_many(
    store: Store, items: Sequence[Completion], *, then: NextClaim | None = None, max: int | None = None
) -> Outcomes:
    """Complete each item as ``complete`` would, all in one transaction; one outcome per item.

    A refused item (stale token, not claimed, not found, a result over the
    payload cap) changes nothing and the others still complete. With ``then``,
    up to ``max`` todos (default: as many as there are items, at most 100) are
    claimed in the same transaction after the finishes, refused or not, and
    come back in the answer's ``next``.
    """
    _require_items(items, Completion)
    results: list[str | None] = []
    bodies: list[Callable[[Transaction], Todo] | SwitchboardError] = []
    for item in items:
        try:
            text = dump_json("result", item.result)
            bodies.append(_completing(store, item.lease, text))
        except SwitchboardError as exc:
            text = None
            bodies.append(exc)
        results.append(text)
    # complete refuses before it writes (its one UPDATE finishes the todo or changes nothing): no savepoints
    return await _finish_many(store, [(i.lease, b) for i, b in zip(items, bodies)], then, max,
                              together=_complete_together(store, items, results), refuses_before_writing=True)  # fmt: skip


def _complete_together(
    store: Store, items: Sequence[Completion], results: list[str | None]
) -> Callable[[Transaction], dict[int, Todo]]:
    """complete_many's first pass: one statement completes every item it can (the
    first item of each todo, its result within the cap); {item's position: todo}.
    ``results``: each item's result text, None for an item refused before the transaction.
    The items it leaves run one by one after it, which refuses them as
    ``complete`` would (or completes them: the same rules, looked at again)."""

    def body(tx: Transaction) -> dict[int, Todo]:
        seen: set[int] = set()
        batch: dict[int, int] = {}  # position → todo id
        wanted = []
        for n, (item, text) in enumerate(zip(items, results)):
            todo_id = item.lease.todo_id
            if text is None or todo_id in seen:  # refused before the transaction, or this todo's second item
                continue
            try:
                settings.require_size(tx, "result", text)
            except InvalidArgument:
                continue
            seen.add(todo_id)
            batch[n] = todo_id
            one: dict[str, Any] = {"id": todo_id, "hash": hash_token(item.lease.token), "result": text}
            if item.lease.queues is not None:
                one["queues"] = list(item.lease.queues)
            wanted.append(one)
        if not wanted:
            return {}
        try:
            rows = tx.all(Q.complete_many, {"items": json.dumps(wanted), "now": store.clock.now_ms()})
        except InvalidArgument:  # a value the database cannot hold (PostgreSQL: a NUL): each item alone says whose
            return {}
        done = {row["id"]: Todo.from_row(row) for row in rows}
        return {n: done[todo_id] for n, todo_id in batch.items() if todo_id in done}

    return body


async def fail_many(
    store: Store, items: Sequence[Failure], *, then: NextClaim | None = None, max: int | None = None
) -> Outcomes:
    """Fail each item as ``fail`` would (a backoff, or a dead letter at the cap), in one
    transaction; one outcome per item. ``then`` and ``max`` as for ``complete_many``."""
    _require_items(items, Failure)
    return await _finish_many(store, [(i.lease, _prepared(lambda i=i: _fail_body(store, i.lease, i.error))) for i in items],
                              then, max)  # fmt: skip


def _prepared(make: Callable[[], Callable[[Transaction], Todo]]) -> Callable[[Transaction], Todo] | SwitchboardError:
    """An item's body, or why its arguments are refused (checked before the transaction, as the single verb checks them)."""
    try:
        return make()
    except SwitchboardError as exc:
        return exc


def _require_items(items: object, kind: type) -> None:
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise InvalidArgument("items must be a list")
    if not 1 <= len(items) <= MAX_BATCH:
        raise InvalidArgument(f"items must hold between 1 and {MAX_BATCH} items, got {len(items)}")
    for n, item in enumerate(items):
        if not isinstance(item, kind):
            raise InvalidArgument(f"items[{n}] must be a {kind.__name__}")


async def _finish_many(
    store: Store,
    items: list[tuple[Lease, Callable[[Transaction], Todo] | SwitchboardError]],
    then: NextClaim | None,
    max: int | None,
    *,
    together: Callable[[Transaction], dict[int, Todo]] | None = None,
    refuses_before_writing: bool = False,
) -> Outcomes:
    """The items' finishes in one transaction, each refused alone. ``together``
    finishes first what it can in one go ({position: todo}); the rest run one by
    one. ``refuses_before_writing``: a body that raises has written nothing, so
    it runs without a savepoint of its own."""
    if then is None and max is not None:
        raise InvalidArgument("max goes with then (the next claim)")
    count = require_max(min(len(items), MAX_BATCH) if max is None else max)
    claim = None if then is None else _claim_many_body(store, then, count)

    def body(tx: Transaction) -> Outcomes:
        finished = {} if together is None else together(tx)
        outcomes = []
        for n, (lease, finish) in enumerate(items):
            if n in finished:
                outcomes.append(ItemOutcome(lease.todo_id, todo=finished[n]))
                continue
            if isinstance(finish, SwitchboardError):
                outcomes.append(ItemOutcome(lease.todo_id, error=finish))
                continue
            try:
                if refuses_before_writing:
                    outcomes.append(ItemOutcome(lease.todo_id, todo=finish(tx)))
                else:
                    with tx.savepoint():
                        outcomes.append(ItemOutcome(lease.todo_id, todo=finish(tx)))
            except StoreFault:
                raise  # the database, not the item: nothing of the batch commits
            except SwitchboardError as exc:
                outcomes.append(ItemOutcome(lease.todo_id, error=exc))
        return Outcomes(outcomes, [] if claim is None else claim(tx))

    return await store.write(body)
