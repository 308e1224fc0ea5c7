"""Every hot statement on todos is served by an index, and every index on todos
serves one: the plans SQLite makes for its statements on a real file (EXPLAIN
QUERY PLAN), and for the claims the work each form does (its virtual machine's
steps) over a shallow backlog and one a hundred times deeper; never timings.

A job's commit pays a page for each index entry it changes, so an index that
no plan uses is pure cost; a statement whose plan walks every todo grows with
the file. The few statements that do walk every todo are listed below with
why that is accepted.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path

import pytest

from switchboard_local.core.store.opener import open_store
from switchboard_local.core.store.queries import Q

pytestmark = pytest.mark.sqlite_only  # the SQLite store itself

# statement -> the index (or primary key) its plan must search todos or attempts by.
PLANS = {
    # claiming, and lapse recovery inside every claim
    "claim_next": "todos_ready_by_queue",
    "claim_next_in_queue": "todos_ready_by_queue",
    "claim_next_in_queues": "todos_ready_by_queue",
    "claim_next_limited": "todos_ready_by_queue",  # where a limited queue is in scope
    "claim_by_id": "INTEGER PRIMARY KEY",
    "todos_by_ids": "INTEGER PRIMARY KEY",  # todo wait, wait_todos
    "any_lapsed_lease": "todos_leases",
    "end_lapsed_attempts": "todos_leases",
    "recover_lapsed_leases": "todos_leases",
    # a limited queue's claimed todos: the few claimed now, never its backlog
    "queue_load": "todos_leases",
    # the leased verbs and the history
    "heartbeat": "INTEGER PRIMARY KEY",
    "complete": "INTEGER PRIMARY KEY",
    "complete_many": "INTEGER PRIMARY KEY",
    "fail": "INTEGER PRIMARY KEY",
    "release": "INTEGER PRIMARY KEY",
    "end_attempt": "INTEGER PRIMARY KEY",
    "attempts_of_todo": "attempts USING PRIMARY KEY",
    "last_ended_attempt": "attempts USING PRIMARY KEY",
    # idempotency
    "insert_todo": "todos_live_key",
    "insert_todo_id": "todos_live_key",
    "live_todo_by_key": "todos_live_key",
    "live_todos_by_key": "todos_live_key",
    # dependencies: what a todo waits for, and what waits for a todo
    "dependency_states": "INTEGER PRIMARY KEY",
    "dependencies_of": "todo_deps USING PRIMARY KEY",
    "cancel_dependents": "todo_deps_by_after",
    # listing one queue
    "list_todos_in_queue": "todos_by_queue",
    "browse_todos_in_queue": "todos_by_queue",
    "queue_has_todos": "todos_by_queue",
    "purge_todos": "todos_by_queue",
    "count_purgeable": "todos_by_queue",
    # pending todos of a queue (bulk cancel)
    "count_pending": "todos_blocked",
    "cancel_pending": "todos_blocked",
    # dead letters
    "dead_letters": "todos_dead",
    "count_dead_letters": "todos_dead",
    "dead_letters_with_error": "todos_dead",
    "dead_groups": "todos_dead",
    # events and their todos (retention keeps an event a live todo points to)
    "prune_events": "todos_by_event",
    "todos_of_event": "todos_by_event",
    "event_in_scope": "todos_by_event",
    "event_in_queues": "todos_by_event",
    # what an adapter acking on completion asks of the messages it holds
    "events_in_play": "todos_by_event",
}

# Statements that walk every todo, and why that is accepted.
WALKS = {
    # Newest first across every queue: the walk down the primary key stops at the limit.
    "list_todos": "newest first, stops at the limit",
    "browse_todos": "newest first, stops at the limit",
    # The pruner's hourly delete of finished todos: a pass over what retention keeps.
    "prune_finished_todos": "hourly, bounded by retention",
    # Counts by queue and state over every todo (done ones included): a read on a read-only connection.
    "stats": "a read of every row's state",
}


@pytest.fixture(scope="module")
def conn(tmp_path_factory: pytest.TempPathFactory):
    path: Path = tmp_path_factory.mktemp("plans") / "switchboard.db"

    async def create() -> None:
        async with await open_store(path):
            pass

    asyncio.run(create())
    connection = sqlite3.connect(path)
    yield connection
    connection.close()


def plan(conn: sqlite3.Connection, name: str) -> list[str]:
    sql = getattr(Q, name)
    params = {p: None for p in re.findall(r":(\w+)", sql)}
    return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


def full_scans_of_todos(lines: list[str]) -> list[str]:
    """Plan lines that read todos row by row, rather than searching an index or the primary key."""
    return [line for line in lines if re.fullmatch(r"SCAN (todos|t|head)( AS \w+)?", line)]


@pytest.mark.parametrize("name", sorted(PLANS))
def test_a_hot_statement_searches_an_index_and_never_scans_todos(conn, name: str) -> None:
    lines = plan(conn, name)
    assert any(PLANS[name] in line for line in lines), f"{name} does not use {PLANS[name]}: {lines}"
    assert not full_scans_of_todos(lines), f"{name} scans todos: {lines}"


def test_claiming_never_sorts_the_backlog(conn) -> None:
    # The queues are found by skipping along the per-queue index (when none
    # are named), then the first :max of each: the only sort is of those heads.
    lines = plan(conn, "claim_next")
    assert "SEARCH todos USING INDEX todos_ready_by_queue (queue>?)" in lines
    assert "SEARCH todos USING INDEX todos_ready_by_queue (queue=?)" in lines


# The claims of the next in line: claim_next in each form (every queue, one,
# several; one todo, a batch, a batch with a budget), and the leaner ones for
# one todo from named queues (the commonest claim, chosen over claim_next).
QUEUES = {"every queue": None, "one queue": ["b"], "several queues": ["a", "c"]}
SIZES = {"one todo": (1, None), "a batch": (10, None), "a batch with a budget": (10, 2_000)}
CLAIMS = [("claim_next", queues, size) for queues in QUEUES for size in SIZES] + [
    ("claim_next_in_queue", "one queue", "one todo"),
    ("claim_next_in_queues", "several queues", "one todo"),
]


@pytest.fixture(scope="module")
def backlogs(tmp_path_factory: pytest.TempPathFactory):
    """Two files, each with three queues of pending todos (mixed priorities): 50 a queue, and 5,000."""
    made = {}
    for depth in (50, 5_000):
        path: Path = tmp_path_factory.mktemp(f"backlog-{depth}") / "switchboard.db"

        async def create(path: Path) -> None:
            async with await open_store(path):
                pass

        asyncio.run(create(path))
        connection = sqlite3.connect(path, isolation_level=None)
        rows = [(queue, f"t{i}", '{"n": 1}', i % 3) for queue in "abc" for i in range(depth)]
        with connection:
            connection.execute("BEGIN")
            connection.executemany(
                "INSERT INTO todos (queue, title, payload, state, priority, max_attempts, visible_at, created_at,"
                " updated_at) VALUES (?, ?, ?, 'pending', ?, 5, 0, 0, 0)", rows)  # fmt: skip
        made[depth] = connection
    yield made
    for connection in made.values():
        connection.close()


def claim_steps(conn: sqlite3.Connection, statement: str, queues: list[str] | None, max: int,
                budget: int | None, limit: str | None = None) -> tuple[int, int]:  # fmt: skip
    """The virtual machine's steps of one claim (a progress handler called at each:
    a count, not a timing), and how many todos it claimed; then rolled back.
    ``limit``: a statement run first, in the same transaction (a queue's limit set)."""
    steps = 0

    def step() -> int:
        nonlocal steps
        steps += 1
        return 0

    params = {"owner": "w", "agent": "w", "hashes": json.dumps([f"h{i}" for i in range(max)]), "max": max,
              "budget": budget, "lease_expires_at": 60_000, "now": 1_000,
              "queues": None if queues is None else json.dumps(queues)}  # fmt: skip
    conn.execute("BEGIN")
    try:
        if limit is not None:
            conn.execute(limit)
        conn.set_progress_handler(step, 1)
        claimed = conn.execute(getattr(Q, statement), params).fetchall()
    finally:
        conn.set_progress_handler(None, 1)
        conn.execute("ROLLBACK")
    return steps, len(claimed)


@pytest.mark.parametrize("statement, queues, size", CLAIMS, ids=[" - ".join(claim) for claim in CLAIMS])
def test_each_form_of_claim_does_the_same_work_over_a_backlog_a_hundred_times_deeper(
    backlogs, statement: str, queues: str, size: str
) -> None:
    # Whatever the queues (every one, one, several) and however many it takes:
    # no walk and no sort of a backlog, or the deeper one would cost more steps.
    max, budget = SIZES[size]
    shallow, deep = (claim_steps(backlogs[depth], statement, QUEUES[queues], max, budget) for depth in (50, 5_000))
    assert shallow[1] == deep[1] > 0
    assert shallow[0] == deep[0]


# Both limits set on every queue of the backlog, never reached: the limited way's own work.
LIMITS = ("INSERT INTO queues (name, max_claimed, max_per_minute)"
          " VALUES ('a', 1000, 100000), ('b', 1000, 100000), ('c', 1000, 100000)")  # fmt: skip


@pytest.mark.parametrize("queues, size", [(q, s) for q in QUEUES for s in SIZES], ids=lambda x: str(x))
def test_a_claim_of_limited_queues_does_the_same_work_over_a_backlog_a_hundred_times_deeper(
    backlogs, queues: str, size: str
) -> None:
    # claim_next_limited counts each queue's claimed todos and claims of the last
    # minute: neither walks nor sorts a backlog, or the deeper one would cost more steps.
    max, budget = SIZES[size]
    shallow, deep = (claim_steps(backlogs[depth], "claim_next_limited", QUEUES[queues], max, budget, LIMITS)
                     for depth in (50, 5_000))  # fmt: skip
    assert shallow[1] == deep[1] > 0
    assert shallow[0] == deep[0]


def test_the_plain_claims_claim_nothing_from_a_limited_queue(backlogs) -> None:
    # ... so that a limit is never passed by a claim that did not count: claims.py takes the limited way then.
    for statement, queues, size in CLAIMS:
        assert claim_steps(backlogs[50], statement, QUEUES[queues], *SIZES[size], LIMITS)[1] == 0, statement


def test_every_index_on_todos_serves_a_plan(conn) -> None:
    indexes = {name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'todos' AND sql IS NOT NULL")}  # fmt: skip
    used = {index for index in PLANS.values() if index.startswith("todos_")}
    assert indexes == used


def test_the_statements_that_walk_every_todo_are_only_the_accepted_ones(conn) -> None:
    names = [n for n in vars(Q) if not n.startswith("_")]
    walking = set()
    for name in names:
        try:
            lines = plan(conn, name)
        except sqlite3.Error:  # PRAGMA data_version and the like: no plan
            continue
        if full_scans_of_todos(lines) and "todos" in getattr(Q, name):
            walking.add(name)
    assert walking <= set(WALKS) | DASHBOARD_READS, sorted(walking - set(WALKS) - DASHBOARD_READS)


# The dashboard's and the watchers' reads that look at every todo by time (what
# changed, what finished in the last hour): read-only connections, never on the
# commit path; an index on a time every state change rewrites would cost every job.
DASHBOARD_READS = {"queue_minutes", "done_since", "browse_fingerprint"}
