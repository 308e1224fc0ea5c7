-- Every statement the core runs, by name. Loaded by store/queries.py; the schema
-- they read and write is schema.sql, at the repository root. Parameters are named; times are
-- integer milliseconds from the core's clock (:now).

-- name: insert_todo
-- A new pending todo, unless a live todo holds the same (queue, key): then it
-- inserts nothing (using up no id) and returns no row; the caller reads the
-- holder. The look is inside the insert: one statement on the common path.
-- A todo that waits for others (:waits_for of them, :blocked_by not done)
-- comes with :visible_at NULL when it is blocked; add_dependencies follows.
INSERT INTO todos (queue, assignee, title, kind, payload, event_id, idempotency_key,
                   state, priority, max_attempts, visible_at, created_at, updated_at, blocked_by, waits_for)
SELECT :queue, :assignee, :title, :kind, :payload, :event_id, :idempotency_key,
       'pending', :priority, :max_attempts, :visible_at, :now, :now, :blocked_by, :waits_for
WHERE :idempotency_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM todos
    WHERE queue = :queue AND idempotency_key = :idempotency_key
      AND state IN ('pending', 'claimed'))
RETURNING *;

-- name: insert_todo_id
-- insert_todo for the ingestion back half, which needs only the new id.
INSERT INTO todos (queue, assignee, title, kind, payload, event_id, idempotency_key,
                   state, priority, max_attempts, visible_at, created_at, updated_at)
SELECT :queue, :assignee, :title, :kind, :payload, :event_id, :idempotency_key,
       'pending', :priority, :max_attempts, :visible_at, :now, :now
WHERE :idempotency_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM todos
    WHERE queue = :queue AND idempotency_key = :idempotency_key
      AND state IN ('pending', 'claimed'))
RETURNING id;

-- name: insert_todo_with_id
-- A batch of the ingestion back half's todos (executemany), their ids given:
-- the batch asked live_keys_held first, so no live todo holds these keys (the
-- unique index todos_live_key would refuse one that did).
INSERT INTO todos (id, queue, assignee, title, kind, payload, event_id, idempotency_key,
                   state, priority, max_attempts, visible_at, created_at, updated_at)
VALUES (:id, :queue, :assignee, :title, :kind, :payload, :event_id, :idempotency_key,
        'pending', :priority, :max_attempts, :visible_at, :now, :now);

-- name: live_keys_held
-- Which of :keys (a JSON array of [queue, idempotency key]) a live todo holds: their positions.
SELECT k.key AS position FROM json_each(:keys) AS k
WHERE EXISTS (
    SELECT 1 FROM todos
    WHERE queue = json_extract(k.value, '$[0]') AND idempotency_key = json_extract(k.value, '$[1]')
      AND state IN ('pending', 'claimed'));

-- name: next_todo_id
-- The id SQLite would give the next todo (AUTOINCREMENT: past every id ever used).
SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'todos'), 0),
           coalesce((SELECT max(id) FROM todos), 0)) + 1 AS id;

-- name: set_todo_event
-- A direct create's event, recorded after its todo (audit.py).
UPDATE todos SET event_id = :event_id WHERE id = :id RETURNING *;

-- name: live_todo_by_key
-- The live (pending or claimed) todo holding a key.
SELECT * FROM todos
WHERE queue = :queue AND idempotency_key = :idempotency_key
  AND state IN ('pending', 'claimed');

-- name: get_todo
SELECT * FROM todos WHERE id = :id;

-- name: todos_by_ids
-- The todos :ids names (a JSON array of todo ids), by id: what `todo wait`
-- and the MCP tool wait_todos look at each time a commit wakes them.
SELECT * FROM todos WHERE id IN (SELECT value FROM json_each(:ids)) ORDER BY id;

-- ---- dependencies (core/todos/dependencies.py; the trigger that readies a
-- todo when the last one it waits for is done is in schema.sql) ----

-- name: dependency_states
-- The todos a new todo is to wait for (:ids, a JSON array of todo ids): each
-- one's state and queue (an id not listed does not exist).
SELECT id, state, queue FROM todos WHERE id IN (SELECT value FROM json_each(:ids)) ORDER BY id;

-- name: readiness
-- Of the todos :ids (a JSON array), each one's state and whether it is blocked
-- (a todo not listed no longer exists): the doorbell's look at the blocked
-- todos it saw arrive.
SELECT id, state, blocked_by > 0 AS blocked FROM todos WHERE id IN (SELECT value FROM json_each(:ids)) ORDER BY id;

-- name: live_todos_by_key
-- The live todos holding :idempotency_key, in any queue (`todo create
-- --after-key`): a walk of todos_live_key, which holds only live keyed todos.
SELECT id, queue FROM todos INDEXED BY todos_live_key
WHERE idempotency_key = :idempotency_key AND state IN ('pending', 'claimed')
ORDER BY id;

-- name: add_dependencies
-- Todo :id waits for each of :ids (a JSON array of todo ids, each older than it).
INSERT INTO todo_deps (todo_id, after_id) SELECT :id, value FROM json_each(:ids);

-- name: dependencies_of
-- What todo :id waits for, oldest first: each one's id, state, result (JSON
-- text) and the result's size in bytes.
SELECT todos.id, todos.state, todos.result, length(CAST(todos.result AS BLOB)) AS result_bytes
FROM todo_deps JOIN todos ON todos.id = todo_deps.after_id
WHERE todo_deps.todo_id = :id
ORDER BY todos.id;

-- name: cancel_dependents
-- The blocked todos that wait for the todos :ids (a JSON array) just
-- cancelled, cancelled too, each naming a dependency of its own that was
-- cancelled; the ids it cancelled. One level: dependencies.cancel_dependents
-- runs it again on what it cancelled, until nothing is left (each level a
-- statement of its own, so that on PostgreSQL it sees a dependent whose create
-- committed while the level before waited for its lock).
UPDATE todos
SET state = 'cancelled', cancelled_by = :by, updated_at = :now,
    cancel_reason = 'dependency ' || (SELECT min(after_id) FROM todo_deps
                                      WHERE todo_id = todos.id AND after_id IN (SELECT value FROM json_each(:ids)))
                    || ' was cancelled'
WHERE id IN (SELECT todo_id FROM todo_deps WHERE after_id IN (SELECT value FROM json_each(:ids)))
  AND state = 'pending' AND blocked_by > 0
RETURNING id;

-- name: list_todos
-- Newest first, before a cursor (:before_id, NULL for the newest); any filter
-- may be NULL; :queues is a JSON array of names (an agent's scope). :timing:
-- 'ready' (claimable now), 'delayed' (claimable later: a delay or a retry's
-- backoff), 'dead' (a dead letter: state 'failed'), 'blocked' (waiting for
-- todos not done). Of every queue: a list of
-- one queue is list_todos_in_queue's.
SELECT * FROM todos
WHERE (:state IS NULL OR state = :state)
  AND (:timing IS NULL
       OR (:timing = 'ready' AND visible_at <= :now)
       OR (:timing = 'delayed' AND visible_at > :now)
       OR (:timing = 'dead' AND state = 'failed')
       OR (:timing = 'blocked' AND state = 'pending' AND blocked_by > 0))
  AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues)))
  AND (:before_id IS NULL OR id < :before_id)
ORDER BY id DESC
LIMIT :limit;

-- name: list_todos_in_queue
-- list_todos for one queue (:queue): a walk down that queue's todos
-- (todos_by_queue) rather than down every todo.
SELECT * FROM todos
WHERE queue = :queue
  AND (:state IS NULL OR state = :state)
  AND (:timing IS NULL
       OR (:timing = 'ready' AND visible_at <= :now)
       OR (:timing = 'delayed' AND visible_at > :now)
       OR (:timing = 'dead' AND state = 'failed')
       OR (:timing = 'blocked' AND state = 'pending' AND blocked_by > 0))
  AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues)))
  AND (:before_id IS NULL OR id < :before_id)
ORDER BY id DESC
LIMIT :limit;

-- name: attempts_of_todo
-- A todo's attempt history, oldest first: the attempts that ended other than
-- by completing (the attempts table), then the open attempt of a claimed
-- todo or the attempt that completed a done one (both on the todo's row;
-- completed_by is set only as a todo is done, for good, and is NULL on a todo
-- done before version 8 with no completing attempt on record).
SELECT attempt, owner, claimed_at, ended_at, outcome, error FROM (
    SELECT seq, attempt, owner, claimed_at, ended_at, outcome, error
    FROM attempts WHERE todo_id = :todo_id
    UNION ALL
    SELECT NULL, attempt, owner, claimed_at, NULL, NULL, NULL
    FROM todos WHERE id = :todo_id AND state = 'claimed'
    UNION ALL
    SELECT NULL, attempt, completed_by, claimed_at, completed_at, 'completed', NULL
    FROM todos WHERE id = :todo_id AND completed_by IS NOT NULL)
ORDER BY seq IS NULL, seq;

-- name: end_lapsed_attempts
-- Part one of recovering lapsed leases (runs inside every claim's
-- transaction, so recovery never waits for a sweeper): their attempts end,
-- written to the history from the claimed rows.
INSERT INTO attempts (todo_id, seq, attempt, owner, claimed_at, ended_at, outcome)
SELECT id, (SELECT COALESCE(MAX(seq), 0) + 1 FROM attempts WHERE todo_id = todos.id),
       attempt, owner, claimed_at, :now, 'lease_expired'
FROM todos
WHERE state = 'claimed' AND lease_expires_at <= :now;

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

-- name: any_lapsed_lease
SELECT 1 FROM todos WHERE state = 'claimed' AND lease_expires_at <= :now LIMIT 1;

-- name: claim_by_id
-- A claim of one todo by its id. Every claim leaves a paused queue alone
-- (schema.sql's queues), in the claiming statement itself: a pause committed
-- before it is always seen. Apart from claim_next (the claim of the next in
-- line) because their PostgreSQL twins lock differently: this one waits for
-- a todo another transaction holds, claim_next skips it.
--
-- A limited queue (max_claimed, max_per_minute) is claimed from only with
-- :limited 1, and then only while it has room: fewer than max_claimed of its
-- todos claimed (the claimed todos are few: a walk down todos_leases, never
-- the backlog) and fewer than max_per_minute claims in queue_claims since a
-- minute ago. With :limited 0 (the plain claim) a limited queue's todo is
-- never claimed: claims.py then takes the limited way (lock_limited_queues,
-- then :limited 1, then log_claims), so the plain claim pays nothing for limits.
UPDATE todos
SET state = 'claimed', owner = :owner, attempt = attempt + 1,
    lease_token_hash = :lease_token_hash, lease_expires_at = :lease_expires_at,
    visible_at = NULL, claimed_at = :now, updated_at = :now
WHERE id = :id
  AND visible_at <= :now
  AND (assignee IS NULL OR assignee = :agent)
  AND NOT EXISTS (
      SELECT 1 FROM queues WHERE queues.name = todos.queue
        AND (queues.paused_at IS NOT NULL
             OR (queues.max_claimed IS NOT NULL OR queues.max_per_minute IS NOT NULL)
                AND (NOT :limited
                     OR queues.max_claimed <= (SELECT count(*) FROM todos AS held INDEXED BY todos_leases
                                               WHERE held.state = 'claimed' AND held.queue = queues.name)
                     OR queues.max_per_minute <= (SELECT count(*) FROM queue_claims
                                                  WHERE queue_claims.queue = queues.name
                                                    AND queue_claims.claimed_at > :now - 60000))))
  AND NOT EXISTS (SELECT 1 FROM todos AS lapsed WHERE lapsed.state = 'claimed' AND lapsed.lease_expires_at <= :now)
RETURNING *;

-- name: claim_next
-- The claim of the next in line, one todo or a batch (:max, 1 to 100), from
-- every queue (:queues NULL) or named ones (:queues, a JSON array of names):
-- up to :max todos, as that many claims one after the other would take them
-- (highest priority, then oldest), each under its own lease. One todo from
-- named queues, the commonest claim, has leaner statements of its own
-- (claim_next_in_queue, claim_next_in_queues); this is every other claim.
--
-- The queues: every queue with pending todos, found by skipping along
-- todos_ready_by_queue (a seek per queue, only when :queues is NULL), or the
-- named ones, one after another. Each one's first :max ready todos are a
-- seek down the same index (a paused queue gets none); the best :max of those
-- heads are the candidates, so the only sort is of the heads, never of a
-- backlog. No index orders todos across queues: one fewer to rewrite at every
-- claim.
--
-- With :budget (bytes, or NULL for none) the candidates are taken in that
-- order while their sizes add up to no more than it (payload, and last_error
-- six times: the most JSON may escape it to; a todo that can be claimed has
-- no result); the first always is. Each candidate takes the hash of :hashes (a JSON array of :max token
-- hashes) at its count of candidates after it, so the last one claimed tells
-- how many the budget left. The count, the place and the running size come
-- from one pass of window functions over the heads, in the order of the sort.
--
-- A limited queue in scope (every limited queue when :queues is NULL) makes
-- it claim nothing: claim_next_limited claims then (claim_by_id says why).
WITH RECURSIVE pending_queues (name) AS (
    SELECT (SELECT queue FROM todos INDEXED BY todos_ready_by_queue
            WHERE visible_at IS NOT NULL ORDER BY queue LIMIT 1)
    WHERE :queues IS NULL
    UNION ALL
    SELECT (SELECT queue FROM todos INDEXED BY todos_ready_by_queue
            WHERE visible_at IS NOT NULL AND queue > pending_queues.name ORDER BY queue LIMIT 1)
    FROM pending_queues WHERE pending_queues.name IS NOT NULL
),
claim_queues (name) AS (
    SELECT name FROM pending_queues WHERE name IS NOT NULL
    UNION ALL
    SELECT value FROM json_each(:queues)
),
ranked AS (
    SELECT head.id,
           row_number() OVER w AS n,
           count(*) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS heads,
           sum(CASE WHEN :budget IS NULL THEN 0 ELSE
               length(CAST(head.payload AS BLOB)) + 6 * COALESCE(length(CAST(head.last_error AS BLOB)), 0)
               END) OVER w AS size
    FROM claim_queues AS q
    JOIN todos AS head ON head.id IN (
        SELECT id FROM todos INDEXED BY todos_ready_by_queue
        WHERE queue = q.name
          AND visible_at <= :now
          AND (assignee IS NULL OR assignee = :agent)
        ORDER BY priority DESC, id
        LIMIT :max)
    WHERE NOT EXISTS (SELECT 1 FROM queues WHERE queues.name = q.name AND queues.paused_at IS NOT NULL)
    WINDOW w AS (ORDER BY head.priority DESC, head.id)
    ORDER BY head.priority DESC, head.id
    LIMIT :max
),
picked AS (
    SELECT id, min(heads, :max) - n AS behind FROM ranked
    WHERE n = 1 OR :budget IS NULL OR size <= :budget
)
UPDATE todos
SET state = 'claimed', owner = :owner, attempt = attempt + 1,
    lease_token_hash = json_extract(:hashes, '$[' || picked.behind || ']'), lease_expires_at = :lease_expires_at,
    visible_at = NULL, claimed_at = :now, updated_at = :now
FROM picked
WHERE todos.id = picked.id
  AND NOT EXISTS (SELECT 1 FROM todos AS lapsed WHERE lapsed.state = 'claimed' AND lapsed.lease_expires_at <= :now)
  AND NOT EXISTS (SELECT 1 FROM queues AS limited
                  WHERE (limited.max_claimed IS NOT NULL OR limited.max_per_minute IS NOT NULL)
                    AND (:queues IS NULL OR limited.name IN (SELECT value FROM json_each(:queues))))
RETURNING *;

-- name: claim_next_in_queue
-- One todo from one queue (:queues, a JSON array of that one name): what
-- claim_next claims with a max of 1 and this queue, in a statement of its own
-- because it is the commonest claim (an agent that names its queue) and its
-- plan is the least there is: one seek down todos_ready_by_queue, no sort and
-- no temporary table. claim_next's way to the same todo runs 1.7 times its
-- instructions (valgrind: 448,000 against 259,000 a claim with its commit).
-- A limited queue gets none here, in the same look at its queues row:
-- claim_next_limited claims from it (claim_by_id says why).
UPDATE todos
SET state = 'claimed', owner = :owner, attempt = attempt + 1,
    lease_token_hash = json_extract(:hashes, '$[0]'), lease_expires_at = :lease_expires_at,
    visible_at = NULL, claimed_at = :now, updated_at = :now
WHERE id = (
    SELECT id FROM todos INDEXED BY todos_ready_by_queue
    WHERE queue = json_extract(:queues, '$[0]')
      AND visible_at <= :now
      AND (assignee IS NULL OR assignee = :agent)
      AND NOT EXISTS (SELECT 1 FROM queues WHERE queues.name = json_extract(:queues, '$[0]')
                      AND (queues.paused_at IS NOT NULL OR queues.max_claimed IS NOT NULL OR queues.max_per_minute IS NOT NULL))
    ORDER BY priority DESC, id
    LIMIT 1)
  AND NOT EXISTS (SELECT 1 FROM todos AS lapsed WHERE lapsed.state = 'claimed' AND lapsed.lease_expires_at <= :now)
RETURNING *;

-- name: claim_next_in_queues
-- One todo from several queues (:queues, a JSON array of their names): what
-- claim_next claims with a max of 1 and these queues, in a statement of its
-- own for the same reason as claim_next_in_queue: a seek per queue for its
-- head (a paused queue gets none), then the best of those heads, and no
-- table of candidates, no counts or sums over them, no recursion to find the
-- queues. claim_next's way runs 1.6 times its instructions (valgrind:
-- 468,000 against 296,000 a claim with its commit). When the best head is a
-- limited queue's, it claims nothing (one look at that queue's row):
-- claim_next_limited claims then. A head of a queue without a limit is what
-- claim_next_limited would take too, a limit only ever holding todos back.
UPDATE todos
SET state = 'claimed', owner = :owner, attempt = attempt + 1,
    lease_token_hash = json_extract(:hashes, '$[0]'), lease_expires_at = :lease_expires_at,
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
    WHERE NOT EXISTS (SELECT 1 FROM queues WHERE queues.name = q.value AND queues.paused_at IS NOT NULL)
    ORDER BY head.priority DESC, head.id
    LIMIT 1)
  AND NOT EXISTS (SELECT 1 FROM todos AS lapsed WHERE lapsed.state = 'claimed' AND lapsed.lease_expires_at <= :now)
  AND NOT EXISTS (SELECT 1 FROM queues AS limited
                  WHERE limited.name = todos.queue
                    AND (limited.max_claimed IS NOT NULL OR limited.max_per_minute IS NOT NULL))
RETURNING *;

-- name: claim_next_limited
-- claim_next where a limited queue is in scope: the same claims, in the same
-- order, but each queue gives no more than its room, the least of :max,
-- max_claimed less its todos claimed now, and max_per_minute less its claims
-- since a minute ago (queue_claims). One transaction writes at a time on
-- SQLite, so what these counts see stays true until the commit; on
-- PostgreSQL lock_limited_queues ran first. Only claims of a limited queue run it:
-- the room's counts, a walk down todos_leases (the todos claimed now, never
-- the backlog) and a seek into queue_claims, cost nothing to the plain claim.
WITH RECURSIVE pending_queues (name) AS (
    SELECT (SELECT queue FROM todos INDEXED BY todos_ready_by_queue
            WHERE visible_at IS NOT NULL ORDER BY queue LIMIT 1)
    WHERE :queues IS NULL
    UNION ALL
    SELECT (SELECT queue FROM todos INDEXED BY todos_ready_by_queue
            WHERE visible_at IS NOT NULL AND queue > pending_queues.name ORDER BY queue LIMIT 1)
    FROM pending_queues WHERE pending_queues.name IS NOT NULL
),
claim_queues (name) AS (
    SELECT name FROM pending_queues WHERE name IS NOT NULL
    UNION ALL
    SELECT value FROM json_each(:queues)
),
rooms AS (
    SELECT q.name,
           min(:max,
               CASE WHEN setting.max_claimed IS NULL THEN :max
                    ELSE setting.max_claimed - (SELECT count(*) FROM todos AS held INDEXED BY todos_leases
                                                WHERE held.state = 'claimed' AND held.queue = q.name) END,
               CASE WHEN setting.max_per_minute IS NULL THEN :max
                    ELSE setting.max_per_minute - (SELECT count(*) FROM queue_claims
                                                   WHERE queue_claims.queue = q.name
                                                     AND queue_claims.claimed_at > :now - 60000) END) AS room
    FROM claim_queues AS q
    LEFT JOIN queues AS setting ON setting.name = q.name
    WHERE setting.paused_at IS NULL
),
heads AS (
    SELECT head.id, head.priority, head.payload, head.last_error, rooms.room,
           row_number() OVER (PARTITION BY rooms.name ORDER BY head.priority DESC, head.id) AS place
    FROM rooms
    JOIN todos AS head ON head.id IN (
        SELECT id FROM todos INDEXED BY todos_ready_by_queue
        WHERE queue = rooms.name
          AND visible_at <= :now
          AND (assignee IS NULL OR assignee = :agent)
        ORDER BY priority DESC, id
        LIMIT :max)
    WHERE rooms.room > 0
),
ranked AS (
    SELECT id,
           row_number() OVER w AS n,
           count(*) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS heads,
           sum(CASE WHEN :budget IS NULL THEN 0 ELSE
               length(CAST(payload AS BLOB)) + 6 * COALESCE(length(CAST(last_error AS BLOB)), 0)
               END) OVER w AS size
    FROM heads
    WHERE place <= room
    WINDOW w AS (ORDER BY priority DESC, id)
    ORDER BY priority DESC, id
    LIMIT :max
),
picked AS (
    SELECT id, min(heads, :max) - n AS behind FROM ranked
    WHERE n = 1 OR :budget IS NULL OR size <= :budget
)
UPDATE todos
SET state = 'claimed', owner = :owner, attempt = attempt + 1,
    lease_token_hash = json_extract(:hashes, '$[' || picked.behind || ']'), lease_expires_at = :lease_expires_at,
    visible_at = NULL, claimed_at = :now, updated_at = :now
FROM picked
WHERE todos.id = picked.id
  AND NOT EXISTS (SELECT 1 FROM todos AS lapsed WHERE lapsed.state = 'claimed' AND lapsed.lease_expires_at <= :now)
RETURNING *;

-- name: lock_limited_queues
-- The limited queues a claim may take from: those of :queues (a JSON array;
-- NULL: every queue), or :id's queue (NULL: any). By name. Nothing to lock on
-- SQLite, whose one writer makes the counts of a claim statement true until
-- its commit; PostgreSQL's twin locks them (it says why).
SELECT name, max_per_minute FROM queues
WHERE (max_claimed IS NOT NULL OR max_per_minute IS NOT NULL)
  AND (:queues IS NULL OR name IN (SELECT value FROM json_each(:queues)))
  AND (:id IS NULL OR name = (SELECT queue FROM todos WHERE id = :id))
ORDER BY name;

-- name: log_claims
-- The claims just made (:ids, a JSON array of todo ids) of the queues with a
-- max_per_minute, each as its queue, instant, todo and lease: what the
-- rolling minute counts.
INSERT INTO queue_claims (queue, claimed_at, todo_id, lease_token_hash)
SELECT todos.queue, todos.claimed_at, todos.id, todos.lease_token_hash
FROM json_each(:ids) AS claimed
JOIN todos ON todos.id = claimed.value
WHERE todos.state = 'claimed'
  AND EXISTS (SELECT 1 FROM queues WHERE queues.name = todos.queue AND queues.max_per_minute IS NOT NULL);

-- name: prune_queue_claims
-- The claims of :queues (a JSON array) older than a minute at :now: the
-- rolling minute no longer counts them.
DELETE FROM queue_claims
WHERE queue IN (SELECT value FROM json_each(:queues)) AND claimed_at <= :now - 60000;

-- name: end_attempt
-- A claimed todo's attempt ends (:outcome, :error) and is written to the
-- history, before the statement that ends it clears the claim. That
-- statement decides: fail and release only under the caller's live lease,
-- an operator's for any claim; one that changes nothing is refused, and the
-- transaction takes this row back with it. No row written: nothing was claimed.
INSERT INTO attempts (todo_id, seq, attempt, owner, claimed_at, ended_at, outcome, error)
SELECT id, (SELECT COALESCE(MAX(seq), 0) + 1 FROM attempts WHERE todo_id = :id),
       attempt, owner, claimed_at, :now, :outcome, :error
FROM todos
WHERE id = :id AND state = 'claimed'
RETURNING owner;

-- name: heartbeat
-- Resets the lease to now + ttl (it does not add), never past the cap that
-- was fixed when the attempt began.
UPDATE todos
SET lease_expires_at = MIN(:now + :lease_ms, claimed_at + :lease_cap_ms), updated_at = :now
WHERE id = :id AND state = 'claimed'
  AND lease_token_hash = :lease_token_hash AND lease_expires_at > :now
RETURNING *;

-- name: complete
-- The attempt that completes stays on the row (completed_by, claimed_at,
-- completed_at): no history row for the common case.
UPDATE todos
SET state = 'done', result = :result, completed_at = :now, updated_at = :now, completed_by = owner,
    owner = NULL, lease_token_hash = NULL, lease_expires_at = NULL
WHERE id = :id AND state = 'claimed'
  AND lease_token_hash = :lease_token_hash AND lease_expires_at > :now
RETURNING *;

-- name: complete_many
-- complete for many todos at once (:items, a JSON array of {"id", "hash": the
-- lease token's hash, "result": the result's JSON text, "queues": the
-- caller's scope, absent for any}); the rows it completed. An item it leaves
-- (its lease stale, outside the scope) is looked at alone by the caller.
UPDATE todos
SET state = 'done', result = json_extract(item.value, '$.result'), completed_at = :now, updated_at = :now,
    completed_by = owner, owner = NULL, lease_token_hash = NULL, lease_expires_at = NULL
FROM json_each(:items) AS item
WHERE todos.id = json_extract(item.value, '$.id') AND state = 'claimed'
  AND lease_token_hash = json_extract(item.value, '$.hash') AND lease_expires_at > :now
  AND (json_extract(item.value, '$.queues') IS NULL
       OR todos.queue IN (SELECT value FROM json_each(item.value, '$.queues')))
RETURNING *;

-- name: fail
-- Below the cap the todo is pending again after an exponential backoff (base
-- doubling per attempt, capped, scaled by the caller's jitter factor); at the
-- cap it is a dead letter: failed, with no retry time.
UPDATE todos
SET state = CASE WHEN attempt >= max_attempts THEN 'failed' ELSE 'pending' END,
    last_error = :error, updated_at = :now,
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

-- name: force_release
-- An operator's release, without the token: back to pending now, the attempt
-- refunded (as a release is); the holder's token no longer matches anything.
UPDATE todos
SET state = 'pending', attempt = attempt - 1, visible_at = :now, updated_at = :now,
    owner = NULL, lease_token_hash = NULL, lease_expires_at = NULL
WHERE id = :id AND state = 'claimed'
RETURNING *;

-- name: cancel
-- A pending or claimed todo finished by an operator: it frees its key, and a
-- holder's token is refused from now on (told who cancelled it, and why).
UPDATE todos
SET state = 'cancelled', cancelled_by = :by, cancel_reason = :reason, updated_at = :now,
    visible_at = NULL, owner = NULL, lease_token_hash = NULL, lease_expires_at = NULL
WHERE id = :id AND state IN ('pending', 'claimed')
RETURNING *;

-- name: cancel_pending
-- A queue's pending todos, blocked ones too (:kind and :since, created at or
-- after, in ms, may be NULL), oldest first, a batch at a time.
UPDATE todos
SET state = 'cancelled', cancelled_by = :by, cancel_reason = :reason, updated_at = :now, visible_at = NULL
WHERE id IN (
    SELECT id FROM (
        SELECT id FROM todos INDEXED BY todos_ready_by_queue
        WHERE queue = :queue AND state = 'pending' AND visible_at IS NOT NULL
          AND (:kind IS NULL OR kind = :kind) AND (:since IS NULL OR created_at >= :since)
        UNION ALL
        SELECT id FROM todos INDEXED BY todos_blocked
        WHERE queue = :queue AND state = 'pending' AND blocked_by > 0
          AND (:kind IS NULL OR kind = :kind) AND (:since IS NULL OR created_at >= :since))
    ORDER BY id
    LIMIT :limit)
RETURNING id;

-- name: count_pending
SELECT (SELECT count(*) FROM todos INDEXED BY todos_ready_by_queue
        WHERE queue = :queue AND state = 'pending' AND visible_at IS NOT NULL
          AND (:kind IS NULL OR kind = :kind) AND (:since IS NULL OR created_at >= :since))
     + (SELECT count(*) FROM todos INDEXED BY todos_blocked
        WHERE queue = :queue AND state = 'pending' AND blocked_by > 0
          AND (:kind IS NULL OR kind = :kind) AND (:since IS NULL OR created_at >= :since)) AS count;

-- name: last_ended_attempt
SELECT * FROM attempts WHERE todo_id = :todo_id ORDER BY seq DESC LIMIT 1;

-- name: redrive
-- A dead letter back to pending with a fresh attempt budget.
UPDATE todos
SET state = 'pending', attempt = 0, visible_at = :now, updated_at = :now
WHERE id = :id AND state = 'failed'
RETURNING *;

-- name: dead_letters
-- A queue's dead letters after :after_id, oldest first, a batch at a time;
-- :kind and :since (died at or after, in ms) may be NULL.
SELECT id FROM todos
WHERE queue = :queue AND state = 'failed'
  AND (:kind IS NULL OR kind = :kind) AND (:since IS NULL OR updated_at >= :since)
  AND id > :after_id
ORDER BY id
LIMIT :limit;

-- name: count_dead_letters
SELECT count(*) FROM todos
WHERE queue = :queue AND state = 'failed'
  AND (:kind IS NULL OR kind = :kind) AND (:since IS NULL OR updated_at >= :since);

-- name: purge_todos
-- A queue's finished todos in :state ('done', 'failed' or 'cancelled'), last
-- touched before :before (NULL: any time), oldest first, a batch at a time.
-- Live todos are never purged, nor a finished todo a live one waits for (its
-- result is that one's input; a dead letter may yet be redriven for it);
-- attempts and event links go with them.
DELETE FROM todos WHERE id IN (
    SELECT id FROM todos
    WHERE queue = :queue AND state = :state AND state IN ('done', 'failed', 'cancelled')
      AND (:before IS NULL OR updated_at < :before)
      AND NOT EXISTS (SELECT 1 FROM todo_deps JOIN todos AS waiting ON waiting.id = todo_deps.todo_id
                      WHERE todo_deps.after_id = todos.id AND waiting.state IN ('pending', 'claimed'))
    ORDER BY id
    LIMIT :limit)
RETURNING id;

-- name: count_purgeable
SELECT count(*) FROM todos
WHERE queue = :queue AND state = :state AND state IN ('done', 'failed', 'cancelled')
  AND (:before IS NULL OR updated_at < :before)
  AND NOT EXISTS (SELECT 1 FROM todo_deps JOIN todos AS waiting ON waiting.id = todo_deps.todo_id
                  WHERE todo_deps.after_id = todos.id AND waiting.state IN ('pending', 'claimed'));

-- name: stats
-- Counts per queue as they stand at :now, without writing: a claimed todo
-- whose lease lapsed counts as what the next claim will make of it (ready
-- again, or a dead letter when its attempts are used up). Pending todos are
-- ready (claimable now) or delayed (a delay, or a retry's backoff); the oldest
-- ready todo's creation time gives its age; blocked ones wait for todos not
-- done (neither ready nor delayed). A paused or limited queue is listed even
-- with no todos, with zero counts; paused_at is NULL unless the queue is
-- paused; max_claimed and max_per_minute are its limits (NULL: none),
-- claims_last_minute its claims since a minute ago (NULL without max_per_minute).
WITH counts AS (
    SELECT queue,
           SUM(ready)                                            AS ready,
           SUM(state = 'pending' AND blocked_by = 0 AND NOT ready) AS delayed,
           SUM(state = 'claimed' AND NOT lapsed)                 AS claimed,
           SUM(state = 'done')                                   AS done,
           SUM(state = 'failed' OR (lapsed AND attempt >= max_attempts)) AS dead,
           SUM(state = 'cancelled')                              AS cancelled,
           SUM(state = 'pending' AND blocked_by > 0)             AS blocked,
           MIN(CASE WHEN ready THEN created_at END)              AS oldest_ready_created_at
    FROM (SELECT *, lapsed AND attempt < max_attempts OR visible_at <= :now AS ready
          FROM (SELECT queue, state, attempt, max_attempts, visible_at, created_at, blocked_by,
                       (state = 'claimed' AND lease_expires_at <= :now) AS lapsed
                FROM todos))
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
       COALESCE(counts.blocked, 0) AS blocked, counts.oldest_ready_created_at, queues.paused_at, queues.paused_by,
       queues.max_claimed, queues.max_per_minute,
       CASE WHEN queues.max_per_minute IS NOT NULL THEN
           (SELECT count(*) FROM queue_claims
            WHERE queue_claims.queue = names.queue AND queue_claims.claimed_at > :now - 60000) END
           AS claims_last_minute
FROM names
LEFT JOIN counts ON counts.queue = names.queue
LEFT JOIN queues ON queues.name = names.queue
ORDER BY names.queue;

-- ---- queues (an operator's settings for a queue: paused or not) ----

-- name: get_queue
SELECT * FROM queues WHERE name = :name;

-- name: pause_queue
-- Paused now by :by; a queue paused already keeps when and by whom.
INSERT INTO queues (name, paused_at, paused_by) VALUES (:name, :now, :by)
ON CONFLICT (name) DO UPDATE
SET paused_at = COALESCE(queues.paused_at, excluded.paused_at),
    paused_by = CASE WHEN queues.paused_at IS NULL THEN excluded.paused_by ELSE queues.paused_by END
RETURNING *;

-- name: resume_queue
UPDATE queues SET paused_at = NULL, paused_by = NULL WHERE name = :name RETURNING *;

-- name: set_queue_limit
-- A queue's limits, both at once (:max_claimed, :max_per_minute; NULL: none);
-- its pause, if any, stays as it is.
INSERT INTO queues (name, max_claimed, max_per_minute) VALUES (:name, :max_claimed, :max_per_minute)
ON CONFLICT (name) DO UPDATE
SET max_claimed = excluded.max_claimed, max_per_minute = excluded.max_per_minute
RETURNING *;

-- name: queue_load
-- A queue's limits (NULL: none) and how close it is to them at :now: its
-- todos claimed under a live lease (a walk down todos_leases: the claimed
-- todos, never the backlog) and its claims since a minute ago. No row: the
-- queue has no setting.
SELECT max_claimed, max_per_minute,
       (SELECT count(*) FROM todos INDEXED BY todos_leases WHERE state = 'claimed' AND queue = :name
          AND lease_expires_at > :now) AS claimed,
       (SELECT count(*) FROM queue_claims WHERE queue = :name AND claimed_at > :now - 60000) AS claims_last_minute
FROM queues WHERE name = :name;


-- name: insert_event
-- A new event, unless the delivery was seen: a stored event with the same
-- external id; the kept key of one pruned since (:pruned_key, 'id:' + the
-- external id); or, with a replay window, the same body (:body_key, NULL when
-- the source has none) seen at or after :window_start. A seen delivery
-- inserts nothing (using up no id) and returns no row; seen_delivery then
-- says which event it repeats. The look is inside the insert: one statement
-- for a new delivery.
INSERT INTO events (source, family, type, external_id, trust_mode, verified, verify_detail,
                    content_type, headers, body, size, received_at)
SELECT :source, :family, :type, :external_id, :trust_mode, :verified, :verify_detail,
       :content_type, :headers, :body, :size, :now
WHERE NOT EXISTS (SELECT 1 FROM events WHERE source = :source AND external_id = :external_id)
  AND NOT EXISTS (
      SELECT 1 FROM delivery_keys
      WHERE source = :source AND (key = :pruned_key OR (key = :body_key AND seen_at >= :window_start)))
RETURNING id;

-- name: insert_event_with_id
-- A batch of new events (executemany), their ids given: the batch asked
-- seen_deliveries first (UNIQUE (source, external_id) still refuses a repeat).
INSERT INTO events (id, source, family, type, external_id, trust_mode, verified, verify_detail,
                    content_type, headers, body, size, received_at)
VALUES (:id, :source, :family, :type, :external_id, :trust_mode, :verified, :verify_detail,
        :content_type, :headers, :body, :size, :now);

-- name: seen_deliveries
-- For a batch of deliveries (a JSON array of [source, external_id, pruned_key,
-- body_key, window_start], as insert_event takes them one by one): the
-- position of each one seen before, with the event it repeats.
SELECT d.key AS position,
       coalesce(
           (SELECT id FROM events
            WHERE source = json_extract(d.value, '$[0]') AND external_id = json_extract(d.value, '$[1]')),
           (SELECT event_id FROM delivery_keys
            WHERE source = json_extract(d.value, '$[0]')
              AND (key = json_extract(d.value, '$[2]')
                   OR (key = json_extract(d.value, '$[3]') AND seen_at >= json_extract(d.value, '$[4]')))
            LIMIT 1)) AS event_id
FROM json_each(:deliveries) AS d
WHERE event_id IS NOT NULL;

-- name: next_event_id
-- The id SQLite would give the next event (AUTOINCREMENT: past every id ever used).
SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0),
           coalesce((SELECT max(id) FROM events), 0)) + 1 AS id;

-- name: insert_operator_event
-- An operator's action (audit.py): always new, trusted as the operator's own.
INSERT INTO events (source, family, type, external_id, trust_mode, verified, verify_detail,
                    content_type, headers, body, size, received_at)
VALUES (:source, 'operator', :type, :external_id, 'operator', 1, 'an action of this machine''s operator',
        'application/json', :headers, :body, :size, :now)
RETURNING id;

-- name: seen_delivery
-- The event a delivery repeats (see insert_event).
SELECT id AS event_id FROM events WHERE source = :source AND external_id = :external_id
UNION ALL
SELECT event_id FROM delivery_keys
WHERE source = :source AND (key = :pruned_key OR (key = :body_key AND seen_at >= :window_start))
LIMIT 1;

-- name: remember_delivery
-- A delivery key kept apart from its event (a body under a replay window, or
-- the external id of an event being pruned); a newer sighting replaces an older.
INSERT INTO delivery_keys (source, key, event_id, seen_at)
VALUES (:source, :key, :event_id, :now)
ON CONFLICT (source, key) DO UPDATE SET event_id = excluded.event_id, seen_at = excluded.seen_at;

-- name: get_event
SELECT * FROM events WHERE id = :id;

-- name: todos_of_event
-- The todos an event produced, by id: those its first delivery answered with
-- (event_todos) and those its replays added since (todos.event_id).
SELECT * FROM todos
WHERE id IN (SELECT todo_id FROM event_todos WHERE event_id = :event_id)
   OR event_id = :event_id
ORDER BY id;

-- name: events_in_play
-- Which of :ids (a JSON array of event ids) still have work in play: a todo
-- they produced (their delivery's, or a replay's) pending or claimed. An
-- adapter acking on completion asks it of the messages it holds.
SELECT DISTINCT event_id FROM todos
WHERE event_id IN (SELECT value FROM json_each(:ids)) AND state IN ('pending', 'claimed');

-- name: event_in_scope
-- Whether a todo in one of :queues (a JSON array) came from the event.
SELECT 1 FROM todos
WHERE event_id = :id AND queue IN (SELECT value FROM json_each(:queues))
LIMIT 1;

-- name: recent_events
-- The newest :limit events (any filter may be NULL), newest first.
SELECT * FROM events
WHERE (:source IS NULL OR source = :source)
  AND (:type IS NULL OR type = :type)
ORDER BY id DESC
LIMIT :limit;

-- ---- sources (the configured producers: webhook sources and adapters) ----

-- name: insert_source
INSERT INTO sources (name, family, kind, trust_mode, enabled, config, secrets, created_at, updated_at)
VALUES (:name, :family, :kind, :trust_mode, 1, :config, :secrets, :now, :now)
ON CONFLICT (name) DO NOTHING
RETURNING *;

-- name: get_source
SELECT * FROM sources WHERE name = :name;

-- name: list_sources
SELECT * FROM sources WHERE (:family IS NULL OR family = :family) ORDER BY name;

-- name: set_source_enabled
UPDATE sources SET enabled = :enabled, updated_at = :now WHERE name = :name RETURNING *;

-- name: set_source_secrets
UPDATE sources SET secrets = :secrets, updated_at = :now WHERE name = :name RETURNING *;

-- name: record_source_health
-- A running consumer's poll: success resets the failure count, failure bumps it.
UPDATE sources
SET last_poll_at = :now,
    last_error = CASE WHEN :error IS NULL THEN last_error ELSE :error END,
    consecutive_failures = CASE WHEN :error IS NULL THEN 0 ELSE consecutive_failures + 1 END,
    messages_stored = messages_stored + :stored
WHERE name = :name;

-- name: advance_schedule
-- A schedule's newest fired tick (the due instant): never moved back, so a
-- late write of a slower pass cannot make fired ticks look due again.
UPDATE sources SET last_tick_at = max(COALESCE(last_tick_at, :due), :due)
WHERE name = :name AND family = 'schedule';

-- ---- agents ----
-- Agent profiles for the MCP server (agents.py) and the statements that keep
-- an agent inside its scope.

-- name: insert_agent
-- An existing name inserts nothing and returns no row.
INSERT INTO agents (name, queues, tools, create_queues, owner, created_at)
VALUES (:name, :queues, :tools, :create_queues, :owner, :now)
ON CONFLICT (name) DO NOTHING
RETURNING *;

-- name: get_agent
SELECT * FROM agents WHERE name = :name;

-- name: list_agents
SELECT * FROM agents ORDER BY name;

-- name: delete_agent
DELETE FROM agents WHERE name = :name RETURNING *;

-- name: list_events
-- Oldest first after a cursor (:after_id, NULL for the start); any filter may
-- be NULL. With :queues (a JSON array) only events that at least one todo in
-- those queues came from.
SELECT * FROM events
WHERE (:after_id IS NULL OR id > :after_id)
  AND (:since IS NULL OR received_at >= :since)
  AND (:source IS NULL OR source = :source)
  AND (:type IS NULL OR type = :type)
  AND (:queues IS NULL OR EXISTS (
        SELECT 1 FROM todos
        WHERE todos.event_id = events.id AND todos.queue IN (SELECT value FROM json_each(:queues))))
ORDER BY id
LIMIT :limit;

-- name: event_in_queues
-- Whether at least one todo in the queues (a JSON array) came from the event.
SELECT 1 FROM todos
WHERE event_id = :event_id AND queue IN (SELECT value FROM json_each(:queues))
LIMIT 1;

-- name: data_version
-- Changes when another connection commits to the file (not for this
-- connection's own commits; the store counts those itself).
PRAGMA data_version;

-- name: todos_after
-- Todos created after :after_id (ids only grow, and a commit holds the write
-- lock, so an id seen means every smaller one is committed or never will be),
-- in :queue (NULL: every queue), oldest first, as they are now: what
-- `todo watch` follows.
SELECT * FROM todos
WHERE id > :after_id
  AND (:queue IS NULL OR queue = :queue)
ORDER BY id
LIMIT :limit;

-- name: todo_arrivals
-- Todos created after :after_id that :agent could claim (no assignee, or
-- itself) in the queues (a JSON array, or NULL for all), oldest first, with
-- the source of the event each came from and whether its queue is paused:
-- what the doorbell rings for (once a blocked one is ready: readiness).
SELECT todos.id, todos.queue, todos.title, todos.state, events.source,
       EXISTS (SELECT 1 FROM queues WHERE queues.name = todos.queue AND queues.paused_at IS NOT NULL) AS paused,
       todos.blocked_by > 0 AS blocked
FROM todos LEFT JOIN events ON events.id = todos.event_id
WHERE todos.id > :after_id
  AND (:queues IS NULL OR todos.queue IN (SELECT value FROM json_each(:queues)))
  AND (todos.assignee IS NULL OR todos.assignee = :agent)
ORDER BY todos.id
LIMIT :limit;

-- ---- rules (routing, applied in position order) ----

-- name: insert_rule
INSERT INTO rules (position, source, type, conditions, action, queue, title, assignee,
                   priority, max_attempts, stop, chain, created_at)
VALUES ((SELECT COALESCE(MAX(position), 0) + 1 FROM rules), :source, :type, :conditions, :action,
        :queue, :title, :assignee, :priority, :max_attempts, :stop, :chain, :now)
RETURNING *;

-- name: list_rules
SELECT * FROM rules WHERE (:source IS NULL OR source = :source) ORDER BY position;

-- name: rules_of_source
SELECT * FROM rules INDEXED BY rules_by_source WHERE source = :source ORDER BY position;

-- ---- retention ----

-- name: prune_finished_todos
-- Finished todos (done, dead letters, cancelled) last touched before the
-- cutoff. Live todos are never pruned, nor a finished todo a live one waits
-- for (as purge_todos).
DELETE FROM todos
WHERE state IN ('done', 'failed', 'cancelled')
  AND updated_at < :cutoff
  AND NOT EXISTS (SELECT 1 FROM todo_deps JOIN todos AS waiting ON waiting.id = todo_deps.todo_id
                  WHERE todo_deps.after_id = todos.id AND waiting.state IN ('pending', 'claimed'));

-- name: prune_events
-- Events received before the cutoff, or beyond the newest :max_events, unless
-- a live todo still points to one; each pruned event's key, for the dedup horizon.
DELETE FROM events
WHERE (received_at < :cutoff
       OR id <= (SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET :max_events))
  AND NOT EXISTS (
      SELECT 1 FROM todos
      WHERE todos.event_id = events.id AND todos.state IN ('pending', 'claimed'))
RETURNING id, source, external_id, received_at;

-- name: keep_pruned_delivery
-- A pruned event's external id, kept until the dedup horizon passes it.
INSERT OR IGNORE INTO delivery_keys (source, key, event_id, seen_at)
VALUES (:source, 'id:' || :external_id, :event_id, :received_at);

-- name: forget_delivery_keys
-- Delivery keys older than the dedup horizon: a redelivery after it is new.
DELETE FROM delivery_keys WHERE seen_at < :horizon;

-- ---- ingest leadership (leadership.py) ----

-- name: get_leader
SELECT * FROM ingest_leader WHERE id = 1;

-- name: take_leadership
-- A new leader, the fence one past the last: only over the row as the caller
-- saw it (:seen_fence, 0 for none), so of two standbys racing one wins.
-- :env: which of the sources' environment variables it has (JSON, names only).
INSERT INTO ingest_leader (id, fence, holder, pid, host, kind, http, since, renewed_at, expires_at, handover_to, env)
VALUES (1, :seen_fence + 1, :holder, :pid, :host, :kind, :http, :now, :now, :expires_at, NULL, :env)
ON CONFLICT (id) DO UPDATE
SET fence = excluded.fence, holder = excluded.holder, pid = excluded.pid, host = excluded.host,
    kind = excluded.kind, http = excluded.http, since = excluded.since, renewed_at = excluded.renewed_at,
    expires_at = excluded.expires_at, handover_to = NULL, env = excluded.env
WHERE ingest_leader.fence = :seen_fence
RETURNING *;

-- name: renew_leadership
-- :env again: sources may have been added since the last renewal.
UPDATE ingest_leader SET renewed_at = :now, expires_at = :expires_at, env = :env
WHERE fence = :fence AND holder = :holder AND expires_at > :now
RETURNING *;

-- name: release_leadership
-- The leader steps down: the row stays (its fence, and a take-over asked for), expired now.
UPDATE ingest_leader SET expires_at = :now, http = NULL, env = NULL WHERE fence = :fence AND holder = :holder;

-- name: check_fence
-- Inside a consumer's batch: the caller still leads.
SELECT 1 FROM ingest_leader WHERE id = 1 AND fence = :fence AND holder = :holder AND expires_at > :now;

-- name: seen_member
INSERT INTO ingest_members (holder, pid, host, kind, seen_at) VALUES (:holder, :pid, :host, :kind, :now)
ON CONFLICT (holder) DO UPDATE SET seen_at = excluded.seen_at;

-- name: forget_gone_members
DELETE FROM ingest_members WHERE seen_at < :before;

-- name: members
SELECT * FROM ingest_members WHERE seen_at >= :since ORDER BY seen_at;

-- ---- browse (core/browse.py: the dashboard's read API; pure reads) ----

-- name: browse_todos
-- Newest first, before a cursor (:before_id, NULL for the newest); every
-- filter may be NULL. :title_like is a LIKE pattern with '\' as its escape.
SELECT * FROM todos
WHERE (:queue IS NULL OR queue = :queue)
  AND (:state IS NULL OR state = :state)
  AND (:kind IS NULL OR kind = :kind)
  AND (:assignee IS NULL OR assignee = :assignee)
  AND (:title_like IS NULL OR title LIKE :title_like ESCAPE '\')
  AND (:before_id IS NULL OR id < :before_id)
ORDER BY id DESC
LIMIT :limit;

-- name: browse_todos_in_queue
-- browse_todos for one queue (:queue), down todos_by_queue.
SELECT * FROM todos
WHERE queue = :queue
  AND (:state IS NULL OR state = :state)
  AND (:kind IS NULL OR kind = :kind)
  AND (:assignee IS NULL OR assignee = :assignee)
  AND (:title_like IS NULL OR title LIKE :title_like ESCAPE '\')
  AND (:before_id IS NULL OR id < :before_id)
ORDER BY id DESC
LIMIT :limit;

-- name: browse_events
-- Newest first, before a cursor; :source and :type may be NULL.
SELECT * FROM events
WHERE (:source IS NULL OR source = :source)
  AND (:type IS NULL OR type = :type)
  AND (:before_id IS NULL OR id < :before_id)
ORDER BY id DESC
LIMIT :limit;

-- name: queue_minutes
-- Per queue and minute since :since (minute 0 starts at :since): todos created,
-- and todos finished (done, dead, cancelled) by their last change.
SELECT queue, minute, SUM(created) AS created, SUM(finished) AS finished FROM (
    SELECT queue, (created_at - :since) / 60000 AS minute, 1 AS created, 0 AS finished
    FROM todos WHERE created_at >= :since
    UNION ALL
    SELECT queue, (updated_at - :since) / 60000, 0, 1
    FROM todos WHERE state IN ('done', 'failed', 'cancelled') AND updated_at >= :since
)
GROUP BY queue, minute;

-- name: done_since
-- Per queue: todos done at or after :since.
SELECT queue, COUNT(*) AS done FROM todos
WHERE state = 'done' AND completed_at >= :since
GROUP BY queue;

-- name: dead_groups
-- Dead letters grouped by queue and last error, the biggest group of a queue first.
SELECT queue, last_error, COUNT(*) AS count, MIN(id) AS first_id, MAX(id) AS last_id,
       MAX(updated_at) AS last_failed_at
FROM todos WHERE state = 'failed'
GROUP BY queue, last_error
ORDER BY queue, count DESC, last_error;

-- name: dead_letters_with_error
-- One dead-letter group's ids (a queue, a last error; NULL matches NULL) after :after_id, oldest first.
SELECT id FROM todos
WHERE queue = :queue AND state = 'failed' AND last_error IS :last_error AND id > :after_id
ORDER BY id
LIMIT :limit;

-- name: deliveries_by_source
-- Per source: events kept (pruning lowers it) and the last one's arrival.
SELECT source, COUNT(*) AS events, MAX(received_at) AS last_received_at FROM events GROUP BY source;

-- name: browse_fingerprint
-- What the live stream compares between two commits to say what changed.
SELECT (SELECT MAX(id) FROM events) AS last_event_id,
       (SELECT MAX(id) FROM todos) AS last_todo_id,
       (SELECT MAX(updated_at) FROM todos) AS todos_updated_at,
       (SELECT COUNT(*) FROM todos WHERE state = 'failed') AS dead,
       (SELECT MAX(MAX(updated_at), COALESCE(MAX(last_poll_at), 0)) FROM sources) AS sources_updated_at,
       (SELECT group_concat(name || '=' || COALESCE(paused_at, '') || '/' || COALESCE(max_claimed, '') || '/'
                            || COALESCE(max_per_minute, ''), ',') FROM queues) AS queues_setting;

-- ---- db copy (the copy_ statements; copy_target_holds is in ../shared.sql) ----

-- `switchboard-local db copy --to TARGET` (core/copy.py), the copy_ statements:
-- every table of the data read in key order, a page after another (the
-- after_ parameters are the last key of the page before; the first page
-- starts below every key: ids start at 1, names are never empty), and written
-- unchanged (ids kept) into an empty target. The reads answer this schema's
-- shapes (times in ms, JSON as text, 0/1) whatever the backend, and the
-- inserts take them.

-- name: copy_last_ids
-- The last id each id sequence gave (pruned ids are never given again: ids
-- are cursors), so the target's sequences move past them; rules' ids are rowids.
SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0),
           coalesce((SELECT max(id) FROM events), 0)) AS events,
       max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'todos'), 0),
           coalesce((SELECT max(id) FROM todos), 0)) AS todos,
       coalesce((SELECT max(id) FROM rules), 0) AS rules;

-- name: copy_seed_sequences
-- The target's AUTOINCREMENT rows for events and todos, where no insert made
-- them (no row copied, yet ids were given: every row pruned).
INSERT INTO sqlite_sequence (name, seq)
SELECT v.name, 0 FROM (SELECT 'events' AS name UNION ALL SELECT 'todos') AS v
WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence AS s WHERE s.name = v.name);

-- name: copy_move_sequences
-- The target's sequences past the source's last ids (never backwards); rules'
-- rowids follow their max by themselves.
UPDATE sqlite_sequence
SET seq = max(seq, CASE name WHEN 'events' THEN :events ELSE :todos END)
WHERE name IN ('events', 'todos');

-- name: copy_read_sources
SELECT name, family, kind, trust_mode, enabled, config, secrets, created_at, updated_at,
       last_poll_at, last_error, consecutive_failures, messages_stored, last_tick_at
FROM sources WHERE name > :after_name ORDER BY name LIMIT :limit;

-- name: copy_insert_sources
INSERT INTO sources (name, family, kind, trust_mode, enabled, config, secrets, created_at, updated_at,
                     last_poll_at, last_error, consecutive_failures, messages_stored, last_tick_at)
VALUES (:name, :family, :kind, :trust_mode, :enabled, :config, :secrets, :created_at, :updated_at,
        :last_poll_at, :last_error, :consecutive_failures, :messages_stored, :last_tick_at);

-- name: copy_read_rules
SELECT id, position, source, type, conditions, action, queue, title, assignee, priority,
       max_attempts, stop, created_at, chain
FROM rules WHERE id > :after_id ORDER BY id LIMIT :limit;

-- name: copy_insert_rules
INSERT INTO rules (id, position, source, type, conditions, action, queue, title, assignee, priority,
                   max_attempts, stop, chain, created_at)
VALUES (:id, :position, :source, :type, :conditions, :action, :queue, :title, :assignee, :priority,
        :max_attempts, :stop, :chain, :created_at);

-- name: copy_read_agents
SELECT name, queues, tools, created_at, create_queues, owner
FROM agents WHERE name > :after_name ORDER BY name LIMIT :limit;

-- name: copy_insert_agents
INSERT INTO agents (name, queues, tools, created_at, create_queues, owner)
VALUES (:name, :queues, :tools, :created_at, :create_queues, :owner);

-- name: copy_read_queues
SELECT name, paused_at, paused_by, max_claimed, max_per_minute FROM queues
WHERE name > :after_name ORDER BY name LIMIT :limit;

-- name: copy_insert_queues
INSERT INTO queues (name, paused_at, paused_by, max_claimed, max_per_minute)
VALUES (:name, :paused_at, :paused_by, :max_claimed, :max_per_minute);

-- name: copy_sizes_events
-- The next page's ids and sizes: copy.py cuts the page where its bodies pass
-- a budget, then reads it whole (copy_read_events), so no page is too large.
SELECT id, size + length(headers) AS size FROM events WHERE id > :after_id ORDER BY id LIMIT :limit;

-- name: copy_read_events
SELECT id, source, family, type, external_id, trust_mode, verified, verify_detail, content_type,
       headers, body, size, received_at
FROM events WHERE id > :after_id AND id <= :through_id ORDER BY id;

-- name: copy_insert_events
INSERT INTO events (id, source, family, type, external_id, trust_mode, verified, verify_detail,
                    content_type, headers, body, size, received_at)
VALUES (:id, :source, :family, :type, :external_id, :trust_mode, :verified, :verify_detail,
        :content_type, :headers, :body, :size, :received_at);

-- name: copy_sizes_todos
-- As copy_sizes_events: a todo's payload and result are as large as limits.max_payload.
SELECT id, length(payload) + coalesce(length(result), 0) + coalesce(length(last_error), 0) AS size
FROM todos WHERE id > :after_id ORDER BY id LIMIT :limit;

-- name: copy_read_todos
-- Every column, the lease's too (owner, lease_token_hash, lease_expires_at,
-- attempt, visible_at): a claimed todo's holder completes it in the target.
SELECT id, queue, assignee, title, kind, payload, event_id, idempotency_key, state, priority, attempt,
       max_attempts, owner, lease_token_hash, lease_expires_at, visible_at, result, last_error,
       created_at, updated_at, claimed_at, completed_at, completed_by, cancelled_by, cancel_reason,
       blocked_by, waits_for
FROM todos WHERE id > :after_id AND id <= :through_id ORDER BY id;

-- name: copy_insert_todos
INSERT INTO todos (id, queue, assignee, title, kind, payload, event_id, idempotency_key, state, priority,
                   attempt, max_attempts, owner, lease_token_hash, lease_expires_at, visible_at, result,
                   last_error, created_at, updated_at, claimed_at, completed_at, completed_by,
                   cancelled_by, cancel_reason, blocked_by, waits_for)
VALUES (:id, :queue, :assignee, :title, :kind, :payload, :event_id, :idempotency_key, :state, :priority,
        :attempt, :max_attempts, :owner, :lease_token_hash, :lease_expires_at, :visible_at, :result,
        :last_error, :created_at, :updated_at, :claimed_at, :completed_at, :completed_by,
        :cancelled_by, :cancel_reason, :blocked_by, :waits_for);

-- name: copy_read_attempts
SELECT todo_id, seq, attempt, owner, claimed_at, ended_at, outcome, error FROM attempts
WHERE (todo_id, seq) > (:after_todo_id, :after_seq)
ORDER BY todo_id, seq LIMIT :limit;

-- name: copy_insert_attempts
INSERT INTO attempts (todo_id, seq, attempt, owner, claimed_at, ended_at, outcome, error)
VALUES (:todo_id, :seq, :attempt, :owner, :claimed_at, :ended_at, :outcome, :error);

-- name: copy_read_delivery_keys
SELECT source, key, event_id, seen_at FROM delivery_keys
WHERE (source, key) > (:after_source, :after_key)
ORDER BY source, key LIMIT :limit;

-- name: copy_insert_delivery_keys
INSERT INTO delivery_keys (source, key, event_id, seen_at) VALUES (:source, :key, :event_id, :seen_at);

-- name: copy_read_queue_claims
SELECT queue, claimed_at, todo_id, lease_token_hash FROM queue_claims
WHERE (queue, claimed_at, lease_token_hash) > (:after_queue, :after_claimed_at, :after_lease_token_hash)
ORDER BY queue, claimed_at, lease_token_hash LIMIT :limit;

-- name: copy_insert_queue_claims
INSERT INTO queue_claims (queue, claimed_at, todo_id, lease_token_hash)
VALUES (:queue, :claimed_at, :todo_id, :lease_token_hash);
