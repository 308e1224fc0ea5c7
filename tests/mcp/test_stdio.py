"""The MCP server as Claude Code runs it: real child processes on stdio, one SQLite file.

These tests wait for real events from other processes (a commit, a child's
answer), always under a timeout; none sleeps to let a lease lapse.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client

from switchboard_local.core import agents, todos
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.store.shared import describe
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.mcp.server import INSTRUCTIONS

from support.backends import PASSWORD, with_password
from support.mcp import Rings, call, child_env, claim_attempts, connect, stdio_params
from support.sql import rows, value

pytestmark = pytest.mark.anyio

INSERT_AND_TIME = """
import asyncio, sys, time
from switchboard_local.core import todos
from switchboard_local.core.store.interface import Store
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.store.shared import describe
from switchboard_local.core.todo_model import NewTodo
async def main():
    async with await open_store(sys.argv[1]) as store:
        before = time.time()
        todo, _ = await todos.create(store, NewTodo(queue="q", title="from another process"))
        print(todo.id, before, flush=True)
asyncio.run(main())
"""


def insert_from_another_process(db: Path) -> tuple[int, float]:
    """Create a todo in a separate OS process: its id, and the wall time just before its transaction began."""
    done = subprocess.run(
        [sys.executable, "-c", INSERT_AND_TIME, str(db)],
        capture_output=True,
        text=True,
        env=child_env(db),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    todo_id, began_at = done.stdout.split()
    return int(todo_id), float(began_at)


@pytest.mark.both_backends
async def test_stdio_round_trip_advertises_the_channel_and_rings_for_a_todo_from_another_process(db_path) -> None:
    rings = Rings()
    async with Client(stdio_params(db_path), mode="legacy", extensions=[rings]) as client:
        assert client.server_capabilities.experimental == {"claude/channel": {}}
        assert client.instructions == INSTRUCTIONS
        todo_id, _ = await anyio.to_thread.run_sync(insert_from_another_process, db_path)
        (ring,) = await rings.until(todo_id)
        claimed = await call(client, "claim", id=todo_id)
        done = await call(client, "complete", id=todo_id, lease_token=claimed["lease_token"], result={"ok": 1})
    assert ring.content == f"todo {todo_id} on q: from another process"
    assert ring.meta == {"todo_id": str(todo_id), "queue": "q", "source": "direct"}
    assert claimed["owner"].startswith("mcp/") and done["state"] == "done"


@pytest.mark.both_backends
async def test_claim_next_long_poll_wakes_on_an_insert_by_another_process(db_path, monkeypatch) -> None:
    tried = claim_attempts(monkeypatch)
    async with await open_store(db_path) as store, connect(store) as client:  # the real clock, as the other process
        await call(client, "queue_stats")  # the first call of a connection pays one-off costs: not what is measured
        answer: dict = {}

        async def wait_for_work() -> None:
            answer.update(await call(client, "claim_next", wait_seconds=15))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(wait_for_work)
            with anyio.fail_after(10):
                await tried.wait()  # it found nothing and waits
            todo_id, _ = await anyio.to_thread.run_sync(insert_from_another_process, db_path)
    # Woken by the other process's commit (a timeout would answer empty); how
    # fast is measured by bench/mcp.py, not asserted here.
    assert answer["todo"]["id"] == todo_id


@pytest.mark.both_backends
async def test_two_mcp_processes_drain_one_queue_and_never_claim_a_todo_twice(db_path) -> None:
    count = 60
    async with await open_store(db_path) as store:
        await agents.add(store, "drainer", queues=["work"])
        for n in range(count):
            await todos.create(store, NewTodo(queue="work", title=f"job {n}"))

    completed: dict[str, list[int]] = {}
    owners: dict[str, set[str]] = {}  # the lease owners each process's claims carried
    both_ready = anyio.Event()
    ready: list[str] = []

    async def drain(name: str, params) -> None:
        async with Client(params, mode="legacy") as client:
            mine, named = completed.setdefault(name, []), owners.setdefault(name, set())
            ready.append(name)  # both processes are up before either drains: they really compete
            if len(ready) == 2:
                both_ready.set()
            await both_ready.wait()
            while True:
                got = await call(client, "claim_next")
                if got["empty"]:
                    return
                todo = got["todo"]
                named.add(todo["owner"])
                await call(client, "complete", id=todo["id"], lease_token=todo["lease_token"])
                mine.append(todo["id"])

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(drain, "by flag", stdio_params(db_path, "--agent", "drainer"))
            tasks.start_soon(drain, "by env", stdio_params(db_path, env={"SWITCHBOARD_AGENT": "drainer"}))

    everything = [todo_id for ids in completed.values() for todo_id in ids]
    assert sorted(everything) == list(range(1, count + 1))  # each todo once, none twice
    # One claim per todo, ended by completion: no attempt ended otherwise, each done one names its owner.
    ended_otherwise = value(db_path, "SELECT count(*) FROM attempts")
    completers = rows(db_path, "SELECT completed_by FROM todos WHERE state = 'done'")
    assert ended_otherwise == 0 and len(completers) == count and all(owner for (owner,) in completers)
    # Two sessions of one agent: each process claims under one owner of its own. (Whether
    # both got work is scheduling, not a promise: a process may have found the queue drained.)
    assert all(len(named) <= 1 for named in owners.values()), owners
    assert not owners["by flag"] & owners["by env"], owners
    assert all(owner.startswith("drainer/") for named in owners.values() for owner in named), owners


@pytest.mark.both_backends
def test_an_unknown_agent_refuses_to_start_with_a_clear_message(db_path) -> None:
    db = with_password(db_path)
    result = subprocess.run(
        [sys.executable, "-m", "switchboard_local", "mcp", "--agent", "ghost"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=child_env(db),
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    # Named as the database is named everywhere: its path, or its URL without a password.
    assert f"not_found: agent 'ghost' does not exist in {describe(db)};" in result.stderr
    assert PASSWORD not in result.stderr
    assert "switchboard-local agent add ghost --queue" in result.stderr


def test_stdout_carries_nothing_but_json_rpc(db_path) -> None:
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "list_todos", "arguments": {}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "get_todo", "arguments": {"id": 7}}},
    ]  # fmt: skip
    with subprocess.Popen(
        [sys.executable, "-m", "switchboard_local", "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=child_env(db_path),
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        replies = []
        for message in messages:
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()
            if "id" in message:
                replies.append(json.loads(proc.stdout.readline()))
        proc.stdin.close()  # the client leaves: the server must exit cleanly
        assert proc.wait(timeout=30) == 0
        rest = proc.stdout.read()
    assert rest == ""
    assert [r["id"] for r in replies] == [1, 2, 3] and all(r["jsonrpc"] == "2.0" for r in replies)
    assert replies[0]["result"]["capabilities"]["experimental"] == {"claude/channel": {}}
    assert replies[1]["result"]["structuredContent"] == {"todos": [], "next_cursor": None}
    assert replies[2]["result"]["isError"] is True
    assert replies[2]["result"]["content"][0]["text"] == "not_found: todo 7 does not exist"


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}  # fmt: skip

STRAY_OUTPUT = """
import asyncio, os, sys
from switchboard_local.mcp.stdio import stdio_wire
async def main():
    async with stdio_wire() as (lines, out):
        print("stray print", flush=True)
        os.write(1, b"stray write\\n")
        async for line in lines:
            await out.write("echo " + line)
            await out.flush()
    os.write(1, b"after\\n")
asyncio.run(main())
"""


def test_stray_output_while_serving_goes_to_stderr_and_the_wire_comes_back_after() -> None:
    done = subprocess.run(
        [sys.executable, "-c", STRAY_OUTPUT], input="one\n" + "x" * 300_000 + "\n",
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "echo one\necho " + "x" * 300_000 + "\nafter\n"  # a line far past asyncio's 64 KiB cap
    assert "stray print" in done.stderr and "stray write" in done.stderr


def test_a_server_whose_stdin_is_a_file_answers_through_the_sdks_own_streams(db_path, tmp_path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps(INITIALIZE) + "\n")
    with requests.open("rb") as stdin:
        done = subprocess.run(
            [sys.executable, "-m", "switchboard_local", "mcp"], stdin=stdin,
            capture_output=True, timeout=60, env=child_env(db_path), check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (reply,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert reply["id"] == 1 and reply["result"]["capabilities"]["experimental"] == {"claude/channel": {}}


def ask_over_sockets(db_path, *, one_socket: bool) -> list[dict]:
    """Run `mcp` with Unix sockets for stdin and stdout (as libuv, hence Claude Code, spawns
    children), or with one socket for both; ask twice, a request after the server is up."""
    ours_in, theirs_in = socket.socketpair()
    ours_out, theirs_out = (ours_in, theirs_in) if one_socket else socket.socketpair()
    requests = [
        INITIALIZE,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "list_todos", "arguments": {}}},
    ]
    with ours_in, theirs_in, ours_out, theirs_out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "switchboard_local", "mcp"], stdin=theirs_in, stdout=theirs_out,
            stderr=subprocess.DEVNULL, env=child_env(db_path),
        )  # fmt: skip
        try:
            replies, buffer = [], b""
            ours_out.settimeout(30)
            for request in requests:
                ours_in.sendall(json.dumps(request).encode() + b"\n")
                while "id" in request and b"\n" not in buffer:
                    chunk = ours_out.recv(65536)
                    assert chunk, "the server closed its stdout without answering"
                    buffer += chunk
                if "id" in request:
                    line, buffer = buffer.split(b"\n", 1)
                    replies.append(json.loads(line))
            ours_in.shutdown(socket.SHUT_WR)  # the client leaves
            assert proc.wait(timeout=30) == 0
        finally:
            proc.kill()
    return replies


def test_a_server_on_unix_sockets_answers_as_on_pipes(db_path) -> None:
    assert [r["id"] for r in ask_over_sockets(db_path, one_socket=False)] == [1, 2]


def test_a_server_whose_stdin_and_stdout_are_one_socket_still_answers(db_path) -> None:
    assert [r["id"] for r in ask_over_sockets(db_path, one_socket=True)] == [1, 2]


def test_a_request_sent_just_before_the_client_hangs_up_is_still_answered(db_path) -> None:
    lines = [INITIALIZE, {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    with subprocess.Popen(
        [sys.executable, "-m", "switchboard_local", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, env=child_env(db_path),
    ) as proc:  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None
        for line in lines:
            proc.stdin.write(json.dumps(line).encode() + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}).encode() + b"\n")
        proc.stdin.close()  # at once: like `printf … | switchboard-local mcp`
        rest = proc.stdout.read()
        assert proc.wait(timeout=30) == 0
    assert [json.loads(line)["id"] for line in rest.splitlines()] == [2]


def test_a_client_that_stops_reading_ends_the_server_with_one_line_and_no_traceback(db_path) -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "switchboard_local", "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=child_env(db_path),
    ) as proc:  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        proc.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
        proc.stdout.close()  # the client's end of the answers is gone
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}).encode() + b"\n")
        proc.stdin.flush()
        assert proc.wait(timeout=30) == 0
        stderr = proc.stderr.read().decode()
    assert "the client closed the connection" in stderr and "Traceback" not in stderr
