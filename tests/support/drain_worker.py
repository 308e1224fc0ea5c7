"""A draining agent as its own OS process, for the concurrency tests.

    python tests/support/drain_worker.py DB OWNER QUEUE [--lease S] [--hang-on-first] [--start-when FILE]
                                         [--max N | --then]

Claims and completes until the queue is empty, printing one JSON line per
completed todo (claim_next, then complete: two commits per todo). With
--then each complete claims the next todo in the same transaction (one
commit per todo). With --max it claims up to N at a time and completes each
batch claiming the next one in the same transaction (the batch verbs). With --hang-on-first it claims one todo, prints it (id, lease
token, lease end in ms), and sleeps (the test kills it: a crashed agent
holding a lease).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

from switchboard_local.core import todos
from switchboard_local.core.store.interface import Store
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.todos import Lease


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("owner")
    parser.add_argument("queue")
    parser.add_argument("--lease", type=float, default=300.0)
    parser.add_argument("--hang-on-first", action="store_true")
    parser.add_argument("--start-when", help="wait until this file exists (so that all workers start together)")
    parser.add_argument("--max", type=int, default=None, help="claim and complete in batches of up to this many")
    parser.add_argument("--then", action="store_true", help="each complete claims the next todo (one commit per todo)")
    args = parser.parse_args()
    async with await open_store(args.db) as store:
        if args.start_when:
            print(json.dumps({"ready": True}), flush=True)
            while not os.path.exists(args.start_when):
                time.sleep(0.01)
        if args.max is not None:
            return await drain_in_batches(store, args.owner, args.queue, args.lease, args.max)
        if args.then:
            return await drain_fused(store, args.owner, args.queue, args.lease)
        while True:
            todo = await todos.claim_next(store, owner=args.owner, queues=[args.queue], lease=args.lease)
            if todo is None:
                return 0
            if args.hang_on_first:
                claimed = {"claimed": todo.id, "token": todo.lease_token, "lease_expires_at": todo.lease_expires_at}
                print(json.dumps(claimed), flush=True)
                time.sleep(3600)
            done = (await todos.complete(store, Lease.of(todo), result={"by": args.owner})).todo
            print(json.dumps({"completed": done.id, "attempt": done.attempt}), flush=True)


async def drain_fused(store: Store, owner: str, queue: str, lease: float) -> int:
    claim = todos.NextClaim(owner, [queue], lease)
    todo = await todos.claim_next(store, owner=owner, queues=[queue], lease=lease)
    while todo is not None:
        finished = await todos.complete(store, Lease.of(todo), result={"by": owner}, then=claim)
        print(json.dumps({"completed": finished.todo.id, "attempt": finished.todo.attempt}), flush=True)
        todo = finished.next
    return 0


async def drain_in_batches(store: Store, owner: str, queue: str, lease: float, most: int) -> int:
    claim = todos.NextClaim(owner, [queue], lease)
    batch = await todos.claim_next_many(store, claim, most)
    while batch:
        items = [todos.Completion(Lease.of(t), {"by": owner}) for t in batch]
        outcomes = await todos.complete_many(store, items, then=claim, max=most)
        for outcome in outcomes:
            if not outcome.ok:
                print(json.dumps({"refused": outcome.todo_id, "error": str(outcome.error)}), flush=True)
                return 1
            print(json.dumps({"completed": outcome.todo_id, "attempt": outcome.todo.attempt}), flush=True)
        batch = outcomes.next
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
