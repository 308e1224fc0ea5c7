"""Group commit: concurrent writers in one process share a transaction."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from switchboard_local.core import todos
from switchboard_local.core.clock import ManualClock
from switchboard_local.core.errors import Busy, Conflict
from switchboard_local.core.store.interface import Store
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.store.shared import BUSY_TIMEOUT_ENV
from switchboard_local.core.store.sqlite import group_commit
from switchboard_local.core.store.sqlite.group_commit import GROUP_SECONDS
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease

from support.sql import count, rows, value
from support.store import hold_the_thread

pytestmark = [pytest.mark.anyio, pytest.mark.sqlite_only]  # the SQLite store itself


class Budget:
    """The group commit's monotonic clock: it moves only when a write spends time.

    Left alone, no group ever runs out of time: writes waiting together are
    exactly one commit, however busy the machine.
    """

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def spend(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def budget() -> Budget:
    return Budget()


@pytest.fixture
async def store(db_path: Path, clock: ManualClock, budget: Budget):  # noqa: ANN201
    opened = await open_store(db_path, clock=clock, rng=random.Random(0), monotonic=budget)
    try:
        yield opened
    finally:
        await opened.close()


def slow_create(store: Store, budget: Budget, title: str):  # noqa: ANN201
    """A write that takes two thirds of a transaction's time budget."""

    def body(tx):  # noqa: ANN001, ANN202
        budget.spend(2 * GROUP_SECONDS / 3)
        return todos.insert(tx, NewTodo(queue="q", title=title), now=store.clock.now_ms())[0]

    return body


async def until_queued(store: Store, writes: int) -> None:
    """Let the loop run the writers' tasks (no time passes) until ``writes`` writes wait for the held thread."""
    for _ in range(1000):
        if len(store._group._writes) >= writes:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{writes} writes never queued up")


async def commits(store: Store) -> int:
    return (await store.data_version())[1]


async def test_writes_waiting_together_share_one_commit_and_all_land(store, db_path: Path) -> None:
    before = await commits(store)
    gate, held = await hold_the_thread(store)
    writes = [asyncio.create_task(todos.create(store, NewTodo(queue="q", title=f"t{i}"))) for i in range(40)]
    await asyncio.sleep(0.05)
    gate.set()
    await held
    created = await asyncio.gather(*writes)
    assert sorted(t.id for t, _ in created) == list(range(1, 41))
    assert await commits(store) - before == 1
    assert count(db_path, "todos") == 40


async def test_a_refused_write_in_a_group_is_rolled_back_alone(store) -> None:
    first, _ = await todos.create(store, NewTodo(queue="q", title="claim me"))
    claimed = await todos.claim_next(store, owner="a")
    gate, held = await hold_the_thread(store)
    before = asyncio.create_task(todos.create(store, NewTodo(queue="q", title="before")))
    stale = asyncio.create_task(todos.complete(store, Lease(first.id, "not-the-token")))
    after = asyncio.create_task(todos.create(store, NewTodo(queue="q", title="after")))
    await asyncio.sleep(0.05)
    gate.set()
    await held
    assert (await before)[0].title == "before" and (await after)[0].title == "after"
    with pytest.raises(Conflict):
        await stale
    assert (await todos.get(store, first.id)).state == "claimed"
    assert (await todos.complete(store, Lease(first.id, claimed.lease_token))).todo.state == "done"


async def test_many_refused_writes_in_a_group_each_get_their_error_and_the_rest_commit_once(store) -> None:
    held_todo, _ = await todos.create(store, NewTodo(queue="q", title="claimed"))
    await todos.claim_next(store, owner="a")
    before = await commits(store)
    gate, held = await hold_the_thread(store)
    writes = []
    for i in range(5):  # more refusals than the optimistic reruns allow for
        writes.append(asyncio.create_task(todos.complete(store, Lease(held_todo.id, f"stale-{i}"))))
        writes.append(asyncio.create_task(todos.create(store, NewTodo(queue="q", title=f"new {i}"))))
    await asyncio.sleep(0.05)
    gate.set()
    await held
    results = await asyncio.gather(*writes, return_exceptions=True)
    assert all(isinstance(r, Conflict) for r in results[0::2])
    assert [r[0].title for r in results[1::2]] == [f"new {i}" for i in range(5)]
    assert await commits(store) - before == 1
    assert len(await todos.list_todos(store, state="pending")) == 5


async def test_a_group_commits_every_few_milliseconds_of_work_and_keeps_the_order(store, budget) -> None:
    before = await commits(store)
    gate, held = await hold_the_thread(store)
    writes = [asyncio.create_task(store.write(slow_create(store, budget, f"t{i}"))) for i in range(9)]
    await asyncio.sleep(0.05)
    gate.set()
    await held
    created = await asyncio.gather(*writes)
    # Two writes fit in a budget (the second one starts before it runs out): 2 + 2 + 2 + 2 + 1.
    assert await commits(store) - before == 5
    assert [t.title for t in sorted(created, key=lambda t: t.id)] == [f"t{i}" for i in range(9)]


def tallied(store: Store, histogram: str) -> tuple[float, int]:
    """The sum and the count of one of the store's tally histograms (the dashboard's metrics)."""
    _, total, observations = store.tally.histograms()[histogram]
    return total, observations


async def test_a_group_is_tallied_as_one_commit_of_all_its_writes_timed_within_their_wait(store) -> None:
    (writes_before, groups_before), (seconds_before, commits_before) = (
        tallied(store, "group_commit_size"), tallied(store, "commit_seconds"))  # fmt: skip
    gate, held = await hold_the_thread(store)
    writes = [asyncio.create_task(todos.create(store, NewTodo(queue="q", title=f"t{i}"))) for i in range(40)]
    await until_queued(store, 40)
    began = time.perf_counter()
    gate.set()
    await held
    await asyncio.gather(*writes)
    waited = time.perf_counter() - began
    writes_after, groups_after = tallied(store, "group_commit_size")
    seconds_after, commits_after = tallied(store, "commit_seconds")
    assert (groups_after - groups_before, writes_after - writes_before) == (1, 40)
    assert commits_after - commits_before == 1
    assert 0 < seconds_after - seconds_before <= waited  # BEGIN to COMMIT: inside the writers' wait


async def test_a_lone_write_is_tallied_as_one_commit_of_one_write_timed_within_its_wait(store) -> None:
    (writes_before, groups_before), (seconds_before, commits_before) = (
        tallied(store, "group_commit_size"), tallied(store, "commit_seconds"))  # fmt: skip
    began = time.perf_counter()
    await todos.create(store, NewTodo(queue="q", title="alone"))
    waited = time.perf_counter() - began
    writes_after, groups_after = tallied(store, "group_commit_size")
    seconds_after, commits_after = tallied(store, "commit_seconds")
    assert (groups_after - groups_before, writes_after - writes_before) == (1, 1)
    assert commits_after - commits_before == 1
    assert 0 < seconds_after - seconds_before <= waited


async def test_a_group_takes_on_writes_until_its_time_budget_is_exceeded_not_merely_reached(store, budget) -> None:
    def spends_the_whole_budget(title: str):  # noqa: ANN202
        def body(tx):  # noqa: ANN001, ANN202
            budget.spend(GROUP_SECONDS)
            return todos.insert(tx, NewTodo(queue="q", title=title), now=store.clock.now_ms())[0]

        return body

    before = await commits(store)
    gate, held = await hold_the_thread(store)
    writes = [asyncio.create_task(store.write(spends_the_whole_budget(f"t{i}"))) for i in range(4)]
    await until_queued(store, 4)
    gate.set()
    await held
    created = await asyncio.gather(*writes)
    # A write that ends exactly at the budget leaves room for the next to start: 2 + 2.
    assert await commits(store) - before == 2
    assert [t.title for t in created] == [f"t{i}" for i in range(4)]


async def test_a_database_error_in_one_write_does_not_lose_the_others(store, db_path: Path) -> None:
    with sqlite3.connect(db_path) as conn:
        conn.execute("CREATE TRIGGER boom BEFORE INSERT ON todos WHEN NEW.title = 'poison' "
                     "BEGIN SELECT RAISE(ABORT, 'injected'); END")  # fmt: skip
    gate, held = await hold_the_thread(store)
    titles = ["one", "poison", "two"]
    writes = [asyncio.create_task(todos.create(store, NewTodo(queue="q", title=t))) for t in titles]
    await asyncio.sleep(0.05)
    gate.set()
    await held
    results = await asyncio.gather(*writes, return_exceptions=True)
    assert isinstance(results[1], Conflict)
    assert [r[0].title for r in (results[0], results[2])] == ["one", "two"]
    assert [r[0] for r in rows(db_path, "SELECT title FROM todos ORDER BY id")] == ["one", "two"]


async def test_a_write_that_raises_after_writing_leaves_none_of_its_rows_and_the_others_land(store, db_path) -> None:
    def half_then_raise(tx):  # noqa: ANN001, ANN202
        todos.insert(tx, NewTodo(queue="q", title="half"), now=store.clock.now_ms())
        raise ValueError("changed my mind")

    gate, held = await hold_the_thread(store)
    writes = [
        asyncio.create_task(todos.create(store, NewTodo(queue="q", title="one"))),
        asyncio.create_task(store.write(half_then_raise)),
        asyncio.create_task(todos.create(store, NewTodo(queue="q", title="two"))),
    ]
    await asyncio.sleep(0.05)
    gate.set()
    await held
    results = await asyncio.gather(*writes, return_exceptions=True)
    assert isinstance(results[1], ValueError)
    assert [r[0] for r in rows(db_path, "SELECT title FROM todos ORDER BY id")] == ["one", "two"]


async def test_a_claim_inside_a_group_takes_over_a_lapsed_lease(store, clock) -> None:
    lapsed, _ = await todos.create(store, NewTodo(queue="q", title="lapsed", priority=5))
    await todos.claim_next(store, owner="crashed", lease=10)
    clock.advance(11)
    gate, held = await hold_the_thread(store)
    other = asyncio.create_task(todos.create(store, NewTodo(queue="q", title="other")))
    takeover = asyncio.create_task(todos.claim_next(store, owner="b"))
    await asyncio.sleep(0.05)
    gate.set()
    await held
    await other
    claimed = await takeover
    assert (claimed.id, claimed.owner, claimed.attempt) == (lapsed.id, "b", 2)
    history = (await todos.get(store, lapsed.id)).attempts
    assert [a.outcome for a in history] == ["lease_expired", None]


async def test_close_lets_the_writes_already_waiting_commit_and_refuses_new_ones(db_path, budget) -> None:
    store = await open_store(db_path, monotonic=budget)
    gate, held = await hold_the_thread(store)
    waiting = [asyncio.create_task(store.write(slow_create(store, budget, f"t{i}"))) for i in range(9)]  # 5 commits
    await asyncio.sleep(0.05)
    closing = asyncio.create_task(store.close())
    await asyncio.sleep(0.05)
    with pytest.raises(RuntimeError, match="^the store is closed$"):
        await todos.create(store, NewTodo(queue="q", title="too late"))
    gate.set()
    await held
    await closing
    assert len(await asyncio.gather(*waiting)) == 9
    assert count(db_path, "todos") == 9


async def test_a_write_that_rolls_back_the_whole_transaction_does_not_take_the_others_with_it(store, db_path) -> None:
    with sqlite3.connect(db_path) as conn:
        conn.execute("CREATE TRIGGER boom BEFORE INSERT ON todos WHEN NEW.title LIKE 'poison%' "
                     "BEGIN SELECT RAISE(ROLLBACK, 'injected'); END")  # fmt: skip
    before = await commits(store)
    gate, held = await hold_the_thread(store)
    titles = ["poison 1", "good 1", "poison 2", "good 2", "poison 3", "good 3"]
    writes = [asyncio.create_task(todos.create(store, NewTodo(queue="q", title=t))) for t in titles]
    await asyncio.sleep(0.05)
    gate.set()
    await held
    await asyncio.gather(*writes, return_exceptions=True)
    assert all(isinstance(w.exception(), Conflict) for w in writes[0::2])  # raised, not returned
    assert [w.result()[0].title for w in writes[1::2]] == ["good 1", "good 2", "good 3"]
    assert await commits(store) - before == 1  # the others still share one commit
    assert [r[0] for r in rows(db_path, "SELECT title FROM todos ORDER BY id")] == ["good 1", "good 2", "good 3"]


class SteppingClock(ManualClock):
    """After ``step_after`` readings, one second later: time passing between two runs of a group."""

    step_after: int | None = None
    readings = 0

    def now_ms(self) -> int:
        self.readings += 1
        late = self.step_after is not None and self.readings > self.step_after
        return super().now_ms() + (1000 if late else 0)


async def test_a_refused_write_is_answered_with_what_it_met_in_the_run_that_commits(db_path, budget) -> None:
    clock = SteppingClock()
    store = await open_store(db_path, clock=clock, monotonic=budget)
    try:
        todo, _ = await todos.create(store, NewTodo(queue="q", title="x"))
        held_by_a = await todos.claim_next(store, owner="a", lease=1)
        clock.advance(0.999)  # a's lease has a millisecond left
        gate, held = await hold_the_thread(store)
        clock.readings, clock.step_after = 0, 2  # the first run of the group, then a second later
        complete = asyncio.create_task(todos.complete(store, Lease(todo.id, held_by_a.lease_token)))
        takeover = asyncio.create_task(todos.claim(store, todo.id, owner="b"))
        await asyncio.sleep(0.05)
        gate.set()
        await held
        completed, taken = await asyncio.gather(complete, takeover, return_exceptions=True)
        # The complete that first went through was rolled back; in the run that committed
        # a's lease had lapsed, so b took the todo over (never "todo is done").
        assert isinstance(completed, Conflict) and "expired" in str(completed)
        assert (taken.owner, taken.attempt) == ("b", 2)
    finally:
        await store.close()


async def test_what_a_write_notes_in_the_memo_is_seen_by_the_next_in_its_group_and_undone_with_it(store) -> None:
    def notes(key):  # noqa: ANN001, ANN202
        def body(tx):  # noqa: ANN001, ANN202
            tx.memo[key] = True

        return body

    def notes_then_raises(tx):  # noqa: ANN001, ANN202
        tx.memo["undone"] = True
        raise ValueError("rolled back to its savepoint")

    def reads(tx):  # noqa: ANN001, ANN202
        return sorted(tx.memo)

    gate, held = await hold_the_thread(store)
    writes = [asyncio.create_task(store.write(body)) for body in (notes("kept"), notes_then_raises, reads)]
    await asyncio.sleep(0.05)
    gate.set()
    await held
    results = await asyncio.gather(*writes, return_exceptions=True)
    assert isinstance(results[1], ValueError)
    assert results[2] == ["kept"]
    assert await store.write(reads) == []  # a memo lives for one transaction


async def test_a_cancelled_writer_does_not_undo_its_committed_work(store, db_path: Path) -> None:
    gate, held = await hold_the_thread(store)
    write = asyncio.create_task(todos.create(store, NewTodo(queue="q", title="fire and forget")))
    await asyncio.sleep(0.05)
    write.cancel()
    gate.set()
    await held
    with pytest.raises(asyncio.CancelledError):
        await write
    await store.write(lambda tx: None)  # queued behind the flush: answered after it
    assert count(db_path, "todos") == 1


async def warm_up_the_inline_regime(store: Store) -> None:
    """A lone writer for a while: the store then writes on the caller's thread."""
    for n in range(group_commit.INLINE_AFTER + 1):
        await todos.create(store, NewTodo(queue="warm", title=f"warm {n}"))


def orphan_attempt(tx) -> None:  # noqa: ANN001
    """A write the database refuses only at COMMIT: a deferred foreign key to no todo."""
    tx.run("PRAGMA defer_foreign_keys = ON")
    tx.run(
        "INSERT INTO attempts (todo_id, seq, attempt, owner, claimed_at, ended_at, outcome)"
        " VALUES (999999, 1, 1, 'nobody', 0, 0, 'failed')"
    )


async def test_a_commit_the_database_refuses_answers_every_writer_of_the_group_with_the_error(store, db_path) -> None:
    gate, held = await hold_the_thread(store)
    writes = [
        asyncio.create_task(todos.create(store, NewTodo(queue="q", title="one"))),
        asyncio.create_task(store.write(orphan_attempt)),
        asyncio.create_task(todos.create(store, NewTodo(queue="q", title="two"))),
    ]
    await asyncio.sleep(0.05)
    gate.set()
    await held
    results = await asyncio.gather(*writes, return_exceptions=True)
    assert [type(r) for r in results] == [Conflict] * 3  # nothing committed: nobody is told it was
    assert all("FOREIGN KEY" in str(r) for r in results)
    assert count(db_path, "todos") == 0
    assert (await todos.create(store, NewTodo(queue="q", title="after")))[1] is True  # the store goes on


async def test_a_lone_commit_the_database_refuses_is_an_error_and_keeps_nothing(store, db_path) -> None:
    with pytest.raises(Conflict, match="FOREIGN KEY"):
        await store.write(orphan_attempt)
    assert count(db_path, "attempts") == 0


async def test_a_fault_inside_the_group_commit_answers_every_waiting_writer_and_the_store_goes_on(store, monkeypatch) -> None:
    def broken(bodies):  # noqa: ANN001, ANN202  (a fault hook: nothing real fails there)
        raise RuntimeError("injected fault in the commit machinery")

    gate, held = await hold_the_thread(store)
    monkeypatch.setattr(store._group, "_commit_group", broken)
    writes = [asyncio.create_task(todos.create(store, NewTodo(queue="q", title=f"t{n}"))) for n in range(3)]
    await asyncio.sleep(0.05)
    gate.set()
    await held
    for write in writes:
        with pytest.raises(RuntimeError, match="injected fault"):
            await asyncio.wait_for(write, 10)
    monkeypatch.undo()
    assert (await todos.create(store, NewTodo(queue="q", title="after")))[1] is True


@pytest.mark.parametrize("grouped", [False, True], ids=["lone", "grouped"])
async def test_writes_that_change_nothing_do_not_move_the_stores_data_version(store, grouped) -> None:
    before = await store.data_version()
    if grouped:
        gate, held = await hold_the_thread(store)
        empty = [asyncio.create_task(todos.claim_next(store, owner="w")) for _ in range(3)]
        await asyncio.sleep(0.05)
        gate.set()
        await held
        assert await asyncio.gather(*empty) == [None] * 3
    else:
        assert await todos.claim_next(store, owner="w") is None
        await store.write(lambda tx: None)
    assert await store.data_version() == before  # an idle long poll must not wake up
    await todos.create(store, NewTodo(queue="q", title="news"))
    assert await store.data_version() != before


async def test_a_grouped_write_that_changes_rows_moves_the_data_version(store) -> None:
    before = await store.data_version()
    gate, held = await hold_the_thread(store)
    writes = [asyncio.create_task(todos.create(store, NewTodo(queue="q", title=f"t{n}"))) for n in range(2)]
    await asyncio.sleep(0.05)
    gate.set()
    await held
    await asyncio.gather(*writes)
    assert await store.data_version() != before


async def test_a_lone_writer_that_never_waits_still_lets_the_other_tasks_run(store) -> None:
    await warm_up_the_inline_regime(store)
    written, seen = 0, []

    async def writer() -> None:
        nonlocal written
        for n in range(4 * group_commit.PROBE_EVERY):  # inline writes: none of them waits for anything
            await store.write(lambda tx, n=n: todos.insert(tx, NewTodo(queue="q", title=f"t{n}"), now=0))
            written += 1

    async def other() -> None:  # first in line after the writer's first step
        seen.append(written)

    await asyncio.gather(writer(), other())
    assert seen and seen[0] <= group_commit.PROBE_EVERY, seen  # it ran while the writer was still writing


async def test_a_second_writer_turning_up_beside_a_lone_one_shares_its_commits(store) -> None:
    await warm_up_the_inline_regime(store)
    before = store._commits

    async def writer(name: str) -> None:
        for n in range(2 * group_commit.PROBE_EVERY):
            await todos.create(store, NewTodo(queue="q", title=f"{name} {n}"))

    first = asyncio.create_task(writer("first"))
    await asyncio.sleep(0)  # the first writes alone, inline, before the second turns up
    await asyncio.gather(first, writer("second"))
    # Once noticed, the two go through the thread together: fewer commits than writes.
    assert store._commits - before < 4 * group_commit.PROBE_EVERY


async def test_a_write_that_raises_leaves_nothing_behind_on_the_inline_path_too(store, db_path) -> None:
    await warm_up_the_inline_regime(store)

    def half_then_raise(tx):  # noqa: ANN001, ANN202
        todos.insert(tx, NewTodo(queue="q", title="half"), now=store.clock.now_ms())
        raise ValueError("changed my mind")

    for _ in range(3):
        with pytest.raises(ValueError, match="changed my mind"):
            await store.write(half_then_raise)
    assert value(db_path, "SELECT count(*) FROM todos WHERE title = 'half'") == 0


async def test_a_write_refused_as_busy_names_the_database_file(db_path, monkeypatch) -> None:
    monkeypatch.setenv(BUSY_TIMEOUT_ENV, "0.05")
    store = await open_store(db_path)
    holder = sqlite3.connect(db_path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        with pytest.raises(Busy) as refused:
            await todos.create(store, NewTodo(queue="q", title="t"))
        assert str(db_path) in str(refused.value)
    finally:
        holder.close()
        await store.close()


async def test_while_the_thread_is_busy_a_write_on_the_inline_path_queues_without_blocking_the_loop(store) -> None:
    await warm_up_the_inline_regime(store)
    gate, held = await hold_the_thread(store)  # the thread holds the connection (a long read, say)
    write = asyncio.create_task(todos.create(store, NewTodo(queue="q", title="queued")))
    await asyncio.sleep(0.05)  # the loop runs on: the write waits in the thread's queue
    gate.set()
    assert await held is True  # released by the loop, not by the thread's own timeout
    assert (await write)[0].title == "queued"


async def test_the_event_loop_never_waits_for_another_processs_lock(db_path, monkeypatch) -> None:
    monkeypatch.setenv(BUSY_TIMEOUT_ENV, "60")
    store = await open_store(db_path)
    try:
        await warm_up_the_inline_regime(store)
        holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        ticked = threading.Event()

        def hold_until_the_loop_ticks() -> bool:
            by_the_loop = ticked.wait(20)  # a blocked loop never ticks: give up after 20 s
            holder.execute("COMMIT")
            return by_the_loop

        released = asyncio.create_task(asyncio.to_thread(hold_until_the_loop_ticks))
        write = asyncio.create_task(todos.create(store, NewTodo(queue="q", title="waits in the thread")))
        for _ in range(3):
            await asyncio.sleep(0.01)
        ticked.set()
        assert await released is True
        assert (await write)[0].title == "waits in the thread"
        holder.close()
    finally:
        await store.close()


async def test_a_write_that_raises_what_a_future_cannot_carry_is_answered_with_a_runtime_error_naming_it(store) -> None:
    def exits(tx):  # noqa: ANN001, ANN202
        raise SystemExit(3)

    with pytest.raises(RuntimeError, match=r"^the store's thread failed: SystemExit\(3\)$"):
        await store.write(exits)
    assert (await todos.create(store, NewTodo(queue="q", title="after")))[1] is True
