"""Group commit: concurrent writers in one process share a transaction."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest
from store_support import hold_the_thread

from switchboard_local import store as store_module
from switchboard_local import todos
from switchboard_local.clock import ManualClock
from switchboard_local.errors import Conflict
from switchboard_local.store import GROUP_SECONDS, Store
from switchboard_local.todos import NewTodo

pytestmark = pytest.mark.anyio


def slow_create(store: Store, title: str):  # noqa: ANN201
    """A write that takes two thirds of a transaction's time budget."""

    def body(tx):  # noqa: ANN001, ANN202
        time.sleep(2 * GROUP_SECONDS / 3)
        return todos.insert(tx, NewTodo(queue="q", title=title), now=store.clock.now_ms())[0]

    return body


async def commits(store: Store) -> int:
    return (await store.data_version())[1]


@pytest.fixture
def roomy_budget(monkeypatch):
    """A transaction's time budget no busy machine can exhaust: the group is exactly one commit."""
    monkeypatch.setattr(store_module, "GROUP_SECONDS", 60.0)


async def test_writes_waiting_together_share_one_commit_and_all_land(store, db_path: Path, roomy_budget) -> None:
    before = await commits(store)
    gate, held = await hold_the_thread(store)
    writes = [asyncio.create_task(todos.create(store, NewTodo(queue="q", title=f"t{i}"))) for i in range(40)]
    await asyncio.sleep(0.05)
    gate.set()
    await held
    created = await asyncio.gather(*writes)
    assert sorted(t.id for t, _ in created) == list(range(1, 41))
    assert await commits(store) - before == 1
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT count(*) FROM todos").fetchone()[0] == 40


async def test_a_refused_write_in_a_group_is_rolled_back_alone(store) -> None:
    first, _ = await todos.create(store, NewTodo(queue="q", title="claim me"))
    claimed = await todos.claim_next(store, owner="a")
    gate, held = await hold_the_thread(store)
    before = asyncio.create_task(todos.create(store, NewTodo(queue="q", title="before")))
    stale = asyncio.create_task(todos.complete(store, first.id, "not-the-token"))
    after = asyncio.create_task(todos.create(store, NewTodo(queue="q", title="after")))
    await asyncio.sleep(0.05)
    gate.set()
    await held
    assert (await before)[0].title == "before" and (await after)[0].title == "after"
    with pytest.raises(Conflict):
        await stale
    assert (await todos.get(store, first.id)).state == "claimed"
    assert (await todos.complete(store, first.id, claimed.lease_token)).state == "done"


async def test_many_refused_writes_in_a_group_each_get_their_error_and_the_rest_commit_once(store, roomy_budget) -> None:
    held_todo, _ = await todos.create(store, NewTodo(queue="q", title="claimed"))
    await todos.claim_next(store, owner="a")
    before = await commits(store)
    gate, held = await hold_the_thread(store)
    writes = []
    for i in range(5):  # more refusals than the optimistic reruns allow for
        writes.append(asyncio.create_task(todos.complete(store, held_todo.id, f"stale-{i}")))
        writes.append(asyncio.create_task(todos.create(store, NewTodo(queue="q", title=f"new {i}"))))
    await asyncio.sleep(0.05)
    gate.set()
    await held
    results = await asyncio.gather(*writes, return_exceptions=True)
    assert all(isinstance(r, Conflict) for r in results[0::2])
    assert [r[0].title for r in results[1::2]] == [f"new {i}" for i in range(5)]
    assert await commits(store) - before == 1
    assert len(await todos.list_todos(store, state="pending")) == 5


async def test_a_group_commits_every_few_milliseconds_of_work_and_keeps_the_order(store, db_path) -> None:
    before = await commits(store)
    gate, held = await hold_the_thread(store)
    writes = [asyncio.create_task(store.write(slow_create(store, f"t{i}"))) for i in range(9)]
    await asyncio.sleep(0.05)
    gate.set()
    await held
    created = await asyncio.gather(*writes)
    assert await commits(store) - before >= 3  # not one long transaction
    assert [t.title for t in sorted(created, key=lambda t: t.id)] == [f"t{i}" for i in range(9)]


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
    with sqlite3.connect(db_path) as conn:
        assert [r[0] for r in conn.execute("SELECT title FROM todos ORDER BY id")] == ["one", "two"]


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
    with sqlite3.connect(db_path) as conn:
        assert [r[0] for r in conn.execute("SELECT title FROM todos ORDER BY id")] == ["one", "two"]


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


async def test_close_lets_the_writes_already_waiting_commit_and_refuses_new_ones(db_path) -> None:
    store = await Store.open(db_path)
    gate, held = await hold_the_thread(store)
    waiting = [asyncio.create_task(store.write(slow_create(store, f"t{i}"))) for i in range(9)]  # several commits
    await asyncio.sleep(0.05)
    closing = asyncio.create_task(store.close())
    await asyncio.sleep(0.05)
    with pytest.raises(RuntimeError, match="closed"):
        await todos.create(store, NewTodo(queue="q", title="too late"))
    gate.set()
    await held
    await closing
    assert len(await asyncio.gather(*waiting)) == 9
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT count(*) FROM todos").fetchone()[0] == 9


async def test_a_write_that_rolls_back_the_whole_transaction_does_not_take_the_others_with_it(store, db_path) -> None:
    with sqlite3.connect(db_path) as conn:
        conn.execute("CREATE TRIGGER boom BEFORE INSERT ON todos WHEN NEW.title LIKE 'poison%' "
                     "BEGIN SELECT RAISE(ROLLBACK, 'injected'); END")  # fmt: skip
    gate, held = await hold_the_thread(store)
    titles = ["poison 1", "good 1", "poison 2", "good 2", "poison 3", "good 3"]
    writes = [asyncio.create_task(todos.create(store, NewTodo(queue="q", title=t))) for t in titles]
    await asyncio.sleep(0.05)
    gate.set()
    await held
    results = await asyncio.gather(*writes, return_exceptions=True)
    assert all(isinstance(r, Conflict) for r in results[0::2])
    with sqlite3.connect(db_path) as conn:
        assert [r[0] for r in conn.execute("SELECT title FROM todos ORDER BY id")] == ["good 1", "good 2", "good 3"]


class SteppingClock(ManualClock):
    """After ``step_after`` readings, one second later: time passing between two runs of a group."""

    step_after: int | None = None
    readings = 0

    def now_ms(self) -> int:
        self.readings += 1
        late = self.step_after is not None and self.readings > self.step_after
        return super().now_ms() + (1000 if late else 0)


async def test_a_refused_write_is_answered_with_what_it_met_in_the_run_that_commits(db_path) -> None:
    clock = SteppingClock()
    store = await Store.open(db_path, clock=clock)
    try:
        todo, _ = await todos.create(store, NewTodo(queue="q", title="x"))
        held_by_a = await todos.claim_next(store, owner="a", lease=1)
        clock.advance(0.999)  # a's lease has a millisecond left
        gate, held = await hold_the_thread(store)
        clock.readings, clock.step_after = 0, 2  # the first run of the group, then a second later
        complete = asyncio.create_task(todos.complete(store, todo.id, held_by_a.lease_token))
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


async def test_a_cancelled_writer_does_not_undo_its_committed_work(store, db_path: Path) -> None:
    gate, held = await hold_the_thread(store)
    write = asyncio.create_task(todos.create(store, NewTodo(queue="q", title="fire and forget")))
    await asyncio.sleep(0.05)
    write.cancel()
    gate.set()
    await held
    with pytest.raises(asyncio.CancelledError):
        await write
    await store.read(lambda tx: None)  # let the thread finish the flush
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT count(*) FROM todos").fetchone()[0] == 1


async def test_a_lone_writer_never_waits_for_another_process_on_the_event_loop(store, db_path: Path) -> None:
    from switchboard_local import store as store_module

    for n in range(store_module.INLINE_AFTER + 1):  # a lone writer for a while: the inline regime
        await todos.create(store, NewTodo(queue="q", title=f"warm {n}"))
    assert store._lone_flushes >= store_module.INLINE_AFTER

    holder = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticking = asyncio.create_task(ticker())
    write = asyncio.create_task(todos.create(store, NewTodo(queue="q", title="waits in the thread")))
    await asyncio.sleep(0.3)
    # It waits in the store's thread (queued there), and the loop kept running meanwhile.
    assert not write.done() and store._flushing and ticks > 0
    await asyncio.to_thread(holder.execute, "COMMIT")
    created, _ = await write
    ticking.cancel()
    holder.close()
    assert created.title == "waits in the thread"
