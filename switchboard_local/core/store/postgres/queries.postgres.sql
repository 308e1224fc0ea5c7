-- Every statement of queries.sql, for PostgreSQL: the same names, the same
-- parameters, the same result columns with the same Python values. Loaded by
-- store/queries.py (POSTGRES, by name); the schema is schema.postgres.sql, at
-- the repository root.
--
-- The values the verbs see are SQLite's: times are integer milliseconds
-- (parameters go in through sb_ts(:now), columns come out as sb_ms(col) AS
-- col), JSON columns come out as text (CAST(col AS text) AS col; jsonb's text,
-- so an object's keys come back in jsonb's order), flags as 0/1 integers, and
-- the column names are SQLite's (count(*) AS "count(*)", 1 AS "1").
--
-- Parameters are written :name, as in queries.sql. This file has no `::`
-- cast (every cast is CAST(x AS t)) and no `%`, so the store converts
-- :name to psycopg's %(name)s with one substitution of (?<![:\w]):(\w+). A
-- parameter whose type nothing around it fixes is cast where it first
-- appears (psycopg sends strings and None untyped, ints as int2/4/8).
--
-- Written for READ COMMITTED (each statement sees the commits made before it
-- started). Where SQLite's one writer made a look-then-write safe, the
-- statement here answers the same without raising when another transaction
-- races it (ON CONFLICT ... DO NOTHING, FOR UPDATE [SKIP LOCKED]): a
-- statement that fails aborts the whole PostgreSQL transaction.

-- name: insert_todo
-- A new pending todo, unless a live todo holds the same (queue, key): then it
-- inserts nothing and returns no row; the caller reads the holder. A race for
-- the key with another transaction waits for it and then inserts nothing,
-- as the unique index's ON CONFLICT says. The id is drawn only for a row
-- inserted (sb_new_id: see schema.postgres.sql). :blocked_by and
-- :waits_for as queries.sql says.
INSERT INTO todos (id, queue, assignee, title, kind, payload, event_id, idempotency_key,
                   state, priority, max_attempts, visible_at, created_at, updated_at, blocked_by, waits_for)
SELECT sb_new_id('todos'), :queue, :assignee, :title, :kind, CAST(:payload AS jsonb), :event_id, :idempotency_key,
       'pending', :priority, :max_attempts, sb_ts(:visible_at), sb_ts(:now), sb_ts(:now), :blocked_by, :waits_for
WHERE CAST(:idempotency_key AS text) IS NULL OR NOT EXISTS (
    SELECT 1 FROM todos
    WHERE queue = :queue AND idempotency_key = :idempotency_key
      AND state IN ('pending', 'claimed'))
ON CONFLICT (queue, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state IN ('pending', 'claimed')
    DO NOTHING
RETURNING id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for;

-- name: insert_todo_id
-- insert_todo for the ingestion back half, which needs only the new id.
INSERT INTO todos (id, queue, assignee, title, kind, payload, event_id, idempotency_key,
                   state, priority, max_attempts, visible_at, created_at, updated_at)
SELECT sb_new_id('todos'), :queue, :assignee, :title, :kind, CAST(:payload AS jsonb), :event_id, :idempotency_key,
       'pending', :priority, :max_attempts, sb_ts(:visible_at), sb_ts(:now), sb_ts(:now)
WHERE CAST(:idempotency_key AS text) IS NULL OR NOT EXISTS (
    SELECT 1 FROM todos
    WHERE queue = :queue AND idempotency_key = :idempotency_key
      AND state IN ('pending', 'claimed'))
ON CONFLICT (queue, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state IN ('pending', 'claimed')
    DO NOTHING
RETURNING id;

-- name: insert_todo_with_id
-- A batch of the ingestion back half's todos (executemany), their ids given
-- (from next_todo_id, under the id lock); the identity's sequence is moved
-- past each (sb_given_id).
INSERT INTO todos (id, queue, assignee, title, kind, payload, event_id, idempotency_key,
                   state, priority, max_attempts, visible_at, created_at, updated_at)
VALUES (sb_given_id('todos', :id), :queue, :assignee, :title, :kind, CAST(:payload AS jsonb), :event_id,
        :idempotency_key, 'pending', :priority, :max_attempts, sb_ts(:visible_at), sb_ts(:now), sb_ts(:now));

-- name: live_keys_held
-- Which of :keys (a JSON array of [queue, idempotency key]) a live todo holds: their positions.
SELECT CAST(k.n - 1 AS integer) AS position
FROM jsonb_array_elements(CAST(:keys AS jsonb)) WITH ORDINALITY AS k(value, n)
WHERE EXISTS (
    SELECT 1 FROM todos
    WHERE queue = k.value ->> 0 AND idempotency_key = k.value ->> 1
      AND state IN ('pending', 'claimed'));

-- name: next_todo_id
-- The first id no todo has had (past every id ever drawn), for a batch to
-- number its todos from: under the id lock, exclusive, held to the commit, so
-- that nobody else draws one meanwhile (schema.postgres.sql).
SELECT sb_first_free_id('todos') AS id;

-- name: set_todo_event
-- A direct create's event, recorded after its todo (audit.py).
UPDATE todos SET event_id = :event_id WHERE id = :id
RETURNING id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for;

-- name: live_todo_by_key
-- The live (pending or claimed) todo holding a key.
SELECT id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for
FROM todos
WHERE queue = :queue AND idempotency_key = :idempotency_key
  AND state IN ('pending', 'claimed');

-- name: get_todo
SELECT id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for
FROM todos WHERE id = :id;

-- name: todos_by_ids
-- The todos :ids names (a JSON array of todo ids), by id.
SELECT id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for
FROM todos WHERE id IN (SELECT CAST(jsonb_array_elements_text(CAST(:ids AS jsonb)) AS bigint)) ORDER BY id;

-- ---- dependencies (as queries.sql's; the trigger is in schema.postgres.sql) ----

-- name: dependency_states
-- As queries.sql's, and each row locked (FOR SHARE) until the create commits:
-- a completion racing it waits, then its trigger sees the new dependency.
SELECT id, state, queue FROM todos
WHERE id IN (SELECT CAST(jsonb_array_elements_text(CAST(:ids AS jsonb)) AS bigint))
ORDER BY id
FOR SHARE;

-- name: readiness
SELECT id, state, CAST(blocked_by > 0 AS integer) AS blocked FROM todos
WHERE id IN (SELECT CAST(jsonb_array_elements_text(CAST(:ids AS jsonb)) AS bigint))
ORDER BY id;

-- name: live_todos_by_key
SELECT id, queue FROM todos
WHERE idempotency_key = :idempotency_key AND state IN ('pending', 'claimed')
ORDER BY id;

-- name: add_dependencies
INSERT INTO todo_deps (todo_id, after_id)
SELECT :id, CAST(jsonb_array_elements_text(CAST(:ids AS jsonb)) AS bigint);

-- name: dependencies_of
SELECT todos.id, todos.state, CAST(todos.result AS text) AS result,
       octet_length(CAST(todos.result AS text)) AS result_bytes
FROM todo_deps JOIN todos ON todos.id = todo_deps.after_id
WHERE todo_deps.todo_id = :id
ORDER BY todos.id;

-- name: cancel_dependents
-- As queries.sql's: one level a statement (see there why).
UPDATE todos
SET state = 'cancelled', cancelled_by = :by, updated_at = sb_ts(:now),
    cancel_reason = 'dependency ' || (SELECT min(after_id) FROM todo_deps
                                      WHERE todo_id = todos.id
                                        AND after_id IN (SELECT CAST(jsonb_array_elements_text(CAST(:ids AS jsonb)) AS bigint)))
                    || ' was cancelled'
WHERE id IN (SELECT todo_id FROM todo_deps
             WHERE after_id IN (SELECT CAST(jsonb_array_elements_text(CAST(:ids AS jsonb)) AS bigint)))
  AND state = 'pending' AND blocked_by > 0
RETURNING id;

-- name: list_todos
-- As queries.sql's: newest first, before a cursor; any filter may be NULL;
-- of every queue (one queue: list_todos_in_queue).
SELECT id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for
FROM todos
WHERE (CAST(:state AS text) IS NULL OR state = :state)
  AND (CAST(:timing AS text) IS NULL
       OR (:timing = 'ready' AND visible_at <= sb_ts(:now))
       OR (:timing = 'delayed' AND visible_at > sb_ts(:now))
       OR (:timing = 'dead' AND state = 'failed')
       OR (:timing = 'blocked' AND state = 'pending' AND blocked_by > 0))
  AND (CAST(:queues AS jsonb) IS NULL OR queue IN (SELECT jsonb_array_elements_text(CAST(:queues AS jsonb))))
  AND (CAST(:before_id AS bigint) IS NULL OR id < :before_id)
ORDER BY id DESC
LIMIT :limit;

-- name: list_todos_in_queue
-- list_todos for one queue (:queue), down todos_by_queue.
SELECT id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for
FROM todos
WHERE queue = :queue
  AND (CAST(:state AS text) IS NULL OR state = :state)
  AND (CAST(:timing AS text) IS NULL
       OR (:timing = 'ready' AND visible_at <= sb_ts(:now))
       OR (:timing = 'delayed' AND visible_at > sb_ts(:now))
       OR (:timing = 'dead' AND state = 'failed')
       OR (:timing = 'blocked' AND state = 'pending' AND blocked_by > 0))
  AND (CAST(:queues AS jsonb) IS NULL OR queue IN (SELECT jsonb_array_elements_text(CAST(:queues AS jsonb))))
  AND (CAST(:before_id AS bigint) IS NULL OR id < :before_id)
ORDER BY id DESC
LIMIT :limit;

-- name: attempts_of_todo
-- A todo's attempt history, oldest first (see queries.sql).
SELECT attempt, owner, sb_ms(claimed_at) AS claimed_at, sb_ms(ended_at) AS ended_at, outcome, error FROM (
    SELECT seq, attempt, owner, claimed_at, ended_at, outcome, error
    FROM attempts WHERE todo_id = :todo_id
    UNION ALL
    SELECT NULL, attempt, owner, claimed_at, NULL, NULL, NULL
    FROM todos WHERE id = :todo_id AND state = 'claimed'
    UNION ALL
    SELECT NULL, attempt, completed_by, claimed_at, completed_at, 'completed', NULL
    FROM todos WHERE id = :todo_id AND completed_by IS NOT NULL) AS history
ORDER BY seq IS NULL, seq;

-- name: end_lapsed_attempts
-- Recovering lapsed leases, in one statement here (queries.sql takes two):
-- the lapsed claimed rows are locked, skipping those another transaction
-- holds (it is recovering them, or finishing them), taken back as
-- recover_lapsed_leases says, and their attempts written to the history
-- from the rows as they were. Two claimers recovering at once never both end
-- one attempt.
WITH lapsed AS (
    SELECT id, attempt, owner, claimed_at FROM todos
    WHERE state = 'claimed' AND lease_expires_at <= sb_ts(:now)
    ORDER BY id
    FOR UPDATE SKIP LOCKED
), recovered AS (
    UPDATE todos
    SET state      = CASE WHEN todos.attempt >= max_attempts THEN 'failed' ELSE 'pending' END,
        visible_at = CASE WHEN todos.attempt >= max_attempts THEN NULL ELSE lease_expires_at END,
        last_error = 'lease expired on attempt ' || todos.attempt || ' of ' || max_attempts
                     || ' (owner ' || todos.owner || ')',
        owner = NULL, lease_token_hash = NULL, lease_expires_at = NULL,
        updated_at = sb_ts(:now)
    FROM lapsed
    WHERE todos.id = lapsed.id
    RETURNING todos.id
)
INSERT INTO attempts (todo_id, seq, attempt, owner, claimed_at, ended_at, outcome)
SELECT lapsed.id, (SELECT COALESCE(MAX(seq), 0) + 1 FROM attempts WHERE todo_id = lapsed.id),
       lapsed.attempt, lapsed.owner, lapsed.claimed_at, sb_ts(:now), 'lease_expired'
FROM lapsed JOIN recovered ON recovered.id = lapsed.id;

-- name: recover_lapsed_leases
-- Done already by end_lapsed_attempts, which takes back the leases with their
-- history in one statement; it always runs just before this one
-- (todos._recover_lapsed). What is left here is only what another
-- transaction holds, and that one recovers it: this changes nothing.
SELECT WHERE CAST(:now AS bigint) IS NULL;

-- name: any_lapsed_lease
SELECT 1 AS "1" FROM todos WHERE state = 'claimed' AND lease_expires_at <= sb_ts(:now) LIMIT 1;

-- name: claim_by_id
-- Every claim leaves a paused queue alone. A todo another transaction holds
-- is waited for, then looked at again as it is. A limited queue's todo only
-- with :limited, while the queue has room (queries.sql says how); claims.py
-- has locked the queue's row then (lock_limited_queues says why).
UPDATE todos
SET state = 'claimed', owner = :owner, attempt = attempt + 1,
    lease_token_hash = :lease_token_hash, lease_expires_at = sb_ts(:lease_expires_at),
    visible_at = NULL, claimed_at = sb_ts(:now), updated_at = sb_ts(:now)
WHERE id = :id
  AND visible_at <= sb_ts(:now)
  AND NOT EXISTS (SELECT 1 FROM todos AS lapsed WHERE lapsed.state = 'claimed' AND lapsed.lease_expires_at <= sb_ts(:now))
  AND (assignee IS NULL OR assignee = :agent)
  AND NOT EXISTS (
      SELECT 1 FROM queues WHERE queues.name = todos.queue
        AND (queues.paused_at IS NOT NULL
             OR (queues.max_claimed IS NOT NULL OR queues.max_per_minute IS NOT NULL)
                AND (NOT CAST(:limited AS boolean)
                     OR queues.max_claimed <= (SELECT count(*) FROM todos AS held
                                               WHERE held.state = 'claimed' AND held.queue = queues.name)
                     OR queues.max_per_minute <= (SELECT count(*) FROM queue_claims
                                                  WHERE queue_claims.queue = queues.name
                                                    AND queue_claims.claimed_at > sb_ts(CAST(:now AS bigint) - 60000)))))
RETURNING id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for;

-- name: claim_next
-- As queries.sql's claim_next: up to :max todos (1 for one) from every queue
-- (:queues NULL) or those of :queues, as that many claims one after the
-- other would take them, each under its own lease. Each queue's first ready
-- todos (64 more than :max: more than the claimers racing on one queue) are
-- the candidates; the best :max of them that no other transaction holds are
-- locked (SKIP LOCKED) and claimed. With :budget the candidates are taken in
-- that order while their sizes (payload as text, and last_error six times; a
-- todo that can be claimed has no result) add up to no more than it, the
-- first always; each takes the hash of :hashes at its count of candidates
-- after it. A limited queue in scope makes it claim nothing, and lock nothing
-- (a test done once, before any row is read): claim_next_limited claims then.
WITH RECURSIVE pending_queues (name) AS (
    SELECT (SELECT queue FROM todos
            WHERE visible_at IS NOT NULL ORDER BY queue LIMIT 1)
    WHERE CAST(:queues AS jsonb) IS NULL
    UNION ALL
    SELECT (SELECT queue FROM todos
            WHERE visible_at IS NOT NULL AND queue > pending_queues.name ORDER BY queue LIMIT 1)
    FROM pending_queues WHERE pending_queues.name IS NOT NULL
),
claim_queues (name) AS (
    SELECT name FROM pending_queues WHERE name IS NOT NULL
    UNION ALL
    SELECT jsonb_array_elements_text(CAST(:queues AS jsonb))
),
locked AS (
    SELECT candidate.id, candidate.priority FROM todos AS candidate
    WHERE candidate.id IN (
        SELECT head.id
        FROM claim_queues AS q
        CROSS JOIN LATERAL (
            SELECT id FROM todos
            WHERE queue = q.name
              AND visible_at <= sb_ts(:now)
              AND (assignee IS NULL OR assignee = :agent)
            ORDER BY priority DESC, id
            LIMIT 64 + CAST(:max AS integer)) AS head
        WHERE NOT EXISTS (SELECT 1 FROM queues WHERE queues.name = q.name AND queues.paused_at IS NOT NULL))
      AND candidate.visible_at <= sb_ts(:now)
      AND NOT EXISTS (SELECT 1 FROM todos AS lapsed WHERE lapsed.state = 'claimed' AND lapsed.lease_expires_at <= sb_ts(:now))
      AND NOT EXISTS (SELECT 1 FROM queues AS limited
                      WHERE (limited.max_claimed IS NOT NULL OR limited.max_per_minute IS NOT NULL)
                        AND (CAST(:queues AS jsonb) IS NULL
                             OR limited.name IN (SELECT jsonb_array_elements_text(CAST(:queues AS jsonb)))))
    ORDER BY candidate.priority DESC, candidate.id
    LIMIT :max
    FOR UPDATE OF candidate SKIP LOCKED
),
picked AS (
    SELECT id, behind FROM (
        SELECT locked.id,
               row_number() OVER w AS n,
               count(*) OVER () - row_number() OVER w AS behind,
               sum(CASE WHEN CAST(:budget AS bigint) IS NULL THEN 0 ELSE
                   (SELECT octet_length(CAST(t.payload AS text)) + 6 * COALESCE(octet_length(t.last_error), 0)
                    FROM todos AS t WHERE t.id = locked.id) END) OVER w AS size
        FROM locked
        WINDOW w AS (ORDER BY locked.priority DESC, locked.id)) AS ranked
    WHERE n = 1 OR CAST(:budget AS bigint) IS NULL OR size <= CAST(:budget AS bigint)
)
UPDATE todos
SET state = 'claimed', owner = :owner, attempt = attempt + 1,
    lease_token_hash = CAST(:hashes AS jsonb) ->> CAST(picked.behind AS integer),
    lease_expires_at = sb_ts(:lease_expires_at),
    visible_at = NULL, claimed_at = sb_ts(:now), updated_at = sb_ts(:now)
FROM picked
WHERE todos.id = picked.id
RETURNING todos.id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for;

-- name: claim_next_in_queue
-- One todo from one queue (:queues, a JSON array of that one name), the
-- oldest highest-priority visible one that no other transaction holds (SKIP
-- LOCKED), unless the queue is paused or limited (claim_next_limited claims
-- from a limited one): its own statement as queries.sql's is.
UPDATE todos
SET state = 'claimed', owner = :owner, attempt = attempt + 1,
    lease_token_hash = CAST(:hashes AS jsonb) ->> 0, lease_expires_at = sb_ts(:lease_expires_at),
    visible_at = NULL, claimed_at = sb_ts(:now), updated_at = sb_ts(:now)
WHERE id = (
    SELECT id FROM todos
    WHERE queue = CAST(:queues AS jsonb) ->> 0
      AND visible_at <= sb_ts(:now)
      AND (assignee IS NULL OR assignee = :agent)
      AND NOT EXISTS (SELECT 1 FROM queues WHERE queues.name = CAST(:queues AS jsonb) ->> 0
                      AND (queues.paused_at IS NOT NULL OR queues.max_claimed IS NOT NULL OR queues.max_per_minute IS NOT NULL))
      AND NOT EXISTS (SELECT 1 FROM todos AS lapsed WHERE lapsed.state = 'claimed' AND lapsed.lease_expires_at <= sb_ts(:now))
    ORDER BY priority DESC, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED)
RETURNING id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for;

-- name: claim_next_in_queues
-- One todo from several queues (:queues, a JSON array of their names), as
-- claim_next claims it with a max of 1: each queue's first ready todos (64)
-- are the candidates, the best one no other transaction holds is locked
-- (SKIP LOCKED) and claimed. Its own statement as queries.sql's is. A
-- limited queue among them makes it claim nothing, and lock nothing:
-- claim_next_limited claims then.
UPDATE todos
SET state = 'claimed', owner = :owner, attempt = attempt + 1,
    lease_token_hash = CAST(:hashes AS jsonb) ->> 0, lease_expires_at = sb_ts(:lease_expires_at),
    visible_at = NULL, claimed_at = sb_ts(:now), updated_at = sb_ts(:now)
WHERE id = (
    SELECT candidate.id FROM todos AS candidate
    WHERE candidate.id IN (
        SELECT head.id
        FROM jsonb_array_elements_text(CAST(:queues AS jsonb)) AS q(name)
        CROSS JOIN LATERAL (
            SELECT id FROM todos
            WHERE queue = q.name
              AND visible_at <= sb_ts(:now)
              AND (assignee IS NULL OR assignee = :agent)
            ORDER BY priority DESC, id
            LIMIT 64) AS head
        WHERE NOT EXISTS (SELECT 1 FROM queues WHERE queues.name = q.name AND queues.paused_at IS NOT NULL))
      AND candidate.visible_at <= sb_ts(:now)
      AND NOT EXISTS (SELECT 1 FROM todos AS lapsed WHERE lapsed.state = 'claimed' AND lapsed.lease_expires_at <= sb_ts(:now))
      AND NOT EXISTS (SELECT 1 FROM queues AS limited
                      WHERE (limited.max_claimed IS NOT NULL OR limited.max_per_minute IS NOT NULL)
                        AND (CAST(:queues AS jsonb) IS NULL
                             OR limited.name IN (SELECT jsonb_array_elements_text(CAST(:queues AS jsonb)))))
    ORDER BY candidate.priority DESC, candidate.id
    LIMIT 1
    FOR UPDATE OF candidate SKIP LOCKED)
RETURNING id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for;

-- name: claim_next_limited
-- claim_next where a limited queue is in scope (queries.sql's says what).
-- READ COMMITTED gives a statement the snapshot of its start: two claims
-- counting a queue's claimed todos at once would both see the same count and
-- both claim (pgqueuer's race #761), and SKIP LOCKED hides the other's rows
-- rather than waiting. So claims.py runs lock_limited_queues first, in the
-- same transaction: it locks the limited queues' rows, waiting for any other
-- claim of them to commit or roll back, and this statement, begun after that,
-- sees every claim committed before it. A limited queue's candidates are its
-- first `room` ready todos (no other claim takes from it while the lock is
-- held); an unlimited one's are claim_next's.
WITH RECURSIVE pending_queues (name) AS (
    SELECT (SELECT queue FROM todos
            WHERE visible_at IS NOT NULL ORDER BY queue LIMIT 1)
    WHERE CAST(:queues AS jsonb) IS NULL
    UNION ALL
    SELECT (SELECT queue FROM todos
            WHERE visible_at IS NOT NULL AND queue > pending_queues.name ORDER BY queue LIMIT 1)
    FROM pending_queues WHERE pending_queues.name IS NOT NULL
),
claim_queues (name) AS (
    SELECT name FROM pending_queues WHERE name IS NOT NULL
    UNION ALL
    SELECT jsonb_array_elements_text(CAST(:queues AS jsonb))
),
rooms AS (
    SELECT q.name,
           setting.max_claimed IS NOT NULL OR setting.max_per_minute IS NOT NULL AS limited,
           GREATEST(0, LEAST(
               CAST(:max AS integer),
               CASE WHEN setting.max_claimed IS NULL THEN CAST(:max AS integer)
                    ELSE setting.max_claimed - (SELECT count(*) FROM todos AS held
                                                WHERE held.state = 'claimed' AND held.queue = q.name) END,
               CASE WHEN setting.max_per_minute IS NULL THEN CAST(:max AS integer)
                    ELSE setting.max_per_minute - (SELECT count(*) FROM queue_claims
                                                   WHERE queue_claims.queue = q.name
                                                     AND queue_claims.claimed_at > sb_ts(CAST(:now AS bigint) - 60000))
                    END)) AS room
    FROM claim_queues AS q
    LEFT JOIN queues AS setting ON setting.name = q.name
    WHERE setting.paused_at IS NULL
),
locked AS (
    SELECT candidate.id, candidate.priority FROM todos AS candidate
    WHERE candidate.id IN (
        SELECT head.id
        FROM rooms
        CROSS JOIN LATERAL (
            SELECT id FROM todos
            WHERE queue = rooms.name
              AND visible_at <= sb_ts(:now)
              AND (assignee IS NULL OR assignee = :agent)
            ORDER BY priority DESC, id
            LIMIT CASE WHEN rooms.limited THEN rooms.room ELSE 64 + CAST(:max AS integer) END) AS head)
      AND candidate.visible_at <= sb_ts(:now)
      AND NOT EXISTS (SELECT 1 FROM todos AS lapsed WHERE lapsed.state = 'claimed' AND lapsed.lease_expires_at <= sb_ts(:now))
    ORDER BY candidate.priority DESC, candidate.id
    LIMIT :max
    FOR UPDATE OF candidate SKIP LOCKED
),
picked AS (
    SELECT id, behind FROM (
        SELECT locked.id,
               row_number() OVER w AS n,
               count(*) OVER () - row_number() OVER w AS behind,
               sum(CASE WHEN CAST(:budget AS bigint) IS NULL THEN 0 ELSE
                   (SELECT octet_length(CAST(t.payload AS text)) + 6 * COALESCE(octet_length(t.last_error), 0)
                    FROM todos AS t WHERE t.id = locked.id) END) OVER w AS size
        FROM locked
        WINDOW w AS (ORDER BY locked.priority DESC, locked.id)) AS ranked
    WHERE n = 1 OR CAST(:budget AS bigint) IS NULL OR size <= CAST(:budget AS bigint)
)
UPDATE todos
SET state = 'claimed', owner = :owner, attempt = attempt + 1,
    lease_token_hash = CAST(:hashes AS jsonb) ->> CAST(picked.behind AS integer),
    lease_expires_at = sb_ts(:lease_expires_at),
    visible_at = NULL, claimed_at = sb_ts(:now), updated_at = sb_ts(:now)
FROM picked
WHERE todos.id = picked.id
RETURNING todos.id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for;

-- name: lock_limited_queues
-- The limited queues a claim may take from (queries.sql's says which), each
-- row locked until the claim's transaction ends, in name order (two claims
-- lock what they share in the same order: no deadlock). A claim of a limited
-- queue waits here for another one to commit, so that claim_next_limited and
-- claim_by_id, run after, count what it claimed: the rows locked are the
-- limited queues', so the plain claim never waits here.
SELECT name, max_per_minute FROM queues
WHERE (max_claimed IS NOT NULL OR max_per_minute IS NOT NULL)
  AND (CAST(:queues AS jsonb) IS NULL OR name IN (SELECT jsonb_array_elements_text(CAST(:queues AS jsonb))))
  AND (CAST(:id AS bigint) IS NULL OR name = (SELECT queue FROM todos WHERE id = CAST(:id AS bigint)))
ORDER BY name
FOR UPDATE;

-- name: log_claims
-- The claims just made (:ids) of the queues with a max_per_minute (queries.sql's says more).
INSERT INTO queue_claims (queue, claimed_at, todo_id, lease_token_hash)
SELECT todos.queue, todos.claimed_at, todos.id, todos.lease_token_hash
FROM todos
WHERE todos.id IN (SELECT CAST(jsonb_array_elements_text(CAST(:ids AS jsonb)) AS bigint))
  AND todos.state = 'claimed'
  AND EXISTS (SELECT 1 FROM queues WHERE queues.name = todos.queue AND queues.max_per_minute IS NOT NULL);

-- name: prune_queue_claims
-- The claims of :queues older than a minute at :now.
DELETE FROM queue_claims
WHERE queue IN (SELECT jsonb_array_elements_text(CAST(:queues AS jsonb)))
  AND claimed_at <= sb_ts(CAST(:now AS bigint) - 60000);

-- name: end_attempt
-- A claimed todo's attempt ends (:outcome, :error) and is written to the
-- history, before the statement that ends it clears the claim (which decides
-- under which lease: see queries.sql). The todo is locked here (FOR UPDATE),
-- so that a recovery of its lapsed lease in another transaction cannot end
-- the same attempt.
INSERT INTO attempts (todo_id, seq, attempt, owner, claimed_at, ended_at, outcome, error)
SELECT id, (SELECT COALESCE(MAX(seq), 0) + 1 FROM attempts WHERE todo_id = :id),
       attempt, owner, claimed_at, sb_ts(:now), :outcome, :error
FROM todos
WHERE id = :id AND state = 'claimed'
FOR UPDATE
RETURNING owner;

-- name: heartbeat
-- Resets the lease to now + ttl, never past the cap fixed when the attempt began.
UPDATE todos
SET lease_expires_at = sb_ts(LEAST(CAST(:now AS bigint) + CAST(:lease_ms AS bigint),
                                   sb_ms(claimed_at) + CAST(:lease_cap_ms AS bigint))),
    updated_at = sb_ts(:now)
WHERE id = :id AND state = 'claimed'
  AND lease_token_hash = :lease_token_hash AND lease_expires_at > sb_ts(:now)
RETURNING id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for;

-- name: complete
UPDATE todos
SET state = 'done', result = CAST(:result AS jsonb), completed_at = sb_ts(:now), updated_at = sb_ts(:now),
    completed_by = owner, owner = NULL, lease_token_hash = NULL, lease_expires_at = NULL
WHERE id = :id AND state = 'claimed'
  AND lease_token_hash = :lease_token_hash AND lease_expires_at > sb_ts(:now)
RETURNING id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for;

-- name: complete_many
-- complete for many todos at once (:items, a JSON array of {"id", "hash": the
-- lease token's hash, "result": the result's JSON text, "queues": the
-- caller's scope, absent for any}); the rows it completed. An item it leaves
-- (its lease stale, outside the scope) is looked at alone by the caller.
UPDATE todos
SET state = 'done', result = CAST(item.value ->> 'result' AS jsonb), completed_at = sb_ts(:now),
    updated_at = sb_ts(:now), completed_by = todos.owner, owner = NULL, lease_token_hash = NULL,
    lease_expires_at = NULL
FROM jsonb_array_elements(CAST(:items AS jsonb)) AS item (value)
WHERE todos.id = CAST(item.value ->> 'id' AS bigint) AND todos.state = 'claimed'
  AND todos.lease_token_hash = item.value ->> 'hash' AND todos.lease_expires_at > sb_ts(:now)
  AND (item.value -> 'queues' IS NULL
       OR todos.queue IN (SELECT jsonb_array_elements_text(item.value -> 'queues')))
RETURNING todos.id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for;

-- name: fail
-- Below the cap, pending again after an exponential backoff (truncated to
-- whole ms, as SQLite's CAST does); at the cap, a dead letter.
UPDATE todos
SET state = CASE WHEN attempt >= max_attempts THEN 'failed' ELSE 'pending' END,
    last_error = :error, updated_at = sb_ts(:now),
    visible_at = CASE
        WHEN attempt >= max_attempts THEN NULL
        ELSE sb_ts(CAST(:now AS bigint) + CAST(trunc(
            LEAST(CAST(:backoff_base_ms AS bigint) << LEAST(attempt - 1, 20), CAST(:backoff_cap_ms AS bigint))
            * CAST(:jitter AS double precision)) AS bigint))
    END,
    owner = NULL, lease_token_hash = NULL, lease_expires_at = NULL
WHERE id = :id AND state = 'claimed'
  AND lease_token_hash = :lease_token_hash AND lease_expires_at > sb_ts(:now)
RETURNING id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for;

-- name: release
-- Back to pending (after an optional delay) with the attempt refunded.
UPDATE todos
SET state = 'pending', attempt = attempt - 1, visible_at = sb_ts(CAST(:now AS bigint) + CAST(:delay_ms AS bigint)),
    updated_at = sb_ts(:now), owner = NULL, lease_token_hash = NULL, lease_expires_at = NULL
WHERE id = :id AND state = 'claimed'
  AND lease_token_hash = :lease_token_hash AND lease_expires_at > sb_ts(:now)
RETURNING id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for;

-- name: force_release
-- An operator's release, without the token: back to pending now, the attempt refunded.
UPDATE todos
SET state = 'pending', attempt = attempt - 1, visible_at = sb_ts(:now), updated_at = sb_ts(:now),
    owner = NULL, lease_token_hash = NULL, lease_expires_at = NULL
WHERE id = :id AND state = 'claimed'
RETURNING id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for;

-- name: cancel
-- A pending or claimed todo finished by an operator.
UPDATE todos
SET state = 'cancelled', cancelled_by = :by, cancel_reason = :reason, updated_at = sb_ts(:now),
    visible_at = NULL, owner = NULL, lease_token_hash = NULL, lease_expires_at = NULL
WHERE id = :id AND state IN ('pending', 'claimed')
RETURNING id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for;

-- name: cancel_pending
-- A queue's pending todos, blocked ones too (:kind and :since may be NULL),
-- oldest first, a batch at a time. The batch is picked once (ARRAY: an IN
-- would pick again for every row, past the rows this statement changed) and
-- locked as it is picked (a todo claimed meanwhile is waited for and left
-- out, and the next one taken instead); the update looks at the state again.
UPDATE todos
SET state = 'cancelled', cancelled_by = :by, cancel_reason = :reason, updated_at = sb_ts(:now), visible_at = NULL
WHERE id = ANY (ARRAY(
    SELECT id FROM todos
    WHERE queue = :queue AND state = 'pending' AND (visible_at IS NOT NULL OR blocked_by > 0)
      AND (CAST(:kind AS text) IS NULL OR kind = :kind)
      AND (CAST(:since AS bigint) IS NULL OR created_at >= sb_ts(:since))
    ORDER BY id
    LIMIT :limit
    FOR UPDATE))
  AND state = 'pending'
RETURNING id;

-- name: count_pending
SELECT count(*) AS count FROM todos
WHERE queue = :queue AND state = 'pending'
  AND (CAST(:kind AS text) IS NULL OR kind = :kind)
  AND (CAST(:since AS bigint) IS NULL OR created_at >= sb_ts(:since));

-- name: last_ended_attempt
SELECT todo_id, seq, attempt, owner, sb_ms(claimed_at) AS claimed_at, sb_ms(ended_at) AS ended_at, outcome, error
FROM attempts WHERE todo_id = :todo_id ORDER BY seq DESC LIMIT 1;

-- name: redrive
-- A dead letter back to pending with a fresh attempt budget. A newer live
-- todo holding its key makes the unique index refuse it (Conflict), as on
-- SQLite: the bulk redrives must run this in a savepoint to carry on.
UPDATE todos
SET state = 'pending', attempt = 0, visible_at = sb_ts(:now), updated_at = sb_ts(:now)
WHERE id = :id AND state = 'failed'
RETURNING id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for;

-- name: dead_letters
-- A queue's dead letters after :after_id, oldest first, a batch at a time.
SELECT id FROM todos
WHERE queue = :queue AND state = 'failed'
  AND (CAST(:kind AS text) IS NULL OR kind = :kind)
  AND (CAST(:since AS bigint) IS NULL OR updated_at >= sb_ts(:since))
  AND id > :after_id
ORDER BY id
LIMIT :limit;

-- name: count_dead_letters
SELECT count(*) AS "count(*)" FROM todos
WHERE queue = :queue AND state = 'failed'
  AND (CAST(:kind AS text) IS NULL OR kind = :kind)
  AND (CAST(:since AS bigint) IS NULL OR updated_at >= sb_ts(:since));

-- name: purge_todos
-- A queue's finished todos in :state, last touched before :before (NULL: any
-- time), oldest first, a batch at a time: picked once (as cancel_pending),
-- locked as they are picked (one redriven meanwhile is left out), and the
-- delete looks at the state again.
DELETE FROM todos WHERE id = ANY (ARRAY(
    SELECT id FROM todos
    WHERE queue = :queue AND state = :state AND state IN ('done', 'failed', 'cancelled')
      AND (CAST(:before AS bigint) IS NULL OR updated_at < sb_ts(:before))
      AND NOT EXISTS (SELECT 1 FROM todo_deps JOIN todos AS waiting ON waiting.id = todo_deps.todo_id
                      WHERE todo_deps.after_id = todos.id AND waiting.state IN ('pending', 'claimed'))
    ORDER BY id
    LIMIT :limit
    FOR UPDATE))
  AND state = :state
RETURNING id;

-- name: count_purgeable
SELECT count(*) AS "count(*)" FROM todos
WHERE queue = :queue AND state = :state AND state IN ('done', 'failed', 'cancelled')
  AND (CAST(:before AS bigint) IS NULL OR updated_at < sb_ts(:before))
  AND NOT EXISTS (SELECT 1 FROM todo_deps JOIN todos AS waiting ON waiting.id = todo_deps.todo_id
                  WHERE todo_deps.after_id = todos.id AND waiting.state IN ('pending', 'claimed'));

-- name: stats
-- Counts per queue as they stand at :now, without writing (see queries.sql).
WITH counts AS (
    SELECT queue,
           count(*) FILTER (WHERE ready)                                  AS ready,
           count(*) FILTER (WHERE state = 'pending' AND blocked_by = 0 AND NOT ready) AS delayed,
           count(*) FILTER (WHERE state = 'claimed' AND NOT lapsed)       AS claimed,
           count(*) FILTER (WHERE state = 'done')                         AS done,
           count(*) FILTER (WHERE state = 'failed' OR (lapsed AND attempt >= max_attempts)) AS dead,
           count(*) FILTER (WHERE state = 'cancelled')                    AS cancelled,
           count(*) FILTER (WHERE state = 'pending' AND blocked_by > 0)   AS blocked,
           MIN(CASE WHEN ready THEN created_at END)                       AS oldest_ready_created_at
    FROM (SELECT *, lapsed AND attempt < max_attempts OR visible_at <= sb_ts(:now) AS ready
          FROM (SELECT queue, state, attempt, max_attempts, visible_at, created_at, blocked_by,
                       (state = 'claimed' AND lease_expires_at <= sb_ts(:now)) AS lapsed
                FROM todos) AS flagged) AS marked
    GROUP BY queue
), names AS (
    SELECT queue FROM counts
    UNION
    SELECT name FROM queues
    WHERE paused_at IS NOT NULL OR max_claimed IS NOT NULL OR max_per_minute IS NOT NULL
)
SELECT names.queue,
       COALESCE(counts.ready, 0) AS ready, COALESCE(counts.delayed, 0) AS delayed,
       COALESCE(counts.claimed, 0) AS claimed, COALESCE(counts.done, 0) AS done,
       COALESCE(counts.dead, 0) AS dead, COALESCE(counts.cancelled, 0) AS cancelled,
       COALESCE(counts.blocked, 0) AS blocked, sb_ms(counts.oldest_ready_created_at) AS oldest_ready_created_at,
       sb_ms(queues.paused_at) AS paused_at, queues.paused_by,
       queues.max_claimed, queues.max_per_minute,
       CASE WHEN queues.max_per_minute IS NOT NULL THEN
           (SELECT count(*) FROM queue_claims
            WHERE queue_claims.queue = names.queue
              AND queue_claims.claimed_at > sb_ts(CAST(:now AS bigint) - 60000)) END
           AS claims_last_minute
FROM names
LEFT JOIN counts ON counts.queue = names.queue
LEFT JOIN queues ON queues.name = names.queue
ORDER BY names.queue;

-- ---- queues (an operator's settings for a queue: paused or not) ----

-- name: get_queue
SELECT name, sb_ms(paused_at) AS paused_at, paused_by, max_claimed, max_per_minute
FROM queues WHERE name = :name;

-- name: pause_queue
-- Paused now by :by; a queue paused already keeps when and by whom.
INSERT INTO queues (name, paused_at, paused_by) VALUES (:name, sb_ts(:now), :by)
ON CONFLICT (name) DO UPDATE
SET paused_at = COALESCE(queues.paused_at, excluded.paused_at),
    paused_by = CASE WHEN queues.paused_at IS NULL THEN excluded.paused_by ELSE queues.paused_by END
RETURNING name, sb_ms(paused_at) AS paused_at, paused_by, max_claimed, max_per_minute;

-- name: resume_queue
UPDATE queues SET paused_at = NULL, paused_by = NULL WHERE name = :name
RETURNING name, sb_ms(paused_at) AS paused_at, paused_by, max_claimed, max_per_minute;

-- name: set_queue_limit
INSERT INTO queues (name, max_claimed, max_per_minute) VALUES (:name, :max_claimed, :max_per_minute)
ON CONFLICT (name) DO UPDATE
SET max_claimed = excluded.max_claimed, max_per_minute = excluded.max_per_minute
RETURNING name, sb_ms(paused_at) AS paused_at, paused_by, max_claimed, max_per_minute;

-- name: queue_load
-- A queue's limits and how close it is to them (queries.sql's says more).
SELECT max_claimed, max_per_minute,
       (SELECT count(*) FROM todos WHERE state = 'claimed' AND queue = :name
          AND lease_expires_at > sb_ts(:now)) AS claimed,
       (SELECT count(*) FROM queue_claims
        WHERE queue = :name AND claimed_at > sb_ts(CAST(:now AS bigint) - 60000)) AS claims_last_minute
FROM queues WHERE name = :name;


-- name: insert_event
-- A new event, unless the delivery was seen (see queries.sql): then it
-- inserts nothing and returns no row. A race with another transaction storing
-- the same (source, external id) waits for it, then inserts nothing.
INSERT INTO events (id, source, family, type, external_id, trust_mode, verified, verify_detail,
                    content_type, headers, body, size, received_at)
SELECT sb_new_id('events'), :source, :family, :type, :external_id, :trust_mode, CAST(:verified AS integer) <> 0,
       :verify_detail, :content_type, CAST(:headers AS jsonb), :body, :size, sb_ts(:now)
WHERE NOT EXISTS (SELECT 1 FROM events WHERE source = :source AND external_id = :external_id)
  AND NOT EXISTS (
      SELECT 1 FROM delivery_keys
      WHERE source = :source
        AND (key = :pruned_key OR (key = :body_key AND seen_at >= sb_ts(:window_start))))
ON CONFLICT (source, external_id) DO NOTHING
RETURNING id;

-- name: insert_event_with_id
-- A batch of new events (executemany), their ids given (from next_event_id,
-- under the id lock); the identity's sequence is moved past each.
INSERT INTO events (id, source, family, type, external_id, trust_mode, verified, verify_detail,
                    content_type, headers, body, size, received_at)
VALUES (sb_given_id('events', :id), :source, :family, :type, :external_id, :trust_mode,
        CAST(:verified AS integer) <> 0, :verify_detail, :content_type, CAST(:headers AS jsonb), :body, :size,
        sb_ts(:now));

-- name: seen_deliveries
-- For a batch of deliveries (a JSON array of [source, external_id,
-- pruned_key, body_key, window_start]): the position of each one seen
-- before, with the event it repeats. sb_seen_delivery takes the id lock
-- (exclusive) before it looks, and looks with a snapshot taken after it: the
-- batch that follows numbers its events and todos, and no delivery stored
-- by another transaction can come between its look and its inserts.
SELECT position, event_id FROM (
    SELECT CAST(d.n - 1 AS integer) AS position,
           sb_seen_delivery(d.value ->> 0, d.value ->> 1, d.value ->> 2, d.value ->> 3,
                            CAST(d.value ->> 4 AS bigint)) AS event_id
    FROM jsonb_array_elements(CAST(:deliveries AS jsonb)) WITH ORDINALITY AS d(value, n)) AS seen
WHERE event_id IS NOT NULL
ORDER BY position;

-- name: next_event_id
-- The first id no event has had, for a batch to number its events from
-- (under the id lock, as next_todo_id).
SELECT sb_first_free_id('events') AS id;

-- name: insert_operator_event
-- An operator's action (audit.py): always new, trusted as the operator's own.
INSERT INTO events (id, source, family, type, external_id, trust_mode, verified, verify_detail,
                    content_type, headers, body, size, received_at)
VALUES (sb_new_id('events'), :source, 'operator', :type, :external_id, 'operator', true,
        'an action of this machine''s operator', 'application/json', CAST(:headers AS jsonb), :body, :size,
        sb_ts(:now))
RETURNING id;

-- name: seen_delivery
-- The event a delivery repeats (see insert_event): a stored event with its
-- external id first, then the kept key of one pruned since, then its body (the
-- order SQLite's plan gives queries.sql's).
SELECT event_id FROM (
    SELECT id AS event_id, 1 AS preference FROM events WHERE source = :source AND external_id = :external_id
    UNION ALL
    SELECT event_id, 2 FROM delivery_keys WHERE source = :source AND key = :pruned_key
    UNION ALL
    SELECT event_id, 3 FROM delivery_keys
    WHERE source = :source AND key = :body_key AND seen_at >= sb_ts(:window_start)) AS seen
ORDER BY preference
LIMIT 1;

-- name: remember_delivery
-- A delivery key kept apart from its event; a newer sighting replaces an older.
INSERT INTO delivery_keys (source, key, event_id, seen_at)
VALUES (:source, :key, :event_id, sb_ts(:now))
ON CONFLICT (source, key) DO UPDATE SET event_id = excluded.event_id, seen_at = excluded.seen_at;

-- name: get_event
SELECT id, source, family, type, external_id, trust_mode, CAST(verified AS integer) AS verified, verify_detail,
  content_type, CAST(headers AS text) AS headers, body, size, sb_ms(received_at) AS received_at
FROM events WHERE id = :id;

-- name: todos_of_event
-- The todos an event produced, by id.
SELECT id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for
FROM todos
WHERE id IN (SELECT todo_id FROM event_todos WHERE event_id = :event_id)
   OR event_id = :event_id
ORDER BY id;

-- name: events_in_play
-- Which of :ids (a JSON array of event ids) still have a todo they produced pending or claimed.
SELECT DISTINCT event_id FROM todos
WHERE event_id IN (SELECT CAST(jsonb_array_elements_text(CAST(:ids AS jsonb)) AS bigint))
  AND state IN ('pending', 'claimed');

-- name: event_in_scope
-- Whether a todo in one of :queues (a JSON array) came from the event.
SELECT 1 AS "1" FROM todos
WHERE event_id = :id AND queue IN (SELECT jsonb_array_elements_text(CAST(:queues AS jsonb)))
LIMIT 1;

-- name: recent_events
-- The newest :limit events (any filter may be NULL), newest first.
SELECT id, source, family, type, external_id, trust_mode, CAST(verified AS integer) AS verified, verify_detail,
  content_type, CAST(headers AS text) AS headers, body, size, sb_ms(received_at) AS received_at
FROM events
WHERE (CAST(:source AS text) IS NULL OR source = :source)
  AND (CAST(:type AS text) IS NULL OR type = :type)
ORDER BY id DESC
LIMIT :limit;

-- ---- sources (the configured producers: webhook sources and adapters) ----

-- name: insert_source
INSERT INTO sources (name, family, kind, trust_mode, enabled, config, secrets, created_at, updated_at)
VALUES (:name, :family, :kind, :trust_mode, true, CAST(:config AS jsonb), CAST(:secrets AS jsonb),
        sb_ts(:now), sb_ts(:now))
ON CONFLICT (name) DO NOTHING
RETURNING name, family, kind, trust_mode, CAST(enabled AS integer) AS enabled, CAST(config AS text) AS config,
  CAST(secrets AS text) AS secrets, sb_ms(created_at) AS created_at, sb_ms(updated_at) AS updated_at,
  sb_ms(last_poll_at) AS last_poll_at, last_error, consecutive_failures, messages_stored,
  sb_ms(last_tick_at) AS last_tick_at;

-- name: get_source
SELECT name, family, kind, trust_mode, CAST(enabled AS integer) AS enabled, CAST(config AS text) AS config,
  CAST(secrets AS text) AS secrets, sb_ms(created_at) AS created_at, sb_ms(updated_at) AS updated_at,
  sb_ms(last_poll_at) AS last_poll_at, last_error, consecutive_failures, messages_stored,
  sb_ms(last_tick_at) AS last_tick_at
FROM sources WHERE name = :name;

-- name: list_sources
SELECT name, family, kind, trust_mode, CAST(enabled AS integer) AS enabled, CAST(config AS text) AS config,
  CAST(secrets AS text) AS secrets, sb_ms(created_at) AS created_at, sb_ms(updated_at) AS updated_at,
  sb_ms(last_poll_at) AS last_poll_at, last_error, consecutive_failures, messages_stored,
  sb_ms(last_tick_at) AS last_tick_at
FROM sources WHERE (CAST(:family AS text) IS NULL OR family = :family) ORDER BY name;

-- name: set_source_enabled
UPDATE sources SET enabled = CAST(:enabled AS integer) <> 0, updated_at = sb_ts(:now) WHERE name = :name
RETURNING name, family, kind, trust_mode, CAST(enabled AS integer) AS enabled, CAST(config AS text) AS config,
  CAST(secrets AS text) AS secrets, sb_ms(created_at) AS created_at, sb_ms(updated_at) AS updated_at,
  sb_ms(last_poll_at) AS last_poll_at, last_error, consecutive_failures, messages_stored,
  sb_ms(last_tick_at) AS last_tick_at;

-- name: set_source_secrets
UPDATE sources SET secrets = CAST(:secrets AS jsonb), updated_at = sb_ts(:now) WHERE name = :name
RETURNING name, family, kind, trust_mode, CAST(enabled AS integer) AS enabled, CAST(config AS text) AS config,
  CAST(secrets AS text) AS secrets, sb_ms(created_at) AS created_at, sb_ms(updated_at) AS updated_at,
  sb_ms(last_poll_at) AS last_poll_at, last_error, consecutive_failures, messages_stored,
  sb_ms(last_tick_at) AS last_tick_at;

-- name: record_source_health
-- A running consumer's poll: success resets the failure count, failure bumps it.
UPDATE sources
SET last_poll_at = sb_ts(:now),
    last_error = CASE WHEN CAST(:error AS text) IS NULL THEN last_error ELSE :error END,
    consecutive_failures = CASE WHEN CAST(:error AS text) IS NULL THEN 0 ELSE consecutive_failures + 1 END,
    messages_stored = messages_stored + CAST(:stored AS bigint)
WHERE name = :name;

-- name: advance_schedule
-- A schedule's newest fired tick: never moved back (GREATEST skips a NULL).
UPDATE sources SET last_tick_at = GREATEST(last_tick_at, sb_ts(:due))
WHERE name = :name AND family = 'schedule';

-- ---- agents ----

-- name: insert_agent
-- An existing name inserts nothing and returns no row.
INSERT INTO agents (name, queues, tools, create_queues, owner, created_at)
VALUES (:name, CAST(:queues AS jsonb), CAST(:tools AS jsonb), CAST(:create_queues AS jsonb), :owner, sb_ts(:now))
ON CONFLICT (name) DO NOTHING
RETURNING name, CAST(queues AS text) AS queues, CAST(tools AS text) AS tools, sb_ms(created_at) AS created_at,
  CAST(create_queues AS text) AS create_queues, owner;

-- name: get_agent
SELECT name, CAST(queues AS text) AS queues, CAST(tools AS text) AS tools, sb_ms(created_at) AS created_at,
  CAST(create_queues AS text) AS create_queues, owner
FROM agents WHERE name = :name;

-- name: list_agents
SELECT name, CAST(queues AS text) AS queues, CAST(tools AS text) AS tools, sb_ms(created_at) AS created_at,
  CAST(create_queues AS text) AS create_queues, owner
FROM agents ORDER BY name;

-- name: delete_agent
DELETE FROM agents WHERE name = :name
RETURNING name, CAST(queues AS text) AS queues, CAST(tools AS text) AS tools, sb_ms(created_at) AS created_at,
  CAST(create_queues AS text) AS create_queues, owner;

-- name: list_events
-- Oldest first after a cursor (:after_id, NULL for the start); any filter may
-- be NULL. With :queues (a JSON array) only events that at least one todo in
-- those queues came from.
SELECT id, source, family, type, external_id, trust_mode, CAST(verified AS integer) AS verified, verify_detail,
  content_type, CAST(headers AS text) AS headers, body, size, sb_ms(received_at) AS received_at
FROM events
WHERE (CAST(:after_id AS bigint) IS NULL OR id > :after_id)
  AND (CAST(:since AS bigint) IS NULL OR received_at >= sb_ts(:since))
  AND (CAST(:source AS text) IS NULL OR source = :source)
  AND (CAST(:type AS text) IS NULL OR type = :type)
  AND (CAST(:queues AS jsonb) IS NULL OR EXISTS (
        SELECT 1 FROM todos
        WHERE todos.event_id = events.id
          AND todos.queue IN (SELECT jsonb_array_elements_text(CAST(:queues AS jsonb)))))
ORDER BY id
LIMIT :limit;

-- name: event_in_queues
-- Whether at least one todo in the queues (a JSON array) came from the event.
SELECT 1 AS "1" FROM todos
WHERE event_id = :event_id AND queue IN (SELECT jsonb_array_elements_text(CAST(:queues AS jsonb)))
LIMIT 1;

-- name: data_version
-- SQLite's PRAGMA data_version has no PostgreSQL counterpart; the store
-- answers data_version() from LISTEN switchboard (schema.postgres.sql's
-- triggers) and need not run this. What it answers, should it be run: a
-- number that changes whenever any transaction that wrote commits (a hash of
-- the current snapshot: the transactions in progress and the next id to
-- come), in this database or another of the server, so it also changes when
-- nothing here did.
SELECT hashtext(CAST(pg_current_snapshot() AS text)) AS data_version;

-- name: todos_after
-- Todos created after :after_id, in :queue (NULL: every queue), oldest first,
-- as they are now: what `todo watch` follows. An id seen means every smaller
-- one is committed or never will be: sb_todos_after first waits for the
-- transactions that drew ids before it (schema.postgres.sql).
SELECT id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for
FROM sb_todos_after(:after_id, :queue, :limit) AS todos
ORDER BY id;

-- name: todo_arrivals
-- Todos created after :after_id that :agent could claim in the queues (a JSON
-- array, or NULL for all), oldest first, with the source of the event each
-- came from and whether its queue is paused: what the doorbell rings for.
-- Waits as todos_after does.
SELECT a.id, a.queue, a.title, a.state, a.source, a.paused,
       CAST((SELECT blocked_by FROM todos WHERE todos.id = a.id) > 0 AS integer) AS blocked
FROM sb_todo_arrivals(:after_id, CAST(:queues AS jsonb), :agent, :limit) AS a
ORDER BY a.id;

-- ---- rules (routing, applied in position order) ----

-- name: insert_rule
INSERT INTO rules (position, source, type, conditions, action, queue, title, assignee,
                   priority, max_attempts, stop, chain, created_at)
VALUES ((SELECT COALESCE(MAX(position), 0) + 1 FROM rules), :source, :type, CAST(:conditions AS jsonb), :action,
        :queue, :title, :assignee, :priority, :max_attempts, CAST(:stop AS integer) <> 0,
        CAST(:chain AS integer) <> 0, sb_ts(:now))
RETURNING id, position, source, type, CAST(conditions AS text) AS conditions, action, queue, title, assignee,
  priority, max_attempts, CAST(stop AS integer) AS stop, sb_ms(created_at) AS created_at,
  CAST(chain AS integer) AS chain;

-- name: list_rules
SELECT id, position, source, type, CAST(conditions AS text) AS conditions, action, queue, title, assignee,
  priority, max_attempts, CAST(stop AS integer) AS stop, sb_ms(created_at) AS created_at,
  CAST(chain AS integer) AS chain
FROM rules WHERE (CAST(:source AS text) IS NULL OR source = :source) ORDER BY position;

-- name: rules_of_source
SELECT id, position, source, type, CAST(conditions AS text) AS conditions, action, queue, title, assignee,
  priority, max_attempts, CAST(stop AS integer) AS stop, sb_ms(created_at) AS created_at,
  CAST(chain AS integer) AS chain
FROM rules WHERE source = :source ORDER BY position;

-- ---- retention ----

-- name: prune_finished_todos
-- Finished todos last touched before the cutoff. Live todos are never pruned, nor
-- a finished todo a live one waits for (as purge_todos).
DELETE FROM todos
WHERE state IN ('done', 'failed', 'cancelled')
  AND updated_at < sb_ts(:cutoff)
  AND NOT EXISTS (SELECT 1 FROM todo_deps JOIN todos AS waiting ON waiting.id = todo_deps.todo_id
                  WHERE todo_deps.after_id = todos.id AND waiting.state IN ('pending', 'claimed'));

-- name: prune_events
-- Events received before the cutoff, or beyond the newest :max_events, unless
-- a live todo still points to one; each pruned event's key, for the dedup horizon.
DELETE FROM events
WHERE (received_at < sb_ts(:cutoff)
       OR id <= (SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET :max_events))
  AND NOT EXISTS (
      SELECT 1 FROM todos
      WHERE todos.event_id = events.id AND todos.state IN ('pending', 'claimed'))
RETURNING id, source, external_id, sb_ms(received_at) AS received_at;

-- name: keep_pruned_delivery
-- A pruned event's external id, kept until the dedup horizon passes it.
INSERT INTO delivery_keys (source, key, event_id, seen_at)
VALUES (:source, 'id:' || CAST(:external_id AS text), :event_id, sb_ts(:received_at))
ON CONFLICT (source, key) DO NOTHING;

-- name: forget_delivery_keys
-- Delivery keys older than the dedup horizon: a redelivery after it is new.
DELETE FROM delivery_keys WHERE seen_at < sb_ts(:horizon);

-- ---- ingest leadership (leadership.py) ----

-- name: get_leader
SELECT id, fence, holder, pid, host, kind, http, sb_ms(since) AS since, sb_ms(renewed_at) AS renewed_at,
  sb_ms(expires_at) AS expires_at, handover_to, env
FROM ingest_leader WHERE id = 1;

-- name: take_leadership
-- A new leader, the fence one past the last: only over the row as the caller
-- saw it (:seen_fence, 0 for none), so of two standbys racing one wins (the
-- other waits for its row, then finds the fence moved: no row).
-- :env: which of the sources' environment variables it has (JSON, names only).
INSERT INTO ingest_leader (id, fence, holder, pid, host, kind, http, since, renewed_at, expires_at, handover_to, env)
VALUES (1, CAST(:seen_fence AS bigint) + 1, :holder, :pid, :host, :kind, :http, sb_ts(:now), sb_ts(:now),
        sb_ts(:expires_at), NULL, :env)
ON CONFLICT (id) DO UPDATE
SET fence = excluded.fence, holder = excluded.holder, pid = excluded.pid, host = excluded.host,
    kind = excluded.kind, http = excluded.http, since = excluded.since, renewed_at = excluded.renewed_at,
    expires_at = excluded.expires_at, handover_to = NULL, env = excluded.env
WHERE ingest_leader.fence = :seen_fence
RETURNING id, fence, holder, pid, host, kind, http, sb_ms(since) AS since, sb_ms(renewed_at) AS renewed_at,
  sb_ms(expires_at) AS expires_at, handover_to, env;

-- name: renew_leadership
-- :env again: sources may have been added since the last renewal.
UPDATE ingest_leader SET renewed_at = sb_ts(:now), expires_at = sb_ts(:expires_at), env = :env
WHERE fence = :fence AND holder = :holder AND expires_at > sb_ts(:now)
RETURNING id, fence, holder, pid, host, kind, http, sb_ms(since) AS since, sb_ms(renewed_at) AS renewed_at,
  sb_ms(expires_at) AS expires_at, handover_to, env;

-- name: release_leadership
-- The leader steps down: the row stays (its fence, and a take-over asked for), expired now.
UPDATE ingest_leader SET expires_at = sb_ts(:now), http = NULL, env = NULL WHERE fence = :fence AND holder = :holder;

-- name: check_fence
-- Inside a consumer's batch: the caller still leads.
SELECT 1 AS "1" FROM ingest_leader
WHERE id = 1 AND fence = :fence AND holder = :holder AND expires_at > sb_ts(:now);

-- name: seen_member
INSERT INTO ingest_members (holder, pid, host, kind, seen_at) VALUES (:holder, :pid, :host, :kind, sb_ts(:now))
ON CONFLICT (holder) DO UPDATE SET seen_at = excluded.seen_at;

-- name: forget_gone_members
DELETE FROM ingest_members WHERE seen_at < sb_ts(:before);

-- name: members
SELECT holder, pid, host, kind, sb_ms(seen_at) AS seen_at
FROM ingest_members WHERE seen_at >= sb_ts(:since) ORDER BY seen_at;

-- ---- browse (core/browse.py: the dashboard's read API; pure reads) ----

-- name: browse_todos
-- Newest first, before a cursor; every filter may be NULL. :title_like is a
-- LIKE pattern with '\' as its escape, matched without regard to ASCII case
-- as SQLite's LIKE does (ILIKE on the columns' "C" collation).
SELECT id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for
FROM todos
WHERE (CAST(:queue AS text) IS NULL OR queue = :queue)
  AND (CAST(:state AS text) IS NULL OR state = :state)
  AND (CAST(:kind AS text) IS NULL OR kind = :kind)
  AND (CAST(:assignee AS text) IS NULL OR assignee = :assignee)
  AND (CAST(:title_like AS text) IS NULL OR title ILIKE :title_like ESCAPE '\')
  AND (CAST(:before_id AS bigint) IS NULL OR id < :before_id)
ORDER BY id DESC
LIMIT :limit;

-- name: browse_todos_in_queue
-- browse_todos for one queue (:queue), down todos_by_queue.
SELECT id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
  priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
  sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error, sb_ms(created_at) AS created_at,
  sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at, sb_ms(completed_at) AS completed_at,
  completed_by, cancelled_by, cancel_reason, blocked_by, waits_for
FROM todos
WHERE queue = :queue
  AND (CAST(:state AS text) IS NULL OR state = :state)
  AND (CAST(:kind AS text) IS NULL OR kind = :kind)
  AND (CAST(:assignee AS text) IS NULL OR assignee = :assignee)
  AND (CAST(:title_like AS text) IS NULL OR title ILIKE :title_like ESCAPE '\')
  AND (CAST(:before_id AS bigint) IS NULL OR id < :before_id)
ORDER BY id DESC
LIMIT :limit;

-- name: browse_events
-- Newest first, before a cursor; :source and :type may be NULL.
SELECT id, source, family, type, external_id, trust_mode, CAST(verified AS integer) AS verified, verify_detail,
  content_type, CAST(headers AS text) AS headers, body, size, sb_ms(received_at) AS received_at
FROM events
WHERE (CAST(:source AS text) IS NULL OR source = :source)
  AND (CAST(:type AS text) IS NULL OR type = :type)
  AND (CAST(:before_id AS bigint) IS NULL OR id < :before_id)
ORDER BY id DESC
LIMIT :limit;

-- name: queue_minutes
-- Per queue and minute since :since (minute 0 starts at :since): todos created,
-- and todos finished (done, dead, cancelled) by their last change.
SELECT queue, minute, SUM(created) AS created, SUM(finished) AS finished FROM (
    SELECT queue, (sb_ms(created_at) - CAST(:since AS bigint)) / 60000 AS minute, 1 AS created, 0 AS finished
    FROM todos WHERE created_at >= sb_ts(:since)
    UNION ALL
    SELECT queue, (sb_ms(updated_at) - CAST(:since AS bigint)) / 60000, 0, 1
    FROM todos WHERE state IN ('done', 'failed', 'cancelled') AND updated_at >= sb_ts(:since)
) AS changes
GROUP BY queue, minute;

-- name: done_since
-- Per queue: todos done at or after :since.
SELECT queue, COUNT(*) AS done FROM todos
WHERE state = 'done' AND completed_at >= sb_ts(:since)
GROUP BY queue;

-- name: dead_groups
-- Dead letters grouped by queue and last error, the biggest group of a queue
-- first (no error sorts first, as on SQLite).
SELECT queue, last_error, COUNT(*) AS count, MIN(id) AS first_id, MAX(id) AS last_id,
       sb_ms(MAX(updated_at)) AS last_failed_at
FROM todos WHERE state = 'failed'
GROUP BY queue, last_error
ORDER BY queue, count DESC, last_error NULLS FIRST;

-- name: dead_letters_with_error
-- One dead-letter group's ids (a queue, a last error; NULL matches NULL) after :after_id, oldest first.
SELECT id FROM todos
WHERE queue = :queue AND state = 'failed' AND last_error IS NOT DISTINCT FROM CAST(:last_error AS text)
  AND id > :after_id
ORDER BY id
LIMIT :limit;

-- name: deliveries_by_source
-- Per source: events kept (pruning lowers it) and the last one's arrival.
SELECT source, COUNT(*) AS events, sb_ms(MAX(received_at)) AS last_received_at FROM events GROUP BY source;

-- name: browse_fingerprint
-- What the live stream compares between two commits to say what changed.
-- (SQLite's two-argument MAX is NULL when either is: no source, no value.)
SELECT (SELECT MAX(id) FROM events) AS last_event_id,
       (SELECT MAX(id) FROM todos) AS last_todo_id,
       (SELECT sb_ms(MAX(updated_at)) FROM todos) AS todos_updated_at,
       (SELECT COUNT(*) FROM todos WHERE state = 'failed') AS dead,
       (SELECT CASE WHEN MAX(updated_at) IS NULL THEN NULL
                    ELSE GREATEST(sb_ms(MAX(updated_at)), COALESCE(sb_ms(MAX(last_poll_at)), 0)) END
        FROM sources) AS sources_updated_at,
       (SELECT string_agg(name || '=' || COALESCE(CAST(sb_ms(paused_at) AS text), '') || '/'
                          || COALESCE(CAST(max_claimed AS text), '') || '/'
                          || COALESCE(CAST(max_per_minute AS text), ''), ',' ORDER BY name)
        FROM queues) AS queues_setting;

-- ---- db copy (the copy_ statements; copy_target_holds is in ../shared.sql) ----

-- core/copy.py's copy_ statements (see sqlite/queries.sql): reads answer the SQLite
-- shapes (ms, JSON text, 0/1), inserts take them; ids are given explicitly
-- (the identities are GENERATED BY DEFAULT), and copy_move_sequences moves
-- each identity past them.

-- name: copy_last_ids
-- The last id each identity gave (or the max id, if more: ids inserted as given).
SELECT greatest(coalesce(pg_sequence_last_value(CAST(pg_get_serial_sequence('events', 'id') AS regclass)), 0),
                coalesce((SELECT max(id) FROM events), 0)) AS events,
       greatest(coalesce(pg_sequence_last_value(CAST(pg_get_serial_sequence('todos', 'id') AS regclass)), 0),
                coalesce((SELECT max(id) FROM todos), 0)) AS todos,
       greatest(coalesce(pg_sequence_last_value(CAST(pg_get_serial_sequence('rules', 'id') AS regclass)), 0),
                coalesce((SELECT max(id) FROM rules), 0)) AS rules;

-- name: copy_seed_sequences
-- SQLite's AUTOINCREMENT needs a row per table first; an identity's sequence always exists.
SELECT WHERE false;

-- name: copy_move_sequences
-- Each identity past the source's last id (sb_given_id never moves one
-- backwards); rules' past their max, as SQLite's rowids follow theirs.
WITH moved AS MATERIALIZED (
    SELECT sb_given_id('events', CAST(:events AS bigint)), sb_given_id('todos', CAST(:todos AS bigint)),
           sb_given_id('rules', (SELECT coalesce(max(id), 0) FROM rules))
)
SELECT FROM moved;

-- name: copy_read_sources
SELECT name, family, kind, trust_mode, CAST(enabled AS integer) AS enabled, CAST(config AS text) AS config,
       CAST(secrets AS text) AS secrets, sb_ms(created_at) AS created_at, sb_ms(updated_at) AS updated_at,
       sb_ms(last_poll_at) AS last_poll_at, last_error, consecutive_failures, messages_stored,
  sb_ms(last_tick_at) AS last_tick_at
FROM sources WHERE name > :after_name ORDER BY name LIMIT :limit;

-- name: copy_insert_sources
INSERT INTO sources (name, family, kind, trust_mode, enabled, config, secrets, created_at, updated_at,
                     last_poll_at, last_error, consecutive_failures, messages_stored, last_tick_at)
VALUES (:name, :family, :kind, :trust_mode, CAST(:enabled AS integer) <> 0, CAST(:config AS jsonb),
        CAST(:secrets AS jsonb), sb_ts(:created_at), sb_ts(:updated_at), sb_ts(:last_poll_at), :last_error,
        :consecutive_failures, :messages_stored, sb_ts(:last_tick_at));

-- name: copy_read_rules
SELECT id, position, source, type, CAST(conditions AS text) AS conditions, action, queue, title, assignee,
       priority, max_attempts, CAST(stop AS integer) AS stop, sb_ms(created_at) AS created_at,
       CAST(chain AS integer) AS chain
FROM rules WHERE id > :after_id ORDER BY id LIMIT :limit;

-- name: copy_insert_rules
INSERT INTO rules (id, position, source, type, conditions, action, queue, title, assignee, priority,
                   max_attempts, stop, chain, created_at)
VALUES (:id, :position, :source, :type, CAST(:conditions AS jsonb), :action, :queue, :title, :assignee,
        :priority, :max_attempts, CAST(:stop AS integer) <> 0, CAST(:chain AS integer) <> 0,
        sb_ts(:created_at));

-- name: copy_read_agents
SELECT name, CAST(queues AS text) AS queues, CAST(tools AS text) AS tools, sb_ms(created_at) AS created_at,
       CAST(create_queues AS text) AS create_queues, owner
FROM agents WHERE name > :after_name ORDER BY name LIMIT :limit;

-- name: copy_insert_agents
INSERT INTO agents (name, queues, tools, created_at, create_queues, owner)
VALUES (:name, CAST(:queues AS jsonb), CAST(:tools AS jsonb), sb_ts(:created_at), CAST(:create_queues AS jsonb),
        :owner);

-- name: copy_read_queues
SELECT name, sb_ms(paused_at) AS paused_at, paused_by, max_claimed, max_per_minute FROM queues
WHERE name > :after_name ORDER BY name LIMIT :limit;

-- name: copy_insert_queues
INSERT INTO queues (name, paused_at, paused_by, max_claimed, max_per_minute)
VALUES (:name, sb_ts(:paused_at), :paused_by, :max_claimed, :max_per_minute);

-- name: copy_sizes_events
SELECT id, size + octet_length(CAST(headers AS text)) AS size FROM events
WHERE id > :after_id ORDER BY id LIMIT :limit;

-- name: copy_read_events
SELECT id, source, family, type, external_id, trust_mode, CAST(verified AS integer) AS verified, verify_detail,
       content_type, CAST(headers AS text) AS headers, body, size, sb_ms(received_at) AS received_at
FROM events WHERE id > :after_id AND id <= :through_id ORDER BY id;

-- name: copy_insert_events
INSERT INTO events (id, source, family, type, external_id, trust_mode, verified, verify_detail,
                    content_type, headers, body, size, received_at)
VALUES (:id, :source, :family, :type, :external_id, :trust_mode, CAST(:verified AS integer) <> 0, :verify_detail,
        :content_type, CAST(:headers AS jsonb), :body, :size, sb_ts(:received_at));

-- name: copy_sizes_todos
SELECT id, octet_length(CAST(payload AS text)) + coalesce(octet_length(CAST(result AS text)), 0)
           + coalesce(octet_length(last_error), 0) AS size
FROM todos WHERE id > :after_id ORDER BY id LIMIT :limit;

-- name: copy_read_todos
SELECT id, queue, assignee, title, kind, CAST(payload AS text) AS payload, event_id, idempotency_key, state,
       priority, attempt, max_attempts, owner, lease_token_hash, sb_ms(lease_expires_at) AS lease_expires_at,
       sb_ms(visible_at) AS visible_at, CAST(result AS text) AS result, last_error,
       sb_ms(created_at) AS created_at, sb_ms(updated_at) AS updated_at, sb_ms(claimed_at) AS claimed_at,
       sb_ms(completed_at) AS completed_at, completed_by, cancelled_by, cancel_reason, blocked_by, waits_for
FROM todos WHERE id > :after_id AND id <= :through_id ORDER BY id;

-- name: copy_insert_todos
INSERT INTO todos (id, queue, assignee, title, kind, payload, event_id, idempotency_key, state, priority,
                   attempt, max_attempts, owner, lease_token_hash, lease_expires_at, visible_at, result,
                   last_error, created_at, updated_at, claimed_at, completed_at, completed_by,
                   cancelled_by, cancel_reason, blocked_by, waits_for)
VALUES (:id, :queue, :assignee, :title, :kind, CAST(:payload AS jsonb), :event_id, :idempotency_key, :state,
        :priority, :attempt, :max_attempts, :owner, :lease_token_hash, sb_ts(:lease_expires_at),
        sb_ts(:visible_at), CAST(:result AS jsonb), :last_error, sb_ts(:created_at), sb_ts(:updated_at),
        sb_ts(:claimed_at), sb_ts(:completed_at), :completed_by, :cancelled_by, :cancel_reason,
        :blocked_by, :waits_for);

-- name: copy_read_attempts
SELECT todo_id, seq, attempt, owner, sb_ms(claimed_at) AS claimed_at, sb_ms(ended_at) AS ended_at, outcome, error
FROM attempts WHERE (todo_id, seq) > (:after_todo_id, :after_seq)
ORDER BY todo_id, seq LIMIT :limit;

-- name: copy_insert_attempts
INSERT INTO attempts (todo_id, seq, attempt, owner, claimed_at, ended_at, outcome, error)
VALUES (:todo_id, :seq, :attempt, :owner, sb_ts(:claimed_at), sb_ts(:ended_at), :outcome, :error);

-- name: copy_read_delivery_keys
SELECT source, key, event_id, sb_ms(seen_at) AS seen_at FROM delivery_keys
WHERE (source, key) > (:after_source, :after_key)
ORDER BY source, key LIMIT :limit;

-- name: copy_insert_delivery_keys
INSERT INTO delivery_keys (source, key, event_id, seen_at) VALUES (:source, :key, :event_id, sb_ts(:seen_at));

-- name: copy_read_queue_claims
SELECT queue, sb_ms(claimed_at) AS claimed_at, todo_id, lease_token_hash FROM queue_claims
WHERE (queue, claimed_at, lease_token_hash) > (:after_queue, sb_ts(:after_claimed_at), :after_lease_token_hash)
ORDER BY queue, claimed_at, lease_token_hash LIMIT :limit;

-- name: copy_insert_queue_claims
INSERT INTO queue_claims (queue, claimed_at, todo_id, lease_token_hash)
VALUES (:queue, sb_ts(:claimed_at), :todo_id, :lease_token_hash);
