"""Checkpoints run beside the commits, in the writing process: the log is folded
into the file and emptied when the store is idle, other processes keep seeing
every commit, and a process killed mid-checkpoint loses nothing it committed."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from switchboard_local.core import todos
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.todo_model import NewTodo

from support.sql import rows
from support.waits import until_async

pytestmark = [pytest.mark.anyio, pytest.mark.sqlite_only]  # the SQLite store itself


def wal_size(db: Path) -> int:
    wal = db.with_name(db.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def count_in_another_process(db: Path) -> int:
    """The todos a fresh process reads from the file (a reader of its own, not this store's)."""
    script = "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM todos').fetchone()[0])"
    done = subprocess.run([sys.executable, "-c", script, str(db)], capture_output=True, text=True, check=True)
    return int(done.stdout)


async def test_the_log_is_emptied_while_the_store_is_idle(db_path) -> None:
    async with await open_store(db_path) as store:
        for i in range(300):
            await todos.create(store, NewTodo(queue="q", title=f"t{i}"))
        assert wal_size(db_path) > 0
        assert store.checkpointer is not None
        # The store stays open: its own checkpointer empties the log.
        await until_async(lambda: (wal_size(db_path), store.checkpointer.truncations >= 1), (0, True))
        assert len(await todos.list_todos(store, queue="q", limit=1000)) == 300


async def test_a_steady_writer_rewrites_the_log_instead_of_growing_it(db_path) -> None:
    async with await open_store(db_path) as store:
        for i in range(300):
            await todos.create(store, NewTodo(queue="q", title=f"t{i}"))
        assert store.checkpointer is not None
        before = store.checkpointer.rewinds
        await todos.create(store, NewTodo(queue="q", title="one more"))  # news for the checkpointer's next look
        await until_async(lambda: store.checkpointer.rewinds > before, True)
        size = wal_size(db_path)  # the next write starts the log over (after the one above, at the latest)
        assert size > 0
        for i in range(10):  # far fewer pages than the log holds: written over its first ones
            await todos.create(store, NewTodo(queue="q", title=f"more {i}"))
        assert wal_size(db_path) <= size  # (or less: emptied meanwhile, the store idle for a moment)
        assert len(await todos.list_todos(store, queue="q", limit=1000)) == 311


async def test_other_processes_see_every_commit_before_and_after_the_log_is_emptied(db_path) -> None:
    async with await open_store(db_path) as store:
        for i in range(200):
            await todos.create(store, NewTodo(queue="q", title=f"t{i}"))
        assert count_in_another_process(db_path) == 200  # from the log
        await until_async(lambda: wal_size(db_path), 0)
        assert count_in_another_process(db_path) == 200  # from the file
        await todos.create(store, NewTodo(queue="q", title="one more"))
        assert count_in_another_process(db_path) == 201


async def test_closing_the_store_leaves_an_empty_log(db_path) -> None:
    store = await open_store(db_path)
    for i in range(100):
        await todos.create(store, NewTodo(queue="q", title=f"t{i}"))
    reader = sqlite3.connect(db_path)  # another connection keeps the -wal file from being removed
    try:
        reader.execute("SELECT 1").fetchone()
        await store.close()
        assert wal_size(db_path) == 0
        assert reader.execute("SELECT count(*) FROM todos").fetchone()[0] == 100
    finally:
        reader.close()


async def test_a_reader_holding_an_old_snapshot_stops_neither_commits_nor_close(db_path) -> None:
    store = await open_store(db_path)
    await todos.create(store, NewTodo(queue="q", title="before"))
    reader = sqlite3.connect(db_path, isolation_level=None)
    try:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM todos").fetchone()[0] == 1
        for i in range(300):
            await todos.create(store, NewTodo(queue="q", title=f"t{i}"))
        await store.close()  # its last TRUNCATE finds the reader and gives up: no wait
        assert reader.execute("SELECT count(*) FROM todos").fetchone()[0] == 1  # its snapshot, intact
        reader.execute("COMMIT")
        assert reader.execute("SELECT count(*) FROM todos").fetchone()[0] == 301
    finally:
        reader.close()


WRITER = """
import asyncio, sys
from switchboard_local.core import todos
from switchboard_local.core.store.interface import Store
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.todo_model import NewTodo

async def main():
    async with await open_store(sys.argv[1]) as store:
        i = 0
        while True:
            made, _ = await todos.create(store, NewTodo(queue="q", title=f"t{i}", payload="x" * 2000))
            # Printed only once committed: every id printed must survive.
            print(made.id, store.checkpointer.checkpoints, flush=True)
            i += 1

asyncio.run(main())
"""


def test_a_process_killed_between_checkpoints_loses_nothing_it_committed(db_path) -> None:
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db_path)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})  # fmt: skip
    assert writer.stdout is not None
    committed: list[int] = []
    try:
        for line in writer.stdout:
            todo_id, checkpoints = (int(x) for x in line.split())
            committed.append(todo_id)
            if checkpoints >= 3:  # well into the run: the log folded into the file, more since
                break
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        rest, _ = writer.communicate()
    committed += [int(line.split()[0]) for line in rest.splitlines() if len(line.split()) == 2]
    assert writer.returncode == -signal.SIGKILL
    assert committed, "the writer committed nothing"
    kept = {todo_id for (todo_id,) in rows(db_path, "SELECT id FROM todos")}
    missing = sorted(set(committed) - kept)
    assert not missing, json.dumps(missing[:20])
    assert rows(db_path, "PRAGMA integrity_check") == [("ok",)]
