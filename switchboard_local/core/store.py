"""The one SQLite file: where it lives, how it is opened, and its transactions.

Every connection runs in WAL mode with foreign keys on, a generous busy
timeout and ``synchronous=FULL`` (acknowledgements to producers depend on the
commit being on disk). Every write transaction starts with ``BEGIN IMMEDIATE``
so that a read-then-write can never fail with "database is locked" half-way;
reads run in autocommit mode, so no read transaction is ever left open to pin
the WAL.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sqlite3
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from .clock import Clock, SystemClock
from .errors import Busy, Conflict, InvalidArgument, StoreUnusable, SwitchboardError, Unavailable
from .queries import Q

APP_NAME = "switchboard-local"
DB_ENV = "SWITCHBOARD_DB"
BUSY_TIMEOUT_ENV = "SWITCHBOARD_BUSY_TIMEOUT"  # seconds a write waits for another process's lock

# The schema version this code writes. A new version appends one migration
# below (from the previous version) and updates schema.sql to the new shape.
SCHEMA_VERSION = 3
# PRAGMA application_id of our files ('SBLQ'); schema.sql sets it.
APPLICATION_ID = 1396853841
# The tables of version 1, which predates the application id: a file with
# user_version 1, no application id and exactly these tables is ours.
V1_TABLES = frozenset({"events", "todos", "event_todos", "attempts", "agents", "adapters", "rules"})

# version -> SQL script that upgrades a file from version - 1 to version.
MIGRATIONS: dict[int, str] = {
    2: """
ALTER TABLE agents ADD COLUMN create_queues TEXT;
CREATE TABLE IF NOT EXISTS delivery_keys (
    source    TEXT    NOT NULL,
    key       TEXT    NOT NULL,
    event_id  INTEGER NOT NULL,
    seen_at   INTEGER NOT NULL,
    PRIMARY KEY (source, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS delivery_keys_by_age ON delivery_keys (seen_at);
CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
-- Keys derived from events move into their own namespace. A live direct todo
-- that squatted the new form keeps it; the derived one then keeps its old key.
UPDATE OR IGNORE todos SET idempotency_key = 'event:' || idempotency_key
WHERE event_id IS NOT NULL AND idempotency_key IS NOT NULL AND idempotency_key NOT LIKE 'event:%';
PRAGMA application_id = 1396853841;
""",
    3: """
ALTER TABLE adapters RENAME TO sources;
""",
}

BUSY_TIMEOUT_MS = 30_000  # the default; $SWITCHBOARD_BUSY_TIMEOUT (seconds) overrides it
MAX_GROUP = 256  # writes that may share one transaction
OPTIMISTIC_RETRIES = 2  # reruns with savepoints only where an item raised, before one for every item
GROUP_SECONDS = 0.005  # work one transaction takes on before it commits; the rest waits for the next
# A lone writer skips the hop to the store's thread (about 140 us here) once
# this many flushes in a row had nobody to share with; every PROBE_EVERY-th
# write then still goes through the thread, so company is noticed again.
INLINE_AFTER = 8
PROBE_EVERY = 32
SYNCHRONOUS_MODES = ("FULL", "NORMAL")

T = TypeVar("T")
Params = Mapping[str, Any] | Sequence[Any]


def busy_timeout_ms() -> int:
    """How long a write waits for another process's lock before it is refused as busy."""
    raw = os.environ.get(BUSY_TIMEOUT_ENV)
    if not raw:
        return BUSY_TIMEOUT_MS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 3600:
        raise InvalidArgument(f"${BUSY_TIMEOUT_ENV} must be a number of seconds from 0 to 3600, got {raw!r}")
    return round(seconds * 1000)


def default_path() -> Path:
    """The database path: $SWITCHBOARD_DB, else the platform's user data dir."""
    from_env = os.environ.get(DB_ENV)
    if from_env:
        return _expanded(from_env)
    import platformdirs

    return platformdirs.user_data_path(APP_NAME) / "switchboard.db"


def _expanded(path: str | os.PathLike[str]) -> Path:
    try:
        return Path(path).expanduser()
    except RuntimeError:  # ~user of a user that does not exist
        raise Unavailable(f"{path}: no home folder for {Path(path).parts[0]}") from None


def _file_name(path: Path) -> str:
    """The name to give SQLite: absolute, so that a file named ":memory:" or
    "file:…" is a file like any other and not an in-memory database or a URI."""
    return str(path.absolute())


def schema_sql() -> str:
    """schema.sql: the packaged copy in a wheel, else the repository root's."""
    packaged = resources.files(__package__).joinpath("schema.sql")
    if packaged.is_file():
        return packaged.read_text("utf-8")
    return (Path(__file__).resolve().parents[2] / "schema.sql").read_text("utf-8")


def _statements(script: str) -> list[str]:
    """Split a script into complete statements (triggers and all)."""
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    return statements


def _create_owner_only(path: Path) -> None:
    """Create missing folders (0700) and the file (0600) before SQLite touches them.

    SQLite gives the -wal and -shm files the database file's mode, so they
    inherit owner-only permissions from here.
    """
    try:
        resolved = path.resolve()
    except RuntimeError:  # a symlink loop (Python 3.13 raises OSError ELOOP instead)
        raise Unavailable(f"{path}: too many levels of symbolic links") from None
    top = resolved.parts[1:3]
    # /dev/shm is a tmpfs of regular files (a scratch database may live there).
    if top[:1] in (("proc",), ("sys",)) or (top[:1] == ("dev",) and top != ("dev", "shm")):
        raise StoreUnusable(f"{path} is on a system file system ({'/' + resolved.parts[1]}), not a place for a database")
    missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        if not stat.S_ISREG(path.stat().st_mode):
            raise StoreUnusable(f"{path} is not a regular file") from None
        return
    os.close(fd)


def _make_owner_only(path: Path) -> None:
    """Our existing file (and its -wal and -shm), open to others, is made
    owner-only; only once it is known to be ours: a file refused is left as it
    was, its mode included."""
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            info = file.stat()
            if info.st_mode & 0o077 and info.st_uid == os.getuid():
                os.chmod(file, stat.S_IMODE(info.st_mode) & 0o700)


def _pragmas(synchronous: str, busy_ms: int) -> list[str]:
    return [
        f"PRAGMA busy_timeout = {busy_ms}",
        "PRAGMA journal_mode = WAL",
        f"PRAGMA synchronous = {synchronous}",
        "PRAGMA foreign_keys = ON",
        # Bound the WAL file left behind after checkpoints.
        "PRAGMA journal_size_limit = 67108864",
    ]


def _migrate(path: Path, busy_ms: int) -> None:
    """Bring the file to SCHEMA_VERSION, or refuse it and leave it untouched.

    Whether the file is ours is decided by reading alone, before anything is
    written (WAL included). The version is checked again inside BEGIN
    IMMEDIATE, so several processes opening a new file at once create the
    schema exactly once.
    """
    conn = sqlite3.connect(_file_name(path), isolation_level=None, timeout=busy_ms / 1000)
    try:
        conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
        version, app_id = _identity(conn)
        if version == SCHEMA_VERSION and app_id == APPLICATION_ID:
            return
        _refuse_foreign(conn, path, version, app_id)
        _refuse_newer(path, version)
        for pragma in _pragmas("FULL", busy_ms):
            conn.execute(pragma)
        conn.execute("BEGIN IMMEDIATE")
        try:
            version, app_id = _identity(conn)
            _refuse_foreign(conn, path, version, app_id)
            _refuse_newer(path, version)
            if version == 0:
                for statement in _statements(schema_sql()):
                    conn.execute(statement)
            else:
                for target in range(version + 1, SCHEMA_VERSION + 1):
                    for statement in _statements(MIGRATIONS[target]):
                        conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        if translate(exc, path) is not None:
            raise
        raise StoreUnusable(f"cannot open {path}: {exc}") from exc  # e.g. a migration that no longer applies
    finally:
        conn.close()


def _identity(conn: sqlite3.Connection) -> tuple[int, int]:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    return version, app_id


def _refuse_foreign(conn: sqlite3.Connection, path: Path, version: int, app_id: int) -> None:
    """Ours: our application id; or a new empty file; or version 1 with exactly
    version 1's tables (that version wrote no application id)."""
    if app_id == APPLICATION_ID:
        return
    tables = {
        name
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'")
    }
    if app_id == 0 and version == 0 and not tables:
        return
    if app_id == 0 and version == 1 and tables == V1_TABLES:
        return
    raise StoreUnusable(
        f"{path} is an SQLite database but not a switchboard-local one "
        f"(application id {app_id}, user version {version}); it was left as it is"
    )


def _refuse_newer(path: Path, version: int) -> None:
    if version > SCHEMA_VERSION:
        raise StoreUnusable(
            f"{path} has schema version {version}, newer than this switchboard-local "
            f"understands ({SCHEMA_VERSION}); upgrade switchboard-local to use it"
        )


# SQLite's primary result codes, as the driver names them, by what they mean here.
_BUSY = {"SQLITE_BUSY", "SQLITE_LOCKED"}
_UNUSABLE = {"SQLITE_CORRUPT", "SQLITE_NOTADB"}
_UNAVAILABLE = {"SQLITE_FULL", "SQLITE_IOERR", "SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_NOLFS",
                "SQLITE_PROTOCOL"}  # fmt: skip


def translate(exc: sqlite3.Error, path: Path) -> SwitchboardError | None:
    """The core's error for a driver error, or None for a bug (misused API, bad SQL)."""
    name = (getattr(exc, "sqlite_errorname", None) or "").split("_")
    primary = "_".join(name[:2])  # SQLITE_IOERR_WRITE -> SQLITE_IOERR
    if primary in _BUSY or (not primary and _is_busy(exc)):
        return Busy(f"{path} is locked by another process for longer than the busy timeout; try again later")
    if primary in _UNUSABLE:
        return StoreUnusable(f"{path} cannot be used: {exc}")
    if primary in _UNAVAILABLE:
        if _disk_full(path):  # SQLite often says only "disk I/O error"
            return Unavailable(f"the disk holding {path} is full ({exc})")
        return Unavailable(f"{path}: {exc}")
    if primary == "SQLITE_CONSTRAINT":
        return Conflict(f"the database refused the change: {exc}")
    return None


def _disk_full(path: Path) -> bool:
    try:
        disk = os.statvfs(path.parent)
    except OSError:
        return False
    return disk.f_bavail * disk.f_frsize < 64 * 1024


@contextlib.contextmanager
def driver_errors(path: Path) -> Iterator[None]:
    """Driver errors leave the store as the core's errors, never as sqlite3's."""
    try:
        yield
    except sqlite3.Error as exc:
        translated = translate(exc, path)
        if translated is None:
            raise
        raise translated from exc
    except OSError as exc:  # creating the folder or the file, statvfs
        where = exc.filename or path
        raise Unavailable(f"{where}: {exc.strerror or exc}") from exc


class Store:
    """An open database: one connection, owned by one thread.

    Each call to ``write`` or ``read`` runs a whole transaction in that thread
    in one hop from the event loop, so a transaction is never interleaved with
    another of this process, and a cancelled caller never leaves one half-run:
    it finishes (commits or rolls back) in the thread either way. Open with
    ``await Store.open(path)``; use as an async context manager or call
    ``close()``. The clock and the random source are injected so that tests
    can move time and pin jitter.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        thread: ThreadPoolExecutor,
        path: Path,
        clock: Clock,
        rng: random.Random,
        busy_ms: int = BUSY_TIMEOUT_MS,
    ) -> None:
        self._conn = conn
        self._thread = thread
        self.path = path
        self.clock = clock
        self.rng = rng
        self._commits = 0  # this connection's commits, which data_version does not count
        # Group commit: writes waiting for the thread, and whether a flush is on its way.
        self._writes: deque[tuple[Callable[[Transaction], Any], asyncio.Future[Any]]] = deque()
        self._flushing = False
        self._writes_lock = threading.Lock()
        # Whoever uses the connection holds this: the thread, or the loop inline.
        self._conn_lock = threading.Lock()
        self._lone_flushes = 0
        self._inline_count = 0
        self._inline_tick_task: asyncio.Task[Any] | None = None
        self._busy_ms = busy_ms
        self._waits_for_locks = True  # busy_timeout is busy_ms (else 0)
        self._closed = False
        self._peek_conn: sqlite3.Connection | None = None  # the loop's read-only connection (peek)
        # What verbs may keep between transactions (settings, briefly); see Transaction.cache.
        self.cache: dict[Any, Any] = {}

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        synchronous: str = "FULL",
    ) -> Store:
        if synchronous not in SYNCHRONOUS_MODES:
            raise InvalidArgument(f"synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}")
        db_path = _expanded(path) if path is not None else default_path()
        busy_ms = busy_timeout_ms()
        thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="switchboard-db")
        loop = asyncio.get_running_loop()
        try:
            with driver_errors(db_path):
                conn = await loop.run_in_executor(thread, _connect, db_path, synchronous, busy_ms)
        except BaseException:
            thread.shutdown(wait=False)
            raise
        return cls(conn, thread, db_path, clock or SystemClock(), rng or random.Random(), busy_ms)

    async def close(self) -> None:
        """Refuse new writes, let those already waiting commit, then close."""
        self._closed = True
        while self._flushing:
            await asyncio.sleep(0.001)
        if self._peek_conn is not None:
            self._peek_conn.close()
        await asyncio.get_running_loop().run_in_executor(self._thread, self._locked, lambda tx: self._conn.close())
        self._thread.shutdown(wait=True)

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def write(self, body: Callable[[Transaction], T]) -> T:
        """Run ``body`` inside BEGIN IMMEDIATE … COMMIT (ROLLBACK if it raises).

        Group commit: writes that arrive while the thread is busy share the
        next transaction, each inside its own SAVEPOINT, so one that raises is
        rolled back alone and the others still commit. Every caller is answered
        only after the COMMIT that holds its work (or with the error that
        kept it out). A lone writer runs exactly as a plain transaction, on
        the caller's own thread when it has been alone for a while and the
        file's write lock is free at that instant (it never waits for a lock
        there: a busy file sends the write to the thread).
        """
        if self._closed:
            raise RuntimeError("the store is closed")
        with driver_errors(self.path):
            return await self._write(body)

    async def _write(self, body: Callable[[Transaction], T]) -> T:
        loop = asyncio.get_running_loop()
        tick_owner = self._inline_tick_task
        if self._lone_flushes >= INLINE_AFTER and (tick_owner is None or tick_owner is asyncio.current_task()):
            self._inline_count += 1
            if self._inline_count % PROBE_EVERY:
                done, result = self._inline(body, write=True)
                if done:
                    # Other tasks' writes that queued up behind this one (the
                    # loop was busy with its fsync) go to the thread, to share
                    # one commit; this task's next write may stay inline.
                    if tick_owner is None:
                        self._inline_tick_task = asyncio.current_task()
                        loop.call_soon(self._end_inline_tick)
                    return result
        waiter: asyncio.Future[T] = loop.create_future()
        with self._writes_lock:
            self._writes.append((body, waiter))
            start = not self._flushing
            self._flushing = True
        if start:
            self._thread.submit(self._flush, loop)
        return await waiter

    def _end_inline_tick(self) -> None:
        self._inline_tick_task = None

    async def read(self, body: Callable[[Transaction], T]) -> T:
        """Run ``body`` in autocommit mode: each statement sees the latest commit."""
        with driver_errors(self.path):
            if self._lone_flushes >= INLINE_AFTER:
                done, result = self._inline(body, write=False)
                if done:
                    return result
            return await asyncio.get_running_loop().run_in_executor(self._thread, self._locked, body)

    async def peek(self, body: Callable[[Transaction], T]) -> T:
        """A point read (an index lookup) on the event loop's own read-only connection.

        Never queued behind the thread's commits, and no thread hop: a webhook
        looks its source up this way on every request. It sees the latest
        commit, like ``read``; only for reads of a few rows, as the loop waits
        for it. Should the file be busy (WAL recovery), it is read in the thread.
        """
        if self._closed:
            raise RuntimeError("the store is closed")
        try:
            with driver_errors(self.path):
                if self._peek_conn is None:
                    self._peek_conn = _connect_reader(self.path)
                return body(Transaction(self._peek_conn, self.cache))
        except Busy:
            return await self.read(body)

    async def probe_writable(self, timeout: float = 2.0) -> None:
        """Take the file's write lock for a moment on a fresh connection; raise within ``timeout``.

        Off the store's thread, so a health check answers even while a long
        transaction (of this process or another) holds the lock.
        """
        with driver_errors(self.path):
            await asyncio.to_thread(_probe_writable, self.path, timeout)

    def _locked(self, body: Callable[[Transaction], T]) -> T:
        with self._conn_lock:
            self._wait_for_locks(True)
            return body(Transaction(self._conn, self.cache))

    def _inline(self, body: Callable[[Transaction], T], *, write: bool) -> tuple[bool, Any]:
        """Run on the caller's thread if the connection and the file are free right now."""
        if self._flushing or not self._conn_lock.acquire(blocking=False):
            return False, None
        conn = self._conn
        try:
            self._wait_for_locks(False)  # never wait for a lock on the event loop
            try:
                if write:
                    conn.execute("BEGIN IMMEDIATE")
                else:
                    return True, body(Transaction(conn, self.cache))
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
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

    async def data_version(self) -> tuple[int, int]:
        """A value that changes whenever anything commits to the file.

        SQLite's data_version sees the commits of every other connection (other
        processes included); this store adds its own. Cheap enough to poll: a
        waiter compares it instead of holding a transaction open.
        """

        def body(tx: Transaction) -> tuple[int, int]:
            row = tx.one(Q.data_version)
            assert row is not None
            return row[0], self._commits

        return await self.read(body)

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
            # Submit anew rather than loop, so reads queued meanwhile run in between.
            self._thread.submit(self._flush, loop)

    def _commit_group(self, bodies: list[Callable[[Transaction], Any]]) -> list[tuple[bool, Any]]:
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
        self, bodies: list[Callable[[Transaction], Any]], risky: set[int] | None, doomed: dict[int, Exception]
    ) -> list[tuple[bool, Any]]:
        """One run of a group: ``risky`` items (all when None) in savepoints, ``doomed`` ones left out."""
        conn = self._conn
        changes = conn.total_changes
        outcomes: list[tuple[bool, Any]] = []
        deadline = time.monotonic() + GROUP_SECONDS
        try:
            conn.execute("BEGIN IMMEDIATE")
            tx = Transaction(conn, self.cache)
            for index, body in enumerate(bodies):
                if index and time.monotonic() > deadline:
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
                conn.execute("SAVEPOINT item")
                try:
                    outcomes.append((True, body(tx)))
                except Exception as exc:
                    if not conn.in_transaction:  # SQLite rolled everything back
                        raise _ItemFailed(index, exc, doomed=True) from exc
                    conn.execute("ROLLBACK TO item")
                    tx.recovered_at = None  # whatever it recovered is undone
                    outcomes.append((False, exc))
                conn.execute("RELEASE item")
            conn.execute("COMMIT")
            self._count_commit(changes)
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
            self._commits += 1

    def _write_alone(self, body: Callable[[Transaction], T]) -> T:
        self._conn.execute("BEGIN IMMEDIATE")
        return self._commit(body)

    def _commit(self, body: Callable[[Transaction], T]) -> T:
        """Inside BEGIN IMMEDIATE: run the body, then COMMIT, or ROLLBACK if it raises."""
        conn = self._conn
        changes = conn.total_changes
        try:
            result = body(Transaction(conn, self.cache))
            conn.execute("COMMIT")
            self._count_commit(changes)
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


MIN_FREE_BYTES = 4 * 1024 * 1024  # below this, commits are about to fail with "disk is full"


def _probe_writable(path: Path, timeout: float) -> None:
    # SQLite opens a file it may not write read-only, without a word, and
    # BEGIN IMMEDIATE then succeeds: ask the system (a mode, a read-only mount,
    # an immutable flag). The folder matters while the -wal or -shm is missing.
    files = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
    for file in files:
        if file.exists() and not os.access(file, os.W_OK):
            raise OSError(f"{file.name} cannot be written")
    if not all(file.exists() for file in files) and not os.access(path.parent, os.W_OK | os.X_OK):
        raise OSError(f"its folder {path.parent} cannot be written")
    disk = os.statvfs(path.parent)
    if disk.f_bavail * disk.f_frsize < MIN_FREE_BYTES:
        raise OSError(f"less than {MIN_FREE_BYTES // 1024 // 1024} MiB free beside {path}")
    conn = sqlite3.connect(_file_name(path), timeout=timeout, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


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


def _connect(path: Path, synchronous: str, busy_ms: int) -> sqlite3.Connection:
    """Runs in the store's thread, which then owns the connection."""
    _create_owner_only(path)
    _migrate(path, busy_ms)
    _make_owner_only(path)
    # Used by the store's thread, or by the event loop's thread for a lone
    # write; never both at once (Store._conn_lock).
    conn = sqlite3.connect(_file_name(path), isolation_level=None, timeout=busy_ms / 1000, check_same_thread=False)
    try:
        conn.row_factory = sqlite3.Row
        for pragma in _pragmas(synchronous, busy_ms):
            conn.execute(pragma)
    except BaseException:
        conn.close()
        raise
    return conn


def _connect_reader(path: Path) -> sqlite3.Connection:
    """A read-only connection for the event loop: it never waits for a lock."""
    conn = sqlite3.connect(_file_name(path), isolation_level=None, timeout=0, check_same_thread=False)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA query_only = ON")
    except BaseException:
        conn.close()
        raise
    return conn


class Transaction:
    """The statements a verb runs while it holds the connection.

    A group commit's items share one: ``recovered_at`` (the clock's time of
    the last recovery of lapsed leases in it) spares the claims that follow
    within the same millisecond a recovery of their own. ``cache`` is the
    store's, shared by its transactions, for what may be a moment old (settings).
    """

    def __init__(self, conn: sqlite3.Connection, cache: dict[Any, Any] | None = None) -> None:
        self._conn = conn
        self.recovered_at: int | None = None
        self.cache: dict[Any, Any] = {} if cache is None else cache

    def one(self, sql: str, params: Params = ()) -> sqlite3.Row | None:
        cursor = self._conn.execute(sql, params)
        try:
            return cursor.fetchone()
        finally:
            cursor.close()  # finish the statement (RETURNING rows included) before COMMIT

    def all(self, sql: str, params: Params = ()) -> list[sqlite3.Row]:
        return self._conn.execute(sql, params).fetchall()

    def run(self, sql: str, params: Params = ()) -> int:
        """Execute; return the number of rows changed."""
        return self._conn.execute(sql, params).rowcount

    def many(self, sql: str, params: Sequence[Params]) -> int:
        """Execute once per parameter set; return the number of rows changed."""
        return self._conn.executemany(sql, params).rowcount
