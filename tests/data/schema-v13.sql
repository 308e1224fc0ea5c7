-- switchboard-local schema: the one definition of the database.
--
-- The store applies this file to a new database inside one BEGIN IMMEDIATE
-- transaction and then sets PRAGMA user_version to the schema version that
-- switchboard_local/core/store/shared.py declares. Older files are brought up to date
-- by the migrations in core/store/sqlite/migrations.py; this file always describes the newest shape.
--
-- Times are INTEGER milliseconds since the Unix epoch (UTC), taken from the
-- core's injected clock, never from SQLite's own clock.

-- Marks the file as switchboard-local's ('SBLQ'), so that another program's
-- database with a user_version of its own is never taken for ours.
PRAGMA application_id = 1396853841;

-- One delivery that arrived: a webhook request, a broker message, a schedule's
-- tick, an operator action. Immutable once written.
CREATE TABLE IF NOT EXISTS events (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused after a prune: ids are cursors
    source          TEXT    NOT NULL,            -- configured webhook, adapter or schedule name
    family          TEXT    NOT NULL CHECK (family IN ('webhook', 'queue', 'schedule', 'operator')),
    type            TEXT    NOT NULL,            -- e.g. X-GitHub-Event, the stream key, or 'tick'
    external_id     TEXT    NOT NULL,            -- provider delivery id, entry id, body hash, or a tick's due instant
    trust_mode      TEXT    NOT NULL,            -- how the source is trusted (signature kind, queue, open)
    verified        INTEGER NOT NULL CHECK (verified IN (0, 1)),
    verify_detail   TEXT,                        -- how it was verified, or why not
    content_type    TEXT,
    headers         TEXT    NOT NULL DEFAULT '{}',  -- JSON object, secrets redacted
    body            BLOB    NOT NULL,            -- raw bytes, kept byte for byte for replay
    size            INTEGER NOT NULL,
    received_at     INTEGER NOT NULL,
    UNIQUE (source, external_id)                 -- a redelivery collapses into the first event
);

CREATE INDEX IF NOT EXISTS events_received ON events (received_at);

-- A durable unit of work.
--
-- States: pending (waiting to be claimed: now, after a delay, or after a failed
-- attempt's backoff), claimed, and the finished ones: done, failed (a dead
-- letter: its attempts are used up) and cancelled (by an operator).
--
-- visible_at is set exactly while the todo is pending and not blocked: when
-- it becomes claimable. Claiming is therefore "visible_at <= now", served by
-- one partial index that finished and blocked rows never enter.
--
-- A blocked todo is pending with todos it waits for (todo_deps) not yet done:
-- blocked_by counts them, and visible_at is NULL until the last one is done
-- (the trigger todos_done_unblocks). waits_for counts the todos it waits
-- for at all, done or not: a claim reads their results only when it is > 0.
CREATE TABLE IF NOT EXISTS todos (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused after a prune
    queue            TEXT    NOT NULL CHECK (queue <> ''),
    assignee         TEXT,                        -- NULL: anyone draining the queue
    title            TEXT    NOT NULL,
    kind             TEXT,
    payload          TEXT    NOT NULL DEFAULT 'null',  -- JSON
    event_id         INTEGER REFERENCES events (id) ON DELETE SET NULL,
    idempotency_key  TEXT,
    state            TEXT    NOT NULL CHECK (state IN ('pending', 'claimed', 'done', 'failed', 'cancelled')),
    priority         INTEGER NOT NULL DEFAULT 0,  -- higher first
    attempt          INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts     INTEGER NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    owner            TEXT,                        -- set while claimed
    lease_token_hash TEXT,                        -- sha256 of the token; the token itself is never stored
    lease_expires_at INTEGER,                     -- set while claimed
    visible_at       INTEGER,                     -- see above
    result           TEXT,                        -- JSON, set by complete
    last_error       TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    claimed_at       INTEGER,                     -- start of the current (or last) attempt
    completed_at     INTEGER,                     -- when it was done
    completed_by     TEXT,                        -- who completed it: the last attempt of a done todo
    cancelled_by     TEXT,                        -- who cancelled it, and why: told to a holder
    cancel_reason    TEXT,                        --   whose lease the cancel ended
    blocked_by       INTEGER NOT NULL DEFAULT 0 CHECK (blocked_by >= 0),    -- see above
    waits_for        INTEGER NOT NULL DEFAULT 0 CHECK (waits_for >= 0),  -- see above
    CHECK ((state = 'claimed') = (lease_expires_at IS NOT NULL)),
    CHECK ((state = 'claimed') = (lease_token_hash IS NOT NULL)),
    CHECK ((state = 'pending' AND blocked_by = 0) = (visible_at IS NOT NULL))
);

-- The indexes on todos. Every state change rewrites the row and each index
-- entry whose key or partial condition changes, and a job's commit pays a
-- page for each: so a finished todo sits in the table and in the indexes
-- that never change (by queue, by event), and the partial ones below hold
-- only the rows in play. tests/core/test_query_plans.py shows which query
-- each serves.

-- Claim order, per queue: priority, then oldest. Only pending rows (claimable
-- now or later); a claim across queues walks the queues in it (a seek each).
CREATE INDEX IF NOT EXISTS todos_ready_by_queue
    ON todos (queue, priority DESC, id) WHERE visible_at IS NOT NULL;

-- Claimed rows by lease expiry: lapsed leases are found at claim time
-- without scanning.
CREATE INDEX IF NOT EXISTS todos_leases
    ON todos (lease_expires_at) WHERE state = 'claimed';

-- A queue's todos, newest first (listing, purge, whether a queue exists);
-- the key never changes after the insert.
CREATE INDEX IF NOT EXISTS todos_by_queue ON todos (queue, id);

-- Dead letters, per queue (redrive, their groups, the count).
CREATE INDEX IF NOT EXISTS todos_dead ON todos (queue, id) WHERE state = 'failed';

CREATE INDEX IF NOT EXISTS todos_by_event ON todos (event_id) WHERE event_id IS NOT NULL;

-- Blocked todos, per queue (a queue's bulk cancel; the dashboard's and `todo list --blocked`):
-- only todos waiting for others enter it, and leave when readied or cancelled.
CREATE INDEX IF NOT EXISTS todos_blocked ON todos (queue, id) WHERE state = 'pending' AND blocked_by > 0;

-- Idempotency: one live todo per (queue, key). Live = pending (blocked or
-- not) or claimed; finished todos (done, dead letters, cancelled) free the key. Keys of
-- todos derived from events start with 'event:', a prefix no direct producer
-- (CLI, agent) may use, so a direct create can never squat a key a future
-- delivery will derive.
CREATE UNIQUE INDEX IF NOT EXISTS todos_live_key
    ON todos (queue, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state IN ('pending', 'claimed');

-- For each event, the todos its first delivery answered with (created, or
-- found live under the same key), so a redelivery gets the same answer.
-- Replays add todos with the event's id but no rows here.
CREATE TABLE IF NOT EXISTS event_todos (
    event_id  INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    position  INTEGER NOT NULL,
    todo_id   INTEGER NOT NULL REFERENCES todos (id) ON DELETE CASCADE,
    PRIMARY KEY (event_id, position)
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS event_todos_by_todo ON event_todos (todo_id);

-- Dependencies: todo_id waits for after_id (a todo that existed before it,
-- so no cycle can be written). A todo is blocked while any of those it waits
-- for is not done; when one becomes done, the trigger below readies each
-- dependent it was the last one of, in the completing statement itself: no
-- sweeper, no polling, whichever verb completed it. A dependency cancelled
-- cancels its blocked dependents (core/todos/dependencies.py, in the
-- cancelling transaction); one that is a dead letter keeps them blocked.
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

-- The attempts that ended other than by completing, one row each, written
-- once, when the attempt ends; seq orders them (1, 2, … per todo). The open
-- attempt lives on its claimed todo (owner, claimed_at), and the attempt that
-- completed a todo on the done todo (completed_by, claimed_at, completed_at):
-- a job that succeeds first time writes no row here. queries.sql's
-- attempts_of_todo puts the three together into one history.
CREATE TABLE IF NOT EXISTS attempts (
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

-- Agent profiles for the MCP server: the queues an agent may drain and the
-- tools it may use (NULL: every tool).
CREATE TABLE IF NOT EXISTS agents (
    name           TEXT    PRIMARY KEY CHECK (name <> ''),
    queues         TEXT    NOT NULL,              -- JSON array of queue names
    tools          TEXT,                          -- JSON array of tool names, or NULL for all
    created_at     INTEGER NOT NULL,
    create_queues  TEXT,                          -- JSON array: where create_for may put todos; NULL: its queues
    owner          TEXT                           -- the person it works for (shown on its claims); NULL: nobody named
);

-- The sources: configured producers of events. Webhook sources (family
-- 'webhook'), adapters (family 'queue', drained by a broker consumer;
-- config.broker names the broker, redis when absent) and schedules (family
-- 'schedule': config holds the cron expression, zone and catch-up; the ingest
-- leader fires their ticks); an event's source is a name from here. Health fields are
-- written by the running consumers.
CREATE TABLE IF NOT EXISTS sources (
    name                 TEXT    PRIMARY KEY CHECK (name <> ''),
    family               TEXT    NOT NULL CHECK (family IN ('webhook', 'queue', 'schedule')),
    kind                 TEXT    NOT NULL,        -- github, stripe, hmac, open, stream, list, ...
    trust_mode           TEXT    NOT NULL,        -- how its events are trusted (the kind, 'open', 'queue')
    enabled              INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    config               TEXT    NOT NULL DEFAULT '{}',  -- JSON: kind options, default queue, limits
    secrets              TEXT    NOT NULL DEFAULT '[]',  -- JSON array of secret references, oldest first
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    last_poll_at         INTEGER,
    last_error           TEXT,
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    messages_stored      INTEGER NOT NULL DEFAULT 0,
    last_tick_at         INTEGER                  -- a schedule's newest tick fired (its due instant)
);

-- Routing rules, applied in position order to each new event of their
-- source: every matching rule adds a todo until a 'stop' or 'drop' rule.
CREATE TABLE IF NOT EXISTS rules (
    id            INTEGER PRIMARY KEY,
    position      INTEGER NOT NULL,
    source        TEXT    NOT NULL,
    type          TEXT,                            -- glob on the event type; NULL: any
    conditions    TEXT    NOT NULL DEFAULT '[]',   -- JSON: [{"path", "op": eq|in|glob|exists, "value"}]
    action        TEXT    NOT NULL CHECK (action IN ('todo', 'drop')),
    queue         TEXT,
    title         TEXT,                            -- template: {dotted.path} from the payload
    assignee      TEXT,
    priority      INTEGER NOT NULL DEFAULT 0,
    max_attempts  INTEGER NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    stop          INTEGER NOT NULL DEFAULT 0 CHECK (stop IN (0, 1)),
    created_at    INTEGER NOT NULL,
    CHECK ((action = 'todo') = (queue IS NOT NULL))
);

CREATE INDEX IF NOT EXISTS rules_by_source ON rules (source, position);

-- Deliveries seen, kept apart from the events so that deduplication outlives
-- them: the key of an event pruned before the dedup horizon (its external
-- id), and, for sources with a replay window, 'body:' + the sha256 of a
-- delivery's type and body (a captured body reposted under a new delivery id
-- is a duplicate within the window). Rows older than the horizon are pruned.
CREATE TABLE IF NOT EXISTS delivery_keys (
    source    TEXT    NOT NULL,
    key       TEXT    NOT NULL,
    event_id  INTEGER NOT NULL,                    -- the event it was (it may be pruned since)
    seen_at   INTEGER NOT NULL,
    PRIMARY KEY (source, key)
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS delivery_keys_by_age ON delivery_keys (seen_at);

-- Settings every process on the file shares (`switchboard-local config`);
-- a missing row means the default.
CREATE TABLE IF NOT EXISTS settings (
    name   TEXT PRIMARY KEY,
    value  TEXT NOT NULL
) WITHOUT ROWID;

-- Queues an operator paused (`queue pause`) or limited (`queue limit`): no
-- claim takes from a paused queue, nor more than a limited queue's limits
-- allow, while todos keep arriving on it. A queue exists by having todos; a
-- row here holds an operator's setting for one, and may name a queue with no
-- todo yet. paused_at is NULL once it is resumed; a limit is NULL when unset.
CREATE TABLE IF NOT EXISTS queues (
    name            TEXT    PRIMARY KEY CHECK (name <> ''),
    paused_at       INTEGER,                   -- set while paused
    paused_by       TEXT,                      -- who paused it
    max_claimed     INTEGER CHECK (max_claimed >= 1),     -- at most this many of its todos claimed at once
    max_per_minute  INTEGER CHECK (max_per_minute >= 1)   -- at most this many claims in any rolling 60 s
) WITHOUT ROWID;

-- The claims of the last minute on each queue with a max_per_minute, one row
-- a claim: what the rolling minute counts. Only a claim of
-- a rate-limited queue writes here (the plain claim never does), and it
-- deletes that queue's rows older than a minute as it goes.
CREATE TABLE IF NOT EXISTS queue_claims (
    queue       TEXT    NOT NULL,
    claimed_at  INTEGER NOT NULL,
    todo_id     INTEGER NOT NULL,
    lease_token_hash TEXT NOT NULL,      -- the claim's: one row per claim, however many at one instant
    PRIMARY KEY (queue, claimed_at, lease_token_hash)
) WITHOUT ROWID;

-- Ingest leadership (core/leadership.py): the one process on this file that
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
    handover_to  TEXT,                                 -- a process asking to take over (serve --take-over)
    -- The environment variables the sources name (secrets, Redis URLs), as
    -- JSON {"NAME": true | false}: whether the leader has each set, renewed
    -- with the lease. Names only, never a value: `doctor` asks it.
    env          TEXT
);

-- The processes that could lead, each seen now and then: the leader and its standbys.
CREATE TABLE IF NOT EXISTS ingest_members (
    holder   TEXT    PRIMARY KEY,
    pid      INTEGER NOT NULL,
    host     TEXT    NOT NULL,
    kind     TEXT    NOT NULL,
    seen_at  INTEGER NOT NULL
) WITHOUT ROWID;
