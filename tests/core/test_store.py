"""The one SQLite file (DESIGN §6): where it lives, how it is opened, its schema version."""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from switchboard_local.core import leadership, queues, sources, todos
from switchboard_local.core.errors import (
    Conflict,
    InvalidArgument,
    StoreUnusable,
    Unavailable,
)
from switchboard_local.core.store.interface import Store
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.store.shared import busy_timeout_ms, default_path
from switchboard_local.core.store.sqlite import migrations
from switchboard_local.core.store.sqlite import store as store_module
from switchboard_local.core.todo_model import NewTodo, hash_token
from switchboard_local.core.todos import Lease

from support.sql import rows, run
from support.store import hold_the_thread

pytestmark = pytest.mark.anyio

REPO_ROOT = Path(__file__).resolve().parents[2]


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def permissive_umask():
    """Owner-only must not depend on the user's umask being strict."""
    previous = os.umask(0)
    yield
    os.umask(previous)


# ---------------------------------------------------------------- files


@pytest.mark.sqlite_only
async def test_new_file_folder_and_wal_files_are_owner_only(tmp_path, clock, permissive_umask):
    path = tmp_path / "fresh" / "switchboard.db"
    async with await open_store(path, clock=clock) as opened:
        await todos.create(opened, NewTodo(queue="q", title="t"))  # a write makes -wal and -shm exist
        assert mode(path.parent) == 0o700
        assert mode(path) == 0o600
        for suffix in ("-wal", "-shm"):
            sidecar = path.with_name(path.name + suffix)
            assert sidecar.exists(), suffix
            assert mode(sidecar) == 0o600, suffix


@pytest.mark.sqlite_only
async def test_a_closed_store_leaves_its_database_as_one_file(db_path, clock) -> None:
    opened = await open_store(db_path, clock=clock)
    await todos.create(opened, NewTodo(queue="q", title="t"))  # a write makes -wal and -shm exist
    await opened.close()  # its last connection closed: SQLite removes them
    assert sorted(p.name for p in db_path.parent.iterdir() if p.name.startswith(db_path.name)) == [db_path.name]


async def test_reopening_a_file_keeps_its_data(db_path, clock):
    async with await open_store(db_path, clock=clock) as first:
        todo, _ = await todos.create(first, NewTodo(queue="q", title="kept"))
    async with await open_store(db_path, clock=clock) as second:
        assert (await todos.get(second, todo.id)).title == "kept"


# ---------------------------------------------------------------- connection settings


async def pragma(opened: Store, name: str):
    """A setting of the write connection, the one that commits."""
    return await opened.write(lambda tx: tx.one(f"PRAGMA {name}")[0])


@pytest.mark.sqlite_only
async def test_connection_runs_wal_with_foreign_keys_busy_timeout_and_full_sync(store):
    assert await pragma(store, "journal_mode") == "wal"
    assert await pragma(store, "foreign_keys") == 1
    assert await pragma(store, "busy_timeout") >= 5000
    assert await pragma(store, "synchronous") == 2  # FULL


@pytest.mark.sqlite_only
async def test_the_write_connection_keeps_temporary_tables_in_memory(store):
    # A claim's candidates and their sort are temporary tables: in a temporary
    # file's pager each costs the claim more than the rest of it.
    assert await pragma(store, "temp_store") == 2  # MEMORY


@pytest.mark.sqlite_only
async def test_the_faster_mode_is_normal_sync_and_others_are_refused(db_path):
    async with await open_store(db_path, synchronous="NORMAL") as opened:
        assert await pragma(opened, "synchronous") == 1
    with pytest.raises(InvalidArgument):
        await open_store(db_path, synchronous="OFF")


@pytest.mark.sqlite_only
async def test_foreign_keys_are_enforced(store):
    with pytest.raises(Conflict):
        await store.write(
            lambda tx: tx.run(
                "INSERT INTO todos (queue, title, state, visible_at, event_id, created_at, updated_at)"
                " VALUES ('q', 't', 'pending', 0, 12345, 0, 0)"
            )
        )


@pytest.mark.sqlite_only
@pytest.mark.parametrize("method", ["one", "all", "run", "many"])
async def test_a_statement_the_schema_refuses_is_a_conflict_that_says_what_it_refused(store, method):
    orphan = ("INSERT INTO todos (queue, title, state, visible_at, event_id, created_at, updated_at)"
              " VALUES ('q', 't', 'pending', 0, 12345, 0, 0)")  # fmt: skip

    def body(tx):  # noqa: ANN001, ANN202
        return tx.many(orphan, [()]) if method == "many" else getattr(tx, method)(orphan)

    with pytest.raises(Conflict, match="the database refused the change: FOREIGN KEY constraint failed$"):
        await store.write(body)


# ---------------------------------------------------------------- schema and versions


@pytest.mark.sqlite_only
async def test_new_file_gets_the_schema_and_the_current_version(store, db_path):
    tables = {name for (name,) in rows(db_path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"events", "todos", "attempts"} <= tables
    assert rows(db_path, "PRAGMA user_version") == [(migrations.SCHEMA_VERSION,)]


@pytest.mark.sqlite_only
def test_schema_sql_is_the_repository_root_file():
    assert migrations.schema_sql() == (REPO_ROOT / "schema.sql").read_text("utf-8")


def make_v1_file(path: Path) -> None:
    """A database as version 1 wrote it (no application id): a live todo derived
    from an event, a done one, a direct one, and an agent."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.executescript((Path(__file__).parents[1] / "data" / "schema-v1.sql").read_text("utf-8"))
        conn.executescript(
            """
            PRAGMA user_version = 1;
            INSERT INTO events (source, family, type, external_id, trust_mode, verified, body, size, received_at)
                VALUES ('gh', 'webhook', 'push', 'd-1', 'github', 1, x'7b7d', 2, 0);
            INSERT INTO todos (queue, title, event_id, idempotency_key, state, visible_at, created_at, updated_at)
                VALUES ('gh', 'live derived', 1, 'gh:d-1:default', 'pending', 0, 0, 0),
                       ('gh', 'done derived', 1, 'gh:d-0:default', 'done', NULL, 0, 0),
                       ('q', 'direct', NULL, 'mine', 'pending', 0, 0, 0);
            INSERT INTO agents (name, queues, created_at) VALUES ('reviewer', '["review"]', 0);
            """
        )
    finally:
        conn.close()


@pytest.mark.sqlite_only
async def test_a_version_1_file_is_upgraded_in_place_keeping_its_data(db_path, clock):
    make_v1_file(db_path)
    async with await open_store(db_path, clock=clock) as opened:
        listed = await todos.list_todos(opened)
        assert [t.title for t in listed] == ["direct", "done derived", "live derived"]
        # Done with no attempt on record: nobody to name as its completer, so no attempt in its history.
        assert (await todos.get(opened, listed[1].id)).attempts == ()
    assert rows(db_path, "PRAGMA user_version") == [(migrations.SCHEMA_VERSION,)]
    assert rows(db_path, "PRAGMA application_id") == [(migrations.APPLICATION_ID,)]
    keys = rows(db_path, "SELECT title, idempotency_key FROM todos ORDER BY id")
    assert keys == [("live derived", "event:gh:d-1:default"), ("done derived", "event:gh:d-0:default"), ("direct", "mine")]
    assert rows(db_path, "SELECT name, create_queues, owner FROM agents") == [("reviewer", None, None)]


@pytest.mark.sqlite_only
async def test_a_file_from_before_the_sources_rename_keeps_its_sources(db_path, clock):
    make_v1_file(db_path)
    run(db_path, "INSERT INTO adapters (name, family, kind, trust_mode, config, created_at, updated_at) "
                 "VALUES ('gh', 'webhook', 'github', 'github', '{\"queue\": \"review\"}', 0, 0)")  # fmt: skip
    async with await open_store(db_path, clock=clock) as opened:
        found = await sources.get(opened, "gh")
    assert (found.kind, found.config) == ("github", {"queue": "review"})
    tables = {name for (name,) in rows(db_path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "sources" in tables and "adapters" not in tables


@pytest.mark.sqlite_only
async def test_a_version_1_file_upgraded_can_pause_a_queue(db_path, clock):
    make_v1_file(db_path)
    async with await open_store(db_path, clock=clock) as opened:
        await queues.pause(opened, "q", by="op")
        assert await todos.claim_next(opened, owner="w", queues=["q"]) is None
        assert (await todos.claim_next(opened, owner="w")).title == "live derived"


def shape(path: Path) -> dict[str, object]:
    """What a file's schema is made of: each table's and index's definition
    (comments dropped, blanks folded, a renamed table's quotes taken off), and
    each table's columns and foreign keys as SQLite reports them."""
    shown: dict[str, object] = {}
    for kind, name, sql in rows(path, "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"):
        text = " ".join(re.sub(r"--[^\n]*", "", sql).replace("IF NOT EXISTS ", "").replace(f'"{name}"', name).split())
        text = text.replace("( ", "(").replace(" )", ")").replace(" ,", ",")
        if kind == "table":
            shown[name] = (text, rows(path, f"PRAGMA table_xinfo({name})"), rows(path, f"PRAGMA foreign_key_list({name})"))
        else:
            shown[name] = text
    return shown


@pytest.mark.sqlite_only
async def test_a_file_upgraded_from_version_1_has_the_shape_of_a_new_one(db_path, tmp_path, clock):
    make_v1_file(db_path)
    async with await open_store(db_path, clock=clock):
        pass
    async with await open_store(tmp_path / "new.db", clock=clock):
        pass
    assert shape(db_path) == shape(tmp_path / "new.db")


def make_v5_file(path: Path) -> None:
    """A database as version 5 wrote it: a todo awaiting a retry (then 'failed'
    with a retry time), a dead letter, a done todo with its attempt, and a todo
    id sequence past the last row (the newest todos were pruned)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.executescript((Path(__file__).parents[1] / "data" / "schema-v5.sql").read_text("utf-8"))
        conn.executescript(
            """
            PRAGMA user_version = 5;
            INSERT INTO todos (id, queue, title, idempotency_key, state, attempt, max_attempts, visible_at,
                               last_error, created_at, updated_at)
                VALUES (1, 'q', 'retrying', 'k', 'failed', 1, 3, 5000, 'flaky', 0, 0),
                       (2, 'q', 'dead', NULL, 'failed', 3, 3, NULL, 'gave up', 0, 0),
                       (3, 'q', 'done', NULL, 'done', 1, 3, NULL, NULL, 0, 0);
            INSERT INTO attempts (todo_id, attempt, owner, claimed_at, ended_at, outcome, error)
                VALUES (1, 1, 'w', 0, 1, 'failed', 'flaky'), (3, 1, 'w', 0, 1, 'completed', NULL);
            UPDATE sqlite_sequence SET seq = 40 WHERE name = 'todos';
            """
        )
    finally:
        conn.close()


@pytest.mark.sqlite_only
async def test_migration_6_makes_a_todo_awaiting_its_retry_pending_and_keeps_every_row(db_path, clock):
    make_v5_file(db_path)
    async with await open_store(db_path, clock=clock) as upgraded:
        states = {t.title: (t.state, t.dead_letter, t.visible_at) for t in await todos.list_todos(upgraded)}
        assert states == {"retrying": ("pending", False, 5000), "dead": ("failed", True, None),
                          "done": ("done", False, None)}  # fmt: skip
        assert [(a.outcome, a.error) for a in (await todos.get(upgraded, 1)).attempts] == [("failed", "flaky")]
        with pytest.raises(Conflict):  # the retrying todo still holds its key
            await todos.redrive(upgraded, 1)
        _, created = await todos.create(upgraded, NewTodo(queue="q", title="dup", idempotency_key="k"))
        assert not created
        newest, _ = await todos.create(upgraded, NewTodo(queue="q", title="after the migration"))
    assert newest.id == 41  # ids pruned before the migration are never reused
    assert rows(db_path, "PRAGMA user_version") == [(migrations.SCHEMA_VERSION,)]
    assert rows(db_path, "PRAGMA foreign_key_check") == []


# Version 7's attempt history: one row per claim, the open one included.
V7_HISTORY = {
    1: [],
    2: [(1, "w1", 100, 200, "failed", "boom"), (2, "w2", 300, None, None, None)],
    3: [(1, "w1", 100, 200, "failed", "boom"), (1, "w2", 300, 350, "released", None),
        (2, "w3", 400, 500, "completed", None)],
    4: [(1, "w1", 100, 200, "failed", "one"), (2, "w2", 300, 400, "lease_expired", None)],
    5: [(1, "w1", 100, 150, "cancelled", "not needed")],
    6: [(1, "w1", 100, 150, "released_by_operator", None)],
}


def make_v7_file(path: Path) -> None:
    """A database as version 7 wrote it: a todo in each state, with the attempts
    each went through (the open one of the claimed todo too), live keys, and a
    todo id sequence past the last row."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.executescript((Path(__file__).parents[1] / "data" / "schema-v7.sql").read_text("utf-8"))
        conn.executescript(
            f"""
            PRAGMA user_version = 7;
            INSERT INTO todos (id, queue, title, idempotency_key, state, attempt, max_attempts, owner,
                               lease_token_hash, lease_expires_at, visible_at, result, last_error,
                               created_at, updated_at, claimed_at, completed_at, cancelled_by, cancel_reason)
            VALUES (1, 'q', 'pending', 'k1', 'pending', 0, 3, NULL, NULL, NULL, 0, NULL, NULL, 0, 0, NULL, NULL,
                    NULL, NULL),
                   (2, 'q', 'claimed', 'k2', 'claimed', 2, 3, 'w2', '{hash_token("tok")}', 10000000000000, NULL,
                    NULL, 'boom', 0, 300, 300, NULL, NULL, NULL),
                   (3, 'q', 'done', 'k3', 'done', 2, 3, NULL, NULL, NULL, NULL, '{{"ok": true}}', 'boom',
                    0, 500, 400, 500, NULL, NULL),
                   (4, 'q', 'dead', 'k4', 'failed', 2, 2, NULL, NULL, NULL, NULL, NULL, 'lease expired',
                    0, 400, 300, NULL, NULL, NULL),
                   (5, 'q', 'cancelled', 'k5', 'cancelled', 1, 3, NULL, NULL, NULL, NULL, NULL, NULL,
                    0, 150, 100, NULL, 'op', 'not needed'),
                   (6, 'q', 'released by an operator', NULL, 'pending', 0, 3, NULL, NULL, NULL, 150, NULL, NULL,
                    0, 150, 100, NULL, NULL, NULL);
            UPDATE sqlite_sequence SET seq = 40 WHERE name = 'todos';
            """
        )
        conn.executemany(
            "INSERT INTO attempts (todo_id, attempt, owner, claimed_at, ended_at, outcome, error)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(todo_id, *a) for todo_id, history in V7_HISTORY.items() for a in history],
        )
    finally:
        conn.close()


@pytest.mark.sqlite_only
async def test_migration_8_keeps_every_todo_its_attempt_history_and_its_key(db_path, clock):
    make_v7_file(db_path)
    before = rows(db_path, "SELECT * FROM todos ORDER BY id")
    async with await open_store(db_path, clock=clock) as upgraded:
        for todo_id, history in V7_HISTORY.items():
            got = await todos.get(upgraded, todo_id)
            shown = [(a.attempt, a.owner, a.claimed_at, a.ended_at, a.outcome, a.error) for a in got.attempts]
            assert shown == history, f"todo {todo_id}"
        # Live keys are still held; finished todos' keys are free.
        for key, held in (("k1", True), ("k2", True), ("k3", False), ("k4", False), ("k5", False)):
            _, created = await todos.create(upgraded, NewTodo(queue="q", title="again", idempotency_key=key))
            assert created is not held, key
        # The claim survives with its lease: its holder completes it, and the history says who.
        await todos.complete(upgraded, Lease(2, "tok"))
        assert [(a.owner, a.outcome) for a in (await todos.get(upgraded, 2)).attempts] == [
            ("w1", "failed"), ("w2", "completed")]  # fmt: skip
        newest, _ = await todos.create(upgraded, NewTodo(queue="q", title="after the migration"))
    assert newest.id == 44  # ids pruned before the migration are never reused (41-43: the freed keys above)
    after = rows(db_path, "SELECT * FROM todos WHERE id <= 6 ORDER BY id")
    # Every column version 7 had, as it was (completed_by is new, after completed_at; blocked_by and
    # waits_for, version 11's, at the end); todo 2 was completed above.
    assert [(*r[:22], *r[23:25]) for r in after if r[0] != 2] == [tuple(r) for r in before if r[0] != 2]
    assert {r[25:] for r in after} == {(0, 0)}
    assert [r[22] for r in after] == [None, "w2", "w3", None, None, None]  # completed_by
    assert rows(db_path, "PRAGMA user_version") == [(migrations.SCHEMA_VERSION,)]
    assert rows(db_path, "PRAGMA foreign_key_check") == []
    assert rows(db_path, "PRAGMA integrity_check") == [("ok",)]


# A leader as version 8 recorded it: its lease, and nothing of its environment.
V8_LEADER = ("INSERT INTO ingest_leader (id, fence, holder, pid, host, kind, http, since, renewed_at, expires_at,"
             " handover_to) VALUES (1, 3, 'holder-3', 4242, 'elsewhere', 'serve', 'http://127.0.0.1:8787', 0, 0,"
             " 10000000000000, NULL)")  # fmt: skip


@pytest.mark.sqlite_only
async def test_migration_9_keeps_the_leader_and_lets_it_say_which_variables_it_has(db_path, clock):
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.executescript((Path(__file__).parents[1] / "data" / "schema-v8.sql").read_text("utf-8"))
        conn.executescript(f"PRAGMA user_version = 8; {V8_LEADER};")
    finally:
        conn.close()
    async with await open_store(db_path, clock=clock) as upgraded:
        await sources.add(upgraded, "gh", family="webhook", kind="github", trust_mode="github", config={},
                          secrets=[sources.secret_ref(env="GH_SECRET")])  # fmt: skip
        leader = await leadership.current(upgraded)
        assert (leader.fence, leader.pid, leader.http) == (3, 4242, "http://127.0.0.1:8787")
        assert leader.has("GH_SECRET") is None  # version 8 recorded nothing of it
        assert await leadership.renew(upgraded, leadership.Lease(3, "holder-3"), environ={"GH_SECRET": "s"})
        assert (await leadership.current(upgraded)).has("GH_SECRET") is True
    assert rows(db_path, "PRAGMA user_version") == [(migrations.SCHEMA_VERSION,)]


@pytest.mark.sqlite_only
async def test_migration_4_adds_the_queues_table_to_a_version_3_file(db_path, clock):
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:  # version 7's shape, taken back to version 3's below
        conn.executescript((Path(__file__).parents[1] / "data" / "schema-v7.sql").read_text("utf-8"))
        conn.execute("INSERT INTO todos (queue, title, state, visible_at, created_at, updated_at)"
                     " VALUES ('q', 'from version 3', 'pending', 0, 0, 0)")  # fmt: skip
    finally:
        conn.close()
    run(db_path, "DROP TABLE queues")
    run(db_path, "ALTER TABLE agents DROP COLUMN owner")  # version 3's shape
    run(db_path, "PRAGMA user_version = 3")
    async with await open_store(db_path, clock=clock) as upgraded:
        paused = await queues.pause(upgraded, "q", by="op")
        assert (paused.paused, paused.has_todos) == (True, True)
        with pytest.raises(Conflict):
            await todos.claim(upgraded, 1, owner="w")
    assert rows(db_path, "PRAGMA user_version") == [(migrations.SCHEMA_VERSION,)]
    assert rows(db_path, "SELECT name, paused_by FROM queues") == [("q", "op")]


@pytest.mark.sqlite_only
async def test_an_older_file_runs_each_later_migration_in_order(db_path, clock, monkeypatch):
    async with await open_store(db_path, clock=clock) as current:
        todo, _ = await todos.create(current, NewTodo(queue="q", title="from now"))
    next_version = migrations.SCHEMA_VERSION + 1
    monkeypatch.setattr(migrations, "SCHEMA_VERSION", next_version)
    monkeypatch.setitem(migrations.MIGRATIONS, next_version, "ALTER TABLE todos ADD COLUMN test_extra TEXT;")
    async with await open_store(db_path, clock=clock) as upgraded:
        assert (await todos.get(upgraded, todo.id)).title == "from now"
    columns = [row[1] for row in rows(db_path, "PRAGMA table_info(todos)")]
    assert "test_extra" in columns
    assert rows(db_path, "PRAGMA user_version") == [(next_version,)]


@pytest.mark.sqlite_only
async def test_failed_migration_leaves_the_file_at_its_old_version(db_path, clock, monkeypatch):
    async with await open_store(db_path, clock=clock) as current:
        await todos.create(current, NewTodo(queue="q", title="from now"))
    old_version = migrations.SCHEMA_VERSION
    monkeypatch.setattr(migrations, "SCHEMA_VERSION", old_version + 1)
    monkeypatch.setitem(
        migrations.MIGRATIONS,
        old_version + 1,
        "ALTER TABLE todos ADD COLUMN half_done TEXT;\nALTER TABLE no_such_table ADD COLUMN x TEXT;",
    )
    with pytest.raises(StoreUnusable):
        await open_store(db_path, clock=clock)
    assert rows(db_path, "PRAGMA user_version") == [(old_version,)]
    assert "half_done" not in [row[1] for row in rows(db_path, "PRAGMA table_info(todos)")]
    assert rows(db_path, "SELECT title FROM todos") == [("from now",)]


@pytest.mark.sqlite_only
async def test_newer_file_is_refused_naming_both_versions(db_path, clock):
    async with await open_store(db_path, clock=clock):
        pass
    run(db_path, "PRAGMA user_version = 99")
    with pytest.raises(StoreUnusable) as refused:
        await open_store(db_path, clock=clock)
    message = str(refused.value).replace(str(db_path), "<path>")
    assert re.search(r"\b99\b", message)
    assert re.search(rf"\b{migrations.SCHEMA_VERSION}\b", message)
    assert rows(db_path, "PRAGMA user_version") == [(99,)]


@pytest.mark.sqlite_only
async def test_foreign_sqlite_file_is_refused(db_path):
    run(db_path, "CREATE TABLE notes (body TEXT)")
    before = db_path.read_bytes()
    with pytest.raises(StoreUnusable, match="application id 0, user version 0"):
        await open_store(db_path)
    assert db_path.read_bytes() == before  # a table at user version 0 is another program's: left byte for byte
    tables = [name for (name,) in rows(db_path, "SELECT name FROM sqlite_master")]
    assert tables == ["notes"]
    assert rows(db_path, "PRAGMA user_version") == [(0,)]


@pytest.mark.sqlite_only
async def test_a_new_file_another_process_gives_the_schema_while_we_look_at_it_is_opened(db_path, monkeypatch):
    # Issue 33: a process opening a new file read its version, then its tables; another
    # process's schema committed in between made the file look foreign. Here another
    # process (a real one) creates the schema right after this one reads the application id.
    sqlite3.connect(db_path).execute("PRAGMA journal_mode = WAL").fetchall()  # new, empty (as its creator leaves it)
    connect = sqlite3.connect
    others: list[subprocess.CompletedProcess[str]] = []

    class Looking(sqlite3.Connection):
        def execute(self, sql, *args):  # type: ignore[no-untyped-def, override]
            answer = super().execute(sql, *args)
            if sql == "PRAGMA application_id" and not others:
                others.append(subprocess.run([sys.executable, "-m", "switchboard_local", "stats", "--db", str(db_path)],
                                             capture_output=True, text=True, cwd=REPO_ROOT, timeout=60))  # fmt: skip
            return answer

    def looking(*args, **kwargs):  # type: ignore[no-untyped-def]
        return connect(*args, **kwargs) if others or "factory" in kwargs else connect(*args, factory=Looking, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", looking)
    async with await open_store(db_path) as store:
        assert await todos.list_todos(store) == []
    assert [(o.returncode, o.stderr) for o in others] == [(0, "")]
    assert rows(db_path, "PRAGMA user_version") == [(migrations.SCHEMA_VERSION,)]


@pytest.mark.sqlite_only
async def test_refused_foreign_file_is_left_in_its_own_journal_mode(db_path):
    # Refusing a file must not change it: a user who points SWITCHBOARD_DB at
    # the wrong database should find it exactly as it was.
    run(db_path, "CREATE TABLE notes (body TEXT)")
    assert rows(db_path, "PRAGMA journal_mode") == [("delete",)]
    with pytest.raises(StoreUnusable):
        await open_store(db_path)
    assert rows(db_path, "PRAGMA journal_mode") == [("delete",)]


@pytest.mark.sqlite_only
async def test_another_programs_file_at_user_version_1_is_refused_and_left_untouched(db_path):
    # Many programs version their schema with user_version; 1 is the commonest.
    run(db_path, "CREATE TABLE todos (id INTEGER PRIMARY KEY, text TEXT)")
    run(db_path, "PRAGMA user_version = 1")
    before = db_path.read_bytes()
    with pytest.raises(StoreUnusable, match="not a switchboard-local one"):
        await open_store(db_path)
    assert db_path.read_bytes() == before
    assert rows(db_path, "PRAGMA journal_mode") == [("delete",)]


@pytest.mark.sqlite_only
@pytest.mark.parametrize("content", ["sqlite", "text"])
async def test_a_refused_file_keeps_its_permissions(db_path, content):
    # Owner-only is for our files: pointing --db at someone else's (as root,
    # at /etc/passwd) must not make it unreadable to others.
    if content == "sqlite":
        run(db_path, "CREATE TABLE notes (body TEXT)")
    else:
        db_path.write_text("not a database\n")
    os.chmod(db_path, 0o644)
    with pytest.raises(StoreUnusable):
        await open_store(db_path)
    assert mode(db_path) == 0o644


@pytest.mark.sqlite_only
async def test_our_file_open_to_others_is_made_owner_only_when_opened(db_path, permissive_umask):
    async with await open_store(db_path):
        pass
    os.chmod(db_path, 0o644)
    async with await open_store(db_path):
        pass
    assert mode(db_path) == 0o600


@pytest.mark.sqlite_only
async def test_a_file_marked_with_another_application_id_is_refused_and_left_untouched(db_path):
    run(db_path, "PRAGMA application_id = 1234")
    run(db_path, f"PRAGMA user_version = {migrations.SCHEMA_VERSION}")
    before = db_path.read_bytes()
    with pytest.raises(StoreUnusable, match="application id 1234"):
        await open_store(db_path)
    assert db_path.read_bytes() == before


@pytest.mark.sqlite_only
async def test_a_new_file_is_marked_with_our_application_id(store, db_path):
    assert rows(db_path, "PRAGMA application_id") == [(migrations.APPLICATION_ID,)]


@pytest.mark.sqlite_only
async def test_a_device_is_refused_as_not_a_regular_file():
    with pytest.raises(StoreUnusable, match="not a regular file|system file system"):
        await open_store("/dev/null")


@pytest.mark.sqlite_only
async def test_a_path_under_proc_is_refused():
    with pytest.raises(StoreUnusable, match="system file system"):
        await open_store(f"/proc/{os.getpid()}/switchboard.db")


@pytest.mark.sqlite_only
@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm here")
async def test_a_database_in_dev_shm_is_usable(clock):
    # /dev/shm is a tmpfs of regular files, not a device: a scratch database may live there.
    path = Path("/dev/shm") / f"switchboard-test-{os.getpid()}.db"
    try:
        async with await open_store(path, clock=clock) as opened:
            todo, _ = await todos.create(opened, NewTodo(queue="q", title="kept"))
            assert (await todos.get(opened, todo.id)).title == "kept"
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


@pytest.mark.sqlite_only
async def test_a_new_database_in_a_folder_that_cannot_be_created_is_unavailable(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(Unavailable, match="a-file"):
        await open_store(blocker / "sub" / "switchboard.db")


@pytest.mark.sqlite_only
async def test_a_file_that_is_not_sqlite_is_refused(db_path):
    db_path.write_bytes(b"this is a text file, not a database\n" * 50)
    with pytest.raises(StoreUnusable):
        await open_store(db_path)


# ---------------------------------------------------------------- where the file lives


@pytest.mark.sqlite_only
def test_default_path_honours_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SWITCHBOARD_DB", str(tmp_path / "from-env.db"))
    assert default_path() == tmp_path / "from-env.db"
    monkeypatch.setenv("SWITCHBOARD_DB", "~/elsewhere/sb.db")
    assert default_path() == Path.home() / "elsewhere" / "sb.db"


@pytest.mark.sqlite_only
def test_default_path_without_the_environment_is_the_user_data_dir(monkeypatch):
    import platformdirs

    monkeypatch.delenv("SWITCHBOARD_DB", raising=False)
    path = default_path()
    assert path == platformdirs.user_data_path("switchboard-local") / "switchboard.db"


@pytest.mark.sqlite_only
async def test_open_without_a_path_uses_the_environment(monkeypatch, tmp_path, clock):
    target = tmp_path / "env" / "switchboard.db"
    monkeypatch.setenv("SWITCHBOARD_DB", str(target))
    async with await open_store(clock=clock) as opened:
        assert opened.path == target
        await todos.create(opened, NewTodo(queue="q", title="t"))
    assert rows(target, "SELECT title FROM todos") == [("t",)]


# ---------------------------------------------------------------- peek


@pytest.mark.sqlite_only
async def test_peek_answers_while_the_thread_is_busy_and_sees_every_commit(store, db_path) -> None:
    gate, held = await hold_the_thread(store)
    try:
        run(db_path, "INSERT INTO agents (name, queues, created_at) VALUES ('other', '[]', 0)")  # another process
        seen = await asyncio.wait_for(store.peek(lambda tx: tx.one("SELECT name FROM agents")), timeout=5)
    finally:
        gate.set()
        await held
    assert seen["name"] == "other"


@pytest.mark.sqlite_only
async def test_a_peek_the_file_refuses_is_read_in_the_write_thread_which_waits_for_the_lock(store) -> None:
    for n in range(10):  # lone writes enough that the last ran inline on the loop, which never waits for a lock
        await todos.create(store, NewTodo(queue="q", title=f"t{n}"))
    tries = 0

    def read(tx):
        nonlocal tries
        tries += 1
        if tries == 1:  # the loop's connection meets the lock (another process recovering the log)
            raise sqlite3.OperationalError("database is locked")
        return tx.one("PRAGMA busy_timeout")[0], tx.cache is store.cache

    # Read again where a lock is waited for, in a transaction like any other (the store's cache with it).
    assert await store.peek(read) == (busy_timeout_ms(), True)
    assert tries == 2


@pytest.mark.sqlite_only
async def test_peek_cannot_write(store) -> None:
    with pytest.raises(Unavailable, match="readonly"):
        await store.peek(lambda tx: tx.run("INSERT INTO agents (name, queues, created_at) VALUES ('x', '[]', 0)"))


# ---------------------------------------------------------------- reads


@pytest.mark.sqlite_only
async def test_reads_answer_while_a_write_holds_the_thread_and_see_every_commit(store, db_path) -> None:
    mine, _ = await todos.create(store, NewTodo(queue="q", title="mine"))
    gate, held = await hold_the_thread(store)  # a long write of this process, its commit still to come
    try:
        run(db_path, "INSERT INTO agents (name, queues, created_at) VALUES ('other', '[]', 0)")  # another process
        agents = await asyncio.wait_for(store.read_all("SELECT name FROM agents"), timeout=5)
        todo = await asyncio.wait_for(store.read_one("SELECT title FROM todos WHERE id = ?", (mine.id,)), timeout=5)
    finally:
        gate.set()
        await held
    assert [a["name"] for a in agents] == ["other"]
    assert todo["title"] == "mine"
    assert await store.read_one("SELECT title FROM todos WHERE id = ?", (mine.id + 1,)) is None


@pytest.mark.sqlite_only
async def test_reads_cannot_write(store) -> None:
    with pytest.raises(Unavailable, match="readonly"):
        await store.read_all("INSERT INTO agents (name, queues, created_at) VALUES ('x', '[]', 0)")
    assert await store.read_all("SELECT * FROM agents") == []


@pytest.mark.sqlite_only
async def test_many_reads_at_once_share_the_few_read_connections(store) -> None:
    await todos.create(store, NewTodo(queue="q", title="t"))
    counts = await asyncio.gather(*(store.read_one("SELECT count(*) AS n FROM todos") for _ in range(20)))
    assert [c["n"] for c in counts] == [1] * 20
    assert len(store._readers) == store_module.READERS


@pytest.mark.sqlite_only
async def test_a_closed_store_refuses_reads(db_path) -> None:
    opened = await open_store(db_path)
    await opened.read_all("SELECT 1")
    await opened.close()
    with pytest.raises(RuntimeError, match="^the store is closed$"):
        await opened.read_one("SELECT 1")


LEFT_OPEN = """
import asyncio, sys
from switchboard_local.core.store.interface import Store
from switchboard_local.core.store.opener import open_store
from switchboard_local.core import queues, todos

async def main():
    store = await open_store(sys.argv[1])
    await todos.list_todos(store)  # the readers are open
    raise SystemExit("left open")

asyncio.run(main())
"""


def test_a_store_left_open_does_not_keep_the_process_from_exiting(db_path) -> None:
    done = subprocess.run([sys.executable, "-c", LEFT_OPEN, str(db_path)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})  # fmt: skip
    assert (done.returncode, done.stderr.strip()) == (1, "left open")
