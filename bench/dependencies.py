"""What dependencies cost (issue 31 §1), at full durability (WAL + synchronous=FULL), SQLite.

    .venv/bin/python bench/dependencies.py [--todos N] [--runs R]

One process drains N todos of one queue (claim_next, then complete, one
transaction each) in three setups, run interleaved, R rounds:

- plain: the queue holds only the N todos;
- blocked beside: the same, with N blocked todos on the same queue (each waits
  for a todo of another queue that is never done): they are outside the ready
  index, so a claim should not see them;
- waiting, done: each of the N todos waited for a todo that is done, so each
  claim reads its dependency and carries its result.

And the completion of one todo with 100 dependents (each readied by it, in the
completing statement) against the completion of a todo with none, R rounds of
20 each. Prints medians and each setup's ratio to plain (the median of each
round's own ratio); writes them to bench/results-dependencies.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
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

DEPENDENTS = 100


async def finish(store, todo_id: int, result=None) -> None:
    await todos.complete(store, Lease.of(await todos.claim(store, todo_id, owner="setup")), result=result)


async def drain_rate(db: Path, n: int, setup: str) -> float:
    """Todos/s claimed and completed from queue 'bench', after ``setup``."""
    async with await open_store(db) as store:
        if setup == "blocked beside":
            never, _ = await todos.create(store, NewTodo(queue="elsewhere", title="never done"))
            for i in range(n):
                await todos.create(store, NewTodo(queue="bench", title=f"blocked {i}", priority=1, after=(never.id,)))
        done = None
        if setup == "waiting, done":
            done, _ = await todos.create(store, NewTodo(queue="inputs", title="input"))
            await finish(store, done.id, {"sha": "4f2c", "files": 12})
        for i in range(n):
            after = (done.id,) if done is not None else ()
            await todos.create(store, NewTodo(queue="bench", title=f"job {i}", after=after))
        start = time.perf_counter()
        count = 0
        while (todo := await todos.claim_next(store, owner="bench", queues=["bench"])) is not None:
            await todos.complete(store, Lease.of(todo))
            count += 1
        elapsed = time.perf_counter() - start
        assert count == n, (setup, count, n)
        return n / elapsed


async def complete_seconds(db: Path, dependents: int, repeats: int) -> float:
    """Median seconds of one complete whose todo has ``dependents`` todos waiting for it."""
    async with await open_store(db) as store:
        times = []
        for r in range(repeats):
            first, _ = await todos.create(store, NewTodo(queue="first", title=f"first {r}"))
            for i in range(dependents):
                await todos.create(store, NewTodo(queue="after", title=f"after {r}.{i}", after=(first.id,)))
            lease = Lease.of(await todos.claim(store, first.id, owner="bench"))
            start = time.perf_counter()
            await todos.complete(store, lease)
            times.append(time.perf_counter() - start)
        ready = await todos.stats(store, queues=["after"])
        assert ready[0].ready == dependents * repeats and ready[0].blocked == 0
        return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--todos", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    setups = ("plain", "blocked beside", "waiting, done")
    rates: dict[str, list[float]] = {s: [] for s in setups}
    completes: dict[str, list[float]] = {"no dependents": [], f"{DEPENDENTS} dependents": []}
    with tempfile.TemporaryDirectory() as folder:
        for run in range(args.runs):
            for setup in setups:
                db = Path(folder) / f"{run}-{setup}.db"
                rates[setup].append(asyncio.run(drain_rate(db, args.todos, setup)))
            for name, n in (("no dependents", 0), (f"{DEPENDENTS} dependents", DEPENDENTS)):
                db = Path(folder) / f"{run}-complete-{n}.db"
                completes[name].append(asyncio.run(complete_seconds(db, n, 20)))
    result = {
        "todos": args.todos,
        "runs": args.runs,
        "load_average": os.getloadavg(),
        "drain_per_second": {s: statistics.median(v) for s, v in rates.items()},
        "drain_ratio_to_plain": {
            s: statistics.median(v / p for v, p in zip(rates[s], rates["plain"], strict=True)) for s in setups
        },
        "complete_ms": {s: statistics.median(v) * 1000 for s, v in completes.items()},
        "complete_ratio": statistics.median(
            a / b for a, b in zip(completes[f"{DEPENDENTS} dependents"], completes["no dependents"], strict=True)
        ),
    }
    for setup in setups:
        print(f"drain, {setup:<15} {result['drain_per_second'][setup]:8.0f} todos/s"
              f"  x{result['drain_ratio_to_plain'][setup]:.2f} of plain")  # fmt: skip
    for name, ms in result["complete_ms"].items():
        print(f"complete, {name:<14} {ms:8.2f} ms")
    print(f"complete with {DEPENDENTS} dependents / with none: x{result['complete_ratio']:.2f}")
    print(f"load average {result['load_average']}")
    (ROOT / "bench" / "results-dependencies.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
