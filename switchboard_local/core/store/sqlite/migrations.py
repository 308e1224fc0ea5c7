"""An SQLite file's schema: whether a file is ours and at which version, the schema a new
file is given (schema.sql, at the repository root), the settings every connection runs,
and the steps from each version to the next, run once, under the file's write lock, by
whichever process opens it first.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ...errors import StoreUnusable
from ..shared import SCHEMA_VERSION, schema_text
from .checkpoints import WAL_AUTOCHECKPOINT
from .errors import translate

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
-- runs the ingest side (broker consumers, pruner, a configured receiver). The
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
    # One form of derived key for every source, whatever its broker (routing.Delivery.key_base): an
    # adapter's todos made before had the broker's name before the source ('event:redis:{source}:…'), the
    # only broker there was. A key whose new form a live todo of its queue holds already (a webhook source
    # of the same name once) keeps its old form, rather than break the one-live-todo-per-key index.
    # Adapters' configs name their URL as every broker's do: url and url_env (a config that is not
    # JSON, edited by hand, stays as it is).
    10: """
UPDATE todos SET idempotency_key = 'event:' || substr(idempotency_key, 13)
WHERE substr(idempotency_key, 1, 12) = 'event:redis:'
  AND NOT EXISTS (SELECT 1 FROM todos AS held
                  WHERE held.queue = todos.queue AND held.idempotency_key = 'event:' || substr(todos.idempotency_key, 13));
UPDATE sources SET config = json_remove(json_set(config, '$.url', json_extract(config, '$.redis_url')), '$.redis_url')
WHERE family = 'queue' AND json_valid(config) AND json_type(config, '$.redis_url') IS NOT NULL
  AND json_type(config, '$.url') IS NULL;
UPDATE sources SET config = json_remove(json_set(config, '$.url_env', json_extract(config, '$.redis_url_env')),
                                        '$.redis_url_env')
WHERE family = 'queue' AND json_valid(config) AND json_type(config, '$.redis_url_env') IS NOT NULL
  AND json_type(config, '$.url_env') IS NULL;
""",
    # Dependencies (issue 31): todos gain blocked_by and waits_for, and the CHECK that ties
    # visible_at to pending lets a blocked todo (pending, waiting for others) have none; the live
    # key's predicate says what it means (pending or claimed), which blocked todos are too. The
    # CHECK changes, so the table is rebuilt (foreign keys are off while migrating), keeping ids,
    # the todo id sequence and every row; then todo_deps and the trigger that unblocks.
    11: """
CREATE TEMP TABLE migration_11_sequence AS SELECT seq FROM sqlite_sequence WHERE name = 'todos';
CREATE TABLE todos_v11 (
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
    blocked_by       INTEGER NOT NULL DEFAULT 0 CHECK (blocked_by >= 0),
    waits_for        INTEGER NOT NULL DEFAULT 0 CHECK (waits_for >= 0),
    CHECK ((state = 'claimed') = (lease_expires_at IS NOT NULL)),
    CHECK ((state = 'claimed') = (lease_token_hash IS NOT NULL)),
    CHECK ((state = 'pending' AND blocked_by = 0) = (visible_at IS NOT NULL))
);
INSERT INTO todos_v11 (id, queue, assignee, title, kind, payload, event_id, idempotency_key, state, priority,
                       attempt, max_attempts, owner, lease_token_hash, lease_expires_at, visible_at, result,
                       last_error, created_at, updated_at, claimed_at, completed_at, completed_by,
                       cancelled_by, cancel_reason)
SELECT id, queue, assignee, title, kind, payload, event_id, idempotency_key, state, priority,
       attempt, max_attempts, owner, lease_token_hash, lease_expires_at, visible_at, result,
       last_error, created_at, updated_at, claimed_at, completed_at, completed_by,
       cancelled_by, cancel_reason
FROM todos;
DROP TABLE todos;
ALTER TABLE todos_v11 RENAME TO todos;
DELETE FROM sqlite_sequence WHERE name = 'todos';
INSERT INTO sqlite_sequence (name, seq)
SELECT 'todos', MAX(COALESCE((SELECT seq FROM migration_11_sequence), 0), COALESCE((SELECT MAX(id) FROM todos), 0));
DROP TABLE migration_11_sequence;
CREATE INDEX todos_ready_by_queue ON todos (queue, priority DESC, id) WHERE visible_at IS NOT NULL;
CREATE INDEX todos_leases ON todos (lease_expires_at) WHERE state = 'claimed';
CREATE INDEX todos_by_queue ON todos (queue, id);
CREATE INDEX todos_dead ON todos (queue, id) WHERE state = 'failed';
CREATE INDEX todos_by_event ON todos (event_id) WHERE event_id IS NOT NULL;
CREATE UNIQUE INDEX todos_live_key ON todos (queue, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state IN ('pending', 'claimed');
CREATE INDEX todos_blocked ON todos (queue, id) WHERE state = 'pending' AND blocked_by > 0;
CREATE TABLE IF NOT EXISTS todo_deps (
    todo_id   INTEGER NOT NULL REFERENCES todos (id) ON DELETE CASCADE,
    after_id  INTEGER NOT NULL REFERENCES todos (id) ON DELETE CASCADE,
    PRIMARY KEY (todo_id, after_id),
    CHECK (after_id < todo_id)
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS todo_deps_by_after ON todo_deps (after_id);

CREATE TRIGGER IF NOT EXISTS todos_done_unblocks
AFTER UPDATE OF state ON todos
WHEN NEW.state = 'done' AND OLD.state <> 'done'
BEGIN
    UPDATE todos
    SET blocked_by = blocked_by - 1,
        visible_at = CASE WHEN blocked_by = 1 THEN NEW.updated_at END,
        updated_at = NEW.updated_at
    WHERE id IN (SELECT todo_id FROM todo_deps WHERE after_id = NEW.id)
      AND state = 'pending' AND blocked_by > 0;
END;
""",
    # Schedules (core/schedules.py): a third family of sources, 'schedule', whose ticks are events of that
    # family; a schedule's newest fired tick (sources.last_tick_at). Both CHECKs change, so both tables are
    # rebuilt (foreign keys are off while migrating), keeping every row, the event ids, their sequence and
    # the indexes.
    12: """
CREATE TEMP TABLE migration_12_sequence AS SELECT seq FROM sqlite_sequence WHERE name = 'events';
CREATE TABLE events_v12 (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    source          TEXT    NOT NULL,
    family          TEXT    NOT NULL CHECK (family IN ('webhook', 'queue', 'schedule', 'operator')),
    type            TEXT    NOT NULL,
    external_id     TEXT    NOT NULL,
    trust_mode      TEXT    NOT NULL,
    verified        INTEGER NOT NULL CHECK (verified IN (0, 1)),
    verify_detail   TEXT,
    content_type    TEXT,
    headers         TEXT    NOT NULL DEFAULT '{}',
    body            BLOB    NOT NULL,
    size            INTEGER NOT NULL,
    received_at     INTEGER NOT NULL,
    UNIQUE (source, external_id)
);
INSERT INTO events_v12 (id, source, family, type, external_id, trust_mode, verified, verify_detail, content_type,
                        headers, body, size, received_at)
SELECT id, source, family, type, external_id, trust_mode, verified, verify_detail, content_type,
       headers, body, size, received_at
FROM events;
DROP TABLE events;
ALTER TABLE events_v12 RENAME TO events;
DELETE FROM sqlite_sequence WHERE name = 'events';
INSERT INTO sqlite_sequence (name, seq)
SELECT 'events', MAX(COALESCE((SELECT seq FROM migration_12_sequence), 0), COALESCE((SELECT MAX(id) FROM events), 0));
DROP TABLE migration_12_sequence;
CREATE INDEX events_received ON events (received_at);
CREATE TABLE sources_v12 (
    name                 TEXT    PRIMARY KEY CHECK (name <> ''),
    family               TEXT    NOT NULL CHECK (family IN ('webhook', 'queue', 'schedule')),
    kind                 TEXT    NOT NULL,
    trust_mode           TEXT    NOT NULL,
    enabled              INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    config               TEXT    NOT NULL DEFAULT '{}',
    secrets              TEXT    NOT NULL DEFAULT '[]',
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    last_poll_at         INTEGER,
    last_error           TEXT,
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    messages_stored      INTEGER NOT NULL DEFAULT 0,
    last_tick_at         INTEGER
);
INSERT INTO sources_v12 (name, family, kind, trust_mode, enabled, config, secrets, created_at, updated_at,
                         last_poll_at, last_error, consecutive_failures, messages_stored)
SELECT name, family, kind, trust_mode, enabled, config, secrets, created_at, updated_at,
       last_poll_at, last_error, consecutive_failures, messages_stored
FROM sources;
DROP TABLE sources;
ALTER TABLE sources_v12 RENAME TO sources;
""",
    # Per-queue limits (`queue limit`): a queue's max_claimed and max_per_minute, and the log of the
    # last minute's claims of a rate-limited queue. Nothing existing changes: no queue has a limit yet.
    13: """
ALTER TABLE queues ADD COLUMN max_claimed INTEGER CHECK (max_claimed >= 1);
ALTER TABLE queues ADD COLUMN max_per_minute INTEGER CHECK (max_per_minute >= 1);
CREATE TABLE IF NOT EXISTS queue_claims (
    queue       TEXT    NOT NULL,
    claimed_at  INTEGER NOT NULL,
    todo_id     INTEGER NOT NULL,
    lease_token_hash TEXT NOT NULL,      -- the claim's: one row per claim, however many at one instant
    PRIMARY KEY (queue, claimed_at, lease_token_hash)
) WITHOUT ROWID;
""",
    # Rule chains (`rule add --chain`): a rule whose todo waits for the todos the event's earlier rules
    # made. Added last in the table, as schema.sql has it; every existing rule chains nothing.
    14: """
ALTER TABLE rules ADD COLUMN chain INTEGER NOT NULL DEFAULT 0 CHECK (chain IN (0, 1));
""",
}


def file_name(path: Path) -> str:
    """The name to give SQLite: absolute, so that a file named ":memory:" or
    "file:…" is a file like any other and not an in-memory database or a URI."""
    return str(path.absolute())


def schema_sql() -> str:
    """schema.sql: the packaged copy in a wheel, else the repository root's."""
    return schema_text(__package__, "schema.sql")


def statements_of(script: str) -> list[str]:
    """Split a script into complete statements (triggers and all)."""
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    return statements


def pragmas(synchronous: str, busy_ms: int) -> list[str]:
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
        # A write's temporary tables (claim_next's candidates, their sort) in
        # memory: each one's temporary file would cost the claim more than the
        # rest of it (0.2 to 0.5 ms a statement, measured). A write's are small.
        "PRAGMA temp_store = MEMORY",
    ]


def migrate(path: Path, busy_ms: int) -> None:
    """Bring the file to SCHEMA_VERSION, or refuse it and leave it untouched.

    Whether the file is ours is decided by reading alone, before anything is
    written (WAL included), from one snapshot: a new file another process is
    giving the schema is empty or whole, never read half from before and half
    from after its commit. The identity is read again inside BEGIN IMMEDIATE,
    so several processes opening a new file at once create the schema exactly
    once, each of the others finding it there.
    """
    conn = sqlite3.connect(file_name(path), isolation_level=None, timeout=busy_ms / 1000)
    try:
        conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
        version, app_id, tables = identity(conn)
        if version == SCHEMA_VERSION and app_id == APPLICATION_ID:
            return
        refuse_foreign(path, version, app_id, tables)
        refuse_newer(path, version)
        for pragma in pragmas("FULL", busy_ms):
            conn.execute(pragma)
        # A migration may rebuild a table (a new CHECK): dropping the old one
        # with foreign keys on would cascade into its children.
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("BEGIN IMMEDIATE")
        try:
            version, app_id, tables = identity(conn)  # as the write lock's holder sees it: it may be done by now
            refuse_foreign(path, version, app_id, tables)
            refuse_newer(path, version)
            if version == SCHEMA_VERSION and app_id == APPLICATION_ID:
                conn.execute("ROLLBACK")
                return
            if version == 0:
                for statement in statements_of(schema_sql()):
                    conn.execute(statement)
            else:
                for target in range(version + 1, SCHEMA_VERSION + 1):
                    for statement in statements_of(MIGRATIONS[target]):
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


def identity(conn: sqlite3.Connection) -> tuple[int, int, set[str]]:
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


def refuse_foreign(path: Path, version: int, app_id: int, tables: set[str]) -> None:
    """Ours: our application id; or a new empty file; or version 1 with exactly
    version 1's tables (that version wrote no application id)."""
    if app_id == APPLICATION_ID or ours(version, app_id, tables):
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


def ours(version: int, app_id: int, tables: set[str]) -> bool:
    if app_id == APPLICATION_ID:
        return True
    return app_id == 0 and ((version == 0 and not tables) or (version == 1 and tables == V1_TABLES))


def refuse_newer(path: Path, version: int) -> None:
    if version > SCHEMA_VERSION:
        raise StoreUnusable(
            f"{path} has schema version {version}, newer than this switchboard-local "
            f"understands ({SCHEMA_VERSION}); upgrade switchboard-local to use it"
        )
