"""`db copy` on a file of many rows: rows/s and the command's peak memory, into SQLite and into PostgreSQL.

    .venv/bin/python bench/db_copy.py [--todos 100000] [--events 10000]

Fills a SQLite file (finished todos, events of 1 KiB each, most todos
pointing at an event) with plain inserts, then runs `switchboard-local db
copy --to …` as its own process into a new SQLite file and into an empty
PostgreSQL database on a server it starts (tests/support/postgres.py), and
prints the time, rows/s and maximum resident memory of each (GNU time's %M):
the copy reads in pages, so memory should not grow with the file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from switchboard_local.core.store.opener import open_store  # noqa: E402


def fill(db: Path, todos: int, events: int) -> None:
    async def create() -> None:
        await (await open_store(db)).close()

    asyncio.run(create())
    now = int(time.time() * 1000)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO events (source, family, type, external_id, trust_mode, verified, headers, body, size, received_at) "
        "VALUES ('gh', 'webhook', 'push', ?, 'github', 1, '{}', ?, 1024, ?)",
        ((f"d-{i}", b"x" * 1024, now) for i in range(events)),
    )
    conn.executemany(
        "INSERT INTO todos (queue, title, payload, event_id, state, created_at, updated_at, completed_at) "
        "VALUES ('q', ?, '{\"n\": 1}', ?, 'done', ?, ?, ?)",
        ((f"job {i}", (i % events) + 1 if events else None, now, now, now) for i in range(todos)),
    )
    conn.execute("COMMIT")
    conn.close()


def copy(db: Path, target: str) -> tuple[float, int, int]:
    """Seconds, rows copied and peak resident KiB of one `db copy` process."""
    time_bin = shutil.which("time") or "/usr/bin/time"
    command = [time_bin, "-f", "%M", sys.executable, "-m", "switchboard_local", "--db", str(db),
               "db", "copy", "--to", target, "--json"]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    return elapsed, json.loads(done.stdout)["total"], int(done.stderr.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--todos", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=10_000)
    args = parser.parse_args()
    from support.postgres import PostgresServer

    with tempfile.TemporaryDirectory(dir=ROOT / "bench") as tmp:
        source = Path(tmp) / "source.db"
        fill(source, args.todos, args.events)
        print(f"source: {args.todos} todos, {args.events} events of 1 KiB; {source.stat().st_size / 1e6:.1f} MB")
        targets = [("SQLite", str(Path(tmp) / "target.db"))]
        server = PostgresServer().start()
        try:
            server.admin("CREATE DATABASE copy_target")
            targets.append(("PostgreSQL", server.url("copy_target")))
            for label, target in targets:
                seconds, rows, kib = copy(source, target)
                print(f"into {label:<11} {rows} rows in {seconds:.1f} s: {rows / seconds:,.0f} rows/s, "
                      f"peak memory {kib / 1024:.0f} MiB")  # fmt: skip
        finally:
            server.stop()


if __name__ == "__main__":
    main()
