"""A PostgreSQL database's schema: whether a database is ours and at which version, the
schema a new one is given (schema.postgres.sql, at the repository root), and the steps
from each version to the next, run by one opener at a time under an advisory lock.
"""

from __future__ import annotations

from typing import Any

import psycopg

from ...errors import StoreUnusable
from ..shared import SCHEMA_VERSION, schema_text

MIGRATION_LOCK = 0x53424C51  # pg_advisory_xact_lock key ('SBLQ'): one opener creates or migrates at a time


def schema_sql() -> str:
    """schema.postgres.sql: the packaged copy in a wheel, else the repository root's."""
    return schema_text(__package__, "schema.postgres.sql")


# version -> SQL that upgrades a database from version - 1 (the PostgreSQL
# schema starts at version 8, SQLite's when it was written).
MIGRATIONS: dict[int, str] = {
    # The leader says which of the sources' environment variables it has (`doctor` asks).
    9: 'ALTER TABLE ingest_leader ADD COLUMN env text COLLATE "C";',
    # One form of derived key for every source (SQLite's migration 10 says why), and adapters'
    # URLs under the names every broker's take.
    10: """
UPDATE todos SET idempotency_key = 'event:' || substr(idempotency_key, 13)
WHERE left(idempotency_key, 12) = 'event:redis:'
  AND NOT EXISTS (SELECT 1 FROM todos AS held
                  WHERE held.queue = todos.queue AND held.idempotency_key = 'event:' || substr(todos.idempotency_key, 13));
UPDATE sources SET config = (config - 'redis_url') || jsonb_build_object('url', config -> 'redis_url')
WHERE family = 'queue' AND jsonb_typeof(config) = 'object' AND config ? 'redis_url' AND NOT config ? 'url';
UPDATE sources SET config = (config - 'redis_url_env') || jsonb_build_object('url_env', config -> 'redis_url_env')
WHERE family = 'queue' AND jsonb_typeof(config) = 'object' AND config ? 'redis_url_env' AND NOT config ? 'url_env';
""",
    # Dependencies (SQLite's migration 11 says what and why).
    11: """
ALTER TABLE todos ADD COLUMN blocked_by integer NOT NULL DEFAULT 0 CHECK (blocked_by >= 0);
ALTER TABLE todos ADD COLUMN waits_for integer NOT NULL DEFAULT 0 CHECK (waits_for >= 0);
DO $$
DECLARE name text;
BEGIN
    SELECT conname INTO name FROM pg_constraint
    WHERE conrelid = 'todos'::regclass AND contype = 'c'
      AND pg_get_constraintdef(oid) LIKE '%state = ''pending''%visible_at IS NOT NULL%';
    EXECUTE format('ALTER TABLE todos DROP CONSTRAINT %I', name);
END
$$;
ALTER TABLE todos ADD CONSTRAINT todos_pending_visible
    CHECK ((state = 'pending' AND blocked_by = 0) = (visible_at IS NOT NULL));
DROP INDEX todos_live_key;
CREATE UNIQUE INDEX todos_live_key ON todos (queue, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state IN ('pending', 'claimed');
CREATE INDEX todos_blocked ON todos (queue, id) WHERE state = 'pending' AND blocked_by > 0;
CREATE TABLE IF NOT EXISTS todo_deps (
    todo_id   bigint  NOT NULL REFERENCES todos (id) ON DELETE CASCADE,
    after_id  bigint  NOT NULL REFERENCES todos (id) ON DELETE CASCADE,
    PRIMARY KEY (todo_id, after_id),
    CHECK (after_id < todo_id)
);

CREATE INDEX IF NOT EXISTS todo_deps_by_after ON todo_deps (after_id);

CREATE OR REPLACE FUNCTION sb_todos_done_unblocks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE todos
    SET blocked_by = blocked_by - 1,
        visible_at = CASE WHEN blocked_by = 1 THEN NEW.updated_at END,
        updated_at = NEW.updated_at
    WHERE id IN (SELECT todo_id FROM todo_deps WHERE after_id = NEW.id)
      AND state = 'pending' AND blocked_by > 0;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER todos_done_unblocks
AFTER UPDATE OF state ON todos
FOR EACH ROW WHEN (NEW.state = 'done' AND OLD.state <> 'done')
EXECUTE FUNCTION sb_todos_done_unblocks();
""",
    # Schedules (core/schedules.py): the family 'schedule' for sources and events, and a schedule's newest
    # fired tick (SQLite's migration 12 rebuilds its tables for the CHECKs; here they are replaced).
    12: """
ALTER TABLE events DROP CONSTRAINT events_family_check,
    ADD CONSTRAINT events_family_check CHECK (family IN ('webhook', 'queue', 'schedule', 'operator'));
ALTER TABLE sources DROP CONSTRAINT sources_family_check,
    ADD CONSTRAINT sources_family_check CHECK (family IN ('webhook', 'queue', 'schedule'));
ALTER TABLE sources ADD COLUMN last_tick_at timestamptz;
""",
    # Per-queue limits (SQLite's migration 13 says what).
    13: """
ALTER TABLE queues ADD COLUMN max_claimed integer CHECK (max_claimed >= 1);
ALTER TABLE queues ADD COLUMN max_per_minute integer CHECK (max_per_minute >= 1);
CREATE TABLE IF NOT EXISTS queue_claims (
    queue       text COLLATE "C"  NOT NULL,
    claimed_at  timestamptz       NOT NULL,
    todo_id     bigint            NOT NULL,
    lease_token_hash text COLLATE "C" NOT NULL,
    PRIMARY KEY (queue, claimed_at, lease_token_hash)
);
""",
    # Rule chains (SQLite's migration 14 says what).
    14: """
ALTER TABLE rules ADD COLUMN chain boolean NOT NULL DEFAULT false;
""",
}


def identity(conn: psycopg.Connection[Any]) -> tuple[bool, int, bool]:
    """(ours, version, empty) of the database ``conn`` is on: read only, from one scan of the
    catalog, so that a schema another opener commits meanwhile is seen whole or not at all."""
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE c.relname = 'schema_migrations' AND c.relkind IN ('r', 'p')) > 0, count(*) "
        "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')"
    ).fetchone()
    assert row is not None
    has_table, relations = bool(row[0]), int(row[1])
    if not has_table:
        return relations == 0, 0, relations == 0
    version = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
    return True, int(version[0]) if version else 0, False


def refuse(where: str, ours: bool, version: int, current: int, *, read_only: bool) -> None:
    if not ours:
        raise StoreUnusable(
            f"{where} is a PostgreSQL database but not a switchboard-local one "
            "(it has tables and no schema_migrations); it was left as it is"
        )
    if version > current:
        raise StoreUnusable(
            f"{where} has schema version {version}, newer than this switchboard-local "
            f"understands ({current}); upgrade switchboard-local to use it"
        )
    if read_only and version != current:
        what = "no schema yet" if version == 0 else f"schema version {version}"
        raise StoreUnusable(f"{where} has {what}; it is created or upgraded when opened for writing")


def migrate(conn: psycopg.Connection[Any], where: str) -> None:
    """Bring the database to the current version, or refuse it and leave it untouched.

    Read first without a lock (an up-to-date database costs one query); else,
    in one transaction under an advisory lock (concurrent openers wait for
    each other and find the work done), create the schema or run each step.
    """
    current = SCHEMA_VERSION
    ours, version, _ = identity(conn)
    refuse(where, ours, version, current, read_only=False)
    if version == current:
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        ours, version, _ = identity(conn)
        refuse(where, ours, version, current, read_only=False)
        if version == current:
            return
        if version == 0:
            conn.execute(schema_sql())  # type: ignore[arg-type]  # one script, no parameters
            conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (current,))
            return
        for target in range(version + 1, current + 1):
            step = MIGRATIONS.get(target)
            if step is None:
                raise StoreUnusable(
                    f"{where} has schema version {version}, which this switchboard-local cannot upgrade"
                )
            conn.execute(step)  # type: ignore[arg-type]
            conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (target,))
