"""The batch finishes: complete_many and fail_many, as SQS has them.

Many single verbs in one transaction, each item answered on its own. The
items run the very bodies the single verbs run; a finish runs in a savepoint
of its own, so one that is refused (a stale token, a todo that is not claimed
or not there) is undone alone and the others commit. The batch claim
(claim_next_many) is in claims.py, beside the claims it shares its statements with.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import settings
from ..errors import InvalidArgument, StoreFault, SwitchboardError
from ..store.interface import Store, Transaction
from ..store.queries import Q
from ..todo_model import Todo, dump_json, hash_token
from .claims import MAX_BATCH, ClaimedBatch, NextClaim, claim_many_body, require_max
from .lifecycle import Lease, completing, fail_body


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


class Outcomes(list[ItemOutcome]):
    """``complete_many``'s and ``fail_many``'s answer: one outcome per item, in the
    items' order; ``next`` holds the todos claimed in the same transaction when
    ``then`` was given (an empty batch otherwise, and when nothing was claimable)."""

    def __init__(self, outcomes: Sequence[ItemOutcome], next: ClaimedBatch) -> None:
        super().__init__(outcomes)
        self.next = next

    @property
    def refused(self) -> list[ItemOutcome]:
        return [o for o in self if not o.ok]


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
            bodies.append(completing(store, item.lease, text))
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
    return await _finish_many(store, [(i.lease, _prepared(lambda i=i: fail_body(store, i.lease, i.error))) for i in items],
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
    claim = None if then is None else claim_many_body(store, then, count)

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
        return Outcomes(outcomes, ClaimedBatch() if claim is None else claim(tx))

    return await store.write(body)
