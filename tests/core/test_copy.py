"""`db copy`: a populated store into an empty one, ids, leases and keys intact; a non-empty target refused."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

from switchboard_local.core import (
    agents,
    copy,
    events,
    queues,
    routing,
    rules,
    settings,
    sources,
    todos,
    webhook_config,
)
from switchboard_local.core.errors import Conflict, InvalidArgument, Unavailable
from switchboard_local.core.events import NewEvent
from switchboard_local.core.store.interface import Store
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.store.queries import Q
from switchboard_local.core.store.shared import describe
from switchboard_local.core.todo_model import MAX_LIST_LIMIT, NewTodo
from switchboard_local.core.todos import Lease

from support import sql

pytestmark = pytest.mark.anyio

REPLAY_WINDOW = 3600.0


def delivery(number: int, *, body: dict | None = None) -> NewEvent:
    payload = body if body is not None else {"action": "opened", "number": number}
    return NewEvent(
        source="gh", family="webhook", type="pull_request", external_id=f"d-{number}", trust_mode="github",
        verified=True, body=json.dumps(payload).encode(), content_type="application/json",
        headers={"x-github-event": "pull_request"}, replay_window=REPLAY_WINDOW,
    )  # fmt: skip


async def populate(store: Store) -> dict[str, object]:
    """A source with rules and events, an agent, settings, a paused queue, and todos in every state."""
    await sources.add(
        store, "gh", family="webhook", kind="github", trust_mode="github",
        config=webhook_config.source_config("github", {}), secrets=[sources.secret_ref(env="GH_SECRET")],
    )  # fmt: skip
    await rules.add(store, source="gh", type="pull_request", queue="review", title="PR #{number}")
    await rules.add(store, source="gh", where=["action=closed"], drop=True)
    await agents.add(store, "bot", queues=["work", "review"], owner="ana")
    await settings.set_value(store, settings.MAX_PAYLOAD.name, "2MiB")
    await settings.set_value(store, settings.HTTP_LISTEN.name, "127.0.0.1:8787")  # this machine's: left behind
    source = await sources.get(store, "gh")
    for number in (1, 2, 3):
        (ingested,) = await routing.accept(store, source, [delivery(number)])
        assert not isinstance(ingested, Exception) and ingested.todo_ids

    pending, _ = await todos.create(store, NewTodo(queue="work", title="keyed", idempotency_key="k-1", priority=2))
    delayed, _ = await todos.create(store, NewTodo(queue="work", title="later", delay=3600))
    claimed_todo, _ = await todos.create(store, NewTodo(queue="lease", title="held", idempotency_key="k-held"))
    claimed = await todos.claim(store, claimed_todo.id, owner="worker-1", lease=600)
    done_todo, _ = await todos.create(store, NewTodo(queue="finish", title="done"))
    done = await todos.claim(store, done_todo.id, owner="worker-2", lease=60)
    await todos.complete(store, Lease.of(done), result={"ok": True})
    dead_todo, _ = await todos.create(store, NewTodo(queue="finish", title="dead", max_attempts=1))
    dead = await todos.claim(store, dead_todo.id, owner="worker-3", lease=60)
    await todos.fail(store, Lease.of(dead), error="boom")
    retry_todo, _ = await todos.create(store, NewTodo(queue="finish", title="retry", max_attempts=3))
    retry = await todos.claim(store, retry_todo.id, owner="worker-4", lease=60)
    await todos.fail(store, Lease.of(retry), error="try again")
    cancelled, _ = await todos.create(store, NewTodo(queue="finish", title="cancelled"))
    await todos.cancel(store, cancelled.id, by="ana", reason="not needed")
    await todos.create(store, NewTodo(queue="finish", title="blocked", after=(claimed_todo.id, done_todo.id)))
    # The last todo purged: the todos' sequence is past every id left (ids are never given twice).
    gone_todo, _ = await todos.create(store, NewTodo(queue="gone", title="purged"))
    gone = await todos.claim(store, gone_todo.id, owner="worker-5", lease=60)
    await todos.complete(store, Lease.of(gone))
    assert await todos.purge(store, queue="gone", state="done") == 1
    await queues.pause(store, "paused", by="ana")
    return {"pending": pending, "delayed": delayed, "claimed": claimed, "last_todo_id": gone_todo.id}


async def reads(store: Store) -> dict[str, object]:
    """What the verbs answer about everything copied."""
    listed = await todos.list_todos(store, limit=MAX_LIST_LIMIT)
    found = await events.list_events(store, limit=MAX_LIST_LIMIT)
    return {
        "todos": [(t, t.dependencies) for t in [await todos.get(store, t.id) for t in listed]],
        "events": found,
        "event_todos": {e.id: await events.todos_of_event(store, e.id) for e in found},
        "sources": await sources.list_sources(store),
        "rules": await rules.list_rules(store),
        "agents": await agents.list_agents(store),
        "settings": [v for v in await settings.get_all(store) if v.setting.name not in settings.PER_INSTALL],
        "queues": await queues.list_queues(store),
        "stats": await todos.stats(store),
    }


@pytest.fixture
async def populated(store: Store) -> dict[str, object]:
    return await populate(store)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """The copy's target: a new SQLite file, or an empty PostgreSQL database (whatever the source's backend)."""
    if request.param == "sqlite":
        return tmp_path / "target.db"
    server = request.getfixturevalue("postgres_server")
    url = server.fresh_database()
    request.addfinalizer(lambda: server.release(url))
    return url


async def open_target(target: Path | str, clock) -> Store:
    return await open_store(target, clock=clock, rng=random.Random(1))


async def test_the_copy_answers_every_read_as_the_source_does(store, populated, target, clock) -> None:
    await copy.copy(store, target)
    async with await open_target(target, clock) as copied:
        assert await reads(copied) == await reads(store)


async def test_the_copy_reports_the_rows_it_copied_per_table(store, populated, target) -> None:
    copied = await copy.copy(store, target)
    assert copied.counts == {
        "sources": 1, "rules": 2, "agents": 1, "settings": 1, "queues": 1, "events": 5,  # 2 operator events
        "todos": 11, "event_todos": 3, "todo_deps": 2, "attempts": 2, "delivery_keys": 3, "queue_claims": 0,
    }  # fmt: skip
    assert copied.left_behind == (settings.HTTP_LISTEN.name,)
    assert copied.to_dict()["total"] == 32


async def test_a_per_install_setting_stays_behind(store, populated, target, clock) -> None:
    await copy.copy(store, target)
    async with await open_target(target, clock) as copied:
        values = {v.setting.name: v for v in await settings.get_all(copied)}
    assert values[settings.HTTP_LISTEN.name].is_default
    assert values[settings.MAX_PAYLOAD.name].value == 2 * 1024 * 1024


async def test_a_claimed_todos_lease_token_completes_it_in_the_target(store, populated, target, clock) -> None:
    claimed = populated["claimed"]
    await copy.copy(store, target)
    async with await open_target(target, clock) as copied:
        finished = await todos.complete(copied, Lease.of(claimed), result={"moved": True})
    assert finished.todo.state == "done" and finished.todo.attempt == 1 and finished.todo.result == {"moved": True}


async def test_a_live_idempotency_key_still_collapses_a_duplicate_in_the_target(store, populated, target, clock) -> None:
    await copy.copy(store, target)
    async with await open_target(target, clock) as copied:
        again, created = await todos.create(copied, NewTodo(queue="work", title="again", idempotency_key="k-1"))
    assert not created and again.id == populated["pending"].id


async def test_a_redelivered_event_and_a_reposted_body_are_duplicates_in_the_target(store, populated, target, clock) -> None:
    await copy.copy(store, target)
    async with await open_target(target, clock) as copied:
        source = await sources.get(copied, "gh")
        (redelivered,) = await routing.accept(copied, source, [delivery(2)])
        reposted = NewEvent(**{**delivery(3).__dict__, "external_id": "d-new"})
        (replayed,) = await routing.accept(copied, source, [reposted])
    assert redelivered.duplicate and redelivered.event_id == 2
    assert replayed.duplicate


async def test_new_ids_in_the_target_come_after_every_id_the_source_gave(store, populated, target, clock) -> None:
    await copy.copy(store, target)
    async with await open_target(target, clock) as copied:
        todo, _ = await todos.create(copied, NewTodo(queue="work", title="new"))
        (event,) = await routing.accept(copied, await sources.get(copied, "gh"), [delivery(9)])
        rule = await rules.add(copied, source="gh", queue="other")
    assert todo.id == populated["last_todo_id"] + 1  # past the purged todo's id, not reusing it
    assert event.event_id == 6  # 3 deliveries, 2 operator events (the cancel, the pause)
    assert rule.id == 3


async def test_a_target_that_holds_data_is_refused_naming_what_it_holds(store, populated, target, clock) -> None:
    async with await open_target(target, clock) as other:
        await todos.create(other, NewTodo(queue="mine", title="already here"))
        await agents.add(other, "someone", queues=["mine"])
    with pytest.raises(Conflict, match=r"is not empty: it holds 1 agent, 1 todo;"):
        await copy.copy(store, target)
    async with await open_target(target, clock) as other:
        assert [t.title for t in await todos.list_todos(other)] == ["already here"]


async def test_a_copy_into_the_source_itself_is_refused(store, populated, db_path) -> None:
    with pytest.raises(InvalidArgument, match="is the source itself"):
        await copy.copy(store, db_path)


async def test_a_copy_that_fails_half_way_leaves_the_target_empty(store, populated, target, clock) -> None:
    calls = 0

    class Broken(Exception):
        pass

    async def opener(location):  # a target whose third page cannot be written
        opened = await open_target(location, clock)
        write = opened.write

        async def failing_write(body):
            def wrapped(tx):
                many = tx.many

                def counting_many(sql, params):
                    nonlocal calls
                    calls += 1
                    if calls == 3:
                        raise Broken("the disk is gone")
                    return many(sql, params)

                tx.many = counting_many
                return body(tx)

            return await write(wrapped)

        opened.write = failing_write
        return opened

    with pytest.raises(Broken):
        await copy.copy(store, target, open_target=opener, page_rows=1)
    async with await open_target(target, clock) as copied:
        held = await copied.read_one(copy.Q.copy_target_holds)
        assert all(held[name] == 0 for name in held.keys())
    # The source is usable at once: its transaction ended with the copy.
    await todos.create(store, NewTodo(queue="work", title="after"))


async def test_pages_of_one_row_copy_the_same_rows(store, populated, target, clock) -> None:
    copied = await copy.copy(store, target, page_rows=1, page_bytes=1)
    assert copied.counts["todos"] == 11 and copied.counts["events"] == 5 and copied.counts["todo_deps"] == 2
    async with await open_target(target, clock) as other:
        assert await reads(other) == await reads(store)


async def test_an_empty_source_copies_nothing_and_says_so(store, target) -> None:
    copied = await copy.copy(store, target)
    assert copied.total == 0 and set(copied.counts) == {t.name for t in copy.TABLES}


@pytest.mark.postgres
async def test_a_postgresql_source_is_copied_as_one_snapshot_while_its_writers_go_on(
    postgres_server, target, clock, tmp_path, monkeypatch
) -> None:
    """Between every two pages the copy reads, another connection commits a new delivery (an event,
    its todo, their link, its key): the copy holds the source as it was when the copy began."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    url = postgres_server.fresh_database()
    try:
        async with await open_store(url, clock=clock, rng=random.Random(0)) as source, \
                await open_store(url, clock=clock, rng=random.Random(2)) as writer:  # fmt: skip
            await populate(source)
            at_start = await reads(source)
            loop = asyncio.get_running_loop()
            written: list[int] = []

            async def deliver() -> None:
                gh = await sources.get(writer, "gh")
                (accepted,) = await routing.accept(writer, gh, [delivery(100 + len(written))])
                assert not isinstance(accepted, Exception) and accepted.todo_ids
                written.append(accepted.event_id)

            put = copy._Pipe.put

            def put_then_deliver(pipe, item) -> None:  # on the source's thread, between its pages
                put(pipe, item)
                if not isinstance(item, copy._End) and len(written) < 6:
                    asyncio.run_coroutine_threadsafe(deliver(), loop).result()  # committed before the next page

            monkeypatch.setattr(copy._Pipe, "put", put_then_deliver)
            copied = await copy.copy(source, target, page_rows=1)
            assert len(written) == 6 and sql.count(url, "events") == 5 + 6  # the writer went on, unblocked
        assert copied.counts["events"] == 5 and copied.counts["todos"] == 11 and copied.counts["event_todos"] == 3
        for table in copy.TABLES:
            assert sql.count(target, table.name) == copied.counts[table.name], table.name
        assert sql.value(target, "SELECT count(*) FROM event_todos WHERE event_id NOT IN (SELECT id FROM events) "
                                 "OR todo_id NOT IN (SELECT id FROM todos)") == 0  # fmt: skip
        async with await open_target(target, clock) as other:
            assert await reads(other) == at_start
            (event,) = await routing.accept(other, await sources.get(other, "gh"), [delivery(9)])
            assert event.event_id == 6  # the snapshot's last id: the writer's events are not in the copy
    finally:
        postgres_server.release(url)


@pytest.mark.postgres
async def test_a_postgresql_snapshot_writes_nothing(postgres_server, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    url = postgres_server.fresh_database()
    try:
        async with await open_store(url) as source:
            with pytest.raises(Unavailable):
                await source.snapshot(lambda tx: tx.run(Q.copy_move_sequences, {"events": 100, "todos": 100}))
            assert await source.snapshot(lambda tx: tx.one(Q.copy_last_ids)) is not None  # the connection is fine
            await todos.create(source, NewTodo(queue="work", title="after"))  # writes go on as before
    finally:
        postgres_server.release(url)


@pytest.mark.parametrize(
    ("location", "shown"),
    [
        ("postgresql://sb:s3cret@db.example:5432/queue", "postgresql://sb:***@db.example:5432/queue"),
        ("postgresql://sb@db.example/queue?password=s3cret&sslmode=require",
         "postgresql://sb@db.example/queue?password=***&sslmode=require"),
        ("postgresql://db.example/queue", "postgresql://db.example/queue"),
        ("/data/switchboard.db", "/data/switchboard.db"),
    ],
)  # fmt: skip
def test_a_database_is_named_without_its_password(location: str, shown: str) -> None:
    assert describe(location) == shown  # what `db copy` names its source and target with
