"""The drains' own statements in bare sqlite3: what the verbs would do with no Python around them.

bench/run.py's section a runs these beside its raw floors. Each fills a file of
this project's schema with ``n`` pending todos (one transaction), then drains
it with exactly the statements the verbs run (queries.sql's complete,
claim_next_in_queue, claim_next with a max, complete_many), in transactions as
the verbs have them, on a plain sqlite3 connection at the same durability
(WAL, synchronous=FULL), with nothing else: no validation, no row decoding,
no group commit, no event loop. The gap between one of these and its verb is
the Python of the verb; the gap between one of these and a peer is the
statements' and the commits' own.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
import time
from pathlib import Path

from switchboard_local.core.store.queries import Q
from switchboard_local.core.store.sqlite.migrations import schema_sql, statements_of

LEASE_MS = 300_000


def _filled(path: Path, n: int) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA foreign_keys = ON")
    for statement in statements_of(schema_sql()):
        conn.execute(statement)
    todo = {"queue": "bench", "assignee": None, "kind": None, "payload": "null", "event_id": None,
            "idempotency_key": None, "priority": 0, "max_attempts": 5, "visible_at": 1, "now": 1,
            "blocked_by": 0, "waits_for": 0}  # fmt: skip
    conn.execute("BEGIN")
    for i in range(n):
        conn.execute(Q.insert_todo, {**todo, "title": f"job {i}"}).fetchall()
    conn.execute("COMMIT")
    return conn


def _hash() -> str:
    return hashlib.sha256(secrets.token_urlsafe(24).encode()).hexdigest()


def drain_one_commit(tmp: Path, n: int) -> float:
    """Jobs/s: complete, then claim the next, one transaction a job (complete(then=…)'s statements)."""
    conn = _filled(tmp / "floor-drain.db", n)
    now = int(time.time() * 1000)

    def claim() -> sqlite3.Row | None:
        params = {"owner": "bench", "agent": "bench", "queues": '["bench"]', "hashes": f'["{_hash()}"]',
                  "lease_expires_at": now + LEASE_MS, "now": now}  # fmt: skip
        return conn.execute(Q.claim_next_in_queue, params).fetchone()

    start = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    row = claim()
    conn.execute("COMMIT")
    done = 0
    while row is not None:
        conn.execute("BEGIN IMMEDIATE")
        finished = {"id": row["id"], "lease_token_hash": row["lease_token_hash"], "now": now, "result": "null"}
        assert conn.execute(Q.complete, finished).fetchone() is not None
        row = claim()
        conn.execute("COMMIT")
        done += 1
    assert done == n
    return n / (time.perf_counter() - start)


def drain_batches(tmp: Path, n: int, size: int = 10) -> float:
    """Jobs/s: claim up to ``size`` in one transaction, complete them all in another (claim_next_many's
    and complete_many's statements)."""
    conn = _filled(tmp / "floor-batches.db", n)
    now = int(time.time() * 1000)
    start, done = time.perf_counter(), 0
    while True:
        params = {"owner": "bench", "agent": "bench", "max": size, "budget": None, "queues": '["bench"]',
                  "hashes": json.dumps([_hash() for _ in range(size)]), "lease_expires_at": now + LEASE_MS, "now": now}  # fmt: skip
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute(Q.claim_next, params).fetchall()
        conn.execute("COMMIT")
        if not rows:
            break
        items = json.dumps([{"id": r["id"], "hash": r["lease_token_hash"], "result": "null"} for r in rows])
        conn.execute("BEGIN IMMEDIATE")
        assert len(conn.execute(Q.complete_many, {"items": items, "now": now}).fetchall()) == len(rows)
        conn.execute("COMMIT")
        done += len(rows)
    assert done == n
    return n / (time.perf_counter() - start)


async def _verbs_one_commit(path: Path, n: int) -> float:
    from switchboard_local.core import todos
    from switchboard_local.core.store.opener import open_store
    from switchboard_local.core.todo_model import NewTodo
    from switchboard_local.core.todos import Lease, NextClaim

    async with await open_store(path) as store:
        for i in range(n):
            await todos.create(store, NewTodo(queue="bench", title=f"job {i}"))
        then, done = NextClaim("bench", ["bench"]), 0
        start = time.perf_counter()
        todo = await todos.claim_next(store, owner="bench", queues=["bench"])
        while todo is not None:
            todo = (await todos.complete(store, Lease.of(todo), then=then)).next
            done += 1
        assert done == n
        return n / (time.perf_counter() - start)


def main() -> None:
    """The one-commit drain, its statements alone beside the verbs, in µs a job, in --dir: on
    /dev/shm (the default: a RAM file system, where fsync costs nothing) the gap is the verbs' Python."""
    import argparse
    import asyncio
    import statistics
    import sys
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--dir", type=Path, default=Path("/dev/shm"))
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    alone, verbs = [], []
    for _ in range(args.runs):  # interleaved
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            alone.append(1e6 / drain_one_commit(Path(tmp), args.jobs))
            verbs.append(1e6 / asyncio.run(_verbs_one_commit(Path(tmp) / "verbs.db", args.jobs)))
    a, v = statistics.median(alone), statistics.median(verbs)
    print(f"one-commit drain in {args.dir}, median of {args.runs}: statements alone {a:.1f} us a job, "
          f"the verbs {v:.1f} us a job ({v - a:.1f} us more)")


if __name__ == "__main__":
    main()
