"""PostgreSQL's statements (shared.sql's and queries.postgres.sql's) against
schema.postgres.sql on a real PostgreSQL server, beside SQLite's (shared.sql's
and queries.sql's) on schema.sql: the same statements, parameters and result
columns, each one valid; which statements have twins, and why; and what the
PostgreSQL schema promises of itself (times in milliseconds, notifications only
for changes, the batch's ids)."""

from __future__ import annotations

import ctypes
import ctypes.util
import re
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import pq

from switchboard_local.core.store import queries
from switchboard_local.core.store.queries import POSTGRES, SHARED, Q, _parse, apart, same_names
from switchboard_local.core.store.queries import TWINS as TWINS_LOADED

from support.postgres import PostgresServer
from support.waits import until

ROOT = Path(__file__).resolve().parents[2]
PARAMETER = re.compile(r"(?<![:\w]):(\w+)")


def numbered(text: str) -> tuple[str, list[str]]:
    """``:name`` → ``$n`` (one number per name, as psycopg sends them), and the names in order."""
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    return PARAMETER.sub(number, text), names


def sqlite_columns(path: Path) -> dict[str, list[str]]:
    """The result columns of every statement of queries.sql, prepared (never run) on schema.sql."""
    lib = ctypes.CDLL(ctypes.util.find_library("sqlite3") or "libsqlite3.so.0")
    lib.sqlite3_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.sqlite3_prepare_v2.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                       ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]  # fmt: skip
    lib.sqlite3_column_count.argtypes = [ctypes.c_void_p]
    lib.sqlite3_column_name.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.sqlite3_column_name.restype = ctypes.c_char_p
    lib.sqlite3_finalize.argtypes = [ctypes.c_void_p]
    lib.sqlite3_close.argtypes = [ctypes.c_void_p]
    lib.sqlite3_errmsg.argtypes = [ctypes.c_void_p]
    lib.sqlite3_errmsg.restype = ctypes.c_char_p
    db = ctypes.c_void_p()
    assert lib.sqlite3_open(str(path).encode(), ctypes.byref(db)) == 0
    columns: dict[str, list[str]] = {}
    try:
        for name in vars(Q):
            statement = ctypes.c_void_p()
            rc = lib.sqlite3_prepare_v2(db, str(getattr(Q, name)).encode(), -1, ctypes.byref(statement), None)
            assert rc == 0, f"{name}: {lib.sqlite3_errmsg(db).decode()}"
            try:
                count = lib.sqlite3_column_count(statement)
                columns[name] = [lib.sqlite3_column_name(statement, i).decode() for i in range(count)]
            finally:
                lib.sqlite3_finalize(statement)
    finally:
        lib.sqlite3_close(db)
    return columns


@pytest.fixture(scope="module")
def sqlite_schema(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-schema") / "schema.db"
    with sqlite3.connect(path) as conn:
        conn.executescript((ROOT / "schema.sql").read_text())
    conn.close()
    return path


@pytest.fixture
def schema_database(postgres_server: PostgresServer) -> Iterator[str]:
    """A new database holding schema.postgres.sql and nothing else; its URL."""
    url = postgres_server.empty_database()
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute((ROOT / "schema.postgres.sql").read_text())  # type: ignore[arg-type]
        yield url
    finally:
        postgres_server.release(url)


# ---------------------------------------------------------------- the two files


def test_loading_refuses_two_files_that_name_different_statements() -> None:
    sqlite = _parse("-- name: a\nSELECT 1;\n-- name: b\nSELECT 2;\n")
    postgres = _parse("-- name: a\nSELECT 1;\n-- name: c\nSELECT 3;\n", "queries.postgres.sql")
    with pytest.raises(ValueError) as refused:
        same_names(sqlite, postgres, names=("queries.sql", "queries.postgres.sql"))
    told = str(refused.value)
    assert "queries.postgres.sql lacks b" in told
    assert "queries.postgres.sql has c, which queries.sql does not" in told
    same_names(sqlite, _parse("-- name: b\nSELECT 4;\n-- name: a\nSELECT 5;\n"), names=("x", "y"))


def test_loading_refuses_a_statement_both_shared_and_a_twin() -> None:
    shared = _parse("-- name: a\nSELECT 1;\n-- name: b\nSELECT 2;\n", "shared.sql")
    with pytest.raises(ValueError) as refused:
        apart(shared, _parse("-- name: b\nSELECT 3;\n-- name: c\nSELECT 4;\n"), names=("shared.sql", "queries.sql"))
    assert str(refused.value).startswith("shared.sql and queries.sql both name b:")
    apart(shared, _parse("-- name: c\nSELECT 4;\n"), names=("shared.sql", "queries.sql"))


# The statements whose texts differ between SQLite and PostgreSQL, by why: each
# has a twin in each dialect's file; every other statement is written once, in
# shared.sql. A twin may differ for more reasons than the one it is listed under;
# that one is checked on its texts (DIFFERS_BY).
# fmt: off
TWINS: dict[str, list[str]] = {
    # PostgreSQL calls a function of schema.postgres.sql that does what SQLite's one writer made
    # safe by itself: ids drawn under the id lock, a look for a delivery or a new row that waits
    # for the transactions that could still commit a smaller id.
    "a server function": [
        "insert_todo", "insert_todo_id", "insert_todo_with_id", "insert_event", "insert_event_with_id",
        "seen_deliveries", "insert_operator_event", "todos_after", "todo_arrivals",
    ],
    # JSON: SQLite's json_each and json_extract, PostgreSQL's jsonb functions and operators.
    "json": [
        "live_keys_held", "list_todos", "list_todos_in_queue", "claim_next_in_queue", "claim_next_in_queues",
        "complete_many", "event_in_scope", "list_events", "event_in_queues", "events_in_play", "todos_by_ids",
        "dependency_states", "add_dependencies", "cancel_dependents", "log_claims", "prune_queue_claims",
        "readiness",
    ],
    # What only SQLite has: PRAGMA, sqlite_sequence (AUTOINCREMENT), INDEXED BY (the plan
    # tests/core/test_query_plans.py holds it to), INSERT OR IGNORE. claim_next: also SKIP LOCKED there.
    "sqlite's own": [
        "next_todo_id", "claim_next", "cancel_pending", "count_pending", "next_event_id", "data_version",
        "rules_of_source", "keep_pruned_delivery", "copy_last_ids", "copy_seed_sequences",
        "copy_move_sequences", "live_todos_by_key", "claim_next_limited", "queue_load",
    ],
    # Times: integer milliseconds in SQLite; timestamptz in PostgreSQL, each parameter through
    # sb_ts() and each column back through sb_ms() (and a todo's payload and result: jsonb there).
    "times": [
        "set_todo_event", "live_todo_by_key", "get_todo", "attempts_of_todo", "any_lapsed_lease",
        "claim_by_id", "heartbeat", "complete", "fail", "release", "force_release", "cancel",
        "last_ended_attempt", "redrive", "dead_letters", "count_dead_letters", "count_purgeable", "stats",
        "get_queue", "pause_queue", "resume_queue", "set_queue_limit", "seen_delivery", "remember_delivery", "get_event",
        "todos_of_event", "recent_events", "insert_source", "get_source", "list_sources",
        "set_source_enabled", "set_source_secrets", "record_source_health", "advance_schedule", "insert_agent",
        "get_agent",
        "list_agents", "delete_agent", "insert_rule", "list_rules", "prune_finished_todos", "prune_events",
        "forget_delivery_keys", "get_leader", "take_leadership", "renew_leadership", "release_leadership",
        "check_fence", "seen_member", "forget_gone_members", "members", "browse_todos",
        "browse_todos_in_queue", "browse_events", "queue_minutes", "done_since", "dead_groups",
        "deliveries_by_source", "browse_fingerprint", "copy_read_sources", "copy_insert_sources",
        "copy_read_rules", "copy_insert_rules", "copy_read_agents", "copy_insert_agents",
        "copy_read_queues", "copy_insert_queues", "copy_read_events", "copy_insert_events",
        "copy_read_todos", "copy_insert_todos", "copy_read_attempts", "copy_insert_attempts",
        "copy_read_delivery_keys", "copy_insert_delivery_keys", "copy_read_queue_claims", "copy_insert_queue_claims",
    ],
    # Locks: a row another transaction may be ending or recovering is locked (FOR UPDATE, SKIP
    # LOCKED) where SQLite's one writer needed nothing.
    "locks": [
        "end_lapsed_attempts", "end_attempt", "purge_todos", "lock_limited_queues",
    ],
    # PostgreSQL recovers lapsed leases in one statement (end_lapsed_attempts): this one is a no-op there.
    "done by another statement": ["recover_lapsed_leases"],
    # NULL equal to NULL: SQLite's `IS :x`, PostgreSQL's IS NOT DISTINCT FROM.
    "null equality": ["dead_letters_with_error"],
    # A size in bytes: SQLite's length() of text counts characters, so a BLOB cast; PostgreSQL's octet_length.
    "bytes": ["copy_sizes_events", "copy_sizes_todos", "dependencies_of"],
}
# fmt: on

DIFFERS_BY = {
    "a server function": lambda sqlite, pg: re.search(r"\bsb_(?!ts\b|ms\b)\w+\(", pg),
    "json": lambda sqlite, pg: re.search(r"\bjson_(each|extract)\(", sqlite) and "jsonb" in pg,
    "sqlite's own": lambda sqlite, pg: re.search(r"PRAGMA|sqlite_sequence|INDEXED BY|OR IGNORE", sqlite),
    "times": lambda sqlite, pg: re.search(r"\bsb_(ts|ms)\(", pg),
    "locks": lambda sqlite, pg: re.search(r"FOR UPDATE|SKIP LOCKED", pg),
    "done by another statement": lambda sqlite, pg: pg.startswith("SELECT WHERE"),
    "null equality": lambda sqlite, pg: " IS :" in sqlite and "IS NOT DISTINCT FROM" in pg,
    "bytes": lambda sqlite, pg: "length(" in sqlite and "octet_length(" in pg,
}


def code(text: str) -> str:
    """A statement without its comments, its words one space apart."""
    return " ".join(" ".join(line.split("--")[0] for line in text.splitlines()).split())


def test_the_twins_are_the_listed_ones_each_differing_for_its_reason() -> None:
    listed = [name for names in TWINS.values() for name in names]
    assert len(listed) == len(set(listed))
    assert set(listed) == TWINS_LOADED == set(vars(Q)) - set(SHARED)
    for reason, names in TWINS.items():
        for name in names:
            assert DIFFERS_BY[reason](code(getattr(Q, name)), code(POSTGRES[name])), (reason, name)


def test_a_statement_the_same_on_both_backends_is_written_once() -> None:
    # A twin whose two texts are the same but for comments and spacing belongs in shared.sql.
    alike = [name for name in TWINS_LOADED if code(getattr(Q, name)) == code(POSTGRES[name])]
    assert not alike, f"the same text on both backends, to be written once in shared.sql: {alike}"
    for name, text in SHARED.items():
        assert getattr(Q, name) == POSTGRES[name] == text


def test_every_statement_knows_its_name_and_has_a_postgresql_text() -> None:
    assert set(POSTGRES) == set(vars(Q))
    for name, statement in vars(Q).items():
        assert isinstance(statement, str) and statement.name == name
        assert POSTGRES[statement.name].strip()
    assert queries.POSTGRES is POSTGRES


def test_the_postgresql_statements_take_the_same_parameters() -> None:
    for name, statement in vars(Q).items():
        assert set(PARAMETER.findall(POSTGRES[name])) == set(PARAMETER.findall(statement)), name


def test_the_postgresql_statements_convert_by_one_substitution() -> None:
    # No `::` cast and no `%` in the file: `:name` → `%(name)s` needs nothing else.
    for name, text in POSTGRES.items():
        assert "::" not in text and "%" not in text, name


# ---------------------------------------------------------------- on a real server


@pytest.mark.postgres
def test_every_postgresql_statement_is_valid_on_the_postgresql_schema_with_sqlites_columns(
    schema_database: str, sqlite_schema: Path
) -> None:
    expected = sqlite_columns(sqlite_schema)
    failures: list[str] = []
    with psycopg.connect(schema_database, autocommit=True) as conn:
        for name, text in POSTGRES.items():
            query, names = numbered(text)
            prepared = conn.pgconn.prepare(name.encode(), query.encode())
            if prepared.status != pq.ExecStatus.COMMAND_OK:
                failures.append(f"{name}: {(prepared.error_message or b'').decode().strip()}")
                continue
            described = conn.pgconn.describe_prepared(name.encode())
            assert described.nparams == len(names), name
            columns = [(described.fname(i) or b"").decode() for i in range(described.nfields)]
            if columns != expected[name]:
                failures.append(f"{name}: columns {columns}, SQLite's {expected[name]}")
    assert not failures, "\n".join(failures)


@pytest.mark.postgres
def test_times_go_in_and_out_as_the_same_milliseconds(schema_database: str) -> None:
    samples = [0, 1, -1, 999, 1_733_106_000_123, 4_102_444_800_000, 253_402_300_799_999, -62_135_596_800_000]
    with psycopg.connect(schema_database, autocommit=True) as conn:
        for ms in samples:
            assert conn.execute("SELECT sb_ms(sb_ts(%s))", (ms,)).fetchone() == (ms,)
        assert conn.execute("SELECT sb_ms(NULL), sb_ts(NULL)").fetchone() == (None, None)


@pytest.mark.postgres
def test_a_commit_notifies_the_tables_it_changed_and_no_others(schema_database: str) -> None:
    with psycopg.connect(schema_database, autocommit=True) as listener, \
            psycopg.connect(schema_database, autocommit=True) as writer:  # fmt: skip
        listener.execute("LISTEN switchboard")
        with writer.transaction():  # changes no row: no notification
            writer.execute("UPDATE todos SET title = 'x' WHERE id = -1")
            writer.execute("DELETE FROM events WHERE id = -1")
        with writer.transaction():  # a change, rolled back: no notification
            writer.execute("INSERT INTO queues (name) VALUES ('rolled-back')")
            raise_rollback(writer)
        with writer.transaction():
            writer.execute("INSERT INTO settings (name, value) VALUES ('a', '1'), ('b', '2')")
            writer.execute("UPDATE settings SET value = '3'")
            writer.execute("INSERT INTO queues (name) VALUES ('q')")
        writer.execute("INSERT INTO agents (name, queues, created_at) VALUES ('bot', '[]', now())")
        heard: list[str] = []
        for notice in listener.notifies(timeout=30):
            heard.append(notice.payload)
            if notice.payload == "agents":
                break
    # One notification per table per transaction, in commit order.
    assert heard == ["settings", "queues", "agents"]


def raise_rollback(conn: psycopg.Connection) -> None:
    """Leave ``with conn.transaction()`` rolling it back."""
    raise psycopg.Rollback()


@pytest.mark.postgres
def test_a_batch_numbers_its_rows_past_every_id_ever_drawn(schema_database: str) -> None:
    with psycopg.connect(schema_database, autocommit=True) as conn:
        with conn.transaction():
            drawn = conn.execute("SELECT sb_new_id('todos')").fetchone()[0]  # type: ignore[index]
            raise_rollback(conn)
        with conn.transaction():
            first = conn.execute(str(numbered(POSTGRES["next_todo_id"])[0])).fetchone()[0]  # type: ignore[index, arg-type]
            assert first == drawn + 1
            conn.execute("INSERT INTO todos (id, queue, title, state, visible_at, created_at, updated_at) "
                         "VALUES (sb_given_id('todos', %s), 'q', 't', 'pending', now(), now(), now())",
                         (first + 4,))  # fmt: skip
        # A single insert after the batch draws past the batch's ids.
        after = conn.execute("SELECT sb_new_id('todos')").fetchone()[0]  # type: ignore[index]
        assert after == first + 5


def statement(name: str) -> str:
    """queries.postgres.sql's statement, with psycopg's parameters."""
    return PARAMETER.sub(r"%(\1)s", POSTGRES[name])


def todo_params(key: str | None, title: str = "t") -> dict[str, object]:
    return {"queue": "q", "assignee": None, "title": title, "kind": None, "payload": '{"a": 1}', "event_id": None,
            "idempotency_key": key, "priority": 0, "max_attempts": 5, "visible_at": 1_000, "now": 1_000,
            "blocked_by": 0, "waits_for": 0}  # fmt: skip


def waiting_for_a_lock(conn: psycopg.Connection, pid: int) -> bool:
    found = conn.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", (pid,)).fetchone()
    return bool(found and found[0])


@pytest.mark.postgres
def test_two_transactions_racing_for_one_key_make_one_todo_and_raise_nothing(schema_database: str) -> None:
    with psycopg.connect(schema_database) as first, psycopg.connect(schema_database) as second, \
            psycopg.connect(schema_database, autocommit=True) as watcher:  # fmt: skip
        made = first.execute(statement("insert_todo"), todo_params("k", "first")).fetchone()
        assert made is not None
        answer: list[object] = []
        racer = threading.Thread(target=lambda: answer.append(
            second.execute(statement("insert_todo_id"), todo_params("k", "second")).fetchone()))
        racer.start()
        until(lambda: waiting_for_a_lock(watcher, second.info.backend_pid), True)
        first.commit()
        racer.join()
        second.commit()
        assert answer == [None]  # inserted nothing, as on SQLite: the caller reads the holder
        holder = second.execute(statement("live_todo_by_key"), {"queue": "q", "idempotency_key": "k"}).fetchall()
        assert [row[3] for row in holder] == ["first"]


@pytest.mark.postgres
def test_a_batch_holds_every_other_insert_of_an_id_off_until_it_commits(schema_database: str) -> None:
    lock = "SELECT pg_try_advisory_xact_lock(1396853841, 1), pg_try_advisory_xact_lock_shared(1396853841, 1)"
    with psycopg.connect(schema_database) as batch, psycopg.connect(schema_database) as other:
        deliveries = '[["gh", "d-1", "id:d-1", null, null], ["gh", "d-2", "id:d-2", null, null]]'
        assert batch.execute(statement("seen_deliveries"), {"deliveries": deliveries}).fetchall() == []
        assert other.execute(lock).fetchone() == (False, False)  # no id drawn, no other batch, meanwhile
        other.rollback()
        batch.commit()
        # A single insert holds a batch off (shared), and lets other single inserts in.
        assert batch.execute(statement("insert_todo_id"), todo_params(None)).fetchone() is not None
        assert other.execute(lock).fetchone() == (False, True)
        other.rollback()
        batch.commit()


@pytest.mark.postgres
@pytest.mark.parametrize("follow", ["todos_after", "todo_arrivals"])
def test_a_follower_never_passes_a_smaller_id_that_commits_later(schema_database: str, follow: str) -> None:
    with psycopg.connect(schema_database) as slow, psycopg.connect(schema_database, autocommit=True) as fast, \
            psycopg.connect(schema_database, autocommit=True) as follower, \
            psycopg.connect(schema_database, autocommit=True) as watcher:  # fmt: skip
        smaller = slow.execute(statement("insert_todo_id"), todo_params(None, "slow")).fetchone()
        larger = fast.execute(statement("insert_todo_id"), todo_params(None, "fast")).fetchone()
        assert smaller is not None and larger is not None and smaller[0] < larger[0]
        params = {"after_id": 0, "queue": None, "queues": None, "agent": "a", "limit": 10}
        seen: list[list[int]] = []
        reader = threading.Thread(
            target=lambda: seen.append([row[0] for row in follower.execute(statement(follow), params).fetchall()])
        )
        reader.start()
        until(lambda: waiting_for_a_lock(watcher, follower.info.backend_pid), True)  # the slow one is awaited
        slow.commit()
        reader.join()
        assert seen == [[smaller[0], larger[0]]]


@pytest.mark.postgres
def test_a_dependency_completed_while_a_create_waits_for_it_readies_the_new_todo(schema_database: str) -> None:
    # The create locks the todo it waits for (dependency_states, FOR SHARE) before counting it as
    # not done; a completion racing it waits for the create's commit, and its trigger then sees
    # the new dependency, rather than miss it and leave the new todo blocked for ever.
    with psycopg.connect(schema_database) as creator, psycopg.connect(schema_database) as completer, \
            psycopg.connect(schema_database, autocommit=True) as watcher:  # fmt: skip
        dep = watcher.execute(statement("insert_todo_id"), todo_params(None, "dependency")).fetchone()[0]
        watcher.execute("UPDATE todos SET state = 'claimed', visible_at = NULL, lease_token_hash = 'h', "
                        "lease_expires_at = sb_ts(999999999), owner = 'w', claimed_at = sb_ts(1000) WHERE id = %s",
                        (dep,))  # fmt: skip
        states = creator.execute(statement("dependency_states"), {"ids": f"[{dep}]"}).fetchall()
        assert [row[1] for row in states] == ["claimed"]
        blocked = {**todo_params(None, "waits"), "visible_at": None, "blocked_by": 1, "waits_for": 1}
        new = creator.execute(statement("insert_todo"), blocked).fetchone()[0]
        creator.execute(statement("add_dependencies"), {"id": new, "ids": f"[{dep}]"})
        done: list[object] = []
        racer = threading.Thread(target=lambda: done.append(completer.execute(
            statement("complete"), {"id": dep, "lease_token_hash": "h", "now": 2_000, "result": "1"}).fetchone()))
        racer.start()
        until(lambda: waiting_for_a_lock(watcher, completer.info.backend_pid), True)
        creator.commit()
        racer.join()
        completer.commit()
        assert done and done[0] is not None
        row = watcher.execute("SELECT blocked_by, sb_ms(visible_at) FROM todos WHERE id = %s", (new,)).fetchone()
        assert row == (0, 2_000)
