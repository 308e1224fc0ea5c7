"""Core throughput on this machine, at full durability (WAL + synchronous=FULL).

    .venv/bin/python bench/core.py [--todos N] [--runs R] [--processes P]

Prints medians over R runs of: todos created/s (one transaction each),
claim+complete/s with one consumer, the total with P processes draining one
file, and how fairly those shared it (the smallest share against an even
split, in percent). Writes the figures as JSON to bench/results-core.json.
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

from switchboard_local.core import todos  # noqa: E402
from switchboard_local.core.store.opener import open_store  # noqa: E402
from switchboard_local.core.todo_model import NewTodo  # noqa: E402
from switchboard_local.core.todos import Lease  # noqa: E402

WORKER = ROOT / "tests" / "support" / "drain_worker.py"


async def create(db: Path, n: int) -> float:
    async with await open_store(db) as store:
        start = time.perf_counter()
        for i in range(n):
            await todos.create(store, NewTodo(queue="bench", title=f"job {i}"))
        return n / (time.perf_counter() - start)


async def drain(db: Path, n: int) -> float:
    async with await open_store(db) as store:
        start = time.perf_counter()
        done = 0
        while (todo := await todos.claim_next(store, owner="bench", queues=["bench"])) is not None:
            await todos.complete(store, Lease.of(todo))
            done += 1
        assert done == n, (done, n)
        return n / (time.perf_counter() - start)


def drain_processes(db: Path, n: int, processes: int) -> float:
    return drain_shares(db, n, processes)[0]


def drain_shares(db: Path, n: int, processes: int) -> tuple[float, list[int]]:
    """Todos/s with ``processes`` draining one file, and how many each completed.

    The shares measure fairness, which is scheduling, not a promise (the
    tests assert only that each todo is completed exactly once). The workers
    open the file, then start draining together, so that the first to start
    up does not get a head start; the rate counts their start-up, as it did.
    """
    go = db.with_name(db.name + ".go")
    start = time.perf_counter()
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), str(db), f"w{i}", "bench", "--start-when", str(go)],
                         stdout=subprocess.PIPE, text=True)  # fmt: skip
        for i in range(processes)
    ]
    for p in procs:
        assert p.stdout is not None and json.loads(p.stdout.readline()) == {"ready": True}
    go.touch()
    shares = [len(p.communicate()[0].splitlines()) for p in procs]
    assert sum(shares) == n and all(p.returncode == 0 for p in procs), (shares, n)
    return n / (time.perf_counter() - start), shares


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--todos", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--processes", type=int, default=4)
    args = parser.parse_args()
    figures: dict[str, list[float]] = {
        "create_per_s": [], "claim_complete_per_s": [], "multi_process_per_s": [], "smallest_share_pct": [],
    }  # fmt: skip
    with tempfile.TemporaryDirectory(dir=ROOT / "bench") as tmp:
        for run in range(args.runs):
            db = Path(tmp) / f"run{run}.db"
            figures["create_per_s"].append(asyncio.run(create(db, args.todos)))
            figures["claim_complete_per_s"].append(asyncio.run(drain(db, args.todos)))
            db2 = Path(tmp) / f"run{run}-multi.db"
            asyncio.run(create(db2, args.todos))
            rate, shares = drain_shares(db2, args.todos, args.processes)
            figures["multi_process_per_s"].append(rate)
            # The least a process got, against an even split (100: perfectly fair).
            figures["smallest_share_pct"].append(100 * min(shares) * args.processes / args.todos)
    medians = {k: round(statistics.median(v)) for k, v in figures.items()}
    print(f"{'figure':<28}{'median':>10}   runs ({args.todos} todos, {args.processes} processes)")
    for key, values in figures.items():
        print(f"{key:<28}{medians[key]:>10}   {', '.join(str(round(v)) for v in values)}")
    out = ROOT / "bench" / "results-core.json"
    out.write_text(json.dumps({"todos": args.todos, "processes": args.processes, "medians": medians, "runs": figures}, indent=2))


if __name__ == "__main__":
    main()
