"""Many OS processes on one file: each todo is completed exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from switchboard_local.core import todos
from switchboard_local.core.clock import ManualClock
from switchboard_local.core.errors import Conflict
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease

from support import sql
from support.store import create_jobs

pytestmark = pytest.mark.anyio

WORKER = str(Path(__file__).parents[1] / "support" / "drain_worker.py")


def start_worker(db: Path | str, owner: str, queue: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, WORKER, str(db), owner, queue, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_four_processes_drain_one_file_each_todo_completed_exactly_once(db_path: Path | str,
                                                                               tmp_path: Path) -> None:  # fmt: skip
    count = 600  # some 150 a process: their claims collide all the while, as with thousands
    async with await open_store(db_path) as store:
        created = await create_jobs(store, count)

    go = tmp_path / "go"
    workers = [start_worker(db_path, f"worker-{n}", "work", "--start-when", str(go)) for n in range(4)]
    for proc in workers:  # every process has opened the file and waits: they start together
        assert proc.stdout is not None and json.loads(proc.stdout.readline()) == {"ready": True}
    go.touch()
    reports: dict[str, list[int]] = {}
    for n, proc in enumerate(workers):
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        assert "database is locked" not in stderr
        reports[f"worker-{n}"] = [json.loads(line)["completed"] for line in stdout.splitlines()]

    completed = [todo_id for ids in reports.values() for todo_id in ids]
    assert sorted(completed) == sorted(created)  # every todo, none twice
    # How evenly the processes shared the work is scheduling, not a promise:
    # bench/core.py measures it (smallest_share_pct).

    states = dict(sql.rows(db_path, "SELECT state, count(*) FROM todos GROUP BY state"))
    # The attempts table keeps the attempts that ended other than by
    # completing; a done todo names the one that completed it.
    ended_otherwise = sql.value(db_path, "SELECT count(*) FROM attempts")
    owner_of = dict(sql.rows(db_path, "SELECT id, completed_by FROM todos"))
    assert states == {"done": count}
    # One claim per todo, ended by completion: nobody else ever held it.
    assert ended_otherwise == 0
    for owner, ids in reports.items():
        assert all(owner_of[todo_id] == owner for todo_id in ids)


async def test_a_killed_agents_todo_is_taken_over_after_its_lease_lapses(db_path: Path) -> None:
    async with await open_store(db_path) as store:
        todo, _ = await todos.create(store, NewTodo(queue="work", title="fragile"))

    # A short lease: the test waits it out on the real clock (what holds before the lapse is asked on a clock of its own).
    crashed = start_worker(db_path, "crasher", "work", "--lease", "1", "--hang-on-first")
    assert crashed.stdout is not None
    first = json.loads(crashed.stdout.readline())
    assert first["claimed"] == todo.id
    os.kill(crashed.pid, signal.SIGKILL)
    crashed.wait(timeout=10)

    # While the lease holds, nobody else gets the todo: asked at its last
    # millisecond on a clock of our own (a busy machine may already be past
    # it on the real one).
    expires = first["lease_expires_at"]
    async with await open_store(db_path, clock=ManualClock(expires - 1)) as store:
        assert await todos.claim_next(store, owner="early", queues=["work"]) is None
        with pytest.raises(Conflict, match="claimed by crasher"):
            await todos.claim(store, todo.id, owner="early")
    time.sleep(max(0.0, expires / 1000 - time.time()) + 0.1)  # real processes, real clock: let the lease lapse

    rescuer = start_worker(db_path, "rescuer", "work")
    stdout, stderr = rescuer.communicate(timeout=60)
    assert rescuer.returncode == 0, stderr
    assert [json.loads(line) for line in stdout.splitlines()] == [{"completed": todo.id, "attempt": 2}]

    async with await open_store(db_path) as store:
        final = await todos.get(store, todo.id)
        with pytest.raises(Conflict):
            await todos.complete(store, Lease(todo.id, first["token"]))
    assert final.state == "done"
    assert [(a.owner, a.outcome) for a in final.attempts or ()] == [
        ("crasher", "lease_expired"),
        ("rescuer", "completed"),
    ]
