"""The store on one SQLite file: where it lives, how it is opened and migrated,
its reads, and how the driver's errors become the core's.

``SQLiteStore`` implements ``store.Store``; the write connection and its group
commit are group_commit.py's. Every connection runs in WAL mode with a
generous busy timeout; the write connection adds foreign keys and
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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from .checkpoints import WAL_AUTOCHECKPOINT, Checkpointer
from ...clock import Clock, SystemClock
from ...errors import (
    Busy,
    Conflict,
    InvalidArgument,
    StoreUnusable,
    SwitchboardError,
    Unavailable,
)
from .group_commit import GroupCommit, Monotonic, SQLiteTransaction, is_busy
from ..queries import Q
from ..interface import (
    BUSY_TIMEOUT_MS,
    FileState,
    Params,
    Transaction,
    busy_timeout_ms,
    default_path,
    expanded,
)
from ...tally import Tally

# The schema version this code writes. A new version appends one migration
# below (from the previous version) and updates schema.sql to the new shape.
SCHEMA_VERSION = 9
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
    4: """
CREATE TABLE IF NOT EXISTS queues (
    name       TEXT    PRIMARY KEY CHECK (name <> ''),
    paused_at  INTEGER,
    paused_by  TEXT
) WITHOUT ROWID;
""",
    5: """
ALTER TABLE agents ADD COLUMN owner TEXT;
""",
    # Retries read as pending ('failed' is a dead letter and nothing else); new:
    # 'cancelled', who cancelled and why, and the operator's attempt outcomes.
    # A CHECK changes, so both tables are rebuilt (foreign keys are off while
    # migrating): ids, the todo id sequence and every row are kept.
    6: """
CREATE TEMP TABLE migration_6_sequence AS SELECT seq FROM sqlite_sequence WHERE name = 'todos';
CREATE TABLE todos_v6 (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    queue            TEXT    NOT NULL CHECK (queue <> ''),
    assignee         TEXT,
    title            TEXT    NOT NULL,
    kind             TEXT,
    payload          TEXT    NOT NULL DEFAULT 'null',
    event_id         INTEGER REFERENCES events (id) ON DELETE SET NULL,
    idempotency_key  TEXT,
    state            TEXT    NOT NULL CHECK (state IN ('pending', 'claimed', 'done', 'failed', 'cancelled')),
    priority         INTEGER NOT NULL DEFAULT 0,
    attempt          INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts     INTEGER NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    owner            TEXT,
    lease_token_hash TEXT,
    lease_expires_at INTEGER,
    visible_at       INTEGER,
    result           TEXT,
    last_error       TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    claimed_at       INTEGER,
    completed_at     INTEGER,
    cancelled_by     TEXT,
    cancel_reason    TEXT,
    CHECK ((state = 'claimed') = (lease_expires_at IS NOT NULL)),
    CHECK ((state = 'claimed') = (lease_token_hash IS NOT NULL)),
    CHECK ((state = 'pending') = (visible_at IS NOT NULL))
);
INSERT INTO todos_v6 (id, queue, assignee, title, kind, payload, event_id, idempotency_key, state, priority,
                      attempt, max_attempts, owner, lease_token_hash, lease_expires_at, visible_at, result,
                      last_error, created_at, updated_at, claimed_at, completed_at)
SELECT id, queue, assignee, title, kind, payload, event_id, idempotency_key,
       CASE WHEN state = 'failed' AND visible_at IS NOT NULL THEN 'pending' ELSE state END, priority,
       attempt, max_attempts, owner, lease_token_hash, lease_expires_at, visible_at, result,
       last_error, created_at, updated_at, claimed_at, completed_at
FROM todos;
DROP TABLE todos;
ALTER TABLE todos_v6 RENAME TO todos;
DELETE FROM sqlite_sequence WHERE name = 'todos';
INSERT INTO sqlite_sequence (name, seq)
SELECT 'todos', MAX(COALESCE((SELECT seq FROM migration_6_sequence), 0), COALESCE((SELECT MAX(id) FROM todos), 0));
DROP TABLE migration_6_sequence;
CREATE INDEX todos_ready_by_queue ON todos (queue, priority DESC, id) WHERE visible_at IS NOT NULL;
CREATE INDEX todos_ready ON todos (priority DESC, id) WHERE visible_at IS NOT NULL;
CREATE INDEX todos_leases ON todos (lease_expires_at) WHERE state = 'claimed';
CREATE INDEX todos_by_event ON todos (event_id) WHERE event_id IS NOT NULL;
CREATE INDEX todos_by_state ON todos (queue, state);
CREATE UNIQUE INDEX todos_live_key ON todos (queue, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND (state = 'claimed' OR visible_at IS NOT NULL);
CREATE TABLE attempts_v6 (
    id          INTEGER PRIMARY KEY,
    todo_id     INTEGER NOT NULL REFERENCES todos (id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    owner       TEXT    NOT NULL,
    claimed_at  INTEGER NOT NULL,
    ended_at    INTEGER,
    outcome     TEXT CHECK (outcome IN ('completed', 'failed', 'released', 'lease_expired',
                                        'released_by_operator', 'cancelled')),
    error       TEXT,
    CHECK ((ended_at IS NULL) = (outcome IS NULL))
);
INSERT INTO attempts_v6 (id, todo_id, attempt, owner, claimed_at, ended_at, outcome, error)
SELECT id, todo_id, attempt, owner, claimed_at, ended_at, outcome, error FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_v6 RENAME TO attempts;
CREATE INDEX attempts_by_todo ON attempts (todo_id, id);
""",
    7: """-- Ingest leadership (core/leadership.py): the one process on this file that
-- runs the ingest side (Redis consumers, pruner, a configured receiver). The
-- fence grows by one at each change of leader; every batch a consumer stores
-- checks it in its own transaction, so a deposed leader stores nothing more.
CREATE TABLE IF NOT EXISTS ingest_leader (
    id           INTEGER PRIMARY KEY CHECK (id = 1),   -- one row at most
    fence        INTEGER NOT NULL,
    holder       TEXT    NOT NULL,                     -- a random token per process
    pid          INTEGER NOT NULL,
    host         TEXT    NOT NULL,
    kind         TEXT    NOT NULL,                     -- serve or mcp
    http         TEXT,                                 -- the receiver's address while it listens
    since        INTEGER NOT NULL,
    renewed_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,                     -- a leader not renewed by then is gone
    handover_to  TEXT                                  -- a process asking to take over (serve --take-over)
);

-- The processes that could lead, each seen now and then: the leader and its standbys.
CREATE TABLE IF NOT EXISTS ingest_members (
    holder   TEXT    PRIMARY KEY,
    pid      INTEGER NOT NULL,
    host     TEXT    NOT NULL,
    kind     TEXT    NOT NULL,
    seen_at  INTEGER NOT NULL
) WITHOUT ROWID;
""",
    # Fewer pages per job: the open attempt lives on its claimed todo and the
    # completed one on its done todo (completed_by); attempts keeps the others,
    # written once when they end, keyed (todo_id, seq) without a rowid. The
    # indexes that every state change rewrote, (queue, state) and the ready
    # order across queues, give way to (queue, id) and the dead letters'. Both
    # tables are rebuilt (foreign keys are off while migrating), keeping ids,
    # the todo id sequence and every row.
    8: """
CREATE TEMP TABLE migration_8_sequence AS SELECT seq FROM sqlite_sequence WHERE name = 'todos';
CREATE TABLE todos_v8 (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    queue            TEXT    NOT NULL CHECK (queue <> ''),
    assignee         TEXT,
    title            TEXT    NOT NULL,
    kind             TEXT,
    payload          TEXT    NOT NULL DEFAULT 'null',
    event_id         INTEGER REFERENCES events (id) ON DELETE SET NULL,
    idempotency_key  TEXT,
    state            TEXT    NOT NULL CHECK (state IN ('pending', 'claimed', 'done', 'failed', 'cancelled')),
    priority         INTEGER NOT NULL DEFAULT 0,
    attempt          INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts     INTEGER NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    owner            TEXT,
    lease_token_hash TEXT,
    lease_expires_at INTEGER,
    visible_at       INTEGER,
    result           TEXT,
    last_error       TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    claimed_at       INTEGER,
    completed_at     INTEGER,
    completed_by     TEXT,
    cancelled_by     TEXT,
    cancel_reason    TEXT,
    CHECK ((state = 'claimed') = (lease_expires_at IS NOT NULL)),
    CHECK ((state = 'claimed') = (lease_token_hash IS NOT NULL)),
    CHECK ((state = 'pending') = (visible_at IS NOT NULL))
);
INSERT INTO todos_v8 (id, queue, assignee, title, kind, payload, event_id, idempotency_key, state, priority,
                      attempt, max_attempts, owner, lease_token_hash, lease_expires_at, visible_at, result,
                      last_error, created_at, updated_at, claimed_at, completed_at, completed_by,
                      cancelled_by, cancel_reason)
SELECT id, queue, assignee, title, kind, payload, event_id, idempotency_key, state, priority,
       attempt, max_attempts, owner, lease_token_hash, lease_expires_at, visible_at, result,
       last_error, created_at, updated_at, claimed_at, completed_at,
       CASE WHEN state = 'done' THEN (
           SELECT owner FROM attempts
           WHERE attempts.todo_id = todos.id AND outcome = 'completed'
           ORDER BY id DESC LIMIT 1) END,
       cancelled_by, cancel_reason
FROM todos;
DROP TABLE todos;
ALTER TABLE todos_v8 RENAME TO todos;
DELETE FROM sqlite_sequence WHERE name = 'todos';
INSERT INTO sqlite_sequence (name, seq)
SELECT 'todos', MAX(COALESCE((SELECT seq FROM migration_8_sequence), 0), COALESCE((SELECT MAX(id) FROM todos), 0));
DROP TABLE migration_8_sequence;
CREATE INDEX todos_ready_by_queue ON todos (queue, priority DESC, id) WHERE visible_at IS NOT NULL;
CREATE INDEX todos_leases ON todos (lease_expires_at) WHERE state = 'claimed';
CREATE INDEX todos_by_queue ON todos (queue, id);
CREATE INDEX todos_dead ON todos (queue, id) WHERE state = 'failed';
CREATE INDEX todos_by_event ON todos (event_id) WHERE event_id IS NOT NULL;
CREATE UNIQUE INDEX todos_live_key ON todos (queue, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND (state = 'claimed' OR visible_at IS NOT NULL);
CREATE TABLE attempts_v8 (
    todo_id     INTEGER NOT NULL REFERENCES todos (id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    owner       TEXT    NOT NULL,
    claimed_at  INTEGER NOT NULL,
    ended_at    INTEGER NOT NULL,
    outcome     TEXT    NOT NULL CHECK (outcome IN ('failed', 'released', 'lease_expired',
                                                    'released_by_operator', 'cancelled')),
    error       TEXT,
    PRIMARY KEY (todo_id, seq)
) WITHOUT ROWID;
INSERT INTO attempts_v8 (todo_id, seq, attempt, owner, claimed_at, ended_at, outcome, error)
SELECT todo_id, ROW_NUMBER() OVER (PARTITION BY todo_id ORDER BY id), attempt, owner, claimed_at,
       ended_at, outcome, error
FROM attempts
WHERE ended_at IS NOT NULL AND outcome <> 'completed';
DROP TABLE attempts;
ALTER TABLE attempts_v8 RENAME TO attempts;
""",
    # The leader says which of the sources' environment variables it has (`doctor` asks).
    9: """
ALTER TABLE ingest_leader ADD COLUMN env TEXT;
""",
}

READERS = 2  # read-only connections for read_one / read_all, opened as needed
SYNCHRONOUS_MODES = ("FULL", "NORMAL")

T = TypeVar("T")



def _file_name(path: Path) -> str:
    """The name to give SQLite: absolute, so that a file named ":memory:" or
    "file:…" is a file like any other and not an in-memory database or a URI."""
    return str(path.absolute())


def schema_sql() -> str:
    """schema.sql: the packaged copy in a wheel, else the repository root's."""
    packaged = resources.files(__package__).joinpath("schema.sql")
    if packaged.is_file():
        return packaged.read_text("utf-8")
    return (Path(__file__).resolve().parents[4] / "schema.sql").read_text("utf-8")


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
        # Checkpoints run beside the commits (checkpoints.py); a commit folds
        # the log into the file itself only should that fall this far behind.
        f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT}",
    ]


def _migrate(path: Path, busy_ms: int) -> None:
    """Bring the file to SCHEMA_VERSION, or refuse it and leave it untouched.

    Whether the file is ours is decided by reading alone, before anything is
    written (WAL included), from one snapshot: a new file another process is
    giving the schema is empty or whole, never read half from before and half
    from after its commit. The identity is read again inside BEGIN IMMEDIATE,
    so several processes opening a new file at once create the schema exactly
    once, each of the others finding it there.
    """
    conn = sqlite3.connect(_file_name(path), isolation_level=None, timeout=busy_ms / 1000)
    try:
        conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
        version, app_id, tables = _identity(conn)
        if version == SCHEMA_VERSION and app_id == APPLICATION_ID:
            return
        _refuse_foreign(path, version, app_id, tables)
        _refuse_newer(path, version)
        for pragma in _pragmas("FULL", busy_ms):
            conn.execute(pragma)
        # A migration may rebuild a table (a new CHECK): dropping the old one
        # with foreign keys on would cascade into its children.
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("BEGIN IMMEDIATE")
        try:
            version, app_id, tables = _identity(conn)  # as the write lock's holder sees it: it may be done by now
            _refuse_foreign(path, version, app_id, tables)
            _refuse_newer(path, version)
            if version == SCHEMA_VERSION and app_id == APPLICATION_ID:
                conn.execute("ROLLBACK")
                return
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


def _identity(conn: sqlite3.Connection) -> tuple[int, int, set[str]]:
    """(user version, application id, tables) of the file, read from one snapshot: in one read
    transaction, unless ``conn`` is in a transaction already."""
    begun = not conn.in_transaction
    if begun:
        conn.execute("BEGIN")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = _tables(conn)
    finally:
        if begun and conn.in_transaction:
            conn.execute("COMMIT")  # it only read
    return version, app_id, tables


def _refuse_foreign(path: Path, version: int, app_id: int, tables: set[str]) -> None:
    """Ours: our application id; or a new empty file; or version 1 with exactly
    version 1's tables (that version wrote no application id)."""
    if app_id == APPLICATION_ID or _ours(version, app_id, tables):
        return
    raise StoreUnusable(
        f"{path} is an SQLite database but not a switchboard-local one "
        f"(application id {app_id}, user version {version}); it was left as it is"
    )


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {
        name
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'")
    }


def _ours(version: int, app_id: int, tables: set[str]) -> bool:
    if app_id == APPLICATION_ID:
        return True
    return app_id == 0 and ((version == 0 and not tables) or (version == 1 and tables == V1_TABLES))


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
    if primary in _BUSY or (not primary and is_busy(exc)):
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
        path: str | os.PathLike[str] | None = None,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        synchronous: str = "FULL",
        monotonic: Monotonic | None = None,
        read_only: bool = False,
    ) -> SQLiteStore:
        if synchronous not in SYNCHRONOUS_MODES:
            raise InvalidArgument(f"synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}")
        db_path = expanded(path) if path is not None else default_path()
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
    conn = sqlite3.connect(_file_name(path), timeout=timeout, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def _connect(path: Path, synchronous: str, busy_ms: int) -> sqlite3.Connection:
    """Runs in the store's thread, which then owns the connection."""
    _create_owner_only(path)
    _migrate(path, busy_ms)
    _make_owner_only(path)
    # Used by the store's thread, or by the event loop's thread for a lone
    # write; never both at once (GroupCommit._conn_lock).
    conn = sqlite3.connect(_file_name(path), isolation_level=None, timeout=busy_ms / 1000, check_same_thread=False)
    try:
        conn.row_factory = sqlite3.Row
        for pragma in _pragmas(synchronous, busy_ms):
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
    conn = sqlite3.connect(_file_name(path), isolation_level=None, timeout=0, check_same_thread=False)
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
        version, app_id, tables = _identity(conn)
        _refuse_foreign(path, version, app_id, tables)
        _refuse_newer(path, version)
        if version != SCHEMA_VERSION:
            raise StoreUnusable(f"{path} has schema version {version}; it is upgraded when opened for writing")
    except BaseException:
        conn.close()
        raise
    return conn


def inspect_file(path: Path) -> FileState:
    """``Store.inspect``: the file's identity, journal mode and integrity, read with nothing changed."""
    with driver_errors(path):
        conn = _connect_existing(path, INSPECT_BUSY_MS)
    try:
        with driver_errors(path):
            try:
                version, app_id, tables = _identity(conn)
            except sqlite3.DatabaseError as exc:
                if _primary(exc) == "SQLITE_NOTADB":
                    return FileState(database=False, current=SCHEMA_VERSION, error=str(exc))
                if _primary(exc) == "SQLITE_CORRUPT":  # the schema's own pages
                    return FileState(database=True, current=SCHEMA_VERSION, problems=(str(exc),))
                raise
            journal = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
            try:
                found = [str(row[0]) for row in conn.execute(f"PRAGMA quick_check({QUICK_CHECK_MAX})")]
            except sqlite3.DatabaseError as exc:
                if _primary(exc) not in _UNUSABLE:
                    raise
                found = [str(exc)]
        return FileState(
            database=True,
            current=SCHEMA_VERSION,
            version=version,
            ours=_ours(version, app_id, tables),
            empty=not tables,
            journal_mode=journal,
            problems=() if found == ["ok"] else tuple(found),
        )
    finally:
        conn.close()


def _primary(exc: sqlite3.Error) -> str:
    """SQLite's primary result code of a driver error: SQLITE_IOERR_WRITE -> SQLITE_IOERR."""
    return "_".join((getattr(exc, "sqlite_errorname", None) or "").split("_")[:2])
