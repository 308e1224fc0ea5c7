"""The ingestion back half's CPU cost per delivery, with the disk taken out.

    .venv/bin/python bench/ingest.py [--deliveries N] [--runs R] [--dir /dev/shm] [--batch B]

Routes N GitHub-like deliveries (a 4 KB body, one rule, a replay window where
the code has one) through `routing.deliver`, one transaction each, into a
file in --dir (default /dev/shm, a RAM file system, so fsync costs nothing and
what is measured is Python and SQLite's own work). With --batch B, N broker
messages instead (a small JSON body, no rule: what a Redis stream adapter
hands over) through `routing.accept`, B a transaction, as an adapter stores
them; with --dir on a disk, that is the store's side of a broker drain.
Prints the median over R runs of deliveries per second and CPU microseconds
per delivery. Run it with PYTHONPATH set to another checkout to compare two
versions in one sitting.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # PYTHONPATH (another checkout) comes first

from switchboard_local.core import routing, rules, sources, webhook_config
from switchboard_local.core.events import NewEvent  # noqa: E402
from switchboard_local.core.store.opener import open_store  # noqa: E402

BODY = {"action": "opened", "number": 0, "pull_request": {"title": "x" * 200, "body": "y" * 3500}}


def event(n: int) -> NewEvent:
    body = json.dumps({**BODY, "number": n}).encode()
    fields = dict(source="gh", family="webhook", type="pull_request", external_id=f"d-{n}", trust_mode="github",
                  verified=True, body=body, content_type="application/json")  # fmt: skip
    if "replay_window" in {f.name for f in dataclasses.fields(NewEvent)}:
        fields["replay_window"] = 86400.0
    return NewEvent(**fields)


async def one_run(folder: Path, n: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        async with await open_store(Path(tmp) / "ingest.db") as store:
            await sources.add(store, "gh", family="webhook", kind="github", trust_mode="github",
                               config=webhook_config.source_config("github", {}), secrets=[{"value": "s"}])  # fmt: skip
            await rules.add(store, source="gh", type="pull_request", where=["action=opened"], queue="review",
                            title="Review PR #{number}")  # fmt: skip
            events = [event(i) for i in range(n)]
            wall, cpu = time.perf_counter(), time.process_time()
            for e in events:
                await routing.deliver(store, e)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return n / wall, cpu / n * 1e6


def message(n: int) -> NewEvent:
    """A message as a Redis stream adapter hands it to the back half (brokers/loop.py)."""
    return NewEvent(source="orders", family="queue", type="orders", external_id=f"{1_700_000_000_000 + n}-0",
                    trust_mode="queue", verified=True, verify_detail="read from redis stream 'orders' (trusted by the "
                    "connection)", content_type=None, headers={}, body=json.dumps({"order": n, "sku": f"sku-{n % 97}"}).encode())  # fmt: skip


async def batch_run(folder: Path, n: int, batch: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        async with await open_store(Path(tmp) / "ingest.db") as store:
            source = await sources.add(store, "orders", family="queue", kind="redis", trust_mode="queue",
                                       config={"url": "redis://127.0.0.1:6379/0", "mode": "stream", "key": "orders"})  # fmt: skip
            batches = [[message(i) for i in range(start, min(n, start + batch))] for start in range(0, n, batch)]
            wall, cpu = time.perf_counter(), time.process_time()
            for messages in batches:
                answers = await routing.accept(store, source, messages)
                assert not any(isinstance(a, Exception) for a in answers)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return n / wall, cpu / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=Path("/dev/shm"))
    parser.add_argument("--batch", type=int, default=None, help="broker messages, this many a transaction")
    args = parser.parse_args()
    if args.batch is None:
        results = [asyncio.run(one_run(args.dir, args.deliveries)) for _ in range(args.runs)]
    else:
        results = [asyncio.run(batch_run(args.dir, args.deliveries, args.batch)) for _ in range(args.runs)]
    rate = statistics.median(r[0] for r in results)
    cpu = statistics.median(r[1] for r in results)
    what = "deliveries" if args.batch is None else f"messages (batches of {args.batch})"
    print(f"{routing.__file__}: {rate:,.0f} {what}/s, {cpu:.0f} us CPU per delivery (median of {args.runs})")


if __name__ == "__main__":
    main()
