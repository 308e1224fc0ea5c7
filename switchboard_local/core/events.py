"""Events and the ingestion back half every producer ends in.

Webhooks and broker consumers (through ``routing.accept``) and operators
all end in ``ingest_many``: one write transaction that stores the event
(deduplicated on source + external id) and, only when it is new, the todos
derived from it (each deduplicated on queue + idempotency key). The producer is answered after it returns, never before:
store-then-ack.

Deduplication outlives the events: the key of an event pruned before the
dedup horizon is kept in ``delivery_keys``. A source whose scheme signs the
body but not the delivery id (GitHub, GitLab, hmac, token…) can set a replay
window: the same verified type and body again within it is a duplicate, even
under a new delivery id.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from .clock import rfc3339
from .errors import InvalidArgument, NotFound
from .sources import FAMILIES as SOURCE_FAMILIES
from .store.interface import Store, Transaction
from .store.queries import Q
from .todo_model import MAX_LIST_LIMIT, NewTodo, Todo
from .todos import insert_id, insert_params
from .todos.claims import settle_lapsed
from .todos.dependencies import made_before
from .watch import FOLLOW_BATCH, IDLE_SECONDS, follow

# A source's family, or an operator's (CLI and agent actions come from no source row).
FAMILIES = (*SOURCE_FAMILIES, "operator")


def body_hash(body: bytes) -> str:
    """The delivery id of a message that brings none of its own."""
    return "sha256:" + hashlib.sha256(body).hexdigest()


@dataclass(frozen=True)
class NewEvent:
    """One delivery as it arrived. Headers must already be redacted."""

    source: str
    family: str
    type: str
    external_id: str
    trust_mode: str
    verified: bool
    body: bytes
    verify_detail: str | None = None
    content_type: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    # Seconds within which the same verified type and body is a duplicate (0: off).
    replay_window: float = 0.0

    def __post_init__(self) -> None:
        for name in ("source", "type", "external_id", "trust_mode"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise InvalidArgument(f"event {name} must be a non-empty string")
        if self.family not in FAMILIES:
            raise InvalidArgument(f"event family must be one of {', '.join(FAMILIES)}, got {self.family!r}")
        if not isinstance(self.body, (bytes, bytearray, memoryview)):
            raise InvalidArgument("event body must be bytes")


@dataclass(frozen=True)
class Ingested:
    event_id: int
    duplicate: bool
    todo_ids: tuple[int, ...]
    # Routing failed: the event was kept without todos (replay it once the
    # cause is fixed), and this says why.
    unroutable: str | None = None


@dataclass(frozen=True)
class Event:
    id: int
    source: str
    family: str
    type: str
    external_id: str
    trust_mode: str
    verified: bool
    verify_detail: str | None
    content_type: str | None
    headers: dict[str, str]
    body: bytes
    size: int
    received_at: int

    @classmethod
    def from_row(cls, row: Any) -> Event:
        return cls(
            id=row["id"],
            source=row["source"],
            family=row["family"],
            type=row["type"],
            external_id=row["external_id"],
            trust_mode=row["trust_mode"],
            verified=bool(row["verified"]),
            verify_detail=row["verify_detail"],
            content_type=row["content_type"],
            headers=json.loads(row["headers"]),
            body=bytes(row["body"]),
            size=row["size"],
            received_at=row["received_at"],
        )

    def full(self) -> dict[str, Any]:
        """The summary plus redacted headers and the body: UTF-8 text, else base64."""
        try:
            body, encoding = self.body.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            body, encoding = base64.b64encode(self.body).decode("ascii"), "base64"
        return {**self.summary(), "headers": self.headers, "body": body, "body_encoding": encoding}

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source": self.source,
            "family": self.family,
            "type": self.type,
            "external_id": self.external_id,
            "trust_mode": self.trust_mode,
            "verified": self.verified,
            "verify_detail": self.verify_detail,
            "content_type": self.content_type,
            "size": self.size,
            "received_at": rfc3339(self.received_at),
        }


# Derives an event's todos inside the ingest transaction (routing reads its
# rules there, so a delivery sees the rules as of its own commit).
Derive = Callable[[Transaction, int, NewEvent], Sequence[NewTodo]]


# Checks a batch's transaction before anything is stored, raising to store
# nothing: a consumer's fence (leadership.check).
Guard = Callable[[Transaction, int], None]


async def ingest_many(
    store: Store, batch: Sequence[tuple[NewEvent, Sequence[NewTodo] | Derive]], *, guard: Guard | None = None
) -> list[Ingested]:
    """Store events and their todos in one transaction (the back half): all of the batch, or none.

    Each event comes with its todos: the list to create, or a function that
    derives it once the event is known to be new. A redelivery of a stored
    event adds nothing and answers with the first delivery's event id and
    todo ids. Any failure part-way rolls everything back, so the producer,
    un-acked, redelivers. ``guard(tx, now)`` runs first in the transaction
    (a consumer's fence).
    """

    def body(tx: Transaction) -> list[Ingested]:
        now = store.clock.now_ms()
        if guard is not None:
            guard(tx, now)
        if len(batch) == 1:  # one delivery: three statements, fewer than the batch path's seven
            ((event, todos),) = batch
            return [_ingest_one(tx, now, event, todos)]
        return _ingest_batch(tx, now, batch)

    return await store.write(body)


def _seen_params(event: NewEvent, now: int) -> dict[str, Any]:
    """How a delivery is recognised as seen before (insert_event's look)."""
    body_key = None
    if event.replay_window > 0 and event.verified:
        digest = hashlib.sha256(event.type.encode("utf-8") + b"\0")
        digest.update(event.body)
        body_key = f"body:{digest.hexdigest()}"
    return {
        "source": event.source,
        "external_id": event.external_id,
        "pruned_key": f"id:{event.external_id}",
        "body_key": body_key,
        "window_start": now - round(event.replay_window * 1000),
    }


def _event_params(event: NewEvent, now: int) -> dict[str, Any]:
    return {
        "source": event.source,
        "external_id": event.external_id,
        "family": event.family,
        "type": event.type,
        "trust_mode": event.trust_mode,
        "verified": int(event.verified),
        "verify_detail": event.verify_detail,
        "content_type": event.content_type,
        "headers": json.dumps(dict(event.headers), ensure_ascii=False) if event.headers else "{}",
        "body": bytes(event.body),
        "size": len(event.body),
        "now": now,
    }


def _ingest_batch(
    tx: Transaction, now: int, batch: Sequence[tuple[NewEvent, Sequence[NewTodo] | Derive]]
) -> list[Ingested]:
    """``_ingest_one`` for each delivery of a batch, in a few statements for all of them.

    Which deliveries were seen before is asked once (seen_deliveries); a
    repeat within the batch answers as its first; new events and their todos
    get their ids here (the transaction holds the write lock, so nobody else
    takes one meanwhile) and are inserted with one executemany each, links too.
    A todo whose key a live todo holds, or that an earlier todo of this batch
    takes, goes the single way (insert_id: the holder answers), after the rest;
    so does a routing chain's todo (it waits for its event's earlier todos).
    The answers are those ``_ingest_one`` would give, delivery by delivery.
    """
    seen = [_seen_params(event, now) for event, _ in batch]
    deliveries = json.dumps(
        [[s["source"], s["external_id"], s["pruned_key"], s["body_key"], s["window_start"]] for s in seen]
    )
    earlier = {row["position"]: row["event_id"] for row in tx.all(Q.seen_deliveries, {"deliveries": deliveries})}
    next_event = int(tx.one(Q.next_event_id)["id"])  # type: ignore[index]
    in_batch: dict[tuple[str, str], int] = {}  # a delivery key of this batch -> the position that brought it
    firsts: dict[int, int] = {}  # position of a repeat within the batch -> position of its first
    new_events: list[dict[str, Any]] = []
    remembered: list[dict[str, Any]] = []
    event_ids: list[int | None] = []
    planned: list[tuple[int, int, NewTodo]] = []  # (position in batch, position in event, todo)
    for position, ((event, todos), look) in enumerate(zip(batch, seen)):
        keys = [(event.source, "id:" + event.external_id)]
        if look["body_key"] is not None:
            keys.append((event.source, look["body_key"]))
        first = next((in_batch[k] for k in keys if k in in_batch), None)
        if position in earlier or first is not None:
            if first is not None and position not in earlier:
                firsts[position] = first
            event_ids.append(None)
            continue
        event_id = next_event
        next_event += 1
        for key in keys:
            in_batch[key] = position
        event_ids.append(event_id)
        new_events.append({**_event_params(event, now), "id": event_id})
        if look["body_key"] is not None:
            remembered.append({"source": event.source, "key": look["body_key"], "event_id": event_id, "now": now})
        derived = todos(tx, event_id, event) if callable(todos) else todos
        planned.extend((position, index, todo) for index, todo in enumerate(derived))
    tx.many(Q.insert_event_with_id, new_events)
    tx.many(Q.remember_delivery, remembered)

    held_keys = [[todo.queue, todo.idempotency_key] for _, _, todo in planned]
    held = {row["position"] for row in tx.all(Q.live_keys_held, {"keys": json.dumps(held_keys)})}
    next_todo = int(tx.one(Q.next_todo_id)["id"])  # type: ignore[index]
    taken: set[tuple[str, str]] = set()
    todo_ids: dict[tuple[int, int], int] = {}
    rows: list[dict[str, Any]] = []
    single: list[tuple[int, int, NewTodo]] = []
    for n, (position, index, todo) in enumerate(planned):
        key = (todo.queue, todo.idempotency_key) if todo.idempotency_key is not None else None
        if n in held or (key is not None and key in taken) or todo.after_keys:
            single.append((position, index, todo))
            continue
        if key is not None:
            taken.add(key)
        todo_ids[position, index] = next_todo
        rows.append(todo_row(todo, now=now, event_id=event_ids[position], id=next_todo))
        next_todo += 1
    tx.many(Q.insert_todo_with_id, rows)
    for position, index, todo in single:  # in the batch's order: a chain's todo after those it waits for
        if todo.after_keys:
            made = {t.idempotency_key: todo_ids[p, i] for p, i, t in planned if p == position and i < index}
            todo = made_before(todo, made)
        todo_ids[position, index] = insert_id(tx, todo, now=now, event_id=event_ids[position])
    links = [
        {"event_id": event_ids[position], "position": index, "todo_id": todo_ids[position, index]}
        for position, index, _ in planned
    ]
    tx.many(Q.link_event_todo, links)

    made: dict[int, list[int]] = {}
    for position, index, _ in planned:
        made.setdefault(position, []).append(todo_ids[position, index])
    answers: list[Ingested] = []
    for position, event_id in enumerate(event_ids):
        if event_id is not None:
            answers.append(Ingested(event_id, False, tuple(made.get(position, ()))))
        elif position in firsts:  # a repeat of a delivery earlier in this batch
            first = answers[firsts[position]]
            answers.append(Ingested(first.event_id, True, first.todo_ids))
        else:  # seen before this batch: answer as the first delivery was answered
            ids = tx.all(Q.todo_ids_of_event, {"event_id": earlier[position]})
            answers.append(Ingested(earlier[position], True, tuple(r["id"] for r in ids)))
    return answers


def todo_row(todo: NewTodo, *, now: int, event_id: int | None, id: int) -> dict[str, Any]:
    """insert_todo_with_id's parameters: the columns todos.insert_id writes, and the id."""
    return {"id": id, **insert_params(todo, now=now, event_id=event_id)}


def _ingest_one(tx: Transaction, now: int, event: NewEvent, todos: Sequence[NewTodo] | Derive) -> Ingested:
    seen = _seen_params(event, now)
    row = tx.one(Q.insert_event, {**seen, **_event_params(event, now)})
    if row is None:  # seen before: answer as the first delivery was answered
        first = tx.one(Q.seen_delivery, seen)
        assert first is not None, "insert_event refused a delivery that was never seen"
        ids = tx.all(Q.todo_ids_of_event, {"event_id": first["event_id"]})  # none once the event is pruned
        return Ingested(first["event_id"], True, tuple(r["id"] for r in ids))
    event_id = row["id"]
    if seen["body_key"] is not None:
        tx.run(Q.remember_delivery, {"source": event.source, "key": seen["body_key"], "event_id": event_id, "now": now})
    derived = todos(tx, event_id, event) if callable(todos) else todos
    todo_ids = []
    made: dict[str, int] = {}  # the event's todos so far, by key: what a routing chain's todo waits for
    for position, todo in enumerate(derived):
        todo_id = insert_id(tx, made_before(todo, made), now=now, event_id=event_id)
        tx.run(Q.link_event_todo, {"event_id": event_id, "position": position, "todo_id": todo_id})
        todo_ids.append(todo_id)
        if todo.idempotency_key is not None:
            made[todo.idempotency_key] = todo_id
    return Ingested(event_id, False, tuple(todo_ids))


async def get_event(store: Store, event_id: int, *, queues: Sequence[str] | None = None) -> Event:
    """One event; with ``queues`` (an agent's scope), only one a todo in them came from."""
    scope = None if queues is None else json.dumps(list(queues))

    if scope is not None and await store.read_one(Q.event_in_queues, {"event_id": event_id, "queues": scope}) is None:
        row = None  # out of scope: answered exactly like an unknown id
    else:
        row = await store.read_one(Q.get_event, {"id": event_id})
    if row is None:
        raise NotFound(f"event {event_id} does not exist")
    return Event.from_row(row)


async def todos_of_event(store: Store, event_id: int) -> list[Todo]:
    """The todos an event produced, as they are now, by id: its first delivery's and its replays'.

    Empty for an event that made none (dropped, unroutable) or is unknown;
    a todo pruned since is no longer among them.
    """
    return [Todo.from_row(r) for r in await store.read_all(Q.todos_of_event, {"event_id": event_id})]


IN_PLAY_CHUNK = 500  # event ids asked about per read: a bounded parameter, however many are held


async def in_play(store: Store, event_ids: Sequence[int]) -> set[int]:
    """Which of these events still have work in play: a todo they produced (their delivery's, or
    a replay's) pending or claimed. For the others every such todo is finished (done, a dead letter or
    cancelled), or there never was one (a drop rule, an unroutable event, an unknown id).

    What an adapter acking on completion asks of the messages it holds unacked. A
    lapsed lease is settled first, as before any read of todos: a last attempt that
    lapsed is a dead letter, finished, though nothing committed since.
    """
    await settle_lapsed(store)
    ids = sorted(set(event_ids))
    found: set[int] = set()
    for start in range(0, len(ids), IN_PLAY_CHUNK):
        chunk = json.dumps(ids[start : start + IN_PLAY_CHUNK])
        found.update(int(r["event_id"]) for r in await store.read_all(Q.events_in_play, {"ids": chunk}))
    return found


async def list_events(
    store: Store,
    *,
    source: str | None = None,
    type: str | None = None,
    after_id: int | None = None,
    limit: int = 50,
    queues: Sequence[str] | None = None,
    since: int | None = None,
) -> list[Event]:
    """Events oldest first after ``after_id`` (the last id of the previous page).

    ``queues`` (an agent's scope) keeps only events that a todo in them came
    from; ``since`` (milliseconds) keeps those received at or after it.
    """
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidArgument(f"limit must be between 1 and {MAX_LIST_LIMIT}, got {limit!r}")
    if after_id is not None and (not isinstance(after_id, int) or isinstance(after_id, bool)):
        raise InvalidArgument("after_id must be an integer")
    params = {
        "source": source,
        "type": type,
        "after_id": after_id,
        "since": since,
        "limit": limit,
        "queues": None if queues is None else json.dumps(list(queues)),
    }
    rows = await store.read_all(Q.list_events, params)
    return [Event.from_row(r) for r in rows]


async def last_event_id(store: Store) -> int:
    row = await store.read_one(Q.last_event_id)
    assert row is not None  # SELECT COALESCE(MAX(id), 0) answers one row, always
    return int(row["id"])


async def follow_events(
    store: Store, *, from_id: int | None = None, source: str | None = None, idle: float = IDLE_SECONDS
) -> AsyncIterator[list[Event]]:
    """New events as they are stored, from any process (``watch.follow``); ``from_id`` as in
    ``watch.follow_todos``."""
    after_id = from_id - 1 if from_id is not None else await last_event_id(store)

    async def read(after: int) -> list[Event]:
        return await list_events(store, source=source, after_id=after, limit=FOLLOW_BATCH)

    async with aclosing(follow(store, read, after_id=after_id, idle=idle)) as batches:
        async for batch in batches:
            yield batch


async def recent_events(store: Store, *, source: str | None = None, type: str | None = None, limit: int = 50) -> list[Event]:
    """The newest ``limit`` events, oldest of them first."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidArgument(f"limit must be between 1 and {MAX_LIST_LIMIT}, got {limit!r}")
    params = {"source": source, "type": type, "limit": limit}
    rows = await store.read_all(Q.recent_events, params)
    return [Event.from_row(r) for r in reversed(rows)]
