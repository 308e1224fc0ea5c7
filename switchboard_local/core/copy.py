"""Copying one store into another, empty one: `switchboard-local db copy --to TARGET`.

What moves is the data: sources, rules, agents, the settings of the data
(not a machine's: settings.PER_INSTALL), queues' settings (a pause), events
with their bodies, todos in every state (a claimed one with its lease: its
holder's token completes it in the target), the links from events to their
todos, the attempts history and the delivery keys. Ids are kept, and the
target's id sequences move past the source's last ids (pruned ids are never
given again). Not copied: the ingest leadership rows (each process on the
target takes its own).

Consistency. The source is read inside one of its transactions
(``Store.snapshot``), which sees one snapshot of the whole database: on
SQLite that is ``BEGIN IMMEDIATE``, and the source's other writers wait (up
to their busy timeout) until the copy ends; on PostgreSQL it is ``REPEATABLE
READ READ ONLY``, and its writers go on, their changes after the snapshot
not copied (every todo copied has its event and links, the last ids are the
snapshot's). Either way, what is copied is the source as one moment left it.
The target is written in one transaction: a copy that fails, or is refused,
leaves it as it was.

Memory. Rows go from the source to the target a page at a time, in key
order; a page of events or todos is cut where its bodies pass
PAGE_BYTES, and at most two pages wait between the two sides.

The two transactions are both bodies (the Store interface runs a body, a
plain function, inside a transaction), so they run on two threads: the
source's in its store's way on the caller's loop, the target's on a thread
and loop of its own, handed pages through a bounded queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from .errors import Conflict, InvalidArgument
from .settings import PER_INSTALL, SETTINGS
from .store.interface import Row, Store, Transaction
from .store.opener import open_store
from .store.queries import Q
from .store.shared import describe, expanded, is_url

PAGE_ROWS = 500  # rows per page read from the source
PAGE_BYTES = 16 * 1024 * 1024  # a page of events or todos stops at this many bytes of bodies (one row at least)
QUEUED_PAGES = 2  # pages waiting between the source's transaction and the target's
POLL_SECONDS = 0.1  # how often a side waiting on the queue looks whether the other gave up


@dataclass(frozen=True)
class Table:
    """A table the copy moves: its name, its key's columns, and the key below every row."""

    name: str
    key: tuple[str, ...]
    start: tuple[Any, ...]
    sized: bool = False  # its pages are cut by size (copy_sizes_NAME), rows may be large


# In the order they are written: a row's references are in the target before it.
TABLES: tuple[Table, ...] = (
    Table("sources", ("name",), ("",)),
    Table("rules", ("id",), (0,)),
    Table("agents", ("name",), ("",)),
    Table("settings", ("name",), ("",)),
    Table("queues", ("name",), ("",)),
    Table("events", ("id",), (0,), sized=True),
    Table("todos", ("id",), (0,), sized=True),
    Table("event_todos", ("event_id", "position"), (0, 0)),
    Table("todo_deps", ("todo_id", "after_id"), (0, 0)),
    Table("attempts", ("todo_id", "seq"), (0, 0)),
    Table("delivery_keys", ("source", "key"), ("", "")),
    Table("queue_claims", ("queue", "claimed_at", "lease_token_hash"), ("", 0, "")),  # a rate limit's last minute
)


# What copy_target_holds counts, as a refusal names it.
_NOUNS = {
    "sources": "source", "rules": "rule", "agents": "agent", "settings": "setting", "queues": "queue setting",
    "events": "event", "todos": "todo", "event_todos": "event-to-todo link", "attempts": "attempt",
    "todo_deps": "dependency",
    "delivery_keys": "delivery key", "queue_claims": "logged claim of a rate-limited queue",
    "ingest_leader": "ingest leader (a process uses it)",
}  # fmt: skip


@dataclass(frozen=True)
class Copied:
    """What a copy moved: rows per table, the settings it left behind, the sequences it set."""

    source: str
    target: str
    counts: dict[str, int]
    left_behind: tuple[str, ...] = ()
    last_ids: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def to_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "target": self.target,
            "copied": dict(self.counts),
            "total": self.total,
            "settings_left_behind": list(self.left_behind),
            "last_ids": dict(self.last_ids),
        }


class _End:
    """The source's last message: its last ids and the settings it left behind."""

    def __init__(self, last_ids: dict[str, int], left_behind: tuple[str, ...]) -> None:
        self.last_ids = last_ids
        self.left_behind = left_behind


class _SourceFailed(Exception):
    """Raised in the target's body when the source's side stopped: the target's transaction rolls back."""


class _Pipe:
    """Pages from the source's transaction to the target's, at most QUEUED_PAGES waiting.

    Either side may give up (an error, a refusal): ``closed`` is then set and
    the other side stops at its next wait rather than waiting forever.
    """

    def __init__(self) -> None:
        self.pages: queue.Queue[tuple[str, list[dict[str, Any]]] | _End] = queue.Queue(QUEUED_PAGES)
        self.closed = threading.Event()

    def put(self, item: tuple[str, list[dict[str, Any]]] | _End) -> None:
        while not self.closed.is_set():
            try:
                self.pages.put(item, timeout=POLL_SECONDS)
                return
            except queue.Full:
                continue
        raise _SourceFailed("the target's side stopped")

    def get(self) -> tuple[str, list[dict[str, Any]]] | _End:
        while True:
            try:
                return self.pages.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if self.closed.is_set():
                    raise _SourceFailed("the source's side stopped before the end") from None


def _same_file(source: Store, target: str | os.PathLike[str]) -> bool:
    """Whether a SQLite target is the source's file (checked before either transaction begins)."""
    return not is_url(target) and _same_path(source.path, expanded(target))


def _same_path(one: os.PathLike[str], other: os.PathLike[str]) -> bool:
    """Whether two stores' paths are one (PostgreSQL's: one per user, host, port and database)."""
    try:
        return os.path.samefile(one, other)
    except OSError:  # one of them does not exist (yet)
        return os.path.abspath(one) == os.path.abspath(other)


def _name(store: Store) -> str:
    """The source as it may be printed: its URL without the password, or its file."""
    url = getattr(store, "url", None)
    return describe(url) if isinstance(url, str) else str(store.path)


async def copy(
    source: Store,
    target: str | os.PathLike[str],
    *,
    open_target: Callable[[str | os.PathLike[str]], Any] | None = None,
    page_rows: int = PAGE_ROWS,
    page_bytes: int = PAGE_BYTES,
) -> Copied:
    """Copy ``source`` into the empty store at ``target`` (a path or a URL); see the module's text.

    ``open_target`` opens the target (default: ``open_store``); it runs on the
    target's own thread and event loop. Raises ``Conflict`` when the target
    holds any data (naming what), ``InvalidArgument`` when it is the source.
    """
    if page_rows < 1 or page_bytes < 1:
        raise InvalidArgument("a page holds one row at least")
    if _same_file(source, target):
        raise InvalidArgument(f"the target {describe(target)!r} is the source itself: copy into another, empty database")
    opener = open_target or open_store
    pipe = _Pipe()
    counts = {t.name: 0 for t in TABLES}
    done: Future[dict[str, Any]] = Future()

    started: list[bool] = []  # the target's body runs once: its pages cannot be read again

    async def fill() -> dict[str, Any]:
        async with await opener(target) as store:
            if _same_path(store.path, source.path):  # e.g. two URLs of one PostgreSQL database
                raise InvalidArgument(f"the target {describe(target)!r} is the source itself: copy into another, empty database")
            return await store.write(lambda tx: _fill(tx, pipe, counts, describe(target), started))  # type: ignore[no-any-return]

    def target_side() -> None:
        try:
            done.set_result(asyncio.run(fill()))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller whole
            done.set_exception(exc)
        finally:
            pipe.closed.set()

    thread = threading.Thread(target=target_side, name="switchboard-copy-target", daemon=True)
    thread.start()
    try:
        await source.snapshot(lambda tx: _drain(tx, pipe, page_rows, page_bytes))
    except _SourceFailed:
        pass  # the target's side stopped first: its error is the one told below
    except BaseException:
        pipe.closed.set()  # the target's body stops at its next wait: its transaction rolls back
        with contextlib.suppress(BaseException):
            await asyncio.wrap_future(done)
        raise
    try:
        filled = await asyncio.wrap_future(done)
    finally:
        await asyncio.to_thread(thread.join)
    return Copied(_name(source), describe(target), counts, filled["left_behind"], filled["last_ids"])


# ---------------------------------------------------------------- the source's side


def _drain(tx: Transaction, pipe: _Pipe, page_rows: int, page_bytes: int) -> None:
    """The source's transaction: every table, a page at a time, into the pipe; then its last ids."""
    row = tx.one(Q.copy_last_ids)
    assert row is not None
    last_ids = {name: int(row[name]) for name in ("events", "todos", "rules")}
    left_behind: list[str] = []
    for table in TABLES:
        for page in _pages(tx, table, page_rows, page_bytes):
            if table.name == "settings":
                left_behind += [r["name"] for r in page if r["name"] in PER_INSTALL]
                page = [r for r in page if _of_the_data(r["name"])]
            if page:
                pipe.put((table.name, page))
    pipe.put(_End(last_ids, tuple(left_behind)))


def _of_the_data(setting: str) -> bool:
    """A setting an operator set for the data; not one of a machine's, nor an internal row (a cache's token)."""
    return setting in SETTINGS and setting not in PER_INSTALL


def _pages(tx: Transaction, table: Table, page_rows: int, page_bytes: int) -> Iterator[list[dict[str, Any]]]:
    after = table.start
    read = getattr(Q, f"copy_read_{table.name}")
    while True:
        key = {f"after_{column}": value for column, value in zip(table.key, after)}
        if table.sized:
            through = _cut(tx.all(getattr(Q, f"copy_sizes_{table.name}"), {**key, "limit": page_rows}), page_bytes)
            if through is None:
                return
            rows = tx.all(read, {**key, "through_id": through})
        else:
            rows = tx.all(read, {**key, "limit": page_rows})
        if not rows:
            return
        page = [_as_dict(r) for r in rows]
        yield page
        if not table.sized and len(rows) < page_rows:
            return
        after = tuple(page[-1][column] for column in table.key)


def _cut(sizes: Sequence[Row], page_bytes: int) -> int | None:
    """The last id of a page: as many rows as fit in ``page_bytes``, one at least (None: no row left)."""
    through, total = None, 0
    for row in sizes:
        total += int(row["size"] or 0)
        if through is not None and total > page_bytes:
            break
        through = int(row["id"])
    return through


def _as_dict(row: Row) -> dict[str, Any]:
    return {name: row[name] for name in row.keys()}


# ---------------------------------------------------------------- the target's side


def _fill(tx: Transaction, pipe: _Pipe, counts: dict[str, int], target: str, started: list[bool]) -> dict[str, Any]:
    """The target's transaction: refuse unless empty, write every page, move the sequences."""
    if started:
        raise RuntimeError("the copy's transaction was run a second time")  # its pages are gone
    started.append(True)
    held = tx.one(Q.copy_target_holds)
    assert held is not None
    holding = [f"{held[name]} {_NOUNS[name]}{'s' if held[name] != 1 else ''}" for name in held.keys() if held[name]]
    if holding:
        raise Conflict(f"the target {target!r} is not empty: it holds {', '.join(holding)}; db copy writes only into an empty database")
    inserts = {t.name: getattr(Q, f"copy_insert_{t.name}") for t in TABLES}
    while True:
        item = pipe.get()
        if isinstance(item, _End):
            break
        name, page = item
        tx.many(inserts[name], page)
        counts[name] += len(page)
    tx.run(Q.copy_seed_sequences)
    tx.run(Q.copy_move_sequences, {"events": item.last_ids["events"], "todos": item.last_ids["todos"]})
    return {"left_behind": item.left_behind, "last_ids": item.last_ids}
