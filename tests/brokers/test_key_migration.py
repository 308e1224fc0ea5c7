"""Derived keys in one form for every broker (``event:{source}:…``), and what version 9 stored
still working after migration 10, on both backends: a database made from a file of version
9's schema (tests/data/schema-v9*.sql) with a Redis adapter as that version stored it.

Before version 10, an adapter's todos had keys ``event:redis:{source}:{message id}:…`` and its
config named its URL ``redis_url`` (and had no ``broker``). A message read again after its
event was pruned past the dedup horizon (no event, no delivery key left: only the todo's key
knows it) must still collapse into the todo it made.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from switchboard_local.brokers.registry import BROKERS
from switchboard_local.core import sources, todos
from switchboard_local.core.events import body_hash
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.store.shared import SCHEMA_VERSION

from support.brokers import Running
from support.postgres import PostgresServer
from support.sql import pg_connection, rows, value

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

DATA = Path(__file__).resolve().parents[1] / "data"
BODY = b'{"order": 7}'
OLD_KEY = f"event:redis:orders:{body_hash(BODY)}:default"
NEW_KEY = f"event:orders:{body_hash(BODY)}:default"
# A finished todo of the same message: its key is rewritten too (it holds no live key, so nothing meets it).
OLD_DONE_KEY = f"event:redis:orders:{body_hash(b'{}')}:default"
# A key whose new form a live todo of the queue holds already (a webhook source of that name, removed
# since): it keeps its old form rather than break the one-live-todo-per-key index.
CLASH_OLD, CLASH_NEW = "event:redis:orders:clash:default", "event:orders:clash:default"


def _v9_rows(url: str, now: str) -> list[str]:
    config = json.dumps({"redis_url": url, "mode": "list", "key": "orders", "batch": 64, "queue": "orders"})
    env_config = json.dumps({"redis_url_env": "ORDERS_URL", "mode": "list", "key": "other", "batch": 64})
    live = "state, visible_at, created_at, updated_at) VALUES ('orders', 'order', '{key}', 'pending', {now}, {now}, {now})"
    return [
        f"INSERT INTO sources (name, family, kind, trust_mode, config, created_at, updated_at) VALUES "
        f"('orders', 'queue', 'redis', 'queue', '{config}', {now}, {now})",
        f"INSERT INTO sources (name, family, kind, trust_mode, config, created_at, updated_at) VALUES "
        f"('other', 'queue', 'redis', 'queue', '{env_config}', {now}, {now})",
        "INSERT INTO todos (queue, title, idempotency_key, " + live.format(key=OLD_KEY, now=now),
        "INSERT INTO todos (queue, title, idempotency_key, state, completed_at, created_at, updated_at) VALUES "
        f"('orders', 'done', '{OLD_DONE_KEY}', 'done', {now}, {now}, {now})",
        "INSERT INTO todos (queue, title, idempotency_key, " + live.format(key=CLASH_OLD, now=now),
        "INSERT INTO todos (queue, title, idempotency_key, " + live.format(key=CLASH_NEW, now=now),
    ]


@pytest.fixture
def v9_database(backend: str, tmp_path: Path, broker, request: pytest.FixtureRequest) -> Path | str:
    """A database as version 9 left it: its schema from the file, a Redis adapter, its todos."""
    if backend == "sqlite":
        path = tmp_path / "switchboard.db"
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.executescript((DATA / "schema-v9.sql").read_text("utf-8"))
            conn.executescript("PRAGMA user_version = 9;\n" + ";\n".join(_v9_rows(broker.url, "0")) + ";")
        finally:
            conn.close()
        return path
    server: PostgresServer = request.getfixturevalue("postgres_server")
    request.getfixturevalue("monkeypatch").setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    url = server.empty_database()
    request.addfinalizer(lambda: server.drop(url))
    with pg_connection(url) as conn:
        conn.execute((DATA / "schema-v9.postgres.sql").read_text("utf-8"))
        conn.execute("INSERT INTO schema_migrations (version) VALUES (9)")
        for statement in _v9_rows(broker.url, "now()"):
            conn.execute(statement)
    return url


async def test_an_old_redis_adapter_s_redelivery_collapses_into_its_todo_after_the_migration(v9_database, broker) -> None:
    async with await open_store(v9_database) as store:
        adapter = await sources.get(store, "orders", family="queue")
        assert adapter.config == {"url": broker.url, "mode": "list", "key": "orders", "batch": 64, "queue": "orders"}
        assert BROKERS.of(adapter).name == "redis"  # no "broker" in the row: Redis
        other = await sources.get(store, "other", family="queue")
        assert other.config["url_env"] == "ORDERS_URL" and "redis_url_env" not in other.config
        assert other.env_names() == ["ORDERS_URL"]
        todo_id = value(v9_database, "SELECT min(id) FROM todos")  # the message's todo, made by version 9

        broker.client().rpush("orders", BODY)  # the message again, its event long pruned
        running = Running(store, adapter, connect=broker.connect)
        await running.until(lambda: value(v9_database, "SELECT count(*) FROM events"), 1)
        await running.finish()
        assert broker.client().llen("orders:processing") == 0  # stored, then acked

        assert value(v9_database, "SELECT count(*) FROM todos") == 4  # no new todo
        assert [r[0] for r in rows(v9_database, "SELECT todo_id FROM event_todos")] == [todo_id]
        assert (await todos.get(store, todo_id)).state == "pending"
    keys = [r[0] for r in rows(v9_database, "SELECT idempotency_key FROM todos ORDER BY id")]
    assert keys == [NEW_KEY, OLD_DONE_KEY.replace("event:redis:", "event:"), CLASH_OLD, CLASH_NEW]
    version = (value(v9_database, "SELECT max(version) FROM schema_migrations") if isinstance(v9_database, str)
               else value(v9_database, "PRAGMA user_version"))  # fmt: skip
    assert version == SCHEMA_VERSION
