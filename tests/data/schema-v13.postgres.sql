-- switchboard-local schema for PostgreSQL: the same tables, constraints and
-- indexes as schema.sql, in PostgreSQL's own types. The statements that read
-- and write them are switchboard_local/core/store/postgres/queries.postgres.sql.
--
-- Types. Ids are bigint identities (never reused after a prune: ids are
-- cursors). Times are timestamptz; the core's clock and every Python-facing
-- value stay integer milliseconds since the Unix epoch, converted at the edge
-- of each statement by sb_ts (ms -> timestamptz) and sb_ms (timestamptz -> ms).
-- JSON columns are jsonb (queries return them as text, so the verbs parse
-- what they parse on SQLite; jsonb keeps neither key order nor whitespace).
-- Flags are boolean (queries return them as 0/1 integers). events.body is bytea.
-- Text columns use the "C" collation: names sort and compare byte by byte, as
-- SQLite's BINARY does, whatever the database's locale.
--
-- Versioning. schema_migrations holds one row per schema version applied;
-- the database's version is max(version), what SQLite's PRAGMA user_version
-- says of a file, with the same numbers (core/store/shared.py's SCHEMA_VERSION).
-- A new database: the store takes pg_advisory_xact_lock(1396853841) (so that
-- two processes opening an empty database do not both create it), applies this
-- file in that one transaction, and inserts (SCHEMA_VERSION) into
-- schema_migrations. An older database: under the same lock, each migration
-- step N (in order, from max(version) + 1 to SCHEMA_VERSION) runs in the
-- transaction and inserts (N); PostgreSQL's DDL is transactional, so a step
-- that fails leaves the version as it was. A database is ours when
-- schema_migrations exists and its rows carry our application id (the one
-- PRAGMA application_id gives our SQLite files, 'SBLQ'); an empty one (no
-- tables in the schema) is new.
--
--   current version:  SELECT max(version) FROM schema_migrations
--   ours:             SELECT to_regclass('schema_migrations') IS NOT NULL
--                     (then every row has application_id = 1396853841, by its CHECK)
--
-- Change notification. Statement-level triggers on todos, events, sources,
-- rules, agents, settings and queues call pg_notify('switchboard', <table
-- name>) after every statement that changed rows; PostgreSQL delivers the
-- notifications at commit (none for a rollback), one per table per
-- transaction, to every session that ran LISTEN switchboard, on any host. The
-- store's data_version() and the long poll's wakeups listen there.
--
-- Ids handed out by the store (the batch ingest, core/events.py): a batch
-- reads the next free id once (next_event_id, next_todo_id) and numbers its
-- rows itself, which is safe only while nobody else takes an id. Every insert
-- that draws an id therefore goes through sb_new_id (a shared transaction
-- lock, then the identity's sequence), and the batch through sb_first_free_id
-- (the same lock, exclusive, held to its commit) and sb_given_id (moves the
-- sequence past the ids it gave). One lock for both tables (events and todos),
-- so that a transaction mixing single inserts of both never deadlocks with a
-- batch. The batch takes the lock in its first statement (seen_deliveries,
-- through sb_seen_delivery), so that its look for repeats already sees every
-- delivery stored before it. Anything that inserts ids of its own (db copy)
-- ends with SELECT sb_given_id('todos', max(id)) and the same for events.
-- The id lock is advisory lock (1396853841, 1). The followers of new todos
-- (todos_after, todo_arrivals) wait on it for the transactions that drew
-- smaller ids (sb_wait_for_inserts).
--
-- The store runs every transaction at READ COMMITTED (each statement sees
-- what was committed before it started); the statements are written for it.

CREATE TABLE IF NOT EXISTS schema_migrations (
    version         integer     PRIMARY KEY CHECK (version >= 1),
    applied_at      timestamptz NOT NULL DEFAULT now(),
    application_id  bigint      NOT NULL DEFAULT 1396853841 CHECK (application_id = 1396853841)
);

-- ms since the epoch -> timestamptz, and back. NULL stays NULL.
CREATE OR REPLACE FUNCTION sb_ts(ms bigint) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN to_timestamp(ms / 1000.0);

CREATE OR REPLACE FUNCTION sb_ms(ts timestamptz) RETURNS bigint
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN CAST(floor(extract(epoch FROM ts) * 1000) AS bigint);

-- The lock that keeps a batch's ids its own (see above): shared by inserts
-- that draw an id, exclusive for a batch; both held to the commit.
CREATE OR REPLACE FUNCTION sb_new_id(tbl regclass) RETURNS bigint
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1396853841, 1);
    RETURN nextval(pg_get_serial_sequence(CAST(tbl AS text), 'id'));
END
$$;

CREATE OR REPLACE FUNCTION sb_first_free_id(tbl regclass) RETURNS bigint
    LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    highest bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(1396853841, 1);
    EXECUTE format('SELECT max(id) FROM %s', tbl) INTO highest;
    RETURN greatest(coalesce(pg_sequence_last_value(pg_get_serial_sequence(CAST(tbl AS text), 'id')), 0),
                    coalesce(highest, 0)) + 1;
END
$$;

CREATE OR REPLACE FUNCTION sb_given_id(tbl regclass, id bigint) RETURNS bigint
    LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    seq text COLLATE "C" := pg_get_serial_sequence(CAST(tbl AS text), 'id');
BEGIN
    IF id > coalesce(pg_sequence_last_value(seq), 0) THEN
        PERFORM setval(seq, id);
    END IF;
    RETURN id;
END
$$;

-- The batch's look for a delivery seen before (queries.postgres.sql's
-- seen_deliveries): under the id lock, exclusive, and (VOLATILE) with a
-- snapshot taken after it, so it sees every delivery committed before the
-- lock was granted. The event it repeats (by its external id, else the kept
-- key of one pruned since, else its body: seen_delivery's order), or NULL.
CREATE OR REPLACE FUNCTION sb_seen_delivery(source text, external_id text, pruned_key text, body_key text,
                                            window_start bigint) RETURNS bigint
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1396853841, 1);
    RETURN coalesce(
        (SELECT events.id FROM events
         WHERE events.source = sb_seen_delivery.source AND events.external_id = sb_seen_delivery.external_id),
        (SELECT delivery_keys.event_id FROM delivery_keys
         WHERE delivery_keys.source = sb_seen_delivery.source AND delivery_keys.key = pruned_key),
        (SELECT delivery_keys.event_id FROM delivery_keys
         WHERE delivery_keys.source = sb_seen_delivery.source AND delivery_keys.key = body_key
           AND delivery_keys.seen_at >= sb_ts(window_start)));
END
$$;

-- Notifies listeners of a change to the table, at commit, when the statement
-- changed a row (its triggers name the rows it changed `changed`).
CREATE OR REPLACE FUNCTION sb_notify() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM changed) THEN
        PERFORM pg_notify('switchboard', TG_TABLE_NAME);
    END IF;
    RETURN NULL;
END
$$;

-- One delivery that arrived: a webhook request, a broker message, an operator
-- action. Immutable once written.
CREATE TABLE IF NOT EXISTS events (
    id              bigint      GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    source          text COLLATE "C"        NOT NULL,
    family          text COLLATE "C"        NOT NULL CHECK (family IN ('webhook', 'queue', 'schedule', 'operator')),
    type            text COLLATE "C"        NOT NULL,
    external_id     text COLLATE "C"        NOT NULL,
    trust_mode      text COLLATE "C"        NOT NULL,
    verified        boolean     NOT NULL,
    verify_detail   text COLLATE "C",
    content_type    text COLLATE "C",
    headers         jsonb       NOT NULL DEFAULT '{}',  -- secrets redacted
    body            bytea       NOT NULL,               -- raw bytes, kept byte for byte for replay
    size            bigint      NOT NULL,
    received_at     timestamptz NOT NULL,
    UNIQUE (source, external_id)                        -- a redelivery collapses into the first event
);

CREATE INDEX IF NOT EXISTS events_received ON events (received_at);

-- A durable unit of work (states and visible_at: see schema.sql).
CREATE TABLE IF NOT EXISTS todos (
    id               bigint      GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    queue            text COLLATE "C"        NOT NULL CHECK (queue <> ''),
    assignee         text COLLATE "C",
    title            text COLLATE "C"        NOT NULL,
    kind             text COLLATE "C",
    payload          jsonb       NOT NULL DEFAULT 'null',
    event_id         bigint      REFERENCES events (id) ON DELETE SET NULL,
    idempotency_key  text COLLATE "C",
    state            text COLLATE "C"        NOT NULL CHECK (state IN ('pending', 'claimed', 'done', 'failed', 'cancelled')),
    priority         bigint      NOT NULL DEFAULT 0,   -- higher first
    attempt          integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts     integer     NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    owner            text COLLATE "C",
    lease_token_hash text COLLATE "C",
    lease_expires_at timestamptz,
    visible_at       timestamptz,
    result           jsonb,
    last_error       text COLLATE "C",
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    claimed_at       timestamptz,
    completed_at     timestamptz,
    completed_by     text COLLATE "C",
    cancelled_by     text COLLATE "C",
    cancel_reason    text COLLATE "C",
    blocked_by       integer     NOT NULL DEFAULT 0 CHECK (blocked_by >= 0),    -- see schema.sql
    waits_for        integer     NOT NULL DEFAULT 0 CHECK (waits_for >= 0),
    CHECK ((state = 'claimed') = (lease_expires_at IS NOT NULL)),
    CHECK ((state = 'claimed') = (lease_token_hash IS NOT NULL)),
    CONSTRAINT todos_pending_visible CHECK ((state = 'pending' AND blocked_by = 0) = (visible_at IS NOT NULL))
);

-- The indexes on todos, as schema.sql's (which says what each serves).
CREATE INDEX IF NOT EXISTS todos_ready_by_queue
    ON todos (queue, priority DESC, id) WHERE visible_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS todos_leases
    ON todos (lease_expires_at) WHERE state = 'claimed';
CREATE INDEX IF NOT EXISTS todos_by_queue ON todos (queue, id);
CREATE INDEX IF NOT EXISTS todos_dead ON todos (queue, id) WHERE state = 'failed';
CREATE INDEX IF NOT EXISTS todos_by_event ON todos (event_id) WHERE event_id IS NOT NULL;

-- Blocked todos, per queue (see schema.sql).
CREATE INDEX IF NOT EXISTS todos_blocked ON todos (queue, id) WHERE state = 'pending' AND blocked_by > 0;

-- Idempotency: one live todo per (queue, key). Live = pending or claimed.
-- Inserts name this index's columns and predicate in ON CONFLICT, so that two
-- transactions racing for one key answer as SQLite's serialized ones do.
CREATE UNIQUE INDEX IF NOT EXISTS todos_live_key
    ON todos (queue, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state IN ('pending', 'claimed');

-- For each event, the todos its first delivery answered with.
CREATE TABLE IF NOT EXISTS event_todos (
    event_id  bigint  NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    position  integer NOT NULL,
    todo_id   bigint  NOT NULL REFERENCES todos (id) ON DELETE CASCADE,
    PRIMARY KEY (event_id, position)
);

CREATE INDEX IF NOT EXISTS event_todos_by_todo ON event_todos (todo_id);

-- Dependencies, and the trigger that readies a todo when the last one it
-- waits for is done (see schema.sql). A completer's trigger reads todo_deps
-- in a statement of its own (a fresh snapshot); a create that adds
-- dependencies first locks the todos it waits for (FOR SHARE, in
-- dependency_states), so a completion racing it either is seen by the create
-- or sees the create's rows.
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

-- The attempts that ended other than by completing (see schema.sql).
CREATE TABLE IF NOT EXISTS attempts (
    todo_id     bigint      NOT NULL REFERENCES todos (id) ON DELETE CASCADE,
    seq         integer     NOT NULL,
    attempt     integer     NOT NULL,
    owner       text COLLATE "C"        NOT NULL,
    claimed_at  timestamptz NOT NULL,
    ended_at    timestamptz NOT NULL,
    outcome     text COLLATE "C"        NOT NULL CHECK (outcome IN ('failed', 'released', 'lease_expired',
                                                        'released_by_operator', 'cancelled')),
    error       text COLLATE "C",
    PRIMARY KEY (todo_id, seq)
);

-- Agent profiles for the MCP server.
CREATE TABLE IF NOT EXISTS agents (
    name           text COLLATE "C"        PRIMARY KEY CHECK (name <> ''),
    queues         jsonb       NOT NULL,          -- array of queue names
    tools          jsonb,                         -- array of tool names, or NULL for all
    created_at     timestamptz NOT NULL,
    create_queues  jsonb,                         -- array: where create_for may put todos; NULL: its queues
    owner          text COLLATE "C"
);

-- The sources: configured producers of events.
CREATE TABLE IF NOT EXISTS sources (
    name                 text COLLATE "C"        PRIMARY KEY CHECK (name <> ''),
    family               text COLLATE "C"        NOT NULL CHECK (family IN ('webhook', 'queue', 'schedule')),
    kind                 text COLLATE "C"        NOT NULL,
    trust_mode           text COLLATE "C"        NOT NULL,
    enabled              boolean     NOT NULL DEFAULT true,
    config               jsonb       NOT NULL DEFAULT '{}',
    secrets              jsonb       NOT NULL DEFAULT '[]',  -- array of secret references, oldest first
    created_at           timestamptz NOT NULL,
    updated_at           timestamptz NOT NULL,
    last_poll_at         timestamptz,
    last_error           text COLLATE "C",
    consecutive_failures integer     NOT NULL DEFAULT 0,
    messages_stored      bigint      NOT NULL DEFAULT 0,
    last_tick_at         timestamptz             -- a schedule's newest tick fired (its due instant)
);

-- Routing rules, applied in position order to each new event of their source.
CREATE TABLE IF NOT EXISTS rules (
    id            bigint      GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    position      integer     NOT NULL,
    source        text COLLATE "C"        NOT NULL,
    type          text COLLATE "C",
    conditions    jsonb       NOT NULL DEFAULT '[]',
    action        text COLLATE "C"        NOT NULL CHECK (action IN ('todo', 'drop')),
    queue         text COLLATE "C",
    title         text COLLATE "C",
    assignee      text COLLATE "C",
    priority      bigint      NOT NULL DEFAULT 0,
    max_attempts  integer     NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    stop          boolean     NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL,
    CHECK ((action = 'todo') = (queue IS NOT NULL))
);

CREATE INDEX IF NOT EXISTS rules_by_source ON rules (source, position);

-- Deliveries seen, kept apart from the events (see schema.sql).
CREATE TABLE IF NOT EXISTS delivery_keys (
    source    text COLLATE "C"        NOT NULL,
    key       text COLLATE "C"        NOT NULL,
    event_id  bigint      NOT NULL,            -- the event it was (it may be pruned since)
    seen_at   timestamptz NOT NULL,
    PRIMARY KEY (source, key)
);

CREATE INDEX IF NOT EXISTS delivery_keys_by_age ON delivery_keys (seen_at);

-- Settings every process shares; a missing row means the default. Values
-- are text, as on SQLite (settings.py reads and writes them).
CREATE TABLE IF NOT EXISTS settings (
    name   text COLLATE "C" PRIMARY KEY,
    value  text COLLATE "C" NOT NULL
);

-- Queues an operator paused or limited (schema.sql says more). A claim of a
-- limited queue locks its row first (queries.postgres.sql's lock_limited_queues).
CREATE TABLE IF NOT EXISTS queues (
    name            text COLLATE "C"        PRIMARY KEY CHECK (name <> ''),
    paused_at       timestamptz,
    paused_by       text COLLATE "C",
    max_claimed     integer     CHECK (max_claimed >= 1),
    max_per_minute  integer     CHECK (max_per_minute >= 1)
);

-- The claims of the last minute on each queue with a max_per_minute (schema.sql says more).
CREATE TABLE IF NOT EXISTS queue_claims (
    queue       text COLLATE "C"  NOT NULL,
    claimed_at  timestamptz       NOT NULL,
    todo_id     bigint            NOT NULL,
    lease_token_hash text COLLATE "C" NOT NULL,
    PRIMARY KEY (queue, claimed_at, lease_token_hash)
);

-- Ingest leadership (core/leadership.py); the fence works across hosts.
CREATE TABLE IF NOT EXISTS ingest_leader (
    id           integer     PRIMARY KEY CHECK (id = 1),
    fence        bigint      NOT NULL,
    holder       text COLLATE "C"        NOT NULL,
    pid          integer     NOT NULL,
    host         text COLLATE "C"        NOT NULL,
    kind         text COLLATE "C"        NOT NULL,
    http         text COLLATE "C",
    since        timestamptz NOT NULL,
    renewed_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    handover_to  text COLLATE "C",
    env          text COLLATE "C"    -- JSON {"NAME": true | false}: the sources' variables the leader has set
);

CREATE TABLE IF NOT EXISTS ingest_members (
    holder   text COLLATE "C"        PRIMARY KEY,
    pid      integer     NOT NULL,
    host     text COLLATE "C"        NOT NULL,
    kind     text COLLATE "C"        NOT NULL,
    seen_at  timestamptz NOT NULL
);

-- The followers' reads (todos_after, todo_arrivals): ids are drawn before
-- their commits, which may land in another order, so a follower that moved
-- its cursor past a committed id could miss a smaller one committed later.
-- sb_wait_for_inserts waits until every transaction that drew an id before it
-- has ended (it takes the id lock exclusive, and lets it go at once: a
-- barrier, which holds new inserts only while it waits); the functions below
-- then read with a snapshot taken after it (VOLATILE), so an id they answer
-- means every smaller one is committed or never will be, as on SQLite.
CREATE OR REPLACE FUNCTION sb_wait_for_inserts() RETURNS void
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pg_advisory_lock(1396853841, 1);
    PERFORM pg_advisory_unlock(1396853841, 1);
END
$$;

CREATE OR REPLACE FUNCTION sb_todos_after(after_id bigint, in_queue text, most bigint) RETURNS SETOF todos
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM sb_wait_for_inserts();
    RETURN QUERY
        SELECT * FROM todos
        WHERE todos.id > after_id AND (in_queue IS NULL OR todos.queue = in_queue)
        ORDER BY todos.id
        LIMIT most;
END
$$;

CREATE OR REPLACE FUNCTION sb_todo_arrivals(after_id bigint, in_queues jsonb, agent text, most bigint)
    RETURNS TABLE (id bigint, queue text, title text, state text, source text, paused integer)
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM sb_wait_for_inserts();
    RETURN QUERY
        SELECT t.id, t.queue, t.title, t.state, e.source,
               CAST(EXISTS (SELECT 1 FROM queues AS q WHERE q.name = t.queue AND q.paused_at IS NOT NULL)
                    AS integer)
        FROM todos AS t LEFT JOIN events AS e ON e.id = t.event_id
        WHERE t.id > after_id
          AND (in_queues IS NULL OR t.queue IN (SELECT jsonb_array_elements_text(in_queues)))
          AND (t.assignee IS NULL OR t.assignee = agent)
        ORDER BY t.id
        LIMIT most;
END
$$;

-- Change notification (see the top of this file): a trigger per table and kind of
-- statement, which notifies only when the statement changed a row (a claim
-- that found nothing, an UPDATE of no row, must wake nobody).
CREATE OR REPLACE TRIGGER todos_notify_insert AFTER INSERT ON todos
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER todos_notify_update AFTER UPDATE ON todos
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER todos_notify_delete AFTER DELETE ON todos
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER events_notify_insert AFTER INSERT ON events
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER events_notify_update AFTER UPDATE ON events
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER events_notify_delete AFTER DELETE ON events
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER sources_notify_insert AFTER INSERT ON sources
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER sources_notify_update AFTER UPDATE ON sources
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER sources_notify_delete AFTER DELETE ON sources
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER rules_notify_insert AFTER INSERT ON rules
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER rules_notify_update AFTER UPDATE ON rules
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER rules_notify_delete AFTER DELETE ON rules
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER agents_notify_insert AFTER INSERT ON agents
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER agents_notify_update AFTER UPDATE ON agents
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER agents_notify_delete AFTER DELETE ON agents
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER settings_notify_insert AFTER INSERT ON settings
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER settings_notify_update AFTER UPDATE ON settings
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER settings_notify_delete AFTER DELETE ON settings
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER queues_notify_insert AFTER INSERT ON queues
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER queues_notify_update AFTER UPDATE ON queues
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
CREATE OR REPLACE TRIGGER queues_notify_delete AFTER DELETE ON queues
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION sb_notify();
