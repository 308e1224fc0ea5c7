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
    # Per-queue limits (SQLite's migration 11 says what).
    11: """
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
