"""Core throughput on this machine, at full durability (WAL + synchronous=FULL).

    .venv/bin/python bench/core.py [--todos N] [--runs R] [--processes P]

Prints medians over R runs of: todos created/s (one transaction each),
claim+complete/s with one consumer, and the total with P processes draining
one file. Writes the figures as JSON to bench/results-core.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from switchboard_local import todos  # noqa: E402
from switchboard_local.store import Store  # noqa: E402

WORKER = ROOT / "tests" / "drain_worker.py"


async def create(db: Path, n: int) -> float:
    async with await Store.open(db) as store:
        start = time.perf_counter()
        for i in range(n):
            await todos.create(store, todos.NewTodo(queue="bench", title=f"job {i}"))
        return n / (time.perf_counter() - start)


async def drain(db: Path, n: int) -> float:
    async with await Store.open(db) as store:
        start = time.perf_counter()
        done = 0
        while (todo := await todos.claim_next(store, owner="bench", queues=["bench"])) is not None:
            await todos.complete(store, todo.id, todo.lease_token)
            done += 1
        assert done == n, (done, n)
        return n / (time.perf_counter() - start)


def drain_processes(db: Path, n: int, processes: int) -> float:
    start = time.perf_counter()
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), str(db), f"w{i}", "bench"], stdout=subprocess.PIPE, text=True)
        for i in range(processes)
    ]
    total = sum(len(p.communicate()[0].splitlines()) for p in procs)
    assert total == n and all(p.returncode == 0 for p in procs), (total, n)
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--todos", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--processes", type=int, default=4)
    args = parser.parse_args()
    figures: dict[str, list[float]] = {"create_per_s": [], "claim_complete_per_s": [], "multi_process_per_s": []}
    with tempfile.TemporaryDirectory(dir=ROOT / "bench") as tmp:
        for run in range(args.runs):
            db = Path(tmp) / f"run{run}.db"
            figures["create_per_s"].append(asyncio.run(create(db, args.todos)))
            figures["claim_complete_per_s"].append(asyncio.run(drain(db, args.todos)))
            db2 = Path(tmp) / f"run{run}-multi.db"
            asyncio.run(create(db2, args.todos))
            figures["multi_process_per_s"].append(drain_processes(db2, args.todos, args.processes))
    medians = {k: round(statistics.median(v)) for k, v in figures.items()}
    print(f"{'figure':<28}{'median':>10}   runs ({args.todos} todos, {args.processes} processes)")
    for key, values in figures.items():
        print(f"{key:<28}{medians[key]:>10}   {', '.join(str(round(v)) for v in values)}")
    out = ROOT / "bench" / "results-core.json"
    out.write_text(json.dumps({"todos": args.todos, "processes": args.processes, "medians": medians, "runs": figures}, indent=2))


if __name__ == "__main__":
    main()
