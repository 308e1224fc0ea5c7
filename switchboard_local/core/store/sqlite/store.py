"""The store on one SQLite file: where it lives, how it is opened, its reads.

``SQLiteStore`` implements the interface's ``Store``; the write connection and
its group commit are group_commit.py's, the schema and its migrations
migrations.py's, the driver's errors errors.py's. Every connection runs in WAL
mode with a generous busy timeout; the write connection adds foreign keys and
``synchronous=FULL`` (acknowledgements to producers depend on the commit being
on disk). Every write transaction starts with ``BEGIN IMMEDIATE`` so that a
read-then-write can never fail with "database is locked" half-way; reads run
in autocommit mode on read-only connections, so no read transaction is ever
left open to pin the WAL and no read waits behind a commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sqlite3
import stat
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from ...clock import Clock, SystemClock
from ...errors import Busy, InvalidArgument, StoreUnusable, Unavailable
from ...tally import Tally
from ..interface import FileState, Params, Transaction
from ..queries import Q
from ..shared import BUSY_TIMEOUT_MS, SCHEMA_VERSION, busy_timeout_ms, expanded
from .checkpoints import Checkpointer
from .errors import UNUSABLE, driver_errors, primary
from .group_commit import GroupCommit, Monotonic, SQLiteTransaction
from .migrations import file_name, identity, migrate, ours, pragmas, refuse_foreign, refuse_newer

READERS = 2  # read-only connections for read_one / read_all, opened as needed
SYNCHRONOUS_MODES = ("FULL", "NORMAL")

T = TypeVar("T")


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


class SQLiteStore:
    """The store on one SQLite file (see ``Store`` for the contract).

    Writes: one connection, owned by one thread (group_commit.GroupCommit).
    Each ``write`` runs a whole transaction there in one hop from the event
    loop (or inline on the loop, for a lone writer), so a transaction is never
    interleaved with another of this process, and a cancelled caller never
    leaves one half-run. Writes stay there, not on aiosqlite: a group commit
    runs many callers' bodies back to back under one ``BEGIN IMMEDIATE`` with
    a savepoint each, and an inline write takes the connection when it is
    free at that instant; both need one owner of the write connection that
    decides what shares a transaction, which aiosqlite's one-request-at-a-time
    queue cannot be.

    Reads: ``read_one`` and ``read_all`` run on a small pool of read-only
    connections (aiosqlite, each with its own thread), so a list or a count
    never waits behind another caller's commit and fsync. ``peek`` reads on
    the event loop's own read-only connection: for a point lookup that is
    faster than any hop to a thread (the webhook receiver looks its source
    up this way on every request).
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        thread: ThreadPoolExecutor,
        path: Path,
        clock: Clock,
        rng: random.Random,
        busy_ms: int = BUSY_TIMEOUT_MS,
        monotonic: Monotonic | None = None,
        checkpointer: Checkpointer | None = None,
    ) -> None:
        self.path = path
        self.where = str(path)
        self.checkpointer = checkpointer  # a writing store's; None for a read-only one
        self.clock = clock
        self.rng = rng
        self.cache: dict[Any, Any] = {}
        self.tally = Tally()
        self._busy_ms = busy_ms
        self._group = GroupCommit(conn, thread, self.cache, busy_ms, monotonic=monotonic, tally=self.tally)
        if checkpointer is not None:
            checkpointer.writer_turn = self._group.turn
        self._closed = False
        self._peek_conn: sqlite3.Connection | None = None  # the loop's read-only connection (peek)
        self._readers: list[aiosqlite.Connection] = []  # every reader opened, idle or not
        self._idle_readers: asyncio.Queue[aiosqlite.Connection] | None = None

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        synchronous: str = "FULL",
        monotonic: Monotonic | None = None,
        read_only: bool = False,
    ) -> SQLiteStore:
        if synchronous not in SYNCHRONOUS_MODES:
            raise InvalidArgument(f"synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}")
        db_path = expanded(path)
        busy_ms = busy_timeout_ms()
        thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="switchboard-db")
        loop = asyncio.get_running_loop()
        try:
            with driver_errors(db_path):
                if read_only:
                    conn = await loop.run_in_executor(thread, _connect_read_only, db_path, busy_ms)
                else:
                    conn = await loop.run_in_executor(thread, _connect, db_path, synchronous, busy_ms)
                    try:
                        checkpointer = Checkpointer(db_path)
                    except BaseException:
                        conn.close()
                        raise
        except BaseException:
            thread.shutdown(wait=False)
            raise
        return cls(conn, thread, db_path, clock or SystemClock(), rng or random.Random(), busy_ms, monotonic,
                   None if read_only else checkpointer)  # fmt: skip

    async def close(self) -> None:
        """Refuse new calls, let the writes already waiting commit, then close."""
        self._closed = True
        while self._group.flushing:
            await asyncio.sleep(0.001)
        readers, self._readers = self._readers, []
        for reader in readers:
            with contextlib.suppress(sqlite3.Error, ValueError):  # a reader that failed to open all the way
                await reader.close()
        if self._peek_conn is not None:
            self._peek_conn.close()
        await self._group.close()
        if self.checkpointer is not None:  # after the last commit: its TRUNCATE leaves an empty log
            await asyncio.to_thread(self.checkpointer.close)

    @property
    def _commits(self) -> int:
        """This store's commits that changed rows (tests count commits with it)."""
        return self._group.commits

    async def __aenter__(self) -> SQLiteStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def write(self, body: Callable[[Transaction], T], *, single: bool = False) -> T:
        """Run ``body`` inside BEGIN IMMEDIATE … COMMIT (ROLLBACK if it raises); ``single``
        changes nothing here (a transaction costs no round trip on a file).

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
            return await self._group.write(body)

    async def snapshot(self, body: Callable[[Transaction], T]) -> T:
        """``body`` in a write's transaction (``BEGIN IMMEDIATE``): one snapshot of the file,
        its other writers waiting until it ends. What it reads is the whole file as one
        moment left it; it writes nothing (the Store contract; not enforced here)."""
        return await self.write(body)

    async def read_one(self, sql: str, params: Params = ()) -> sqlite3.Row | None:
        """The first row of ``sql``, on a read-only connection; it sees the latest commit."""
        rows = await self._read(sql, params)
        return rows[0] if rows else None

    async def read_all(self, sql: str, params: Params = ()) -> list[sqlite3.Row]:
        """Every row of ``sql``, on a read-only connection; it sees the latest commit."""
        return await self._read(sql, params)

    async def _read(self, sql: str, params: Params) -> list[sqlite3.Row]:
        if self._closed:
            raise RuntimeError("the store is closed")
        with driver_errors(self.path):
            reader = await self._reader()
            try:
                # One hop to the reader's thread: the statement runs and is
                # finished there, so no read transaction stays open.
                return list(await reader.execute_fetchall(sql, params))
            finally:
                assert self._idle_readers is not None
                self._idle_readers.put_nowait(reader)

    async def _reader(self) -> aiosqlite.Connection:
        """An idle reader; a new one while fewer than READERS are open; else wait for one."""
        if self._idle_readers is None:
            self._idle_readers = asyncio.Queue()
        if self._idle_readers.empty() and len(self._readers) < READERS:
            reader = _new_reader(_reader_uri(self.path), self._busy_ms / 1000)
            self._readers.append(reader)
            try:
                await reader
                reader.row_factory = sqlite3.Row
                await reader.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
                await reader.execute("PRAGMA query_only = ON")
            except BaseException:
                self._readers.remove(reader)
                with contextlib.suppress(Exception):
                    await reader.close()
                raise
            return reader
        return await self._idle_readers.get()

    async def peek(self, body: Callable[[Transaction], T]) -> T:
        """A point read (an index lookup) on the event loop's own read-only connection.

        Never queued behind the thread's commits, and no thread hop: a webhook
        looks its source up this way on every request. It sees the latest
        commit, like ``read_one``; only for reads of a few rows, as the loop
        waits for it. Should the file be busy (WAL recovery), it is read in
        the write thread, which waits for the lock.
        """
        if self._closed:
            raise RuntimeError("the store is closed")
        try:
            with driver_errors(self.path):
                if self._peek_conn is None:
                    self._peek_conn = _connect_reader(self.path)
                return body(SQLiteTransaction(self._peek_conn, self.cache))
        except Busy:
            with driver_errors(self.path):
                return await self._group.run_locked(body)

    async def probe_writable(self, timeout: float = 2.0) -> None:
        """Take the file's write lock for a moment on a fresh connection; raise within ``timeout``.

        Off the store's thread, so a health check answers even while a long
        transaction (of this process or another) holds the lock.
        """
        with driver_errors(self.path):
            await asyncio.to_thread(_probe_writable, self.path, timeout)

    async def data_version(self) -> tuple[int, int]:
        """A value that changes whenever anything commits to the file.

        SQLite's data_version, read on the loop's one read-only connection
        (always the same: the number is per connection), moves with the
        commits of every other connection, this store's write connection and
        other processes included. Beside it, the write connection's own count
        of commits that changed rows. Cheap enough to poll: a waiter compares
        it instead of holding a transaction open.
        """
        row = await self.peek(lambda tx: tx.one(Q.data_version))
        assert row is not None
        return row[0], self._commits


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
    conn = sqlite3.connect(file_name(path), timeout=timeout, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def _connect(path: Path, synchronous: str, busy_ms: int) -> sqlite3.Connection:
    """Runs in the store's thread, which then owns the connection."""
    _create_owner_only(path)
    migrate(path, busy_ms)
    _make_owner_only(path)
    # Used by the store's thread, or by the event loop's thread for a lone
    # write; never both at once (GroupCommit._conn_lock).
    conn = sqlite3.connect(file_name(path), isolation_level=None, timeout=busy_ms / 1000, check_same_thread=False)
    try:
        conn.row_factory = sqlite3.Row
        for pragma in pragmas(synchronous, busy_ms):
            conn.execute(pragma)
    except BaseException:
        conn.close()
        raise
    return conn


def _new_reader(uri: str, timeout: float) -> aiosqlite.Connection:
    """``aiosqlite.connect``, called from a daemon thread.

    Its worker thread is made there and inherits that daemon flag: a store
    left open (a start-up that failed before its ``close``) then never keeps
    the process from exiting, as the write thread's executor does not either.
    A reader has nothing to finish. (tests/core/test_store.py checks it.)
    """
    made: list[aiosqlite.Connection] = []
    maker = threading.Thread(
        target=lambda: made.append(aiosqlite.connect(uri, uri=True, isolation_level=None, timeout=timeout)),
        name="switchboard-reader-maker",
        daemon=True,
    )
    maker.start()
    maker.join()
    return made[0]


def _reader_uri(path: Path) -> str:
    """A read-only URI for the file (percent-encoded, so any name is a file name)."""
    return path.absolute().as_uri() + "?mode=ro"


def _connect_reader(path: Path) -> sqlite3.Connection:
    """A read-only connection for the event loop: it never waits for a lock."""
    conn = sqlite3.connect(file_name(path), isolation_level=None, timeout=0, check_same_thread=False)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA query_only = ON")
    except BaseException:
        conn.close()
        raise
    return conn


# ---------------------------------------------------------------- reading a file without changing it

INSPECT_BUSY_MS = 2_000  # `doctor` answers within seconds, even beside a long write
QUICK_CHECK_MAX = 20  # problems quick_check lists before it stops


def _connect_existing(path: Path, busy_ms: int) -> sqlite3.Connection:
    """A connection to an existing file that changes nothing in it.

    ``mode=rw``, not ``mode=ro``: SQLite never creates a missing file then,
    and the last connection to close removes the -wal and -shm it made, so
    the folder is left as it was found; a ``mode=ro`` connection leaves them
    behind. ``query_only`` refuses every write. (Closing last may fold a WAL
    left by a crash into the file, as any reader of it would.)
    """
    if not stat.S_ISREG(path.stat().st_mode):
        raise StoreUnusable(f"{path} is not a regular file")
    uri = path.absolute().as_uri() + "?mode=rw"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=busy_ms / 1000, check_same_thread=False)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
        conn.execute("PRAGMA query_only = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def _connect_read_only(path: Path, busy_ms: int) -> sqlite3.Connection:
    """A read-only store's connection: our file at the current version, or refused."""
    conn = _connect_existing(path, busy_ms)
    try:
        version, app_id, tables = identity(conn)
        refuse_foreign(path, version, app_id, tables)
        refuse_newer(path, version)
        if version != SCHEMA_VERSION:
            raise StoreUnusable(f"{path} has schema version {version}; it is upgraded when opened for writing")
    except BaseException:
        conn.close()
        raise
    return conn


def inspect_file(path: Path) -> FileState:
    """``opener.inspect_store`` for a file: its identity, journal mode and integrity, read with nothing changed."""
    with driver_errors(path):
        conn = _connect_existing(path, INSPECT_BUSY_MS)
    try:
        with driver_errors(path):
            try:
                version, app_id, tables = identity(conn)
            except sqlite3.DatabaseError as exc:
                if primary(exc) == "SQLITE_NOTADB":
                    return FileState(database=False, current=SCHEMA_VERSION, error=str(exc))
                if primary(exc) == "SQLITE_CORRUPT":  # the schema's own pages
                    return FileState(database=True, current=SCHEMA_VERSION, problems=(str(exc),))
                raise
            journal = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
            try:
                found = [str(row[0]) for row in conn.execute(f"PRAGMA quick_check({QUICK_CHECK_MAX})")]
            except sqlite3.DatabaseError as exc:
                if primary(exc) not in UNUSABLE:
                    raise
                found = [str(exc)]
        return FileState(
            database=True,
            current=SCHEMA_VERSION,
            version=version,
            ours=ours(version, app_id, tables),
            empty=not tables,
            journal_mode=journal,
            problems=() if found == ["ok"] else tuple(found),
        )
    finally:
        conn.close()
