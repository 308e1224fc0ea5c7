"""Claims: a todo taken under a lease, by id or the next in line, one or many, now or after a wait.

One statement claims the next in line (claim_next), one todo or many, from
every queue, one or several; one todo from named queues, the commonest claim,
has leaner ones (claim_next_in_queue, claim_next_in_queues), all with the same
parameters. ``_claim_statement`` is the one place that chooses;
``claim_next_body`` (one todo) and ``claim_many_body`` run what it chose. A
claim by id has its own (claim_by_id): PostgreSQL waits there for a todo
another transaction holds, where the others skip it. Each claim statement
claims nothing while a lease has lapsed; ``_claiming`` then takes lapsed
leases back (``recover_lapsed``) and claims again, so takeover never waits
for a sweeper. The other verbs recover first too (reads: ``settle_lapsed``),
so that what they see is what the next claim would find.

A limited queue (``queues.set_limit``) is never claimed from by those
statements: one that would take a limited queue's todo claims nothing, and
``_claiming`` then takes the limited way (``_claiming_limited``): lock the
limited queues in scope (PostgreSQL; SQLite's one writer needs no lock),
claim with claim_next_limited (or claim_by_id's ``limited``), each queue
giving no more than its room, and log the claims the rolling minute counts.
So the plain claim pays nothing for limits, and racing claimers never pass one.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

from ..clock import rfc3339
from ..errors import Conflict, Forbidden, InvalidArgument, NotFound
from ..store.interface import Row, Store, Transaction, needs_transaction
from ..store.queries import Q
from ..todo_model import INT64_MAX, Todo, hash_token, lease_millis, require_int, require_name
from .dependencies import with_dependencies

if TYPE_CHECKING:  # watch reads events, which store todos: a type only, no import at run time
    from ..watch import Changes


@dataclass(frozen=True)
class NextClaim:
    """Who claims next, from where: for claim_next, and for finishing a todo and
    claiming the next one in the same transaction (one commit per job)."""

    owner: str
    queues: Sequence[str] | None = None
    lease: float | None = None
    agent: str | None = None
    # A batch's size bound, in bytes of the claimed todos' payloads and error
    # texts (an error's counted six times: JSON may escape each byte as
    # \u00XX; a todo that can be claimed has no result yet). The todos are
    # taken in claim order while they fit; the first always is, however big.
    # None: no bound.
    budget: int | None = None


MAX_BATCH = 100  # items of one batch, and todos one batch claim may take


class ClaimedBatch(list[Todo]):
    """A batch claim's todos, in claim order; ``over_budget`` counts the todos next
    in line that its size bound (``NextClaim.budget``) left pending, unclaimed."""

    def __init__(self, todos: Sequence[Todo] = (), over_budget: int = 0) -> None:
        super().__init__(todos)
        self.over_budget = over_budget


def require_max(max: object) -> int:
    """A batch claim's ``max``: 1 to MAX_BATCH."""
    require_int("max", max, low=1, high=MAX_BATCH)
    return max  # type: ignore[return-value]


# ---------------------------------------------------------------- the verbs


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
        check_scope(tx, todo_id, queues)
        now = store.clock.now_ms()
        token = _new_token()
        params = {**_claim_params(owner, agent, token, now, lease_ms), "id": todo_id}
        rows = _claiming(tx, now, lambda limited: tx.all(Q.claim_by_id, {**params, "limited": limited}), id=todo_id)
        row = rows[0] if rows else None
        if row is None:
            raise _why_not_claimable(tx, todo_id, agent or owner, now)
        # The open attempt is the claimed row itself; what it waited for comes with it.
        return with_dependencies(tx, Todo.from_row(row, lease_token=token))

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
    claimed = await store.write(claim_next_body(store, NextClaim(owner, queues, lease, agent)), single=True)
    store.tally.claimed(time.perf_counter() - started)  # call to committed answer, found or not
    return claimed


async def claim_next_many(store: Store, claim: NextClaim, max: int) -> ClaimedBatch:
    """Claim up to ``max`` (1-100) todos in one transaction, each under its own lease token.

    The order and the rules are claim_next's, one claim after the other: highest
    priority, then oldest; a lapsed lease is taken over. Fewer (none: an empty
    list) when fewer are claimable, or when ``claim.budget`` stops the batch
    (``over_budget`` says how many it left); that is not an error.
    """
    require_max(max)
    started = time.perf_counter()
    claimed = await store.write(claim_many_body(store, claim, max), single=True)
    store.tally.claimed(time.perf_counter() - started)
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


# ---------------------------------------------------------------- the statements


def _claim_queues(claim: NextClaim) -> list[str] | None:
    """A claim's owner and queues checked (before its transaction); its queues as a list (None: every queue)."""
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


def _claim_statement(queues: list[str] | None, max: int) -> str:
    """The one choice of a claim of the next in line's statement: claim_next, but for
    one todo from named queues, the commonest claim, which has leaner ones of its own
    (claim_next_in_queue, claim_next_in_queues: queries.sql says why). All take the
    same parameters."""
    if max == 1 and queues is not None:
        return Q.claim_next_in_queue if len(queues) == 1 else Q.claim_next_in_queues
    return Q.claim_next


def claim_next_body(store: Store, claim: NextClaim) -> Callable[[Transaction], Todo | None]:
    """claim_next's body; a finish's ``then`` runs it after the finish, in the same transaction."""
    queues = _claim_queues(claim)
    statement = _claim_statement(queues, 1)
    params = _next_params(claim, queues, 1, None)  # the first is always taken: no budget to weigh
    lease_ms = lease_millis(claim.lease)

    def body(tx: Transaction) -> Todo | None:
        now = store.clock.now_ms()
        token = _new_token()
        # A token hash is hex: the one-item JSON array needs no encoder.
        values = {**params, "hashes": f'["{hash_token(token)}"]', "lease_expires_at": now + lease_ms, "now": now}
        rows = _claiming(tx, now, lambda limited: tx.all(Q.claim_next_limited if limited else statement, values),
                         queues=params["queues"])
        # The open attempt is the claimed row itself; what it waited for comes with it.
        return with_dependencies(tx, Todo.from_row(rows[0], lease_token=token)) if rows else None

    return body


def claim_many_body(store: Store, claim: NextClaim, max: int) -> Callable[[Transaction], ClaimedBatch]:
    """Up to ``max`` claims in one statement: what ``max`` claims in a row would claim, in their order."""
    queues = _claim_queues(claim)
    statement = _claim_statement(queues, max)
    params = _next_params(claim, queues, max, claim.budget)
    lease_ms = lease_millis(claim.lease)
    if claim.budget is not None:
        require_int("budget", claim.budget, low=0, high=INT64_MAX)

    def body(tx: Transaction) -> ClaimedBatch:
        now = store.clock.now_ms()
        tokens = {hash_token(token): token for token in (_new_token() for _ in range(max))}
        hashes = list(tokens)
        values = {**params, "hashes": json.dumps(hashes), "lease_expires_at": now + lease_ms, "now": now}
        rows = _claiming(tx, now, lambda limited: tx.all(Q.claim_next_limited if limited else statement, values),
                         queues=params["queues"])
        # The results they carry draw on what the budget left once their payloads and errors were weighed.
        room = None if claim.budget is None else [claim.budget - sum(map(_weight, rows))]
        claimed = [
            with_dependencies(tx, Todo.from_row(row, lease_token=tokens[row["lease_token_hash"]]), room) for row in rows
        ]
        claimed.sort(key=lambda todo: (-todo.priority, todo.id))  # the order one claim after another takes them
        # A candidate takes the hash at its count of candidates after it, so the
        # last one claimed tells how many the budget left (see claim_next).
        position = {h: n for n, h in enumerate(hashes)}
        left = min((position[row["lease_token_hash"]] for row in rows), default=0)
        return ClaimedBatch(claimed, over_budget=left)

    return body


def _weight(row: Row) -> int:
    """A claimed row's bytes as a batch's budget weighs them (the claim statements' ``size``):
    its payload's, and its last error's six times (JSON may escape each byte as \\u00XX)."""
    return len(row["payload"].encode("utf-8")) + 6 * len((row["last_error"] or "").encode("utf-8"))


def _next_params(claim: NextClaim, queues: list[str] | None, max: int, budget: int | None) -> dict[str, Any]:
    """A claim of the next in line's parameters but its time and token hashes."""
    return {"owner": claim.owner, "agent": claim.agent or claim.owner, "max": max, "budget": budget,
            "queues": None if queues is None else json.dumps(queues)}  # fmt: skip


def _new_token() -> str:
    """A claim's lease token: unguessable (the store keeps only its hash)."""
    return secrets.token_urlsafe(24)


def _claim_params(owner: str, agent: str | None, token: str, now: int, lease_ms: int) -> dict[str, Any]:
    return {
        "owner": owner,
        "agent": agent or owner,
        "lease_token_hash": hash_token(token),
        "lease_expires_at": now + lease_ms,
        "now": now,
    }


# In tx.cache (the store's, across transactions): whether a scope of claim_next
# (its queues' JSON, None for every queue) had a limited queue at its last claim,
# and when each rate-limited queue's old claims were last forgotten. A stale
# note costs a statement, never a wrong claim: the limited way claims what the
# plain one would where no limit is set.
LIMITED_SCOPES = "todos.limited_scopes"
PRUNED_AT = "todos.claims_pruned_at"
PRUNE_EVERY_MS = 10_000  # a queue's log keeps at most this much more than its minute


def _claiming(
    tx: Transaction, now: int, claim: Callable[[bool], list[Row]], *, queues: str | None = None, id: int | None = None
) -> list[Row]:
    """Run a claim statement (``claim(limited)``). Each claims nothing while a
    lease has lapsed (one look down todos_leases, inside it), nor a limited
    queue's todo unless ``limited``, so the common claim is one statement; one
    that claimed nothing takes the limited way when a limited queue is in its
    scope (``queues``, a JSON array or None for every queue; or todo ``id``'s
    queue), recovers lapsed leases, if any, and claims again. A scope that had
    a limited queue at its last claim takes the limited way at once."""
    hints: dict[str | None, bool] = tx.cache.setdefault(LIMITED_SCOPES, {})
    if id is None and hints.get(queues):
        needs_transaction(tx)  # the lock held until the claim commits (PostgreSQL)
        limited = tx.all(Q.lock_limited_queues, {"queues": queues, "id": id})
        claimed = claim(bool(limited))
    else:
        claimed = claim(False)
        if claimed:
            return claimed
        limited = tx.all(Q.lock_limited_queues, {"queues": queues, "id": id})
        if limited:
            needs_transaction(tx)
            claimed = claim(True)
    if id is None:
        if len(hints) >= 1024:  # scopes are an agent's queues: a few; never let odd callers grow it
            hints.clear()
        hints[queues] = bool(limited)
    if not claimed and recover_lapsed(tx, now):
        claimed = claim(bool(limited))
    if claimed and any(row["max_per_minute"] is not None for row in limited):
        _log_claims(tx, now, claimed, [row["name"] for row in limited if row["max_per_minute"] is not None])
    return claimed


def _log_claims(tx: Transaction, now: int, claimed: list[Row], rated: list[str]) -> None:
    """The rolling minute's record of the claims of rate-limited queues (``rated``),
    and, now and then, their claims older than a minute forgotten."""
    tx.run(Q.log_claims, {"ids": json.dumps([row["id"] for row in claimed])})
    pruned: dict[str, int] = tx.cache.setdefault(PRUNED_AT, {})
    due = [q for q in rated if not 0 <= now - pruned.get(q, -PRUNE_EVERY_MS) < PRUNE_EVERY_MS]
    if due:
        tx.run(Q.prune_queue_claims, {"queues": json.dumps(due), "now": now})
        pruned.update(dict.fromkeys(due, now))


# ---------------------------------------------------------------- lapsed leases


RECOVERED_AT = "todos.recovered_at"  # in tx.memo: the clock's time of the last recovery in this transaction


def recover_lapsed(tx: Transaction, now: int) -> bool:
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


async def settle_lapsed(store: Store) -> None:
    """Before a read: recover lapsed leases, if any, so that what is shown is what
    the next claim would find (a lapsed todo is pending again, or a dead letter).
    A cheap indexed check (todos_leases), so a peek on the caller's own thread:
    no hop to a reader before the read that follows. The write happens only
    when a lease has lapsed."""
    now = store.clock.now_ms()
    if await store.peek(lambda tx: tx.one(Q.any_lapsed_lease, {"now": now})) is not None:
        await store.write(lambda tx: recover_lapsed(tx, store.clock.now_ms()))


# ---------------------------------------------------------------- refusals


def check_scope(tx: Transaction, todo_id: int, queues: Sequence[str] | None) -> None:
    """A todo outside the caller's scope is answered exactly like an unknown one."""
    if queues is None:
        return
    row = tx.one(Q.get_todo, {"id": todo_id})
    if row is None or row["queue"] not in queues:
        raise NotFound(f"todo {todo_id} does not exist")


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
        return Conflict(f"todo {todo_id} was cancelled{by_and_why(todo)}")
    if todo.blocked:
        return Conflict(
            f"todo {todo_id} is blocked: it waits for {todo.blocked_by} todo{'' if todo.blocked_by == 1 else 's'} "
            "not done yet"
        )
    if todo.dead_letter:
        return Conflict(f"todo {todo_id} is a dead letter after {todo.attempt} attempt{'' if todo.attempt == 1 else 's'}; redrive it first")
    assert todo.visible_at is not None
    if todo.visible_at > now:
        return Conflict(f"todo {todo_id} is not visible until {rfc3339(todo.visible_at)}")
    limit = at_limit(tx, todo.queue, now)
    if limit is None:  # PostgreSQL: another claim held it, and let it go before this one looked
        return Conflict(f"todo {todo_id} was held by another claim; try again")
    return Conflict(f"todo {todo_id} is on queue {todo.queue!r}, which is at its limit: {limit}")


def at_limit(tx: Transaction, queue: str, now: int) -> str | None:
    """Which of ``queue``'s limits it is at, in words, for a refused claim (None: none)."""
    load = tx.one(Q.queue_load, {"name": queue, "now": now})
    if load is None:
        return None
    words = []
    if load["max_claimed"] is not None and load["claimed"] >= load["max_claimed"]:
        words.append(f"{load['claimed']} claimed of --max-claimed {load['max_claimed']}")
    if load["max_per_minute"] is not None and load["claims_last_minute"] >= load["max_per_minute"]:
        words.append(f"{load['claims_last_minute']} claims in the last minute of --max-per-minute {load['max_per_minute']}")
    return "; ".join(words) + "; it waits, ready, until the queue has room" if words else None


def by_and_why(todo: Todo) -> str:
    """Who cancelled ``todo`` (a cancel always names someone) and why, for the words of a refusal."""
    return f" by {todo.cancelled_by}" + (f" ({todo.cancel_reason})" if todo.cancel_reason else "")
