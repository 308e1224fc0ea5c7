"""Redis stream drain: messages/s from a pre-filled stream to committed todos.

    .venv/bin/python bench/redis_drain.py [--entries N] [--runs R] [--batches 1,64]

Starts its own redis-server (persistence off) on a free loopback port. For
each run it fills a fresh stream with N entries, then measures, on the same
server: raw XREADGROUP (COUNT 100) + XACK with no storage at all, and the
stream adapter draining into the database at full durability with each batch
size (every entry must end as exactly one event and one todo, with nothing
left pending). Prints medians over R runs and writes
bench/results-redis.json.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from switchboard_local.brokers.loop import Consumer  # noqa: E402
from switchboard_local.brokers.registry import BROKERS  # noqa: E402
from switchboard_local.core import sources  # noqa: E402
from switchboard_local.core.store.opener import open_store  # noqa: E402

from support.redis_server import RedisServer  # noqa: E402


def fill(server: RedisServer, key: str, n: int) -> None:
    r = server.client()
    r.delete(key)
    with r.pipeline(transaction=False) as pipe:
        for i in range(n):
            pipe.xadd(key, {"payload": json.dumps({"order": i, "sku": f"sku-{i % 97}"})})
            if i % 5000 == 4999:
                pipe.execute()
        pipe.execute()


def raw(server: RedisServer, key: str, n: int) -> float:
    r = server.client()
    r.xgroup_create(key, "raw", id="0")
    start = time.perf_counter()
    done = 0
    while done < n:
        reply = r.xreadgroup("raw", "c", {key: ">"}, count=100)
        ids = [entry_id for entry_id, _ in reply[0][1]]
        r.xack(key, "raw", *ids)
        done += len(ids)
    return n / (time.perf_counter() - start)


async def drain(server: RedisServer, key: str, n: int, batch: int, db: Path) -> float:
    async with await open_store(db) as store:
        config = BROKERS.get("redis").configure({"url": server.url, "mode": "stream", "key": key, "batch": batch})
        adapter = await sources.add(store, "bench", family="queue", kind="redis", trust_mode="queue", config=config)
        stop = asyncio.Event()
        start = time.perf_counter()
        task = asyncio.create_task(Consumer(store, adapter, stop).run())
        with sqlite3.connect(db) as conn:
            while conn.execute("SELECT count(*) FROM todos").fetchone()[0] < n:
                await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - start
        stop.set()
        await task
    r = server.client()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM events WHERE family <> 'operator'").fetchone()[0] == n
    assert r.xpending(key, "switchboard")["pending"] == 0
    return n / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batches", default="1,64")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    figures: dict[str, list[float]] = {"raw_xreadgroup_xack": [], **{f"batch_{b}": [] for b in batches}}
    with tempfile.TemporaryDirectory(dir=ROOT / "bench") as tmp:
        server = RedisServer(Path(tmp)).start()
        try:
            for run in range(args.runs):
                fill(server, "raw", args.entries)
                figures["raw_xreadgroup_xack"].append(raw(server, "raw", args.entries))
                for b in batches:
                    key = f"drain-{b}-{run}"
                    fill(server, key, args.entries)
                    db = Path(tmp) / f"{key}.db"
                    figures[f"batch_{b}"].append(asyncio.run(drain(server, key, args.entries, b, db)))
                    server.client().delete(key)
        finally:
            server.stop()
    medians = {k: round(statistics.median(v)) for k, v in figures.items()}
    raw_median = medians["raw_xreadgroup_xack"]
    print(f"{'figure':<22}{'msgs/s':>10}{'vs raw':>9}   runs ({args.entries} entries each)")
    for key, values in figures.items():
        print(f"{key:<22}{medians[key]:>10}{medians[key] / raw_median:>8.1%}   {', '.join(str(round(v)) for v in values)}")
    (ROOT / "bench" / "results-redis.json").write_text(
        json.dumps({"entries": args.entries, "medians": medians, "runs": figures}, indent=2)
    )


if __name__ == "__main__":
    main()
