"""The single-file binary (packaging/build_binary.py) is the whole program: it runs
with no Python environment around it.

The binary is built once per session, by the docs' own build commands
(docs/guide/binary.md) in a copy of the checkout with no .venv (a build they cannot make fails every test
here), in the background from the end of collection on (the ``binary``
fixture, tests/processes/conftest.py and support/binary.py); then each
test runs it with a bare environment (PATH=/usr/bin:/bin, no VIRTUAL_ENV or
PYTHONPATH, a HOME of its own) from a folder outside the checkout, so that
nothing can come from the checkout or the virtualenv. `-m "not binary"`
leaves these tests out.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from switchboard_local import __version__
from switchboard_local.core.store.shared import SCHEMA_VERSION

from support.mcp import RawServer
from support.postgres import PostgresServer
from support.receiver import serve_process
from support.redis_server import started_redis_server
from support.sql import rows, value
from support.sqs_server import aws_environment, started_sqs_server
from support.waits import until

pytestmark = [pytest.mark.binary, pytest.mark.sqlite_only]  # the binary is built and tried once, on SQLite


@pytest.fixture
def bare_env(tmp_path: Path, db_path: Path) -> dict[str, str]:
    """Nothing of Python's: the system's PATH, a new HOME, the test's database."""
    home = tmp_path / "home"
    home.mkdir()
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "SWITCHBOARD_DB": str(db_path)}


def run(binary: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), *args], env=env, cwd=env["HOME"], capture_output=True, text=True, timeout=60, check=False
    )


def as_json(binary: Path, env: dict[str, str], *args: str) -> Any:
    done = run(binary, env, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_binary_prints_its_version(binary: Path, bare_env: dict[str, str]) -> None:
    done = run(binary, bare_env, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"switchboard-local, version {__version__}"


def test_a_todo_goes_round_trip_through_the_binary(binary: Path, bare_env: dict[str, str], db_path: Path) -> None:
    created = as_json(binary, bare_env, "todo", "create", "--queue", "q", "--title", "from the binary")
    claimed = as_json(binary, bare_env, "todo", "claim", "--queue", "q")
    token = claimed["lease_token"]
    done = as_json(binary, bare_env, "todo", "complete", str(created["id"]), "--token", token, "--result", '{"ok": 1}')
    shown = as_json(binary, bare_env, "todo", "show", str(created["id"]))
    assert created["created"] is True and claimed["id"] == created["id"]
    assert done["state"] == "done"
    assert shown["state"] == "done" and shown["result"] == {"ok": 1} and shown["attempt"] == 1
    assert value(db_path, "SELECT state FROM todos WHERE id = ?", [created["id"]]) == "done"  # in the file named



def test_the_binary_gives_a_new_postgresql_database_its_schema_from_its_bundle(
    binary: Path, bare_env: dict[str, str], postgres_server: PostgresServer
) -> None:
    # schema.postgres.sql and queries.postgres.sql are read from the bundle (core/store/postgres/), not the checkout.
    url = postgres_server.empty_database()
    try:
        env = {**bare_env, "SWITCHBOARD_DB": url}
        created = as_json(binary, env, "todo", "create", "--queue", "q", "--title", "on PostgreSQL")
        shown = as_json(binary, env, "todo", "show", str(created["id"]))
        versions = rows(url, "SELECT version FROM schema_migrations")
    finally:
        postgres_server.release(url)
    assert created["created"] is True and shown["title"] == "on PostgreSQL"
    assert versions == [(SCHEMA_VERSION,)]

def test_the_binarys_mcp_answers_initialize_and_tool_calls_on_stdio(
    binary: Path, bare_env: dict[str, str], db_path: Path
) -> None:
    server = RawServer(db_path, program=[str(binary)], environ=bare_env)
    try:
        server.initialize()
        initialized = server.answer(1)["result"]
        server.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        tools = {tool["name"] for tool in server.answer(2)["result"]["tools"]}
        server.send({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                     "params": {"name": "create_for", "arguments": {"queue": "q", "title": "over MCP"}}})  # fmt: skip
        created = server.answer(3)["result"]
        server.send({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                     "params": {"name": "list_todos", "arguments": {"queue": "q"}}})  # fmt: skip
        listed = server.answer(4)["result"]
        assert server.close() == 0, server.stderr
    finally:
        server.kill()
    assert initialized["serverInfo"]["version"] == __version__
    assert initialized["capabilities"]["experimental"] == {"claude/channel": {}}
    assert {"create_for", "list_todos", "claim_next", "complete"} <= tools
    assert not created["isError"] and created["structuredContent"]["created"] is True
    todo_id = created["structuredContent"]["todo"]["id"]
    assert [row["id"] for row in listed["structuredContent"]["todos"]] == [todo_id]


def test_the_binarys_serve_answers_healthz_and_drains_a_redis_stream(
    binary: Path, bare_env: dict[str, str], db_path: Path, tmp_path: Path
) -> None:
    redis_server = started_redis_server(tmp_path)
    try:
        as_json(binary, bare_env, "adapter", "add", "work", "--redis-url", redis_server.url, "--mode", "stream",
                "--key", "work")  # fmt: skip
        with serve_process(db_path, program=[str(binary)], environ=bare_env) as serve:
            receiver = serve.wait_serving()
            health = receiver.request("GET", "/healthz")
            redis_server.client().xadd("work", {"payload": json.dumps({"n": 1})})
            until(lambda: value(db_path, "SELECT count(*) FROM todos WHERE queue = 'work'"), 1,
                  dead=lambda: None if serve.proc.poll() is None else f"serve exited: {serve.stderr}")  # fmt: skip
            assert serve.stop() == 0, serve.stderr
    finally:
        redis_server.stop()
    assert health.status == 200, health.body
    assert health.json()["ok"] is True
    assert "Traceback" not in serve.stderr, serve.stderr


def test_the_binary_adds_an_sqs_adapter_and_its_serve_drains_the_queue_with_the_aws_models_it_carries(
    binary: Path, bare_env: dict[str, str], db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = started_sqs_server(tmp_path, monkeypatch)
    try:
        url = server.create_queue("work")
        env = {**bare_env, **aws_environment(tmp_path)}
        added = as_json(binary, env, "adapter", "add", "work", "--broker", "sqs", "--queue-url", url, "--endpoint-url",
                        server.endpoint)  # fmt: skip
        assert (added["broker"], added["reads"]) == ("sqs", f"queue work at {url}, endpoint {server.endpoint}")
        with serve_process(db_path, program=[str(binary)], environ=env) as serve:
            server.client().send_message(QueueUrl=url, MessageBody=json.dumps({"n": 1}))
            until(lambda: value(db_path, "SELECT count(*) FROM todos WHERE queue = 'work'"), 1,
                  dead=lambda: None if serve.proc.poll() is None else f"serve exited: {serve.stderr}")  # fmt: skip
            until(lambda: server.counts(url), (0, 0))  # deleted after the commit
            assert serve.stop() == 0, serve.stderr
    finally:
        server.stop()
    assert "Traceback" not in serve.stderr, serve.stderr
