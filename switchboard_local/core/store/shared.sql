-- The statements whose text is the same on both backends, written once. The
-- store loads this file with sqlite/queries.sql for SQLite and with
-- postgres/queries.postgres.sql for PostgreSQL (store/queries.py, by name).
-- A statement is here, or in both of those files as twins where the dialects
-- differ, never in both places: tests/core/test_postgres_queries.py lists the
-- twins, each with why it differs.
--
-- So a text here is SQL both read alike: parameters written :name (the
-- PostgreSQL store converts them: postgres/statements.py), no time (integer
-- milliseconds in SQLite, timestamptz in PostgreSQL), no JSON function, no
-- `::` cast and no `%`, and each result column named as SQLite names it
-- (1 AS "1").

-- ---- events and their todos ----

-- name: link_event_todo
INSERT INTO event_todos (event_id, position, todo_id) VALUES (:event_id, :position, :todo_id);

-- name: todo_ids_of_event
-- The todos the event's first delivery answered with, in that order.
SELECT todo_id AS id FROM event_todos WHERE event_id = :event_id ORDER BY position;

-- name: last_todo_id
SELECT COALESCE(MAX(id), 0) AS id FROM todos;

-- name: last_event_id
SELECT COALESCE(MAX(id), 0) AS id FROM events;

-- ---- queues ----

-- name: queue_has_todos
SELECT 1 AS "1" FROM todos WHERE queue = :queue LIMIT 1;

-- name: clear_queue_claims
-- A queue's logged claims, once it has no max_per_minute: nothing counts them.
DELETE FROM queue_claims WHERE queue = :name;

-- ---- sources and their rules ----

-- name: delete_source
DELETE FROM sources WHERE name = :name;

-- name: delete_rules_of_source
-- A removed source takes its rules along: a new source of the same name starts clean.
DELETE FROM rules WHERE source = :name;

-- name: delete_rule
DELETE FROM rules WHERE id = :id;

-- name: set_rule_position
UPDATE rules SET position = :position WHERE id = :id;

-- ---- settings (settings.py; a missing row means the default) ----

-- name: get_setting
SELECT value FROM settings WHERE name = :name;

-- name: list_settings
SELECT name, value FROM settings ORDER BY name;

-- name: set_setting
INSERT INTO settings (name, value) VALUES (:name, :value)
ON CONFLICT (name) DO UPDATE SET value = excluded.value;

-- name: delete_setting
DELETE FROM settings WHERE name = :name;

-- name: sources_generation
-- A token made anew in every transaction that changes a source or a rule
-- (new_sources_generation): what the delivery path's caches of sources and
-- rules are kept under, in every process on the file. No row: ''.
SELECT coalesce((SELECT value FROM settings WHERE name = 'sources.generation'), '') AS generation;

-- name: new_sources_generation
-- A random token, not a count: a change rolled back can never leave a value
-- that a later change would take again (a cache filled inside the rolled-back
-- transaction could then pass for current).
INSERT INTO settings (name, value) VALUES ('sources.generation', :token)
ON CONFLICT (name) DO UPDATE SET value = excluded.value;

-- ---- ingest leadership (leadership.py) ----

-- name: set_leader_http
UPDATE ingest_leader SET http = :http WHERE fence = :fence AND holder = :holder;

-- name: ask_handover
UPDATE ingest_leader SET handover_to = :holder WHERE id = 1;

-- name: forget_member
DELETE FROM ingest_members WHERE holder = :holder;

-- ---- db copy (core/copy.py; the other copy_ statements are twins) ----

-- name: copy_target_holds
-- This one: what a target holds: it must be empty (the leader's row: a process uses it).
SELECT (SELECT COUNT(*) FROM sources) AS sources, (SELECT COUNT(*) FROM rules) AS rules,
       (SELECT COUNT(*) FROM agents) AS agents, (SELECT COUNT(*) FROM settings) AS settings,
       (SELECT COUNT(*) FROM queues) AS queues, (SELECT COUNT(*) FROM events) AS events,
       (SELECT COUNT(*) FROM todos) AS todos, (SELECT COUNT(*) FROM event_todos) AS event_todos,
       (SELECT COUNT(*) FROM todo_deps) AS todo_deps,
       (SELECT COUNT(*) FROM attempts) AS attempts, (SELECT COUNT(*) FROM delivery_keys) AS delivery_keys,
       (SELECT COUNT(*) FROM queue_claims) AS queue_claims, (SELECT COUNT(*) FROM ingest_leader) AS ingest_leader;

-- name: copy_read_settings
SELECT name, value FROM settings WHERE name > :after_name ORDER BY name LIMIT :limit;

-- name: copy_insert_settings
INSERT INTO settings (name, value) VALUES (:name, :value);

-- name: copy_read_event_todos
SELECT event_id, position, todo_id FROM event_todos
WHERE (event_id, position) > (:after_event_id, :after_position)
ORDER BY event_id, position LIMIT :limit;

-- name: copy_insert_event_todos
INSERT INTO event_todos (event_id, position, todo_id) VALUES (:event_id, :position, :todo_id);

-- name: copy_read_todo_deps
SELECT todo_id, after_id FROM todo_deps
WHERE (todo_id, after_id) > (:after_todo_id, :after_after_id)
ORDER BY todo_id, after_id LIMIT :limit;

-- name: copy_insert_todo_deps
INSERT INTO todo_deps (todo_id, after_id) VALUES (:todo_id, :after_id);
