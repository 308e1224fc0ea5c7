"""Many OS processes draining one database with the batch verbs: each todo is completed exactly once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from switchboard_local.core import todos
from switchboard_local.core.store.opener import open_store

from support.store import create_jobs

pytestmark = pytest.mark.anyio

WORKER = str(Path(__file__).parents[1] / "support" / "drain_worker.py")


async def test_four_processes_draining_in_batches_complete_each_todo_exactly_once(db_path: Path | str,
                                                                                   tmp_path: Path) -> None:  # fmt: skip
    count = 400  # a hundred a process: every batch size collides with the others, as thousands would
    async with await open_store(db_path) as store:
        created = await create_jobs(store, count)

    go = tmp_path / "go"
    workers = [
        subprocess.Popen(
            [sys.executable, WORKER, str(db_path), f"worker-{n}", "work", "--start-when", str(go), "--max", str(m)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        for n, m in enumerate([10, 10, 7, 100])
    ]
    for proc in workers:  # every process has opened the file and waits: they start together
        assert proc.stdout is not None and json.loads(proc.stdout.readline()) == {"ready": True}
    go.touch()
    reports: dict[str, list[int]] = {}
    for n, proc in enumerate(workers):
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stdout + stderr
        reports[f"worker-{n}"] = [json.loads(line)["completed"] for line in stdout.splitlines()]

    completed = [todo_id for ids in reports.values() for todo_id in ids]
    assert sorted(completed) == sorted(created)  # every todo, none twice

    # One claim per todo, ended by completion by the worker that reported it:
    # nobody else ever held it (read through the core, whatever the storage).
    owner_of = {todo_id: owner for owner, ids in reports.items() for todo_id in ids}
    async with await open_store(db_path) as store:
        for todo_id in created:
            todo = await todos.get(store, todo_id)
            assert (todo.state, todo.attempt) == ("done", 1)
            assert [(a.owner, a.outcome) for a in todo.attempts or ()] == [(owner_of[todo_id], "completed")]
