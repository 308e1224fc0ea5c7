"""An operator's bulk jobs: redrive a queue's dead letters (all, or one group of
them), cancel its pending todos, purge its finished ones; and the counts that
preview each. One helper runs them all (``_in_batches``): a bounded batch per
transaction, so a job never holds the write lock for long, each batch in the
audit trail with its ids.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import audit
from ..errors import Conflict, InvalidArgument
from ..store.interface import Store, Transaction
from ..store.queries import Q
from ..todo_model import MAX_LIST_LIMIT, require_int, require_name
from . import dependencies
from .claims import recover_lapsed, settle_lapsed
from .operator import cancel_params

BULK_BATCH = 500  # todos per transaction of a bulk change: it never holds the write lock for long
PURGEABLE = ("done", "failed", "cancelled")  # the finished states: what a purge may delete


@dataclass(frozen=True)
class Redriven:
    """What a bulk redrive did: dead letters matched, redriven, and held back
    (a newer live todo holds the key; each stays a dead letter)."""

    matched: int
    redriven: int
    skipped: int

    def to_dict(self) -> dict[str, int]:
        return {"matched": self.matched, "redriven": self.redriven, "skipped": self.skipped}


# ---------------------------------------------------------------- the jobs


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
    matched, redriven = await _in_batches(
        store, Q.dead_letters, _bulk_filter(queue, kind, since), each=_redrive_one, by=by, action="todo.redrive",
        subject=queue, noted=lambda ids, done: {"ids": done, "skipped": len(ids) - len(done)}, batch=batch,
        progress=progress,
    )  # fmt: skip
    return Redriven(matched, redriven, matched - redriven)


async def redrive_group(
    store: Store, *, queue: str, last_error: str | None, by: str | None = None, batch: int = BULK_BATCH
) -> Redriven:
    """A queue's dead letters whose last error is ``last_error`` (None: those with none) back to
    pending with a fresh budget, ``batch`` per transaction, each in the audit trail when ``by`` is given."""
    require_name("queue", queue)
    if last_error is not None and not isinstance(last_error, str):
        raise InvalidArgument("last_error must be a string or null")
    matched, redriven = await _in_batches(
        store, Q.dead_letters_with_error, {"queue": queue, "last_error": last_error}, each=_redrive_one, by=by,
        action="todo.redrive", subject=queue,
        noted=lambda ids, done: {"ids": done, "skipped": len(ids) - len(done), "last_error": last_error}, batch=batch,
    )  # fmt: skip
    return Redriven(matched, redriven, matched - redriven)


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
    ``batch`` per transaction, each in the audit trail with its ids; how many.
    The blocked todos that wait for them are cancelled too (not counted)."""
    params = {**_bulk_filter(queue, kind, since), **cancel_params(by, reason)}
    _, cancelled = await _in_batches(
        store, Q.cancel_pending, params, by=by, action="todo.cancel", subject=queue,
        noted=lambda ids, _: {"ids": ids, "reason": params["reason"]}, batch=batch, progress=progress,
        then=lambda tx, ids, now: _cascaded(dependencies.cancel_dependents(tx, ids, by=by, now=now)),
    )  # fmt: skip
    return cancelled


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
    _, purged = await _in_batches(
        store, Q.purge_todos, _purge_filter(queue, state, before), by=by, action="todo.purge", subject=queue,
        noted=lambda ids, _: {"state": state, "count": len(ids), "first_id": ids[0], "last_id": ids[-1]},
        batch=batch, progress=progress,
    )  # fmt: skip
    return purged


def _redrive_one(tx: Transaction, todo_id: int, now: int) -> bool:
    """One dead letter of a bulk redrive back to pending; whether it was."""
    try:
        return tx.one(Q.redrive, {"id": todo_id, "now": now}) is not None
    except Conflict:  # a newer live todo holds its idempotency key: it stays a dead letter
        return False


async def _in_batches(
    store: Store,
    take: str,
    params: dict[str, Any],
    *,
    each: Callable[[Transaction, int, int], bool] | None = None,
    by: str | None,
    action: str,
    subject: str,
    noted: Callable[[list[int], list[int]], dict[str, Any]],
    batch: int,
    progress: Callable[[int], None] | None = None,
    then: Callable[[Transaction, list[int], int], dict[str, Any]] | None = None,
) -> tuple[int, int]:
    """A bulk change, one bounded batch per transaction, until a batch comes back short.

    Each transaction takes lapsed leases back, then ``take`` answers the next
    batch's ids (at most ``:limit``, after ``:after_id``): ``each(tx, id, now)``
    changes each and says whether it did, or, without ``each``, ``take``
    changed them itself. With ``by``, the batch is recorded in the audit
    trail as ``action`` on ``subject`` with ``noted(ids taken, ids done)``.
    The cursor (the last id taken: past the ones left as they were) is
    carried out here, not kept by the body, since a body may run more than
    once (group commit). ``progress`` hears the running count done; ``then``
    runs in the transaction with the ids done, and what it answers is noted
    too. Answers the totals (taken, done).
    """
    require_int("batch", batch, low=1, high=MAX_LIST_LIMIT)

    def step(after_id: int) -> Callable[[Transaction], tuple[list[int], list[int]]]:
        def body(tx: Transaction) -> tuple[list[int], list[int]]:
            now = store.clock.now_ms()
            recover_lapsed(tx, now)
            ids = sorted(r["id"] for r in tx.all(take, {**params, "after_id": after_id, "limit": batch, "now": now}))
            done = ids if each is None else [todo_id for todo_id in ids if each(tx, todo_id, now)]
            also = {} if then is None else then(tx, done, now)
            if by is not None and ids:
                audit.record(tx, now, by=by, action=action, subject=subject, **noted(ids, done), **also)
            return ids, done

        return body

    taken = done = after_id = 0
    while True:
        ids, changed = await store.write(step(after_id))
        taken, done = taken + len(ids), done + len(changed)
        if progress is not None and ids:
            progress(done)
        if len(ids) < batch:
            return taken, done
        after_id = ids[-1]


def _cascaded(ids: list[int]) -> dict[str, Any]:
    """What the audit record of a cancel notes of the dependents it cancelled with it."""
    return {"cascaded": ids} if ids else {}


# ---------------------------------------------------------------- filters and previews


def _bulk_filter(queue: str, kind: str | None, since: int | None) -> dict[str, Any]:
    """The filters a bulk redrive or cancel takes: one queue, a kind, a time (ms)."""
    require_name("queue", queue)
    if kind is not None:
        require_name("kind", kind)
    return {"queue": queue, "kind": kind, "since": since}


def _purge_filter(queue: str, state: str, before: int | None) -> dict[str, Any]:
    require_name("queue", queue)
    if state not in PURGEABLE:
        raise InvalidArgument(f"only finished todos can be purged: state must be one of {', '.join(PURGEABLE)}")
    return {"queue": queue, "state": state, "before": before}


async def count_dead_letters(store: Store, *, queue: str, kind: str | None = None, since: int | None = None) -> int:
    """How many dead letters of ``queue`` (of ``kind``, dead since ``since`` ms) a bulk redrive would take."""
    return await _count(store, Q.count_dead_letters, _bulk_filter(queue, kind, since))


async def count_pending(store: Store, *, queue: str, kind: str | None = None, since: int | None = None) -> int:
    """How many pending todos of ``queue`` (of ``kind``, created since ``since`` ms) a bulk cancel would take."""
    return await _count(store, Q.count_pending, _bulk_filter(queue, kind, since))


async def count_purgeable(store: Store, *, queue: str, state: str, before: int | None = None) -> int:
    """How many finished todos of ``queue`` in ``state``, last touched before ``before`` (ms), a purge would delete."""
    return await _count(store, Q.count_purgeable, _purge_filter(queue, state, before))


async def _count(store: Store, sql: str, params: dict[str, Any]) -> int:
    """A preview's count, with lapsed leases settled first as the job would find them."""
    await settle_lapsed(store)
    row = await store.read_one(sql, params)
    assert row is not None  # a SELECT count(*) answers one row, always
    return int(row[0])
