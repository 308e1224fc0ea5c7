"""The write connection's one owner: a queue of writes, committed in groups.

Every write of the process goes through one ``GroupCommit``. It owns the
SQLite write connection and the one thread that uses it; writes that arrive
while that thread is busy wait in a queue and then share one ``BEGIN
IMMEDIATE`` … ``COMMIT`` (one fsync for all of them), each inside its own
SAVEPOINT when it may raise. A lone writer, alone for a while, runs on the
caller's own thread instead (inline), saving the hop.

Why one owner and not a pool, or aiosqlite: a group is many callers' bodies
run back to back on one connection under one ``BEGIN IMMEDIATE``, with
savepoints and reruns, and an inline write must be able to take that same
connection when it is free at that instant. That needs one object that holds
the connection, decides what shares a transaction and answers each caller
after the COMMIT that holds its work; aiosqlite's connection runs one request
at a time from a queue it owns, with no way to hold a transaction across
several callers' bodies or to run one inline.

The time budget of a group (GROUP_SECONDS of work per transaction) is read
from an injected monotonic clock, so that tests can decide when a group is
full without sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ...errors import Conflict
from ...tally import Tally
from ..interface import Params

MAX_GROUP = 256  # writes that may share one transaction
OPTIMISTIC_RETRIES = 2  # reruns with savepoints only where an item raised, before one for every item
GROUP_SECONDS = 0.005  # work one transaction takes on before it commits; the rest waits for the next
# A lone writer skips the hop to the store's thread (about 140 us here) once
# this many flushes in a row had nobody to share with; before every
# PROBE_EVERY-th write it lets the loop run the other tasks, so company is
# noticed again (once a hop through the thread: 400 us each, 13 us a job of
# a lone drain).
INLINE_AFTER = 8
PROBE_EVERY = 32

T = TypeVar("T")
Monotonic = Callable[[], float]


class SQLiteTransaction:
    """The statements a verb runs while it holds the connection (store.Transaction, on SQLite).

    ``memo`` is the verbs' own, for one transaction: the items of a group
    commit share it (so one may spare the next work already done in this
    transaction), and an item rolled back to its savepoint takes what it put
    there with it. The store never reads it. ``cache`` is the store's, shared
    by its transactions, for what may be a moment old (settings).

    A statement the schema refuses (a unique index, a CHECK) raises
    ``Conflict`` at once, so a verb can answer it in its own words without
    knowing the driver.
    """

    in_transaction = True  # always: every body runs in BEGIN IMMEDIATE … COMMIT

    def __init__(self, conn: sqlite3.Connection, cache: dict[Any, Any]) -> None:
        self._conn = conn
        self._savepoints = 0  # named apart, so that nested ones never meet the group's own
        self.memo: dict[Any, Any] = {}
        self.cache = cache

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        """A part of the body that is undone alone when it raises (store.Transaction.savepoint)."""
        self._savepoints += 1
        name = f"part{self._savepoints}"
        memo = dict(self.memo)
        self._conn.execute(f"SAVEPOINT {name}")
        try:
            yield
        except BaseException:
            if self._conn.in_transaction:  # else SQLite rolled everything back: the caller's to answer
                self._conn.execute(f"ROLLBACK TO {name}")
                self._conn.execute(f"RELEASE {name}")
                self.memo = memo  # what the part noted is undone with its rows
            raise
        self._conn.execute(f"RELEASE {name}")

    def one(self, sql: str, params: Params = ()) -> sqlite3.Row | None:
        try:
            cursor = self._conn.execute(sql, params)
            try:
                return cursor.fetchone()
            finally:
                cursor.close()  # finish the statement (RETURNING rows included) before COMMIT
        except sqlite3.IntegrityError as exc:
            raise _refused(exc) from exc

    def all(self, sql: str, params: Params = ()) -> list[sqlite3.Row]:
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.IntegrityError as exc:
            raise _refused(exc) from exc

    def run(self, sql: str, params: Params = ()) -> int:
        """Execute; return the number of rows changed."""
        try:
            return self._conn.execute(sql, params).rowcount
        except sqlite3.IntegrityError as exc:
            raise _refused(exc) from exc

    def many(self, sql: str, params: Sequence[Params]) -> int:
        """Execute once per parameter set; return the number of rows changed."""
        try:
            return self._conn.executemany(sql, params).rowcount
        except sqlite3.IntegrityError as exc:
            raise _refused(exc) from exc


def _refused(exc: sqlite3.IntegrityError) -> Conflict:
    return Conflict(f"the database refused the change: {exc}")


class GroupCommit:
    """The write connection, its thread and the queue of writes waiting for it.

    ``write`` runs a body inside BEGIN IMMEDIATE … COMMIT and answers only
    after the COMMIT that holds its work. Driver errors leave as they are:
    the store translates them.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        thread: ThreadPoolExecutor,
        cache: dict[Any, Any],
        busy_ms: int,
        *,
        monotonic: Monotonic | None = None,
        tally: Tally,
    ) -> None:
        self._conn = conn
        self._tally = tally  # each commit's duration and writes (the dashboard's metrics)
        self._thread = thread
        self._cache = cache
        self._busy_ms = busy_ms
        self._monotonic = monotonic or time.monotonic  # the group budget's time
        self.commits = 0  # this connection's commits that changed rows
        self._writes: deque[tuple[Callable[[SQLiteTransaction], Any], asyncio.Future[Any]]] = deque()
        self._flushing = False  # a flush is on its way or running
        self._writes_lock = threading.Lock()
        # Whoever uses the connection holds this: the thread, or the loop inline.
        self._conn_lock = threading.Lock()
        self._lone_flushes = 0
        self._inline_count = 0
        self._inline_tick_task: asyncio.Task[Any] | None = None
        self._looking: asyncio.Task[Any] | None = None  # the lone writer letting the others run (_look_around)
        self._waits_for_locks = True  # busy_timeout is busy_ms (else 0)

    @property
    def flushing(self) -> bool:
        return self._flushing

    @property
    def turn(self) -> threading.Lock:
        """Held by whoever uses the connection: another holder (the checkpointer)
        makes this process's writes wait until it lets go."""
        return self._conn_lock

    async def write(self, body: Callable[[SQLiteTransaction], T]) -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        # While the lone writer looks around (below), another task's write goes to the thread,
        # and the lone writer's next write joins it there: a group, if they are company.
        alone = self._looking is None or self._looking is task
        if alone and self._lone_flushes >= INLINE_AFTER and self._inline_tick_task in (None, task):
            self._inline_count += 1
            if not self._inline_count % PROBE_EVERY:
                await self._look_around(task)
            done, result = self._inline(body)
            if done:
                # Other tasks' writes that queued up behind this one (the
                # loop was busy with its fsync) go to the thread, to share
                # one commit; this task's next write may stay inline.
                if self._inline_tick_task is None:
                    self._inline_tick_task = task
                    loop.call_soon(self._end_inline_tick)
                return result  # type: ignore[no-any-return]
        waiter: asyncio.Future[T] = loop.create_future()
        with self._writes_lock:
            self._writes.append((body, waiter))
            start = not self._flushing
            self._flushing = True
        if start:
            self._thread.submit(self._flush, loop)
        return await waiter

    async def run_locked(self, body: Callable[[SQLiteTransaction], T]) -> T:
        """Run ``body`` in the thread, holding the connection, outside any transaction."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._locked, body)

    async def close(self) -> None:
        """Close the connection in its thread, and the thread: the caller (the store's
        close) has refused new writes and waited until nothing is flushing."""
        await self.run_locked(lambda tx: self._conn.close())
        self._thread.shutdown(wait=True)

    def _end_inline_tick(self) -> None:
        self._inline_tick_task = None

    async def _look_around(self, task: asyncio.Task[Any] | None) -> None:
        """Let the loop run the other tasks once: a lone writer that never waits would hold
        them off, and a write one of them makes meanwhile is company (it goes to the thread,
        busy then, so this writer's next write queues behind it: a group)."""
        self._looking = task
        try:
            await asyncio.sleep(0)
        finally:
            self._looking = None

    def _locked(self, body: Callable[[SQLiteTransaction], T]) -> T:
        with self._conn_lock:
            self._wait_for_locks(True)
            return body(SQLiteTransaction(self._conn, self._cache))

    def _inline(self, body: Callable[[SQLiteTransaction], T]) -> tuple[bool, Any]:
        """Run on the caller's thread if the connection and the file are free right now."""
        if self._flushing or not self._conn_lock.acquire(blocking=False):
            return False, None
        try:
            self._wait_for_locks(False)  # never wait for a lock on the event loop
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                return False, None  # another process holds the file: wait in the thread instead
            return True, self._commit(body)
        finally:
            self._conn_lock.release()

    def _wait_for_locks(self, wait: bool) -> None:
        """busy_timeout: the thread waits for another process's lock, the loop never
        does. Switched only when the caller changes (a pragma costs ~10 us)."""
        if wait != self._waits_for_locks:
            self._conn.execute(f"PRAGMA busy_timeout = {self._busy_ms if wait else 0}")
            self._waits_for_locks = wait

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        """In the thread: commit what is waiting (up to MAX_GROUP writes, or as many
        as GROUP_SECONDS of work holds), then settle each caller."""
        with self._writes_lock:
            group = [self._writes.popleft() for _ in range(min(len(self._writes), MAX_GROUP))]
        self._lone_flushes = self._lone_flushes + 1 if len(group) == 1 else 0
        try:
            with self._conn_lock:
                self._wait_for_locks(True)
                outcomes = self._commit_group([body for body, _ in group])
        except BaseException as exc:  # never leave a caller waiting, whatever happened
            outcomes = [(False, exc)] * len(group)
        for (_, waiter), outcome in zip(group, outcomes):
            try:
                loop.call_soon_threadsafe(_settle, waiter, outcome)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass
        with self._writes_lock:
            self._writes.extendleft(reversed(group[len(outcomes) :]))  # past the time budget: next, first
            more = bool(self._writes)
            self._flushing = more
        if more:
            # Submit anew rather than loop, so work queued meanwhile runs in between.
            self._thread.submit(self._flush, loop)

    def _commit_group(self, bodies: list[Callable[[SQLiteTransaction], Any]]) -> list[tuple[bool, Any]]:
        """One transaction for the first of ``bodies``: as many as GROUP_SECONDS of
        work holds (at least one), an outcome for each; the rest wait for the next.

        Optimistic: items run without savepoints. When one raises, the
        transaction is rolled back and the group runs again with that item
        (and every other that raised so far) inside a SAVEPOINT of its own, so
        that it is rolled back alone and its answer is what it met in the run
        that commits. After OPTIMISTIC_RETRIES reruns every item gets a
        savepoint. An item that rolls back the whole transaction (a trigger's
        RAISE(ROLLBACK)) is left out of the reruns, answered with its error.
        Bodies may therefore run more than once: a body only reads and writes
        through its transaction.
        """
        if not bodies:
            return []
        if len(bodies) == 1:
            try:
                return [(True, self._write_alone(bodies[0]))]
            except Exception as exc:
                return [(False, exc)]
        risky: set[int] | None = set()  # None: every item in a savepoint
        doomed: dict[int, Exception] = {}
        reruns = 0
        while True:
            try:
                return self._run_group(bodies, risky, doomed)
            except _ItemFailed as failed:
                if failed.doomed:
                    doomed[failed.index] = failed.error
                elif risky is not None:
                    risky.add(failed.index)
                    reruns += 1
                    if reruns > OPTIMISTIC_RETRIES:
                        risky = None

    def _run_group(
        self, bodies: list[Callable[[SQLiteTransaction], Any]], risky: set[int] | None, doomed: dict[int, Exception]
    ) -> list[tuple[bool, Any]]:
        """One run of a group: ``risky`` items (all when None) in savepoints, ``doomed`` ones left out."""
        conn = self._conn
        changes = conn.total_changes
        outcomes: list[tuple[bool, Any]] = []
        deadline = self._monotonic() + GROUP_SECONDS
        started = time.perf_counter()
        try:
            conn.execute("BEGIN IMMEDIATE")
            tx = SQLiteTransaction(conn, self._cache)
            for index, body in enumerate(bodies):
                if index and self._monotonic() > deadline:
                    break  # the rest waits for the next transaction
                if index in doomed:
                    outcomes.append((False, doomed[index]))
                    continue
                if risky is not None and index not in risky:
                    try:
                        outcomes.append((True, body(tx)))
                    except Exception as exc:
                        raise _ItemFailed(index, exc) from exc
                    continue
                memo = dict(tx.memo)
                conn.execute("SAVEPOINT item")
                try:
                    outcomes.append((True, body(tx)))
                except Exception as exc:
                    if not conn.in_transaction:  # SQLite rolled everything back
                        raise _ItemFailed(index, exc, doomed=True) from exc
                    conn.execute("ROLLBACK TO item")
                    tx.memo = memo  # what the item noted is undone with its rows
                    outcomes.append((False, exc))
                conn.execute("RELEASE item")
            conn.execute("COMMIT")
            self._count_commit(changes)
            self._tally.committed(time.perf_counter() - started, len(outcomes))
        except _ItemFailed:
            self._rollback()
            raise
        except BaseException as exc:
            self._rollback()
            return [(False, exc)] * len(bodies)  # nothing committed: nobody may ack
        return outcomes

    def _count_commit(self, changes_before: int) -> None:
        # Only commits that changed rows: an empty claim must not look like news
        # to this store's own waiters (data_version), or idle long polls spin.
        if self._conn.total_changes != changes_before:
            self.commits += 1

    def _write_alone(self, body: Callable[[SQLiteTransaction], T]) -> T:
        self._conn.execute("BEGIN IMMEDIATE")
        return self._commit(body)

    def _commit(self, body: Callable[[SQLiteTransaction], T]) -> T:
        """Inside BEGIN IMMEDIATE: run the body, then COMMIT, or ROLLBACK if it raises."""
        conn = self._conn
        changes = conn.total_changes
        started = time.perf_counter()
        try:
            result = body(SQLiteTransaction(conn, self._cache))
            conn.execute("COMMIT")
            self._count_commit(changes)
            self._tally.committed(time.perf_counter() - started, 1)
        except BaseException:
            self._rollback()
            raise
        return result

    def _rollback(self) -> None:
        # SQLite may already have rolled back (e.g. on SQLITE_FULL);
        # a second ROLLBACK would hide the real error.
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")


class _ItemFailed(Exception):
    """Item ``index`` of a group raised ``error``: run the group again, that item in
    a savepoint (or, ``doomed``: it rolled back the whole transaction, without it)."""

    def __init__(self, index: int, error: Exception, *, doomed: bool = False) -> None:
        super().__init__(index, error)
        self.index = index
        self.error = error
        self.doomed = doomed


def is_busy(exc: sqlite3.OperationalError) -> bool:
    # SQLite words SQLITE_BUSY and SQLITE_LOCKED alike: "database is locked",
    # "database table is locked", "database schema is locked".
    return "locked" in str(exc)


def _settle(waiter: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if waiter.cancelled():  # the caller went away; its work committed (or not) all the same
        return
    ok, value = outcome
    if ok:
        waiter.set_result(value)
    elif isinstance(value, Exception) and not isinstance(value, StopIteration):
        waiter.set_exception(value)
    else:  # a future cannot carry these: report them instead of leaving the caller waiting
        waiter.set_exception(RuntimeError(f"the store's thread failed: {value!r}"))
