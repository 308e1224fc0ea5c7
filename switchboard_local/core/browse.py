"""What an operator browses: the dashboard's read API, as pure reads.

Every function here reads through ``store.read_all`` / ``read_one`` (the
store's read-only connections, never the write lock) and changes nothing:
unlike ``todos.get`` and ``todos.list_todos``, none settles lapsed leases
first, so a page open on the file never slows ingestion. A claimed todo whose
lease lapsed therefore shows as claimed until the next claim recovers it
(the queue counts already count it as what it will become: ``todos.stats``).

Lists are newest first and cursor-paged: a page answers the cursor of the
next one (the last id it holds), or None when it is the last.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from .clock import rfc3339
from .errors import InvalidArgument, NotFound
from .events import Event
from .sources import FAMILIES as SOURCE_FAMILIES
from .sources import Source, list_sources
from .store.interface import Store
from .store.queries import Q
from .text import digits
from .todo_model import INT64_MAX, MAX_LIST_LIMIT, STATES, Attempt, QueueStats, Todo, require_int
from .todos import stats
from .todos.dependencies import with_dependencies

HOUR_MS = 3_600_000
MINUTE_MS = 60_000
SPARK_MINUTES = 60
DEFAULT_LIMIT = 50


@dataclass(frozen=True)
class Page:
    """One page of a list, and the cursor of the next (None: this was the last)."""

    items: list[Any]
    next_cursor: int | None


def _page(items: list[Any], limit: int) -> Page:
    # A full page may have more behind it; the next page starts below its last id.
    return Page(items, items[-1].id if len(items) == limit else None)


def parse_cursor(value: str | None) -> int | None:
    """A cursor as a client sends it back (the id a page answered), or None."""
    if value is None or value == "":
        return None
    cursor = digits(value)
    if cursor is None or cursor > INT64_MAX:
        raise InvalidArgument(f"cursor must be the next_cursor a page answered, got {value[:40]!r}")
    return cursor


def _limit(limit: int) -> int:
    require_int("limit", limit, low=1, high=MAX_LIST_LIMIT)
    return limit


# ---------------------------------------------------------------- queues


@dataclass(frozen=True)
class QueueView:
    """A queue as the dashboard shows it: its counts, done in the last hour, and
    todos created and finished per minute over the last hour (oldest minute first)."""

    stats: QueueStats
    done_last_hour: int
    created_per_minute: tuple[int, ...]
    finished_per_minute: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.stats.to_dict(),
            "done_last_hour": self.done_last_hour,
            "created_per_minute": list(self.created_per_minute),
            "finished_per_minute": list(self.finished_per_minute),
        }


async def queues(store: Store) -> list[QueueView]:
    """Every queue (``todos.stats``), with its last hour: done, and per minute created and finished."""
    now = store.clock.now_ms()
    # The hour is SPARK_MINUTES whole minutes ending with the current (partial) one.
    since = (now // MINUTE_MS - (SPARK_MINUTES - 1)) * MINUTE_MS
    found = await stats(store)
    done = {r["queue"]: r["done"] for r in await store.read_all(Q.done_since, {"since": now - HOUR_MS})}
    created: dict[str, list[int]] = {}
    finished: dict[str, list[int]] = {}
    for r in await store.read_all(Q.queue_minutes, {"since": since}):
        minute = r["minute"]
        if 0 <= minute < SPARK_MINUTES:
            created.setdefault(r["queue"], [0] * SPARK_MINUTES)[minute] += r["created"]
            finished.setdefault(r["queue"], [0] * SPARK_MINUTES)[minute] += r["finished"]
    zeros = (0,) * SPARK_MINUTES
    return [
        QueueView(
            s,
            done.get(s.queue, 0),
            tuple(created.get(s.queue, zeros)),
            tuple(finished.get(s.queue, zeros)),
        )
        for s in found
    ]


# ---------------------------------------------------------------- todos


def _like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


async def todos(
    store: Store,
    *,
    queue: str | None = None,
    state: str | None = None,
    kind: str | None = None,
    assignee: str | None = None,
    text: str | None = None,
    cursor: int | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Page:
    """Todos newest first, each filter optional; ``text`` is found anywhere in the title (any case, ASCII)."""
    if state is not None and state not in STATES:
        raise InvalidArgument(f"state must be one of {', '.join(STATES)}, got {state!r}")
    params = {
        "queue": queue,
        "state": state,
        "kind": kind,
        "assignee": assignee,
        "title_like": _like(text) if text else None,
        "before_id": cursor,
        "limit": _limit(limit),
    }
    rows = await store.read_all(Q.browse_todos if queue is None else Q.browse_todos_in_queue, params)
    return _page([Todo.from_row(r) for r in rows], limit)


async def todo(store: Store, todo_id: int) -> tuple[Todo, Event | None]:
    """One todo with its attempt history, and the event that made it (None: none, or pruned)."""
    row = await store.read_one(Q.get_todo, {"id": todo_id})
    if row is None:
        raise NotFound(f"todo {todo_id} does not exist")
    attempts = tuple(
        Attempt(r["attempt"], r["owner"], r["claimed_at"], r["ended_at"], r["outcome"], r["error"])
        for r in await store.read_all(Q.attempts_of_todo, {"todo_id": todo_id})
    )
    plain = replace(Todo.from_row(row), attempts=attempts)
    found = await store.peek(lambda tx: with_dependencies(tx, plain)) if plain.waits_for else plain
    event = None
    if found.event_id is not None:
        event_row = await store.read_one(Q.get_event, {"id": found.event_id})
        event = None if event_row is None else Event.from_row(event_row)
    return found, event


# ---------------------------------------------------------------- events


async def events(
    store: Store,
    *,
    source: str | None = None,
    type: str | None = None,
    cursor: int | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Page:
    """Events newest first (audit events included: their source is ``operator``)."""
    params = {"source": source, "type": type, "before_id": cursor, "limit": _limit(limit)}
    rows = await store.read_all(Q.browse_events, params)
    return _page([Event.from_row(r) for r in rows], limit)


async def event(store: Store, event_id: int) -> tuple[Event, list[Todo]]:
    """One event and the todos it produced (its first delivery's and its replays')."""
    row = await store.read_one(Q.get_event, {"id": event_id})
    if row is None:
        raise NotFound(f"event {event_id} does not exist")
    made = [Todo.from_row(r) for r in await store.read_all(Q.todos_of_event, {"event_id": event_id})]
    return Event.from_row(row), made


def body_views(body: bytes, content_type: str | None) -> dict[str, Any]:
    """An event body as the dashboard may show it: ``body_view`` says which
    (json: ``body_json`` holds it parsed; text: ``body_text``; base64 only)."""
    import base64

    out: dict[str, Any] = {"body_base64": base64.b64encode(body).decode("ascii"), "body_json": None, "body_text": None}
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return {**out, "body_view": "base64"}
    try:
        out["body_json"] = json.loads(text)
        view = "json"
    except ValueError:
        view = "text"
    return {**out, "body_text": text, "body_view": view}


# ---------------------------------------------------------------- sources and dead letters


@dataclass(frozen=True)
class SourceView:
    """A source, the events kept from it and the last one's arrival (never a secret)."""

    source: Source
    events: int
    last_received_at: int | None

    def to_dict(self) -> dict[str, Any]:
        return {**self.source.to_dict(), "events": self.events, "last_received_at": rfc3339(self.last_received_at)}


async def sources(store: Store, *, family: str | None = None) -> list[SourceView]:
    """Every source (``family``: webhook, queue or schedule) with its events kept and its last delivery."""
    if family is not None and family not in SOURCE_FAMILIES:
        raise InvalidArgument(f"family must be one of {', '.join(SOURCE_FAMILIES)}, got {family!r}")
    found = await list_sources(store, family=family)
    seen = {r["source"]: (r["events"], r["last_received_at"]) for r in await store.read_all(Q.deliveries_by_source)}
    return [SourceView(s, *seen.get(s.name, (0, None))) for s in found]


@dataclass(frozen=True)
class DeadGroup:
    """Dead letters of one queue that failed with the same last error."""

    queue: str
    last_error: str | None
    count: int
    first_id: int
    last_id: int
    last_failed_at: int

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "last_failed_at": rfc3339(self.last_failed_at)}


async def dead_groups(store: Store) -> list[DeadGroup]:
    rows = await store.read_all(Q.dead_groups)
    return [
        DeadGroup(r["queue"], r["last_error"], r["count"], r["first_id"], r["last_id"], r["last_failed_at"]) for r in rows
    ]


# ---------------------------------------------------------------- what changed


async def fingerprint(store: Store) -> dict[str, Any]:
    """Values that move when a topic's rows change: the live stream compares two."""
    row = await store.read_one(Q.browse_fingerprint)
    assert row is not None
    return {key: row[key] for key in row.keys()}


# Which topics a change of each fingerprint value touches.
TOPICS_OF = {
    "last_event_id": ("events", "sources"),
    "last_todo_id": ("todos", "queues"),
    "todos_updated_at": ("todos", "queues"),
    "dead": ("dead", "queues"),
    "sources_updated_at": ("sources", "adapters"),
    "queues_setting": ("queues",),
}
TOPICS = ("queues", "todos", "events", "dead", "sources", "adapters")


def changed_topics(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    return {topic for key, topics in TOPICS_OF.items() if before.get(key) != after.get(key) for topic in topics}
