-- Every statement the core runs, by name. Loaded by queries.py; the schema
-- they read and write is ../schema.sql. Parameters are named; times are
-- integer milliseconds from the core's clock (:now).

-- name: insert_todo
-- A new pending todo. A live todo with the same (queue, idempotency_key)
-- makes this insert nothing and return no row (the caller then reads it).
INSERT INTO todos (queue, assignee, title, kind, payload, event_id, idempotency_key,
                   state, priority, max_attempts, visible_at, created_at, updated_at)
VALUES (:queue, :assignee, :title, :kind, :payload, :event_id, :idempotency_key,
        'pending', :priority, :max_attempts, :visible_at, :now, :now)
ON CONFLICT DO NOTHING
RETURNING *;

-- name: live_todo_by_key
-- The live (pending, claimed, or awaiting retry) todo holding a key.
SELECT * FROM todos
WHERE queue = :queue AND idempotency_key = :idempotency_key
  AND (state = 'claimed' OR visible_at IS NOT NULL);

-- name: get_todo
SELECT * FROM todos WHERE id = :id;

-- name: list_todos
-- Newest first; either filter may be NULL.
SELECT * FROM todos
WHERE (:queue IS NULL OR queue = :queue)
  AND (:state IS NULL OR state = :state)
ORDER BY id DESC
LIMIT :limit;

-- name: attempts_of_todo
SELECT * FROM attempts WHERE todo_id = :todo_id ORDER BY id;

-- name: close_lapsed_attempts
-- Part one of recovering lapsed leases (runs inside every claim's
-- transaction, so recovery never waits for a sweeper): end their attempts.
UPDATE attempts SET ended_at = :now, outcome = 'lease_expired'
WHERE ended_at IS NULL
  AND todo_id IN (SELECT id FROM todos WHERE state = 'claimed' AND lease_expires_at <= :now);

-- name: recover_lapsed_leases
-- Part two: a lapsed todo with attempts left is visible again at once; one
-- whose last attempt lapsed becomes a dead letter instead of looping.
UPDATE todos
SET state      = CASE WHEN attempt >= max_attempts THEN 'failed' ELSE 'pending' END,
    visible_at = CASE WHEN attempt >= max_attempts THEN NULL ELSE lease_expires_at END,
    last_error = 'lease expired on attempt ' || attempt || ' of ' || max_attempts
                 || ' (owner ' || owner || ')',
    owner = NULL, lease_token_hash = NULL, lease_expires_at = NULL,
    updated_at = :now
WHERE state = 'claimed' AND lease_expires_at <= :now;

-- name: claim_by_id
UPDATE todos
SET state = 'claimed', owner = :owner, attempt = attempt + 1,
    lease_token_hash = :lease_token_hash, lease_expires_at = :lease_expires_at,
    visible_at = NULL, claimed_at = :now, updated_at = :now
WHERE id = :id
  AND visible_at <= :now
  AND (assignee IS NULL OR assignee = :agent)
RETURNING *;

-- name: claim_next_any
-- The oldest highest-priority visible todo in any queue.
UPDATE todos
SET state = 'claimed', owner = :owner, attempt = attempt + 1,
    lease_token_hash = :lease_token_hash, lease_expires_at = :lease_expires_at,
    visible_at = NULL, claimed_at = :now, updated_at = :now
WHERE id = (
    SELECT id FROM todos INDEXED BY todos_ready
    WHERE visible_at <= :now
      AND (assignee IS NULL OR assignee = :agent)
    ORDER BY priority DESC, id
    LIMIT 1)
RETURNING *;

-- name: claim_next_in_queue
-- The oldest highest-priority visible todo in one queue.
UPDATE todos
SET state = 'claimed', owner = :owner, attempt = attempt + 1,
    lease_token_hash = :lease_token_hash, lease_expires_at = :lease_expires_at,
    visible_at = NULL, claimed_at = :now, updated_at = :now
WHERE id = (
    SELECT id FROM todos INDEXED BY todos_ready_by_queue
    WHERE queue = :queue
      AND visible_at <= :now
      AND (assignee IS NULL OR assignee = :agent)
    ORDER BY priority DESC, id
    LIMIT 1)
RETURNING *;

-- name: claim_next_in_queues
-- The oldest highest-priority visible todo in any of several queues
-- (:queues is a JSON array of names): one index seek per queue for its head,
-- then the best of those heads, so a deep backlog is never sorted.
UPDATE todos
SET state = 'claimed', owner = :owner, attempt = attempt + 1,
    lease_token_hash = :lease_token_hash, lease_expires_at = :lease_expires_at,
    visible_at = NULL, claimed_at = :now, updated_at = :now
WHERE id = (
    SELECT head.id
    FROM json_each(:queues) AS q
    JOIN todos AS head ON head.id = (
        SELECT id FROM todos INDEXED BY todos_ready_by_queue
        WHERE queue = q.value
          AND visible_at <= :now
          AND (assignee IS NULL OR assignee = :agent)
        ORDER BY priority DESC, id
        LIMIT 1)
    ORDER BY head.priority DESC, head.id
    LIMIT 1)
RETURNING *;

-- name: open_attempt
INSERT INTO attempts (todo_id, attempt, owner, claimed_at)
VALUES (:todo_id, :attempt, :owner, :now);

-- name: close_attempt
UPDATE attempts SET ended_at = :now, outcome = :outcome, error = :error
WHERE todo_id = :todo_id AND ended_at IS NULL;

-- name: heartbeat
-- Resets the lease to now + ttl (it does not add), never past the cap that
-- was fixed when the attempt began.
UPDATE todos
SET lease_expires_at = MIN(:now + :lease_ms, claimed_at + :lease_cap_ms), updated_at = :now
WHERE id = :id AND state = 'claimed'
  AND lease_token_hash = :lease_token_hash AND lease_expires_at > :now
RETURNING *;

-- name: complete
UPDATE todos
SET state = 'done', result = :result, completed_at = :now, updated_at = :now,
    owner = NULL, lease_token_hash = NULL, lease_expires_at = NULL
WHERE id = :id AND state = 'claimed'
  AND lease_token_hash = :lease_token_hash AND lease_expires_at > :now
RETURNING *;

-- name: fail
-- Below the cap the todo waits out an exponential backoff (base doubling per
-- attempt, capped, scaled by the caller's jitter factor); at the cap it is a
-- dead letter: failed with no retry time.
UPDATE todos
SET state = 'failed', last_error = :error, updated_at = :now,
    visible_at = CASE
        WHEN attempt >= max_attempts THEN NULL
        ELSE :now + CAST(MIN(:backoff_base_ms << MIN(attempt - 1, 20), :backoff_cap_ms) * :jitter AS INTEGER)
    END,
    owner = NULL, lease_token_hash = NULL, lease_expires_at = NULL
WHERE id = :id AND state = 'claimed'
  AND lease_token_hash = :lease_token_hash AND lease_expires_at > :now
RETURNING *;

-- name: release
-- Back to pending (after an optional delay) with the attempt refunded:
-- releasing is not failing.
UPDATE todos
SET state = 'pending', attempt = attempt - 1, visible_at = :now + :delay_ms, updated_at = :now,
    owner = NULL, lease_token_hash = NULL, lease_expires_at = NULL
WHERE id = :id AND state = 'claimed'
  AND lease_token_hash = :lease_token_hash AND lease_expires_at > :now
RETURNING *;

-- name: redrive
-- A dead letter back to pending with a fresh attempt budget.
UPDATE todos
SET state = 'pending', attempt = 0, visible_at = :now, updated_at = :now
WHERE id = :id AND state = 'failed' AND visible_at IS NULL
RETURNING *;

-- name: stats
-- Counts per queue and state; dead letters are the failed todos with no
-- retry time; the oldest pending todo's creation time gives its age.
SELECT queue,
       SUM(state = 'pending')                        AS pending,
       SUM(state = 'claimed')                        AS claimed,
       SUM(state = 'done')                           AS done,
       SUM(state = 'failed')                         AS failed,
       SUM(state = 'failed' AND visible_at IS NULL)  AS dead_letters,
       MIN(CASE WHEN state = 'pending' THEN created_at END) AS oldest_pending_created_at
FROM todos
GROUP BY queue
ORDER BY queue;

-- name: insert_event
-- A redelivery (same source and external id) inserts nothing and returns no row.
INSERT INTO events (source, family, type, external_id, trust_mode, verified, verify_detail,
                    content_type, headers, body, size, received_at)
VALUES (:source, :family, :type, :external_id, :trust_mode, :verified, :verify_detail,
        :content_type, :headers, :body, :size, :now)
ON CONFLICT (source, external_id) DO NOTHING
RETURNING id;

-- name: event_id_by_external_id
SELECT id FROM events WHERE source = :source AND external_id = :external_id;

-- name: link_event_todo
INSERT INTO event_todos (event_id, position, todo_id) VALUES (:event_id, :position, :todo_id);

-- name: todo_ids_of_event
-- The todos the event's first delivery answered with, in that order.
SELECT todo_id AS id FROM event_todos WHERE event_id = :event_id ORDER BY position;

-- name: get_event
SELECT * FROM events WHERE id = :id;
