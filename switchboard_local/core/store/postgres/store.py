"""The store on a PostgreSQL database: its URL, how it is opened and migrated,
its transactions and reads, its change feed, and how the driver's errors
become the core's.

``PostgresStore`` implements ``store.Store`` with psycopg 3: a pool of
*synchronous* connections (pool.py, which fails at once while the
server cannot be reached), driven from the event loop through a thread pool
of the same size. Why sync connections and
threads rather than psycopg's async API: the Transaction protocol is
synchronous (a verb's body is a plain callable that runs its statements one
after another, and may run more than once), so a body has to run on a thread
that can block on each statement anyway; one hop per transaction to a thread
holding a pooled connection is what an async connection would cost per
statement. And why no group commit: PostgreSQL takes concurrent writers (row
locks, ``FOR UPDATE SKIP LOCKED``), so each ``write`` is simply one
transaction on its own pooled connection, committed (and flushed, with
``synchronous_commit=on``) before it answers; the server groups the WAL
flushes of concurrent commits itself.

Transactions run at READ COMMITTED (what the claim's ``SKIP LOCKED`` is made
for), but for ``snapshot``'s, REPEATABLE READ READ ONLY (one view of every
table, for a copy); a body that meets a serialization failure or a deadlock is rolled back
and run again. A statement that fails aborts a PostgreSQL transaction, where
SQLite lets the transaction go on: a body that catches a refusal (``Conflict``)
and carries on is therefore run again with every statement inside a savepoint
of its own, so that its answer is what it would have been on SQLite.

Statements are the named ones of queries.postgres.sql: ``tx.one(Q.claim_by_id)``
runs the PostgreSQL text under the same name, its ``:name`` parameters turned
into psycopg's ``%(name)s`` once, when first used; SQL text that is no named
statement is refused (ValueError).

Connections: writes on a pool of WRITERS, reads (``read_one``/``read_all``) on
a pool of READERS that are read-only (a statement that would write is refused
as Unavailable, as on SQLite), ``peek`` on one read-only connection the event
loop uses itself (a point read costs less than a thread hop), and
``data_version`` on one that LISTENs. ``synchronous="NORMAL"`` (SQLite's name)
is ``synchronous_commit=off``: a commit may be lost by a server crash.
``$SWITCHBOARD_BUSY_TIMEOUT`` is the ``lock_timeout``. A URL's password never
leaves in a message: the URL is read by store/url.py and libpq is handed its
keywords (``Target``), never the URL, which libpq quotes in its errors; the
URL is shown with its password hidden (``where``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg
import psycopg.errors as pgerrors
from psycopg import pq
from psycopg.conninfo import make_conninfo

from ...clock import Clock, SystemClock
from ...errors import InvalidArgument, StoreFault, Unavailable
from ...tally import Tally
from .. import url as pg_url
from ..interface import FileState, NeedsTransaction, Params, Transaction, needs_transaction
from ..shared import APP_NAME, SCHEMA_VERSION, busy_timeout_ms, is_url, local_path
from .errors import RETRY, driver_errors, translate
from .migrations import identity, migrate, refuse
from .pool import Pool
from .statements import PgRow, Statements, has_rows, row_factory

T = TypeVar("T")

CONNECT_SECONDS = 10  # connect_timeout of every connection
POOL_WAIT_SECONDS = 10  # how long a call waits for a pooled connection while all are in use
WRITERS = 8  # pooled connections for writes (each write holds one for its transaction)
READERS = 4  # pooled read-only connections for read_one and read_all
PEEK_TIMEOUT_MS = 2_000  # statement_timeout of peek's connection: the event loop waits for it
RETRIES = 8  # reruns of a body after a serialization failure or a deadlock
LISTEN_CHANNEL = "switchboard"
SYNCHRONOUS_COMMIT = {"FULL": "on", "NORMAL": "off"}  # SQLite's names, PostgreSQL's synchronous_commit


# ---------------------------------------------------------------- transactions


class _Rerun(Exception):
    """A statement was refused, the body carried on, and PostgreSQL had aborted the
    transaction: run the body again with a savepoint around each statement."""


_CHANGES = ("INSERT", "UPDATE", "DELETE", "MERGE")


class PgTransaction:
    """The statements a body runs on one connection (store.Transaction, on PostgreSQL).

    ``careful``: each statement inside a savepoint of its own, so that one
    refused leaves the transaction usable (what a body that catches
    ``Conflict`` and carries on needs; see ``PostgresStore.write``).
    """

    def __init__(
        self,
        conn: psycopg.Connection[PgRow],
        statements: Statements,
        cache: dict[Any, Any],
        *,
        careful: bool = False,
        in_transaction: bool = True,
    ) -> None:
        self._conn = conn
        self._statements = statements
        self._careful = careful
        self.in_transaction = in_transaction  # False: each statement is its own transaction (write's single)
        self.memo: dict[Any, Any] = {}
        self.cache = cache
        self.changed = False  # a statement changed rows (only such commits are news to data_version)
        self.refused = False  # a statement was refused outside a savepoint: the transaction is aborted

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        """A part of the body that is undone alone when it raises (store.Transaction.savepoint)."""
        needs_transaction(self)  # a savepoint is a part of a transaction
        if self.refused and self._conn.info.transaction_status == pq.TransactionStatus.INERROR:
            raise _Rerun()  # a refusal the body caught left the transaction aborted
        memo = dict(self.memo)
        refused = self.refused
        try:
            with self._conn.transaction():  # nested: SAVEPOINT … RELEASE, ROLLBACK TO on an error
                yield
        except BaseException:
            self.memo = memo  # what the part noted is undone with its rows
            self.refused = refused
            raise

    def _execute(self, sql: str, params: Params, fetch: Callable[[psycopg.Cursor[PgRow]], T]) -> T:
        name, text = self._statements[sql]
        return self._guarded(lambda: self._run(text, params, fetch))

    def _guarded(self, run: Callable[[], T]) -> T:
        """Run one statement: in a savepoint of its own when careful; a refusal as Conflict
        (InvalidArgument for a value PostgreSQL cannot hold), noting when it left the
        transaction aborted (the body then runs again, careful)."""
        try:
            if self._careful:
                with self._conn.transaction():
                    return run()
            return run()
        except pgerrors.InFailedSqlTransaction:
            if self.refused:
                raise _Rerun() from None
            raise
        except (psycopg.IntegrityError, psycopg.DataError) as exc:
            # A refusal of this statement's values (a unique key; a NUL that
            # PostgreSQL cannot hold): the body may catch it and carry on.
            if not self._careful and self._conn.info.transaction_status == pq.TransactionStatus.INERROR:
                self.refused = True
            refusal = translate(exc, "the database")  # neither message names where
            assert refusal is not None  # both kinds translate
            raise refusal from exc

    def _run(self, text: str, params: Params, fetch: Callable[[psycopg.Cursor[PgRow]], T]) -> T:
        with self._conn.cursor() as cursor:
            cursor.execute(text, _params(params))  # type: ignore[arg-type]
            self._note_changes(cursor)
            return fetch(cursor)

    def _note_changes(self, cursor: psycopg.Cursor[PgRow]) -> None:
        status = cursor.statusmessage or ""
        if status.startswith(_CHANGES) and not status.endswith(" 0"):
            self.changed = True

    def one(self, sql: str, params: Params = ()) -> PgRow | None:
        return self._execute(sql, params, lambda cursor: cursor.fetchone() if has_rows(cursor) else None)

    def all(self, sql: str, params: Params = ()) -> list[PgRow]:
        return self._execute(sql, params, lambda cursor: cursor.fetchall() if has_rows(cursor) else [])

    def run(self, sql: str, params: Params = ()) -> int:
        return self._execute(sql, params, lambda cursor: max(cursor.rowcount, 0))

    def many(self, sql: str, params: Sequence[Params]) -> int:
        name, text = self._statements[sql]
        sets = [_params(p) for p in params]
        if not sets:
            return 0
        return self._guarded(lambda: self._run_many(text, sets))

    def _run_many(self, text: str, sets: list[Any]) -> int:
        with self._conn.cursor() as cursor:
            cursor.executemany(text, sets)
            changed = max(cursor.rowcount, 0)
            if changed:
                self.changed = True
            return changed


def _params(params: Params) -> Any:
    if isinstance(params, Mapping):
        return params
    return tuple(params)


class Target:
    """Where a store connects: libpq's keywords read from its URL (store/url.py), never the URL itself,
    which libpq would quote in its errors; ``where``, the URL as it may be shown."""

    def __init__(self, url: str) -> None:
        if not is_url(url):
            raise InvalidArgument("a PostgreSQL database is named by a postgresql:// URL")
        self.where = pg_url.redacted(url)
        known = frozenset(d.keyword.decode() for d in pq.Conninfo.get_defaults())
        try:
            params, given = pg_url.read(url, known)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{self.where}: {exc.message}") from None
        # What a driver's error must not show: the secrets, and every value the query gave.
        self.hidden = tuple({params.get("password", ""), *given.values()} - {""})
        self._keys = sorted(k for k in params if k not in pg_url.SECRET_PARAMS)
        try:
            self.conninfo = make_conninfo("", **params)
        except psycopg.ProgrammingError:
            raise self.refused() from None

    def refused(self) -> InvalidArgument:
        """libpq refused a value: its words would quote it (a password's tail, as like as not), so none is shown."""
        return InvalidArgument(f"{self.where}: libpq refused a value among the URL's parameters "
                               f"({', '.join(self._keys) or 'none'}; the values are not shown)")  # fmt: skip

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """``driver_errors`` for this target."""
        with driver_errors(self.where, self.hidden):
            yield


def _connect(target: Target, *, read_only: bool = False, **settings: str) -> psycopg.Connection[PgRow]:
    """A new connection, configured; only the core's errors leave."""
    with target.errors():
        try:
            conn = psycopg.connect(target.conninfo, autocommit=True, connect_timeout=CONNECT_SECONDS,
                                   row_factory=row_factory)  # fmt: skip
        except psycopg.ProgrammingError:  # a value libpq refuses, which it would quote
            raise target.refused() from None
        try:
            _configure(conn, read_only=read_only, **settings)
        except BaseException:
            conn.close()
            raise
    return conn


def _configure(conn: psycopg.Connection[Any], *, read_only: bool, **settings: str) -> None:
    """The session settings of every connection of a store (each a SET, in autocommit)."""
    wanted = {"TimeZone": "UTC", "application_name": APP_NAME, **settings}
    if read_only:
        wanted["default_transaction_read_only"] = "on"
    for name, value in wanted.items():
        conn.execute("SELECT set_config(%s, %s, false)", (name, value))


def inspect_url(url: str) -> FileState:
    """``opener.inspect_store`` for a database URL: its identity, read with nothing changed."""
    target = Target(url)
    current = SCHEMA_VERSION
    with target.errors():
        conn = _connect(target, read_only=True)
        try:
            ours, version, empty = identity(conn)
        finally:
            conn.close()
    return FileState(database=True, current=current, version=version, ours=ours, empty=empty, journal_mode="")


# ---------------------------------------------------------------- the store


class PostgresStore:
    """The store on a PostgreSQL database (see ``Store`` for the contract; the module for why threads).

    Writes: ``write(body)`` is one transaction on a pooled connection, in a
    thread; rerun after a serialization failure or a deadlock, and rerun
    with a savepoint per statement when the body carried on past a refused
    statement. Reads: autocommit statements on pooled read-only
    connections (each sees every commit before it); ``peek``: the same on a
    read-only connection the event loop uses itself (no thread hop). Changes: one connection
    of its own LISTENs on ``switchboard`` (the schema's triggers notify at
    each commit that changed rows, from any host), started at the first
    ``data_version()``. ``path`` is not the database: a local file name
    (``local_path``) beside which the files that go with a database (the
    dashboard token) are kept.
    """

    def __init__(
        self,
        url: str,
        target: Target,
        pool: Pool,
        readers: Pool,
        threads: ThreadPoolExecutor,
        clock: Clock,
        rng: random.Random,
        *,
        read_only: bool,
        settings: dict[str, str],
    ) -> None:
        self.url = url
        self.where = target.where
        self.path = local_path(url)
        self._target = target
        self.clock = clock
        self.rng = rng
        self.cache: dict[Any, Any] = {}
        self.tally = Tally()
        self.read_only = read_only
        self._pool = pool
        self._readers = readers
        self._threads = threads
        self._settings = settings
        self._statements = Statements()
        self._closed = False
        self._busy = 0  # calls in flight (close waits for them)
        self._idle: asyncio.Event | None = None
        self.commits = 0  # this store's commits that changed rows
        self._commits_lock = threading.Lock()
        self._listener: _Listener | None = None
        self._peek_conn: psycopg.Connection[PgRow] | None = None  # peek's, used on the event loop

    def __str__(self) -> str:
        return self.where

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        synchronous: str = "FULL",
        monotonic: Any = None,  # group commit's time budget: no group commit here
        read_only: bool = False,
    ) -> PostgresStore:
        if synchronous not in SYNCHRONOUS_COMMIT:
            raise InvalidArgument(f"synchronous must be one of {', '.join(SYNCHRONOUS_COMMIT)}")
        target = Target(url)  # refused here, naming what is wrong, unless the URL reads cleanly
        settings = {"lock_timeout": f"{busy_timeout_ms()}ms", "synchronous_commit": SYNCHRONOUS_COMMIT[synchronous]}
        where = target.where
        url = "postgresql://" + url.split("://", 1)[1]  # one form from here on

        def pool(size: int, *, read_only: bool) -> Pool:
            # Connections are made as calls need them (a one-shot command makes few).
            return Pool(lambda: _connect(target, read_only=read_only, **settings), size, wait=POOL_WAIT_SECONDS,
                        where=where)  # fmt: skip

        def prepare() -> tuple[Pool, Pool, psycopg.Connection[PgRow]]:
            conn = _connect(target, read_only=read_only, **settings)
            with target.errors():
                try:
                    if read_only:
                        ours, version, _ = identity(conn)
                        refuse(where, ours, version, SCHEMA_VERSION, read_only=True)
                    else:
                        migrate(conn, where)
                    # The connection that looked stays, as peek's (one connection fewer to make).
                    _configure(conn, read_only=True, statement_timeout=f"{PEEK_TIMEOUT_MS}ms")
                except BaseException:
                    conn.close()
                    raise
                # Reads run read-only: a statement that would write is refused there, as on SQLite.
                return pool(WRITERS, read_only=read_only), pool(READERS, read_only=True), conn

        writers, readers, peek_conn = await asyncio.to_thread(prepare)
        threads = ThreadPoolExecutor(max_workers=WRITERS + READERS, thread_name_prefix="switchboard-pg")
        store = cls(url, target, writers, readers, threads, clock or SystemClock(), rng or random.Random(),
                    read_only=read_only, settings=settings)  # fmt: skip
        store._peek_conn = peek_conn
        return store

    async def __aenter__(self) -> PostgresStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Refuse new calls, let the calls already running finish, then close every connection."""
        if self._closed:
            return
        self._closed = True
        while self._busy:
            assert self._idle is not None
            await self._idle.wait()
        if self._peek_conn is not None:
            self._peek_conn.close()
        listener, self._listener = self._listener, None
        if listener is not None:
            await asyncio.to_thread(listener.stop)
        await asyncio.to_thread(self._pool.close)
        await asyncio.to_thread(self._readers.close)
        self._threads.shutdown(wait=False)

    @property
    def _commits(self) -> int:
        return self.commits

    # ------------------------------------------------------------ running in the threads

    async def _in_thread(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on one of the store's threads; a cancelled caller leaves it to finish."""
        if self._closed:
            raise RuntimeError("the store is closed")
        if self._idle is None:
            self._idle = asyncio.Event()
        self._busy += 1
        self._idle.clear()
        future = asyncio.get_running_loop().run_in_executor(self._threads, fn)
        future.add_done_callback(self._done)
        return await asyncio.shield(future)

    def _done(self, _: object) -> None:
        self._busy -= 1
        if not self._busy and self._idle is not None:
            self._idle.set()

    async def write(self, body: Callable[[Transaction], T], *, single: bool = False) -> T:
        """Run ``body`` in one transaction on a pooled connection; answer after its COMMIT.

        ``single`` (store.Store.write): the body's statements run in autocommit,
        each its own transaction, until it asks for one (NeedsTransaction): then
        it runs again in one. A claim or a complete is then one round trip, not
        three (BEGIN, the statement, COMMIT)."""
        if self.read_only:
            if self._closed:
                raise RuntimeError("the store is closed")
            raise Unavailable(f"{self.where} was opened read-only; nothing can be written")
        return await self._in_thread(lambda: self._write(body, single))

    def _write(self, body: Callable[[Transaction], T], single: bool = False) -> T:
        careful = False
        attempt = 0
        with self._target.errors(), self._pool.connection() as conn:
            while True:
                started = time.perf_counter()
                tx = PgTransaction(conn, self._statements, self.cache, careful=careful, in_transaction=not single)
                try:
                    if single:
                        result = body(tx)  # autocommit: each statement commits as it runs
                    else:
                        with conn.transaction():
                            result = body(tx)
                            if conn.info.transaction_status == pq.TransactionStatus.INERROR:
                                raise _Rerun()  # a refusal the body caught: the transaction is void
                except NeedsTransaction:
                    if not single or tx.changed:  # a bug: only a body that has changed nothing may start over
                        raise RuntimeError("a body asked for a transaction after it changed rows, or inside one") from None
                    single = False  # what ran so far only read: run it again, in one transaction
                    continue
                except _Rerun:
                    if careful:  # cannot happen: every statement had a savepoint
                        raise RuntimeError("a statement left the transaction aborted inside a savepoint") from None
                    careful = True
                    continue
                except RETRY:
                    attempt += 1
                    if attempt > RETRIES:
                        raise
                    time.sleep(min(0.2, 0.002 * 2**attempt) * random.random())
                    continue
                if tx.changed:
                    with self._commits_lock:  # writes commit on several threads
                        self.commits += 1
                self.tally.committed(time.perf_counter() - started, 1)
                return result

    async def snapshot(self, body: Callable[[Transaction], T]) -> T:
        """``body`` once, in ``BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`` on a pooled
        read-only connection: every statement sees the snapshot its first one took, while
        other connections go on writing. Nothing here can fail to serialize (a read-only
        REPEATABLE READ transaction never does), so the body is never run again."""
        return await self._in_thread(lambda: self._snapshot(body))

    def _snapshot(self, body: Callable[[Transaction], T]) -> T:
        with self._target.errors(), self._readers.connection() as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            try:
                with conn.transaction():  # BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY
                    return body(PgTransaction(conn, self._statements, self.cache))
            finally:
                if not conn.closed:  # the pool's next reader gets the connection as it was
                    conn.isolation_level = None
                    conn.read_only = None

    async def read_one(self, sql: str, params: Params = ()) -> PgRow | None:
        rows = await self._in_thread(lambda: self._read(sql, params))
        return rows[0] if rows else None

    async def read_all(self, sql: str, params: Params = ()) -> list[PgRow]:
        return await self._in_thread(lambda: self._read(sql, params))

    def _read(self, sql: str, params: Params) -> list[PgRow]:
        with self._target.errors(), self._readers.connection() as conn:
            return PgTransaction(conn, self._statements, self.cache).all(sql, params)

    async def peek(self, body: Callable[[Transaction], T]) -> T:
        """A point read on the caller's own thread, on a read-only connection of its own.

        A hop to a thread costs more than the read itself (a webhook looks
        its source up this way on every request), so the loop runs it, as
        SQLite's store does: only for reads of a few rows by index, bounded
        by PEEK_TIMEOUT_MS on the server. The connection is made in a thread
        (the first time, and again after it failed).
        """
        if self._closed:
            raise RuntimeError("the store is closed")
        conn = self._peek_conn
        if conn is None or conn.closed:
            settings = {**self._settings, "statement_timeout": f"{PEEK_TIMEOUT_MS}ms"}
            conn = await self._in_thread(lambda: _connect(self._target, read_only=True, **settings))
            if self._peek_conn is not None and not self._peek_conn.closed:  # another task made one meanwhile
                conn.close()
                conn = self._peek_conn
            self._peek_conn = conn
        try:
            with self._target.errors():
                return body(PgTransaction(conn, self._statements, self.cache))
        except StoreFault:
            if conn.broken:
                conn.close()  # made again at the next peek
            raise

    async def probe_writable(self, timeout: float = 2.0) -> None:
        """Begin a transaction that takes a transaction id (a write's first step), within ``timeout``."""
        ms = max(1, round(timeout * 1000))

        def probe() -> None:
            with self._target.errors(), self._pool.connection(timeout) as conn, conn.transaction():
                conn.execute("SELECT set_config('statement_timeout', %s, true)", (f"{ms}ms",))
                conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{ms}ms",))
                conn.execute("SET TRANSACTION READ WRITE")
                conn.execute("SELECT pg_current_xact_id()")
                raise psycopg.Rollback()

        if self.read_only:
            raise Unavailable(f"{self.where} was opened read-only; nothing can be written")
        await self._in_thread(probe)

    async def data_version(self) -> tuple[int, int]:
        """(notifications heard on ``switchboard``, this store's commits that changed rows).

        One round trip on a connection of its own that LISTENs (opened at the
        first call): PostgreSQL sends a session the notifications queued
        before it answers, so every commit that changed rows and finished
        before this call, on any host, has moved the value when it returns.
        A listener that lost its connection counts one more when it is back
        (it may have missed some).
        """
        if self._closed:
            raise RuntimeError("the store is closed")
        if self._listener is None:
            self._listener = _Listener(self._target)
        return await self._in_thread(self._listener.poll), self.commits


class _Listener:
    """A connection of its own that LISTENs on ``switchboard`` and counts what it hears."""

    def __init__(self, target: Target) -> None:
        self._target = target
        self._count = 0
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    def _heard(self, _: psycopg.Notify) -> None:
        self._count += 1

    def poll(self) -> int:
        """Hear what was sent since the last poll (one round trip); the count."""
        with self._lock, self._target.errors():
            if self._conn is not None and self._conn.closed:
                self._conn = None
                self._count += 1  # what was missed while away
            if self._conn is None:
                conn = psycopg.connect(self._target.conninfo, autocommit=True, connect_timeout=CONNECT_SECONDS)
                try:
                    conn.add_notify_handler(self._heard)
                    conn.execute(f"LISTEN {LISTEN_CHANNEL}")
                except BaseException:
                    conn.close()
                    raise
                self._conn = conn
            try:
                self._conn.execute("SELECT 1")
            except psycopg.OperationalError:
                self._conn.close()
                raise
            return self._count

    def stop(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
