"""The claim's cost with and without per-queue limits, and against another checkout (issue 31 §4).

    .venv/bin/python bench/claims.py [--todos N] [--runs R] [--backend sqlite|postgres]
                                     [--before PATH]

One consumer drains N todos (claim_next of its queue, then complete: two
commits a todo) and the bench prints claims+completes per second, medians of
R rounds, for each case:

  plain          no queue has a limit (the claim every agent makes)
  max_claimed    the queue has --max-claimed 1000 (never reached: the cost of
                 the limited way, lock and counts, not of waiting)
  per_minute     the queue has --max-per-minute 1000000 (never reached; each
                 claim also logs itself for the rolling minute)
  before         with --before PATH: the plain case run by that checkout's
                 code (say, the main branch before limits), for the ratio

Each case runs in a process of its own, the cases interleaved in every round,
so that a slow moment of the machine falls on all of them alike. Durability
is relaxed on both backends (SQLite synchronous=NORMAL; PostgreSQL started
with fsync off): this measures what the statements cost, which a flush to
disk per commit would hide. The figures go to bench/results-claims.json.
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
CASES = ("plain", "max_claimed", "per_minute")
LIMITS = {"plain": {}, "max_claimed": {"max_claimed": 1000}, "per_minute": {"max_per_minute": 1_000_000}}


async def one_case(db: str, case: str, n: int) -> float:
    """Claims+completes per second of one consumer draining ``n`` todos of queue "bench" under ``case``."""
    from switchboard_local.core import todos
    from switchboard_local.core.store.opener import open_store
    from switchboard_local.core.store.shared import is_url
    from switchboard_local.core.todo_model import NewTodo
    from switchboard_local.core.todos import Lease

    relaxed = {} if is_url(db) else {"synchronous": "NORMAL"}
    async with await open_store(db if is_url(db) else Path(db), **relaxed) as store:
        for start in range(0, n, 100):
            await asyncio.gather(*(todos.create(store, NewTodo(queue="bench", title=f"job {i}"))
                                   for i in range(start, min(n, start + 100))))  # fmt: skip
        if LIMITS[case]:
            from switchboard_local.core import queues

            await queues.set_limit(store, "bench", by="bench", **LIMITS[case])
        started = time.perf_counter()
        done = 0
        while (todo := await todos.claim_next(store, owner="bench", queues=["bench"])) is not None:
            await todos.complete(store, Lease.of(todo))
            done += 1
        assert done == n, (done, n)
        return n / (time.perf_counter() - started)


def run_case(root: Path, db: str, case: str, n: int) -> float:
    """``one_case`` in a process of its own, on ``root``'s code."""
    code = (f"import sys, asyncio; sys.path.insert(0, {str(root)!r}); sys.path.insert(1, {str(ROOT / 'bench')!r});"
            f" import claims; print(asyncio.run(claims.one_case({db!r}, {case!r}, {n})))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{case} on {root} failed:\n{done.stderr}")
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--todos", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--before", type=Path, default=None, help="another checkout: its plain claim, for the ratio")
    args = parser.parse_args()
    cases = [(case, ROOT) for case in CASES] + ([("before", args.before.resolve())] if args.before else [])
    runs: dict[str, list[float]] = {case: [] for case, _ in cases}
    server = None
    if args.backend == "postgres":
        sys.path.insert(0, str(ROOT / "tests"))
        from support.postgres import PostgresServer

        server = PostgresServer(fsync=False).start()
    try:
        with tempfile.TemporaryDirectory(dir=ROOT / "bench") as tmp:
            for r in range(args.runs):
                order = cases if r % 2 == 0 else cases[::-1]  # neither always first
                for case, root in order:
                    db = server.empty_database() if server else str(Path(tmp) / f"{case}-{r}.db")
                    try:
                        runs[case].append(run_case(root, db, "plain" if case == "before" else case, args.todos))
                    finally:
                        if server:
                            server.drop(db)
    finally:
        if server:
            server.stop()
    medians = {case: statistics.median(values) for case, values in runs.items()}
    base = medians["plain"]
    print(f"{args.backend}: claim+complete/s, one consumer, {args.todos} todos, median of {args.runs}")
    print(f"{'case':<14}{'median':>10}{'vs plain':>10}   runs")
    for case, values in runs.items():
        print(f"{case:<14}{medians[case]:>10.0f}{medians[case] / base:>10.3f}   {', '.join(f'{v:.0f}' for v in values)}")
    out = ROOT / "bench" / f"results-claims-{args.backend}.json"
    out.write_text(json.dumps({"backend": args.backend, "todos": args.todos, "medians": medians, "runs": runs},
                              indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
