"""Per-queue limits across OS processes (issue 31 §4): eight processes draining a limited
queue, one todo at a time, fused and in batches, never hold more than --max-claimed of its
todos at once, as a separate reader sampling the database throughout sees it."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from switchboard_local.core import queues
from switchboard_local.core.store.opener import open_store

from support.sql import pg_connection
from support.store import create_jobs

pytestmark = pytest.mark.anyio

WORKER = str(Path(__file__).parents[1] / "support" / "limited_worker.py")
MAX_CLAIMED = 3
CLAIMED = "SELECT count(*) FROM todos WHERE queue = 'work' AND state = 'claimed'"


class Sampler(threading.Thread):
    """Reads the queue's claimed count on its own connection, again and again, until stopped."""

    def __init__(self, db: Path | str) -> None:
        super().__init__(daemon=True)
        self.db, self.samples, self.stop = db, [], threading.Event()

    def run(self) -> None:
        if isinstance(self.db, Path):
            conn = sqlite3.connect(self.db, isolation_level=None)  # each SELECT its own read transaction
            try:
                while not self.stop.is_set():
                    self.samples.append(conn.execute(CLAIMED).fetchone()[0])
            finally:
                conn.close()
        else:
            with pg_connection(self.db) as conn:
                while not self.stop.is_set():
                    self.samples.append(conn.execute(CLAIMED).fetchone()[0])


async def test_eight_processes_draining_a_limited_queue_never_hold_more_than_max_claimed(
    db_path: Path | str, tmp_path: Path
) -> None:
    async with await open_store(db_path) as store:
        created = await create_jobs(store, 240)
        await queues.set_limit(store, "work", max_claimed=MAX_CLAIMED, by="test")

    go = tmp_path / "go"
    modes = [[], [], ["--then"], ["--then"], ["--max", "2"], ["--max", "5"], ["--max", "10"], []]
    workers = [
        subprocess.Popen([sys.executable, WORKER, str(db_path), f"worker-{n}", "work", "--start-when", str(go), *mode],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        for n, mode in enumerate(modes)
    ]
    for proc in workers:  # every process has opened the database and waits: they start together
        assert proc.stdout is not None and json.loads(proc.stdout.readline()) == {"ready": True}
    sampler = Sampler(db_path)
    sampler.start()
    go.touch()
    completed: list[int] = []
    try:
        for proc in workers:
            stdout, stderr = proc.communicate(timeout=300)
            assert proc.returncode == 0, stdout + stderr
            completed += [json.loads(line)["completed"] for line in stdout.splitlines()]
    finally:
        sampler.stop.set()
        sampler.join()

    assert sorted(completed) == sorted(created)  # every todo, none twice
    assert sampler.samples and max(sampler.samples) <= MAX_CLAIMED
