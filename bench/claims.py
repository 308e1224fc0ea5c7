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
disk per commit would hide. Beside the rate, the consumer's CPU time per
claim+complete (its process's, the store's thread included: on SQLite the
whole cost, on PostgreSQL the client's share), which a busy machine disturbs
less than the wall clock.

On SQLite it also counts, as tests/core/test_query_plans.py does, the
virtual machine's steps of each claim statement over a backlog of 3 queues of
50 todos (a count, not a timing: the same on every machine), for this
checkout and --before's: the plain forms, and the limited way of one queue
(lock_limited_queues, claim_next_limited, log_claims) with both limits set.
The figures go to bench/results-claims-BACKEND.json.
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
        started, cpu = time.perf_counter(), time.process_time()
        done = 0
        while (todo := await todos.claim_next(store, owner="bench", queues=["bench"])) is not None:
            await todos.complete(store, Lease.of(todo))
            done += 1
        assert done == n, (done, n)
        return n / (time.perf_counter() - started), (time.process_time() - cpu) / n * 1e6


def statement_steps() -> dict[str, int]:
    """The virtual machine's steps of each claim statement of this code (SQLite), each run once and rolled back."""
    import re
    import sqlite3

    from switchboard_local.core.store.opener import open_store
    from switchboard_local.core.store.queries import Q

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "steps.db"

        async def create() -> None:
            await (await open_store(path)).close()

        asyncio.run(create())
        conn = sqlite3.connect(path, isolation_level=None)
        conn.executemany("INSERT INTO todos (queue, title, payload, state, priority, max_attempts, visible_at,"
                         " created_at, updated_at) VALUES (?, 't', '{}', 'pending', ?, 5, 0, 0, 0)",
                         [(q, i % 3) for q in "abc" for i in range(50)])  # fmt: skip
        forms = {
            "claim_next, every queue": ("claim_next", None, 1), "claim_next, every queue, max 10": ("claim_next", None, 10),
            "claim_next_in_queue": ("claim_next_in_queue", ["a"], 1),
            "claim_next_in_queues": ("claim_next_in_queues", ["a", "b"], 1),
            "claim_by_id": ("claim_by_id", None, 1),
        }  # fmt: skip
        limited = {"lock_limited_queues": ("lock_limited_queues", ["a"], 1),
                   "claim_next_limited, one queue": ("claim_next_limited", ["a"], 1),
                   "log_claims": ("log_claims", None, 1)}  # fmt: skip
        found: dict[str, int] = {}
        for label, (name, queues, most) in [*forms.items(), *(limited.items() if _has(Q, "claim_next_limited") else [])]:
            sql = str(getattr(Q, name))
            params = {"owner": "w", "agent": "w", "hashes": json.dumps([f"h{i}" for i in range(most)]), "max": most,
                      "budget": None, "lease_expires_at": 60_000, "now": 1_000, "id": 1, "lease_token_hash": "h",
                      "limited": 1 if label in limited else 0, "ids": "[1]",
                      "queues": None if queues is None else json.dumps(queues)}  # fmt: skip
            wanted = {p: params[p] for p in re.findall(r"(?<![:\w]):(\w+)", sql)}
            conn.execute("BEGIN")
            if label in limited:
                conn.execute("INSERT INTO queues (name, max_claimed, max_per_minute) VALUES ('a', 1000, 1000000)")
                if name == "log_claims":
                    conn.execute("UPDATE todos SET state = 'claimed', visible_at = NULL, lease_token_hash = 'h',"
                                 " lease_expires_at = 60000, owner = 'w', claimed_at = 1000 WHERE id = 1")  # fmt: skip
            steps = 0

            def step() -> int:
                nonlocal steps
                steps += 1
                return 0

            conn.set_progress_handler(step, 1)
            conn.execute(sql, wanted).fetchall()
            conn.set_progress_handler(None, 1)
            conn.execute("ROLLBACK")
            found[label] = steps
        conn.close()
    return found


def _has(q: object, name: str) -> bool:
    try:
        getattr(q, name)
    except (AttributeError, KeyError):
        return False
    return True


def in_process(root: Path, call: str) -> object:
    """``call`` (an expression on this module, ``claims``) in a process of its own, on ``root``'s code; its JSON."""
    code = (f"import sys, asyncio, json; sys.path.insert(0, {str(root)!r}); sys.path.insert(1, {str(ROOT / 'bench')!r});"
            f" import claims; print(json.dumps({call}))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{call} on {root} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def run_case(root: Path, db: str, case: str, n: int) -> tuple[float, float]:
    """``one_case`` in a process of its own, on ``root``'s code: (claims+completes/s, CPU µs each)."""
    rate, cpu = in_process(root, f"asyncio.run(claims.one_case({db!r}, {case!r}, {n}))")  # type: ignore[misc]
    return rate, cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--todos", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--before", type=Path, default=None, help="another checkout: its plain claim, for the ratio")
    args = parser.parse_args()
    cases = [(case, ROOT) for case in CASES] + ([("before", args.before.resolve())] if args.before else [])
    runs: dict[str, list[float]] = {case: [] for case, _ in cases}
    cpu: dict[str, list[float]] = {case: [] for case, _ in cases}
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
                        rate, micros = run_case(root, db, "plain" if case == "before" else case, args.todos)
                        runs[case].append(rate)
                        cpu[case].append(micros)
                    finally:
                        if server:
                            server.drop(db)
    finally:
        if server:
            server.stop()
    medians = {case: statistics.median(values) for case, values in runs.items()}
    cpu_medians = {case: statistics.median(values) for case, values in cpu.items()}
    base, cpu_base = medians["plain"], cpu_medians["plain"]
    print(f"{args.backend}: claim+complete, one consumer, {args.todos} todos, median of {args.runs}")
    print(f"{'case':<14}{'per s':>8}{'vs plain':>10}{'cpu us':>9}{'vs plain':>10}   runs (per s)")
    for case, values in runs.items():
        print(f"{case:<14}{medians[case]:>8.0f}{medians[case] / base:>10.3f}{cpu_medians[case]:>9.0f}"
              f"{cpu_medians[case] / cpu_base:>10.3f}   {', '.join(f'{v:.0f}' for v in values)}")  # fmt: skip
    steps = {}
    if args.backend == "sqlite":
        steps["after"] = in_process(ROOT, "claims.statement_steps()")
        if args.before:
            steps["before"] = in_process(args.before.resolve(), "claims.statement_steps()")
        print("\nvirtual machine steps of one claim statement (3 queues of 50 todos)")
        print(f"{'statement':<36}{'after':>8}{'before':>8}")
        for label, n in steps["after"].items():  # type: ignore[union-attr]
            print(f"{label:<36}{n:>8}{steps.get('before', {}).get(label, '-'):>8}")  # type: ignore[union-attr]
    out = ROOT / "bench" / f"results-claims-{args.backend}.json"
    out.write_text(json.dumps({"backend": args.backend, "todos": args.todos, "medians": medians, "runs": runs,
                               "cpu_us_medians": cpu_medians, "cpu_us": cpu, "steps": steps}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
