"""The store: the interface the verbs depend on, with its contract.

``Store`` and ``Transaction`` are Protocols: what a verb may ask of a
database. ``SQLiteStore`` (sqlite/, with its group commit for writes)
implements them on one SQLite file, ``PostgresStore`` (postgres/) on a
PostgreSQL database; ``opener.open_store`` picks one by what it is given (a
``postgresql://`` or ``postgres://`` URL, else a file path). Verbs and edges
annotate with these names, so they depend on the interface, never on a
backend; nothing here imports a backend or a database driver.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..clock import Clock

if TYPE_CHECKING:
    from ..tally import Tally

T = TypeVar("T")
Params = Mapping[str, Any] | Sequence[Any]


@dataclass(frozen=True)
class FileState:
    """What a database file is, read without changing it (``opener.inspect_store``; `doctor` reports it).

    ``database`` is False for a file the backend cannot read as a database
    at all (``error`` says why); then nothing else is known. ``ours`` holds
    for our own files and for a new, empty one (``empty``); ``version`` is
    its schema version, ``current`` the one this code writes. ``problems``
    are what the integrity check found (none: it is sound).
    """

    database: bool
    current: int
    version: int = 0
    ours: bool = False
    empty: bool = False
    journal_mode: str = ""
    problems: tuple[str, ...] = ()
    error: str | None = None


class Row(Protocol):
    """A row a read answers: its columns by name (``row["id"]``) or by position."""

    def __getitem__(self, key: str | int, /) -> Any: ...

    def keys(self) -> list[str]: ...


class NeedsTransaction(Exception):
    """A body running statement by statement must change rows more than once:
    the store runs it again, in one transaction (``needs_transaction``)."""


def needs_transaction(tx: Transaction) -> None:
    """Called before the first change of a body that will change rows more than
    once: a body of ``write(…, single=True)`` running statement by statement
    stops here and runs again, in one transaction."""
    if not tx.in_transaction:
        raise NeedsTransaction()


class Transaction(Protocol):
    """What a write's body (or a peek's) is handed: statements by name (store/queries.py's Q).

    A statement the schema refuses (a unique index, a CHECK) raises
    ``Conflict`` at once. ``memo`` is the verbs' own for one transaction (see
    ``Store``); ``cache`` is the store's, shared by its transactions, for what
    may be a moment old (settings).
    """

    memo: dict[Any, Any]
    cache: dict[Any, Any]
    # False while a write's body runs statement by statement (``write(body,
    # single=True)`` on PostgreSQL): see ``needs_transaction``.
    in_transaction: bool

    def one(self, sql: str, params: Params = ()) -> Row | None:
        """The first row of the statement (None: no row); the statement is finished."""
        ...

    def all(self, sql: str, params: Params = ()) -> list[Row]:
        """Every row of the statement."""
        ...

    def run(self, sql: str, params: Params = ()) -> int:
        """Execute; the number of rows changed."""
        ...

    def many(self, sql: str, params: Sequence[Params]) -> int:
        """Execute once per parameter set; the number of rows changed."""
        ...

    def savepoint(self) -> AbstractContextManager[None]:
        """``with tx.savepoint(): …``: a part of the body that, when it raises,
        is undone alone (its rows and what it put in ``memo``) before the error
        goes on; the rest of the transaction stands. What a batch runs each
        item in, so that a refused item changes nothing and the others commit.
        """
        ...


class Store(Protocol):
    """What the verbs ask of a database. SQLite (``SQLiteStore``) and PostgreSQL
    (``PostgresStore``) implement it, and the verbs do not know which they hold.

    The contract:

    - **Writes.** ``write(body)`` runs ``body`` in one transaction (SQLite:
      ``BEGIN IMMEDIATE`` … ``COMMIT``; ROLLBACK if it raises) and answers
      only once that transaction is committed and durable: store, then ack.
      (PostgreSQL: one transaction per call on a pooled connection; the
      server takes concurrent writers, so there is no group commit.)
      Writes of one process may share a transaction (group commit), each
      isolated so that one that raises is rolled back alone, the others
      commit, and each caller gets its own result or error. A body may
      therefore run more than once; it reads and writes only through its
      transaction, and keeps what it must remember within that transaction
      in ``tx.memo`` (undone with the body's rows when the body is rolled
      back). A cancelled caller's write still finishes, committed or not.
    - **Reads.** ``read_one`` and ``read_all`` run one statement in
      autocommit and see every commit answered before they were called (this
      process's and others'). Several reads are several snapshots. They never
      wait behind a write's commit. ``peek`` is a point read (a few rows by
      index) for hot paths, answered on the caller's own thread.
      ``snapshot(body)`` runs a body that only reads in one transaction that
      sees one snapshot of every table (what a copy needs).
    - **Changes.** ``data_version()`` is a value that changes whenever
      anything that changed rows was committed, by any process (PostgreSQL:
      by any host, heard through LISTEN/NOTIFY).
    - **Errors.** What the database did leaves a store only as the project's
      errors (core/errors.py: Busy, Unavailable, StoreUnusable, a refused
      constraint as Conflict), never as a driver's; only a statement the
      database cannot run at all (bad SQL, a bug) is raised as it is. An
      error a body raises reaches its caller as it was (one a future cannot
      carry, as a RuntimeError naming it). After ``close()`` every call
      raises RuntimeError.
    """

    # SQLite: the database file. PostgreSQL: a local file name, never the
    # database, beside which the files of a database (the dashboard token) go.
    path: Path
    # The database's name for messages and output (``shared.describe``): the file's
    # path, or the URL with its password hidden; never the local file name.
    where: str
    clock: Clock
    rng: random.Random
    # What verbs may keep between transactions (settings, briefly); see Transaction.cache.
    cache: dict[Any, Any]
    # This process's counters (deliveries, claim and commit latencies): core/tally.py.
    tally: Tally

    async def write(self, body: Callable[[Transaction], T], *, single: bool = False) -> T:
        """Run ``body`` in one transaction; answer after its commit (see above).

        ``single``: the body changes rows with one statement at most, and what
        it reads needs no lock held to that change (a claim, a complete). A
        server database may then run each statement as its own transaction:
        no BEGIN and COMMIT round trips. A body that finds it must change more
        calls ``needs_transaction(tx)`` before its first change, and runs
        again in a transaction.
        SQLite runs every body in a transaction (it costs nothing there).
        """
        ...

    async def snapshot(self, body: Callable[[Transaction], T]) -> T:
        """Run ``body`` once, in one transaction that reads one snapshot of the whole
        database and writes nothing: what `db copy` reads its source in.

        SQLite: a write's ``BEGIN IMMEDIATE`` (the file's other writers wait,
        up to their busy timeout, until it ends). PostgreSQL: ``BEGIN
        ISOLATION LEVEL REPEATABLE READ READ ONLY`` on a pooled read-only
        connection; other writers go on, unseen by the body, and a statement
        that would write is refused as Unavailable.
        """
        ...

    async def read_one(self, sql: str, params: Params = ()) -> Row | None:
        """The first row of one statement run on its own (None: no row)."""
        ...

    async def read_all(self, sql: str, params: Params = ()) -> list[Row]:
        """Every row of one statement run on its own."""
        ...

    async def peek(self, body: Callable[[Transaction], T]) -> T:
        """A point read on the caller's own thread: ``body`` looks up a few rows by index."""
        ...

    async def data_version(self) -> tuple[int, int]:
        """A value that changes whenever anything commits a change; cheap enough to poll."""
        ...

    async def probe_writable(self, timeout: float = 2.0) -> None:
        """Raise, within ``timeout`` seconds, unless a write could commit now."""
        ...

    async def close(self) -> None:
        """Refuse new calls, let the writes already waiting commit, then close."""
        ...

    async def __aenter__(self) -> Store: ...

    async def __aexit__(self, *exc: object) -> None: ...
