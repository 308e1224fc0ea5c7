"""Todos and their lifecycle: the verbs every edge calls, as ``todos.<verb>``.

    create ─▶ pending ─claim─▶ claimed ─complete─▶ done
               ▲  ▲ ▲            │  │  │
               │  │ └─ release, ─┘  │  └─ fail, attempts left: pending after a backoff
               │  │   lease lapse   │     fail on the last attempt ─▶ failed (a dead letter)
               │  │                 │                                  │
               │  └──────────── redrive (an operator) ◀────────────────┘
               │
        cancel (an operator, on pending or claimed) ─▶ cancelled

done, failed and cancelled are finished: they free the idempotency key.

The verbs live by concept; this package names them all, so that a caller
asks for the noun's verb without knowing the module it lives in:

    claims.py     claim by id, claim_next (one or many, or waiting for work); the
                  one choice of claim statement; lapsed leases taken back
    lifecycle.py  create, and the leased verbs: heartbeat, complete, fail, release
    batches.py    complete_many, fail_many: the single verbs' bodies, each item alone
    reads.py      get, list_todos, stats
    waits.py      of_ids, wait_finished: todos named by id, waited on until they finish
    operator.py   redrive, force_release, cancel: an operator's verbs on one todo
    bulk.py       redrive_many, redrive_group, cancel_many, purge, and their counts

What a todo is (its fields and their checks) lives in todo_model.py.
"""

from .batches import Completion, Failure, ItemOutcome, Outcomes, complete_many, fail_many
from .bulk import (
    BULK_BATCH,
    PURGEABLE,
    Redriven,
    cancel_many,
    count_dead_letters,
    count_pending,
    count_purgeable,
    purge,
    redrive_group,
    redrive_many,
)
from .claims import MAX_BATCH, ClaimedBatch, NextClaim, claim, claim_next, claim_next_many, claim_next_waiting
from .lifecycle import Finished, Lease, complete, create, fail, heartbeat, insert, insert_id, insert_params, release
from .operator import cancel, force_release, redrive
from .reads import get, list_todos, queues_without_todos, stats
from .waits import FINISHED, MAX_WAITED, finished, of_ids, wait_finished

__all__ = [
    "BULK_BATCH",
    "FINISHED",
    "MAX_BATCH",
    "MAX_WAITED",
    "PURGEABLE",
    "ClaimedBatch",
    "Completion",
    "Failure",
    "Finished",
    "ItemOutcome",
    "Lease",
    "NextClaim",
    "Outcomes",
    "Redriven",
    "cancel",
    "cancel_many",
    "claim",
    "claim_next",
    "claim_next_many",
    "claim_next_waiting",
    "complete",
    "complete_many",
    "count_dead_letters",
    "count_pending",
    "count_purgeable",
    "create",
    "fail",
    "fail_many",
    "finished",
    "force_release",
    "get",
    "heartbeat",
    "insert",
    "insert_id",
    "insert_params",
    "list_todos",
    "of_ids",
    "purge",
    "queues_without_todos",
    "redrive",
    "redrive_group",
    "redrive_many",
    "release",
    "stats",
    "wait_finished",
]
