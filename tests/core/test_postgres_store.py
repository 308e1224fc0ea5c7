"""The PostgreSQL store's own machinery: opening a database, its schema, its URL, its errors.

What every store promises (the verbs, reads, data_version) is tested on both
backends by the rest of tests/core; these are the things only this store has.
A real PostgreSQL server (tests/support/postgres.py), a database per test.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
from pathlib import Path

import pytest

from switchboard_local.core import leadership, sources, todos
from switchboard_local.core.errors import Conflict, InvalidArgument, StoreUnusable, Unavailable
from switchboard_local.core.store.interface import needs_transaction
from switchboard_local.core.store.opener import inspect_store, open_store
from switchboard_local.core.store.postgres.statements import convert_params
from switchboard_local.core.store.postgres.store import PostgresStore
from switchboard_local.core.store.queries import Q
from switchboard_local.core.store.shared import SCHEMA_VERSION
from switchboard_local.core.todo_model import NewTodo

from support.cli import invoke
from support.postgres import PostgresServer
from support.sql import pg_connection, rows, run, value

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
def server(postgres_server: PostgresServer, tmp_path, monkeypatch) -> PostgresServer:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return postgres_server


@pytest.fixture
def empty_url(server: PostgresServer):
    url = server.empty_database()
    yield url
    server.release(url)


@pytest.fixture
def url(server: PostgresServer):
    url = server.fresh_database()
    yield url
    server.release(url)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_an_empty_database_gets_the_schema_and_the_current_version(empty_url, clock) -> None:
    async with await open_store(empty_url, clock=clock) as store:
        assert isinstance(store, PostgresStore)
        await todos.create(store, NewTodo(queue="q", title="first"))
    assert value(empty_url, "SELECT max(version) FROM schema_migrations") == SCHEMA_VERSION
    state = await inspect_store(empty_url)
    assert (state.ours, state.version, state.current, state.empty) == (True, SCHEMA_VERSION, SCHEMA_VERSION, False)


async def test_stores_opening_an_empty_database_at_once_create_the_schema_once(empty_url) -> None:
    stores = await asyncio.gather(*(open_store(empty_url) for _ in range(4)))
    for store in stores:
        await store.close()
    assert rows(empty_url, "SELECT version FROM schema_migrations") == [(SCHEMA_VERSION,)]


async def test_the_postgres_scheme_names_the_same_database(url) -> None:
    async with await open_store("postgres://" + url.split("://", 1)[1]) as store:
        created, _ = await todos.create(store, NewTodo(queue="q", title="t"))
    assert value(url, "SELECT title FROM todos WHERE id = ?", [created.id]) == "t"


async def test_another_programs_database_is_refused_and_left_as_it_is(empty_url) -> None:
    run(empty_url, "CREATE TABLE theirs (x integer)")
    with pytest.raises(StoreUnusable, match="not a switchboard-local one"):
        await open_store(empty_url)
    assert rows(empty_url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'") == [("theirs",)]
    state = await inspect_store(empty_url)
    assert (state.ours, state.empty) == (False, False)


async def test_a_version_8_database_is_upgraded_keeping_its_leader(empty_url, clock) -> None:
    with pg_connection(empty_url) as conn:
        conn.execute((Path(__file__).parents[1] / "data" / "schema-v8.postgres.sql").read_text("utf-8"))
        conn.execute("INSERT INTO schema_migrations (version) VALUES (8)")
        conn.execute(
            "INSERT INTO ingest_leader (id, fence, holder, pid, host, kind, http, since, renewed_at, expires_at)"
            " VALUES (1, 3, 'holder-3', 4242, 'elsewhere', 'serve', NULL, now(), now(), now() + interval '100 years')"
        )
    async with await open_store(empty_url, clock=clock) as upgraded:
        await sources.add(upgraded, "gh", family="webhook", kind="github", trust_mode="github", config={},
                          secrets=[sources.secret_ref(env="GH_SECRET")])  # fmt: skip
        leader = await leadership.current(upgraded)
        assert (leader.fence, leader.pid, leader.has("GH_SECRET")) == (3, 4242, None)
        assert await leadership.renew(upgraded, leadership.Lease(3, "holder-3"), environ={"GH_SECRET": "s"})
        assert (await leadership.current(upgraded)).has("GH_SECRET") is True
    assert rows(empty_url, "SELECT version FROM schema_migrations ORDER BY version") == [
        (v,) for v in range(8, SCHEMA_VERSION + 1)]  # fmt: skip


async def test_a_newer_database_is_refused_naming_both_versions(url) -> None:
    run(url, "INSERT INTO schema_migrations (version) VALUES (?)", [SCHEMA_VERSION + 1])
    with pytest.raises(StoreUnusable, match=f"version {SCHEMA_VERSION + 1}.*\\({SCHEMA_VERSION}\\)"):
        await open_store(url)


async def test_a_read_only_store_reads_and_refuses_every_write(url, clock) -> None:
    async with await open_store(url, clock=clock) as store:
        created, _ = await todos.create(store, NewTodo(queue="q", title="t"))
    async with await open_store(url, read_only=True) as store:
        assert (await todos.get(store, created.id)).title == "t"
        with pytest.raises(Unavailable, match="read-only"):
            await todos.create(store, NewTodo(queue="q", title="u"))
        with pytest.raises(Unavailable):
            await store.probe_writable()


async def test_a_read_only_store_refuses_an_empty_database_and_creates_nothing(empty_url) -> None:
    with pytest.raises(StoreUnusable, match="no schema yet"):
        await open_store(empty_url, read_only=True)
    assert rows(empty_url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'") == []


async def test_an_unreachable_server_is_unavailable_and_its_password_is_never_shown() -> None:
    secret_url = f"postgresql://someone:s3cret-pw@127.0.0.1:{closed_port()}/db"
    with pytest.raises(Unavailable) as refused:
        await open_store(secret_url)
    assert "s3cret-pw" not in str(refused.value) and "someone:***@127.0.0.1" in str(refused.value)


def test_the_cli_never_prints_a_urls_password(server) -> None:
    secret_url = f"postgresql://someone:s3cret-pw@127.0.0.1:{closed_port()}/db"
    shown = invoke(secret_url, "db", "path")
    assert shown.code == 0 and "s3cret-pw" not in shown.out and "someone:***@" in shown.out
    failed = invoke(secret_url, "todo", "list")
    assert failed.code == 3 and "s3cret-pw" not in failed.out + failed.err and "someone:***@" in failed.err


async def test_sql_text_that_is_no_named_statement_is_refused(url) -> None:
    async with await open_store(url) as store:
        with pytest.raises(ValueError, match="named statements only"):
            await store.read_all("SELECT 1")
        assert await store.read_all(str(Q.list_agents)) == []  # the text of a named statement is that statement


async def test_a_refusal_the_body_catches_leaves_the_rest_of_its_transaction_to_commit(url, clock) -> None:
    def params(queue: str, title: str) -> dict:
        return todos.insert_params(NewTodo(queue="q", title=title), now=clock.now_ms(), event_id=None) | {"queue": queue}

    def body(tx) -> str:
        tx.one(Q.insert_todo, params("q", "before"))
        try:
            tx.one(Q.insert_todo, params("", "refused"))  # CHECK (queue <> '')
        except Conflict:
            pass
        tx.one(Q.insert_todo, params("q", "after"))
        return "done"

    async with await open_store(url, clock=clock) as store:
        assert await store.write(body) == "done"
    assert rows(url, "SELECT title FROM todos ORDER BY id") == [("before",), ("after",)]


async def test_a_refused_part_in_a_savepoint_is_undone_alone_memo_included(url, clock) -> None:
    def params(queue: str, title: str) -> dict:
        return todos.insert_params(NewTodo(queue="q", title=title), now=clock.now_ms(), event_id=None) | {"queue": queue}

    def body(tx) -> dict:
        tx.memo["kept"] = 1
        with pytest.raises(Conflict), tx.savepoint():
            tx.memo["undone"] = 1
            tx.one(Q.insert_todo, params("q", "undone"))
            tx.one(Q.insert_todo, params("", "refused"))
        tx.one(Q.insert_todo, params("q", "kept"))
        return dict(tx.memo)

    async with await open_store(url, clock=clock) as store:
        assert await store.write(body) == {"kept": 1}
    assert rows(url, "SELECT title FROM todos") == [("kept",)]


def _todo(clock, title: str) -> dict:
    return todos.insert_params(NewTodo(queue="q", title=title), now=clock.now_ms(), event_id=None)


async def test_a_single_write_commits_each_statement_as_it_runs(url, clock) -> None:
    """write(single=True): no BEGIN/COMMIT around the body (a claim is one round trip):
    another connection sees the change before the body returns."""
    seen = []

    def body(tx) -> None:
        tx.one(Q.insert_todo, _todo(clock, "one"))
        seen.append((tx.in_transaction, value(url, "SELECT count(*) FROM todos")))

    async with await open_store(url, clock=clock) as store:
        await store.write(body, single=True)
        await store.write(body)
    assert seen == [(False, 1), (True, 1)]  # in a transaction the second insert is not seen until the commit


async def test_a_single_write_that_needs_a_transaction_runs_again_in_one(url, clock) -> None:
    runs = []

    def body(tx) -> str:
        runs.append(tx.in_transaction)
        needs_transaction(tx)
        tx.one(Q.insert_todo, _todo(clock, "first"))
        runs.append(value(url, "SELECT count(*) FROM todos"))  # not committed yet: one transaction
        tx.one(Q.insert_todo, _todo(clock, "second"))
        return "done"

    async with await open_store(url, clock=clock) as store:
        assert await store.write(body, single=True) == "done"
    assert runs == [False, True, 0]
    assert value(url, "SELECT count(*) FROM todos") == 2


async def test_a_single_write_asking_for_a_transaction_after_a_change_is_a_bug(url, clock) -> None:
    def body(tx) -> None:
        tx.one(Q.insert_todo, _todo(clock, "first"))
        needs_transaction(tx)

    async with await open_store(url, clock=clock) as store:
        with pytest.raises(RuntimeError, match="after it changed rows"):
            await store.write(body, single=True)


async def test_a_claim_statement_by_statement_still_takes_over_a_lapsed_lease(url, clock) -> None:
    """A claim runs statement by statement until it finds a lapsed lease; then it
    runs again in one transaction: the recovery ends the attempt, the claim takes the todo."""
    async with await open_store(url, clock=clock) as store:
        todo, _ = await todos.create(store, NewTodo(queue="q", title="t"))
        await todos.claim_next(store, owner="crashed", queues=["q"], lease=1)
        clock.advance(2)
        taken = await todos.claim_next(store, owner="next", queues=["q"])
        assert taken is not None and taken.id == todo.id and taken.attempt == 2
    assert rows(url, "SELECT owner, outcome FROM attempts WHERE todo_id = ?", (todo.id,)) == [("crashed", "lease_expired")]


async def test_concurrent_writers_each_commit_their_own_work(url, clock) -> None:
    async with await open_store(url, clock=clock, rng=random.Random(0)) as store:
        created = await asyncio.gather(*(todos.create(store, NewTodo(queue="q", title=f"t{i}")) for i in range(40)))
        claimed = await asyncio.gather(*(todos.claim_next(store, queues=["q"], owner=f"w{i}") for i in range(40)))
    assert len({todo.id for todo, _ in created}) == 40
    assert sorted(todo.id for todo in claimed if todo is not None) == sorted(todo.id for todo, _ in created)


async def test_rows_read_by_name_and_by_position(url, clock) -> None:
    async with await open_store(url, clock=clock) as store:
        created, _ = await todos.create(store, NewTodo(queue="q", title="t"))
        row = await store.read_one(Q.get_todo, {"id": created.id})
    assert row is not None and row["id"] == row[0] == created.id and "title" in row.keys()
    assert dict(zip(row.keys(), row))["title"] == "t"


def test_named_parameters_become_psycopgs_and_casts_strings_and_comments_stay() -> None:
    sql = "SELECT :a::jsonb, ':b', \"c:d\", 5 % 2, $$x:y$$ -- :e\nWHERE f = ? /* :g */"
    assert convert_params(sql) == "SELECT %(a)s::jsonb, ':b', \"c:d\", 5 %% 2, $$x:y$$ -- :e\nWHERE f = %s /* :g */"


def test_doctor_checks_a_postgresql_database_without_showing_its_password(url) -> None:
    with_password = url.replace("postgres@", "postgres:s3cret-pw@")  # trust authentication ignores it
    found = invoke(with_password, "doctor", "--json")
    assert "s3cret-pw" not in found.out + found.err
    checks = {c["name"]: c for c in json.loads(found.out)["checks"]}
    assert checks["database"]["status"] == "ok" and "postgres:***@" in checks["database"]["detail"]
    assert (checks["schema"]["status"], checks["schema"]["detail"]) == ("ok", f"version {SCHEMA_VERSION} (current)")


@pytest.mark.parametrize(
    "todo",
    [
        NewTodo(queue="q", title="t", payload={"a": "x\u0000y"}),  # jsonb holds no \u0000
        NewTodo(queue="q", title="t", payload={"\u0000": 1}),
    ],
    ids=["nul-in-a-value", "nul-in-a-key"],
)
async def test_a_value_postgresql_cannot_hold_is_invalid_input_and_nothing_is_stored(url, clock, todo) -> None:
    async with await open_store(url, clock=clock) as store:
        with pytest.raises(InvalidArgument, match="PostgreSQL cannot store a value given"):
            await todos.create(store, todo)
        assert await todos.list_todos(store) == []


async def test_writes_that_deadlock_are_run_again_and_both_commit(url) -> None:
    import threading

    meet = threading.Barrier(2, timeout=10)
    runs = {"a-then-b": 0, "b-then-a": 0}

    def writes(first: str, second: str, label: str):
        def body(tx) -> str:
            runs[label] += 1
            tx.run(Q.set_setting, {"name": first, "value": label})
            if runs[label] == 1:
                meet.wait()  # each holds its first row: the second statements wait on each other
            tx.run(Q.set_setting, {"name": second, "value": label})
            return label

        return body

    async with await open_store(url) as store:
        await store.write(lambda tx: tx.many(Q.set_setting, [{"name": n, "value": "-"} for n in "ab"]))
        done = await asyncio.gather(store.write(writes("a", "b", "a-then-b")), store.write(writes("b", "a", "b-then-a")))
    assert done == ["a-then-b", "b-then-a"]
    # PostgreSQL broke the deadlock by failing one, which ran again. Its rerun may
    # meet the other once more (an upsert that waited on the failed one retries
    # after it, and the rerun can lock its first row in between): then that deadlock
    # is broken the same way, so either body may have run more than once.
    assert min(runs.values()) >= 1 and max(runs.values()) >= 2
    assert len({v for (v,) in rows(url, "SELECT value FROM settings WHERE name IN ('a', 'b')")}) == 1


async def test_a_row_locked_past_the_busy_timeout_is_busy(url, monkeypatch) -> None:
    import psycopg

    from switchboard_local.core.errors import Busy

    monkeypatch.setenv("SWITCHBOARD_BUSY_TIMEOUT", "0.2")
    async with await open_store(url) as store:
        await store.write(lambda tx: tx.run(Q.set_setting, {"name": "a", "value": "-"}))
        with psycopg.connect(url) as holder:  # another process, in the middle of a transaction
            holder.execute("UPDATE settings SET value = 'held' WHERE name = 'a'")
            with pytest.raises(Busy, match="try again later"):
                await store.write(lambda tx: tx.run(Q.set_setting, {"name": "a", "value": "mine"}))
            holder.rollback()
        await store.write(lambda tx: tx.run(Q.set_setting, {"name": "a", "value": "mine"}))  # free again
    assert value(url, "SELECT value FROM settings WHERE name = 'a'") == "mine"


@pytest.fixture
def own_server(tmp_path, monkeypatch):
    """A PostgreSQL server of the test's own, to stop and start again (the session's serves every other test)."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    server = PostgresServer(fsync=False).start()
    try:
        yield server
    finally:
        server.stop()


async def test_every_entry_point_answers_an_outage_as_unavailable_and_recovers(own_server, clock) -> None:
    url = own_server.empty_database()
    async with await open_store(url, clock=clock) as store:
        created, _ = await todos.create(store, NewTodo(queue="q", title="before"))
        await store.data_version()  # its listening connection is made
        calls = {
            "write": lambda: store.write(lambda tx: tx.run(Q.set_setting, {"name": "a", "value": "b"})),
            "single write": lambda: store.write(lambda tx: tx.one(Q.get_todo, {"id": created.id}), single=True),
            "snapshot": lambda: store.snapshot(lambda tx: tx.one(Q.get_todo, {"id": created.id})),
            "read_one": lambda: store.read_one(Q.get_todo, {"id": created.id}),
            "read_all": lambda: store.read_all(Q.get_todo, {"id": created.id}),
            "peek": lambda: store.peek(lambda tx: tx.one(Q.get_todo, {"id": created.id})),
            "data_version": store.data_version,
            "probe_writable": store.probe_writable,
        }
        own_server.halt()
        for _ in range(2):  # the first call meets its connection cut; the next has to make one
            for name, call in calls.items():
                try:
                    await call()
                except Unavailable:  # anything else (a driver's error) fails the test as it is
                    continue
                pytest.fail(f"{name} answered while the server was down")
        with pytest.raises(Unavailable):
            await inspect_store(url)
        with pytest.raises(Unavailable):
            await open_store(url)
        own_server.resume()
        assert (await store.peek(lambda tx: tx.one(Q.get_todo, {"id": created.id})))["title"] == "before"
        assert (await todos.create(store, NewTodo(queue="q", title="after")))[0].id > created.id
