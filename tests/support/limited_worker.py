"""A draining agent on a limited queue, as its own OS process (tests/processes/test_limited_drain.py).

    python tests/support/limited_worker.py DB OWNER QUEUE --start-when FILE [--max N | --then]

Claims and completes until the queue has nothing pending or claimed, printing
one JSON line per completed todo. A claim that finds the queue at its limit
waits as an agent would: a long poll (claim_next_waiting), woken by the
commits of the other processes. One todo at a time (claim_next, then
complete); with --then each complete claims the next in the same transaction;
with --max, batches of up to N (claim_next_many, complete_many then-claiming).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

from switchboard_local.core import todos, watch
from switchboard_local.core.store.interface import Store
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.todos import Lease, NextClaim


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("owner")
    parser.add_argument("queue")
    parser.add_argument("--start-when", required=True, help="wait until this file exists (all start together)")
    parser.add_argument("--max", type=int, default=None, help="claim and complete in batches of up to this many")
    parser.add_argument("--then", action="store_true", help="each complete claims the next todo")
    args = parser.parse_args()
    async with await open_store(args.db) as store, watch.following(store) as changes:
        print(json.dumps({"ready": True}), flush=True)
        while not os.path.exists(args.start_when):
            time.sleep(0.01)
        claim = NextClaim(args.owner, [args.queue])
        while True:
            batch = await todos.claim_next_waiting(store, claim, wait=1, changes=changes, max=args.max or 1)
            if not batch:
                (stats,) = await todos.stats(store, queues=[args.queue])
                if stats.pending == 0 and stats.claimed == 0:
                    return 0
                continue
            while batch:
                batch = await finish(store, claim, batch, args)


async def finish(store: Store, claim: NextClaim, batch: list[todos.Todo], args: argparse.Namespace) -> list[todos.Todo]:
    """Complete ``batch``; the todos claimed next in the same transaction (none without --then or --max)."""
    if args.max is not None:
        outcomes = await todos.complete_many(store, [todos.Completion(Lease.of(t), None) for t in batch],
                                             then=claim, max=args.max)  # fmt: skip
        for outcome in outcomes:
            assert outcome.ok, outcome.error
            print(json.dumps({"completed": outcome.todo_id}), flush=True)
        return list(outcomes.next)
    (todo,) = batch
    finished = await todos.complete(store, Lease.of(todo), then=claim if args.then else None)
    print(json.dumps({"completed": finished.todo.id}), flush=True)
    return [finished.next] if finished.next is not None else []


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
