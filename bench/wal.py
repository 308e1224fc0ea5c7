"""What one job costs the write-ahead log, and how long its commit takes.

    .venv/bin/python bench/wal.py [--todos N] [--runs R]

The drain loop of an agent: ``claim_next``, then ``complete(then=…)`` (finish
this todo and claim the next in one transaction: one commit per job).

- WAL pages per job commit: a reader holds a snapshot taken before the drain
  starts, so no checkpoint can copy or restart the log; every page the drain's
  commits write stays in the -wal file, and its size counts them. Beside it,
  raw sqlite3's claim + complete (two commits per job) on a one-index table.
- Commit latency: each ``complete(then=…)`` call, timed from the call to its
  committed answer (p50, p99, max), with checkpoints as the store runs them.

Prints medians over R runs and writes bench/results-wal.json. bench/run.py may
import ``measure_wal_pages``, ``measure_raw_wal_pages`` and
``measure_commit_latency``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from switchboard_local.core import todos  # noqa: E402
from switchboard_local.core.store.interface import Store  # noqa: E402
from switchboard_local.core.store.opener import open_store  # noqa: E402
from switchboard_local.core.todo_model import NewTodo  # noqa: E402
from switchboard_local.core.todos import Lease, NextClaim  # noqa: E402

QUEUE = "bench"
WAL_HEADER = 32
FRAME_HEADER = 24


def _wal_frames(db: Path, page_size: int) -> int:
    wal = db.with_name(db.name + "-wal")
    size = wal.stat().st_size if wal.exists() else 0
    return max(0, size - WAL_HEADER) // (page_size + FRAME_HEADER)


async def _fill(db: Path, n: int) -> None:
    async with await open_store(db) as store:
        for i in range(n):
            await todos.create(store, NewTodo(queue=QUEUE, title=f"job {i}", payload={"n": i}))


async def _drain(store: Store, timings: list[float] | None = None) -> int:
    """claim_next, then complete(then=…) until nothing is left; the jobs done."""
    then = NextClaim(owner="bench", queues=[QUEUE])
    todo = await todos.claim_next(store, owner="bench", queues=[QUEUE])
    done = 0
    while todo is not None:
        started = time.perf_counter()
        finished = await todos.complete(store, Lease.of(todo), result={"ok": True}, then=then)
        if timings is not None:
            timings.append(time.perf_counter() - started)
        done += 1
        todo = finished.next
    return done


def _pin(db: Path) -> sqlite3.Connection:
    """A reader whose snapshot predates every frame to come: the log only grows while it is open."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN")
    conn.execute("SELECT count(*) FROM todos").fetchone()
    return conn


def measure_wal_pages(tmp: Path, n: int) -> dict[str, Any]:
    """WAL pages written per job by the drain loop (one commit per job), over ``n`` todos."""
    db = tmp / f"wal-pages-{time.monotonic_ns()}.db"
    asyncio.run(_fill(db, n))  # closing the last connection folds the log into the file
    page_size = sqlite3.connect(db).execute("PRAGMA page_size").fetchone()[0]
    pin = _pin(db)
    try:
        before = _wal_frames(db, page_size)

        async def drain() -> int:
            async with await open_store(db) as store:
                return await _drain(store)

        jobs = asyncio.run(drain())
        frames = _wal_frames(db, page_size) - before
    finally:
        pin.close()
    assert jobs == n, (jobs, n)
    return {"jobs": jobs, "wal_frames": frames, "pages_per_job": frames / jobs, "page_size": page_size}


def measure_raw_wal_pages(tmp: Path, n: int) -> dict[str, Any]:
    """The same count for raw sqlite3: one UPDATE…RETURNING claim and one UPDATE complete, a commit each."""
    db = tmp / f"wal-raw-{time.monotonic_ns()}.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, body TEXT, state TEXT, owner TEXT)")
    conn.execute("CREATE INDEX jobs_ready ON jobs (id) WHERE state = 'ready'")
    for i in range(n):
        conn.execute("INSERT INTO jobs (body, state) VALUES (?, 'ready')", (json.dumps({"n": i}),))
    conn.close()
    page_size = sqlite3.connect(db).execute("PRAGMA page_size").fetchone()[0]
    pin = sqlite3.connect(db, isolation_level=None)
    pin.execute("BEGIN")
    pin.execute("SELECT count(*) FROM jobs").fetchone()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA synchronous = FULL")
    try:
        jobs = 0
        while True:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute(
                "UPDATE jobs SET state = 'claimed', owner = 'bench' WHERE id = "
                "(SELECT id FROM jobs WHERE state = 'ready' ORDER BY id LIMIT 1) RETURNING id"
            ).fetchone()
            conn.execute("COMMIT")
            if row is None:
                break
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE jobs SET state = 'done', owner = NULL WHERE id = ?", (row[0],))
            conn.execute("COMMIT")
            jobs += 1
        frames = _wal_frames(db, page_size)
    finally:
        conn.close()
        pin.close()
    return {"jobs": jobs, "wal_frames": frames, "pages_per_job": frames / jobs, "page_size": page_size}


def measure_commit_latency(tmp: Path, n: int) -> dict[str, Any]:
    """Each complete(then=…) of the drain loop, call to committed answer, in ms: p50, p99, max."""
    db = tmp / f"wal-latency-{time.monotonic_ns()}.db"
    asyncio.run(_fill(db, n))
    timings: list[float] = []

    async def drain() -> int:
        async with await open_store(db) as store:
            return await _drain(store, timings)

    started = time.perf_counter()
    jobs = asyncio.run(drain())
    elapsed = time.perf_counter() - started
    ms = sorted(t * 1000 for t in timings)
    p50 = ms[len(ms) // 2]
    p99 = ms[min(len(ms) - 1, round(len(ms) * 0.99))]
    return {
        "jobs": jobs,
        "jobs_per_s": jobs / elapsed,
        "p50_ms": p50,
        "p99_ms": p99,
        "max_ms": ms[-1],
        "p99_over_p50": p99 / p50,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--todos", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[float]] = {
        "pages_per_job": [], "raw_pages_per_job": [], "p50_ms": [], "p99_ms": [], "max_ms": [], "p99_over_p50": [],
        "jobs_per_s": [],
    }  # fmt: skip
    with tempfile.TemporaryDirectory(dir=ROOT / "bench") as tmp:
        for _ in range(args.runs):
            runs["pages_per_job"].append(measure_wal_pages(Path(tmp), args.todos)["pages_per_job"])
            runs["raw_pages_per_job"].append(measure_raw_wal_pages(Path(tmp), args.todos)["pages_per_job"])
            latency = measure_commit_latency(Path(tmp), args.todos)
            for key in ("p50_ms", "p99_ms", "max_ms", "p99_over_p50", "jobs_per_s"):
                runs[key].append(latency[key])
    medians = {k: statistics.median(v) for k, v in runs.items()}
    print(f"{'figure':<22}{'median':>10}   runs ({args.todos} todos; drain: claim_next, then complete(then=…))")
    for key, values in runs.items():
        print(f"{key:<22}{medians[key]:>10.2f}   {', '.join(f'{v:.2f}' for v in values)}")
    out = ROOT / "bench" / "results-wal.json"
    out.write_text(json.dumps({"todos": args.todos, "medians": medians, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
