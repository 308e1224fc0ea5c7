"""Per-queue limits (issue 31 §4; DESIGN §2: "nor a todo of a queue at its limit").

`queue limit Q --max-claimed N` holds at most N of Q's todos claimed at once;
`--max-per-minute N` at most N claims of Q in any rolling 60 s; `--clear`
removes both. Every claim holds them (by id, the next in line from any queue,
one or several, one todo or a batch, and the then-claim of complete and fail);
a limited queue's other todos wait as ready; stats and the queue list show the
limit and how close the queue is; a long poll waiting on a full queue wakes
when a slot frees.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from switchboard_local.core import queues, todos, watch
from switchboard_local.core.errors import Conflict, InvalidArgument
from switchboard_local.core.store.interface import Store
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.todo_model import NewTodo, Todo
from switchboard_local.core.todos import Lease, NextClaim

from support.sql import pg_connection, value
from support.waits import until_async

pytestmark = pytest.mark.anyio
DATA = Path(__file__).parents[1] / "data"


async def new(store: Store, queue: str = "limited", title: str = "t", **fields: Any) -> Todo:
    todo, _ = await todos.create(store, NewTodo(queue=queue, title=title, **fields))
    return todo


async def limit(store: Store, queue: str = "limited", **limits: Any) -> queues.Limit:
    return await queues.set_limit(store, queue, by="op", **limits)


async def held(store: Store) -> Todo:
    """A todo claimed on queue "work" (not limited), whose finish may claim the next one."""
    return await todos.claim(store, (await new(store, "work", "held")).id, owner="w")


async def by_id(store: Store) -> Todo | None:
    waiting = [t for t in await todos.list_todos(store, queue="limited") if t.state == "pending"]
    return await todos.claim(store, waiting[0].id, owner="w")


async def finish_then(store: Store, verb: Any, queues_: list[str] | None) -> Todo | None:
    finished = await verb(store, Lease.of(await held(store)), then=NextClaim("w", queues_))
    return finished.next


async def batch(store: Store, queues_: list[str] | None) -> Todo | None:
    claimed = await todos.claim_next(store, owner="w", queues=queues_, max=10)
    return claimed[0] if claimed else None


# Each way a claim can take a todo, asked to take from "limited" (alone, or among
# other queues that have nothing); each answers the todo it claimed, or None.
CLAIM_PATHS = {
    "claim_next any queue": lambda store: todos.claim_next(store, owner="w"),
    "claim_next its queue": lambda store: todos.claim_next(store, owner="w", queues=["limited"]),
    "claim_next several queues": lambda store: todos.claim_next(store, owner="w", queues=["limited", "other"]),
    "batch any queue": lambda store: batch(store, None),
    "batch its queue": lambda store: batch(store, ["limited"]),
    "claim by id": by_id,
    "complete then any queue": lambda store: finish_then(store, todos.complete, None),
    "complete then its queue": lambda store: finish_then(store, todos.complete, ["limited"]),
    "fail then several queues": lambda store: finish_then(store, todos.fail, ["limited", "other"]),
}


async def claimed_on(store: Store, queue: str = "limited") -> int:
    return sum(1 for t in await todos.list_todos(store, queue=queue) if t.state == "claimed")


@pytest.mark.parametrize("path", CLAIM_PATHS.values(), ids=CLAIM_PATHS.keys())
async def test_no_claim_takes_a_todo_past_max_claimed(store, path) -> None:
    await limit(store, max_claimed=2)
    for _ in range(2):
        await todos.claim(store, (await new(store)).id, owner="first")
    waiting = await new(store, title="waits")
    try:
        claimed = await path(store)
    except Conflict:
        claimed = None
    assert claimed is None
    after = await todos.get(store, waiting.id)
    assert (after.state, after.attempt, after.owner) == ("pending", 0, None)


@pytest.mark.parametrize("path", CLAIM_PATHS.values(), ids=CLAIM_PATHS.keys())
async def test_every_claim_takes_a_limited_queues_todo_while_it_has_room(store, path) -> None:
    await limit(store, max_claimed=2, max_per_minute=5)
    await todos.claim(store, (await new(store)).id, owner="first")
    waiting = await new(store, title="waits")
    claimed = await path(store)
    assert claimed is not None and claimed.id == waiting.id


@pytest.mark.parametrize("path", CLAIM_PATHS.values(), ids=CLAIM_PATHS.keys())
async def test_no_claim_takes_a_todo_past_max_per_minute(store, path, clock) -> None:
    await limit(store, max_per_minute=2)
    for _ in range(2):  # two claims, both finished: only the rate holds the third back
        first = await todos.claim(store, (await new(store)).id, owner="first")
        await todos.complete(store, Lease.of(first))
    waiting = await new(store, title="waits")
    clock.advance(59.999)
    try:
        claimed = await path(store)
    except Conflict:
        claimed = None
    assert claimed is None
    assert (await todos.get(store, waiting.id)).state == "pending"


@pytest.mark.parametrize("path", CLAIM_PATHS.values(), ids=CLAIM_PATHS.keys())
async def test_a_paused_limited_queue_is_never_claimed_from_though_it_has_room(store, path) -> None:
    await limit(store, max_claimed=2, max_per_minute=5)
    waiting = await new(store, title="waits")
    await queues.pause(store, "limited", by="op")
    try:
        claimed = await path(store)
    except Conflict:
        claimed = None
    assert claimed is None
    after = await todos.get(store, waiting.id)
    assert (after.state, after.attempt, after.owner) == ("pending", 0, None)


async def test_a_limited_queues_lapsed_lease_is_recovered_and_claimed_again_before_the_next_todo(store, clock) -> None:
    await limit(store, max_claimed=5)
    lapsed = await todos.claim(store, (await new(store, title="first")).id, owner="gone", lease=10)
    await new(store, title="second")
    clock.advance(11)
    again = await todos.claim_next(store, owner="w", queues=["limited"])
    assert (again.id, again.attempt) == (lapsed.id, 2)


async def test_a_limited_queues_room_goes_to_its_most_urgent_todos(store) -> None:
    await limit(store, max_claimed=1)
    await new(store, title="older, routine", priority=1)
    urgent = await new(store, title="newer, urgent", priority=9)
    claimed = await todos.claim_next_many(store, NextClaim("w", ["limited"]), 5)
    assert [t.id for t in claimed] == [urgent.id]


async def test_a_finished_claim_frees_a_slot_for_the_next(store) -> None:
    await limit(store, max_claimed=1)
    first = await todos.claim(store, (await new(store)).id, owner="w")
    second = await new(store)
    assert await todos.claim_next(store, owner="w", queues=["limited"]) is None
    await todos.complete(store, Lease.of(first))
    assert (await todos.claim_next(store, owner="w", queues=["limited"])).id == second.id


async def test_a_lapsed_lease_frees_its_slot(store, clock) -> None:
    await limit(store, max_claimed=1)
    await todos.claim(store, (await new(store, title="lapses")).id, owner="gone", lease=10)
    other = await new(store, title="next")
    clock.advance(11)
    taken = await todos.claim_next(store, owner="w", queues=["limited"])
    assert taken is not None and taken.title == "lapses"  # taken over, not a second claim
    assert await claimed_on(store) == 1
    assert (await todos.get(store, other.id)).state == "pending"


async def test_a_batch_claim_takes_at_most_the_room_and_the_rest_from_other_queues(store) -> None:
    await limit(store, max_claimed=3)
    await todos.claim(store, (await new(store)).id, owner="first")
    limited = [await new(store, title=f"l{i}", priority=5) for i in range(5)]
    other = [await new(store, "other", f"o{i}") for i in range(3)]
    claimed = await todos.claim_next(store, owner="w", max=10)
    assert [t.id for t in claimed] == [t.id for t in limited[:2]] + [t.id for t in other]
    assert await claimed_on(store) == 3
    assert await todos.claim_next(store, owner="w", queues=["limited"], max=10) == []


async def test_a_batch_claim_takes_at_most_what_the_minute_allows(store) -> None:
    await limit(store, max_per_minute=4, max_claimed=10)
    for i in range(6):
        await new(store, title=f"l{i}")
    assert len(await todos.claim_next(store, owner="w", queues=["limited"], max=3)) == 3
    assert len(await todos.claim_next(store, owner="w", queues=["limited"], max=3)) == 1
    assert await todos.claim_next(store, owner="w", queues=["limited"], max=3) == []


async def test_claims_keep_priority_order_across_a_limited_queue_with_room(store) -> None:
    await limit(store, max_claimed=5)
    plain = await new(store, "other", "plain")
    urgent = await new(store, title="urgent", priority=9)
    assert (await todos.claim_next(store, owner="w", queues=["other", "limited"])).id == urgent.id
    assert (await todos.claim_next(store, owner="w")).id == plain.id


async def test_a_claim_by_id_at_the_limit_is_refused_naming_the_limit(store) -> None:
    await limit(store, max_claimed=1)
    await todos.claim(store, (await new(store)).id, owner="first")
    waiting = await new(store)
    with pytest.raises(Conflict) as refused:
        await todos.claim(store, waiting.id, owner="w")
    told = str(refused.value)
    assert f"todo {waiting.id} is on queue 'limited', which is at its limit" in told
    assert "1 claimed of --max-claimed 1" in told


async def test_a_claim_by_id_over_the_rate_is_refused_naming_the_rate(store) -> None:
    await limit(store, max_per_minute=1)
    first = await todos.claim(store, (await new(store)).id, owner="first")
    await todos.complete(store, Lease.of(first))
    waiting = await new(store)
    with pytest.raises(Conflict) as refused:
        await todos.claim(store, waiting.id, owner="w")
    assert "1 claims in the last minute of --max-per-minute 1" in str(refused.value)


async def test_the_minute_rolls_claims_older_than_60_seconds_out(store, clock) -> None:
    await limit(store, max_per_minute=2)
    for _ in range(4):
        await new(store)

    async def take() -> Todo | None:
        found = await todos.claim_next(store, owner="w", queues=["limited"])
        if found is not None:
            await todos.complete(store, Lease.of(found))
        return found

    assert await take() is not None  # at 0 s
    clock.advance(30)
    assert await take() is not None  # at 30 s
    assert await take() is None
    clock.advance(29.999)  # 59.999 s: both still within the minute
    assert await take() is None
    clock.advance(0.001)  # 60 s: the first is a minute old
    assert await take() is not None
    assert await take() is None
    clock.advance(30)  # 90 s: the one at 30 s rolled out
    assert await take() is not None


async def test_a_failed_attempt_still_counts_in_the_minute(store) -> None:
    await limit(store, max_per_minute=2)
    todo = await new(store)
    first = await todos.claim(store, todo.id, owner="w")
    await todos.release(store, Lease.of(first))
    await todos.claim(store, todo.id, owner="w")  # the second claim of the same todo
    await new(store)
    assert await todos.claim_next(store, owner="w", queues=["limited"]) is None


async def test_clear_removes_both_limits(store) -> None:
    await limit(store, max_claimed=1, max_per_minute=1)
    await todos.claim(store, (await new(store)).id, owner="first")
    await new(store)
    cleared = await limit(store, clear=True)
    assert (cleared.max_claimed, cleared.max_per_minute, cleared.limited) == (None, None, False)
    assert await todos.claim_next(store, owner="w", queues=["limited"]) is not None


async def test_setting_one_limit_keeps_the_other(store) -> None:
    await limit(store, max_claimed=3)
    both = await limit(store, max_per_minute=7)
    assert (both.max_claimed, both.max_per_minute) == (3, 7)
    changed = await limit(store, max_claimed=4)
    assert (changed.max_claimed, changed.max_per_minute) == (4, 7)


async def test_a_limit_holds_back_only_its_own_queue(store) -> None:
    await limit(store, max_claimed=1)
    await todos.claim(store, (await new(store)).id, owner="first")
    other = await new(store, "other")
    assert (await todos.claim_next(store, owner="w")).id == other.id


@pytest.mark.parametrize(
    "limits, message",
    [
        ({"max_claimed": 0}, "--max-claimed must be between 1 and 1000000, got 0"),
        ({"max_per_minute": -1}, "--max-per-minute must be between 1 and 1000000, got -1"),
        ({"max_claimed": 1_000_001}, "--max-claimed must be between 1 and 1000000"),
        ({"max_claimed": True}, "--max-claimed must be an integer"),
        ({}, "give --max-claimed N, --max-per-minute N (or both), or --clear"),
        ({"clear": True, "max_claimed": 2}, "--clear removes both limits"),
    ],
)
async def test_a_bad_limit_is_refused_and_nothing_is_set(store, limits, message) -> None:
    with pytest.raises(InvalidArgument) as refused:
        await limit(store, **limits)
    assert message in str(refused.value)
    assert not (await queues.get_limit(store, "limited")).limited


async def test_a_limited_queues_todos_wait_as_ready_and_stats_show_how_close_it_is(store) -> None:
    await limit(store, max_claimed=2, max_per_minute=10)
    for _ in range(2):
        await todos.claim(store, (await new(store)).id, owner="w")
    for _ in range(3):
        await new(store)
    (stats,) = [s for s in await todos.stats(store) if s.queue == "limited"]
    assert (stats.ready, stats.claimed, stats.max_claimed) == (3, 2, 2)
    assert (stats.claims_last_minute, stats.max_per_minute) == (2, 10)
    assert stats.limit_text == "2/2 claimed, 2/10 a minute"
    assert stats.to_dict()["max_claimed"] == 2


async def test_list_queues_lists_a_limited_queue_even_with_no_todos(store) -> None:
    await limit(store, "empty", max_claimed=4)
    (listed,) = await queues.list_queues(store)
    assert (listed.name, listed.stats.max_claimed, listed.stats.claimed, listed.stats.max_per_minute) == (
        "empty", 4, 0, None)  # fmt: skip
    assert listed.to_dict()["max_claimed"] == 4


async def test_a_long_poll_on_a_full_queue_wakes_when_a_slot_frees(store, monkeypatch) -> None:
    monkeypatch.setattr(todos.claims, "RECHECK_SECONDS", 60.0)  # only a commit can wake it
    await limit(store, max_claimed=1)
    first = await todos.claim(store, (await new(store)).id, owner="first")
    waiting = await new(store, title="waits")
    claim_next, found = todos.claims.claim_next, []
    tried = anyio.Event()

    async def observed(*args: Any, **kwargs: Any) -> Any:
        found.append(await claim_next(*args, **kwargs))
        tried.set()
        return found[-1]

    monkeypatch.setattr(todos.claims, "claim_next", observed)
    async with watch.following(store) as changes, anyio.create_task_group() as tasks:
        answer: dict[str, Any] = {}

        async def poll() -> None:
            claim = NextClaim("w", ["limited"])
            answer["todo"] = await todos.claim_next_waiting(store, claim, wait=30, changes=changes)

        tasks.start_soon(poll)
        with anyio.fail_after(10):
            await tried.wait()  # its first try found the queue full: it waits
        await todos.complete(store, Lease.of(first))
    assert [todo.id if todo else None for todo in found] == [None, waiting.id]
    assert answer["todo"].id == waiting.id


@pytest.fixture
def v12_database(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Path | str:
    """A database as version 12, the one before limits, left it (tests/data/schema-v12*.sql): a paused queue
    and two todos."""
    rows = ["INSERT INTO queues (name, paused_at, paused_by) VALUES ('held', {now}, 'op')"] + [
        "INSERT INTO todos (queue, title, state, visible_at, created_at, updated_at)"
        f" VALUES ('{queue}', 't', 'pending', {{now}}, {{now}}, {{now}})" for queue in ("held", "limited")]  # fmt: skip
    if backend == "sqlite":
        path = tmp_path / "switchboard.db"
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.executescript((DATA / "schema-v12.sql").read_text("utf-8"))
            conn.executescript("PRAGMA user_version = 12;\n" + ";\n".join(r.format(now=0) for r in rows) + ";")
        finally:
            conn.close()
        return path
    server = request.getfixturevalue("postgres_server")
    request.getfixturevalue("monkeypatch").setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    url = server.empty_database()
    request.addfinalizer(lambda: server.drop(url))
    with pg_connection(url) as conn:
        conn.execute((DATA / "schema-v12.postgres.sql").read_text("utf-8"))
        conn.execute("INSERT INTO schema_migrations (version) VALUES (12)")
        for row in rows:
            conn.execute(row.format(now="to_timestamp(0)"))
    return url


async def test_the_limits_migration_keeps_every_queue_setting_and_todo_and_lets_a_queue_be_limited(
    v12_database, clock
) -> None:
    async with await open_store(v12_database, clock=clock) as upgraded:
        (held, limited) = await queues.list_queues(upgraded)
        assert (held.name, held.paused, held.stats.max_claimed, limited.stats.ready) == ("held", True, None, 1)
        await limit(upgraded, max_claimed=1, max_per_minute=1)
        assert (await todos.claim_next(upgraded, owner="w", queues=["limited"])) is not None
        (_, after) = await todos.stats(upgraded)
        assert (after.claimed, after.max_claimed, after.claims_last_minute) == (1, 1, 1)


async def test_a_claim_racing_one_not_yet_committed_counts_it_and_takes_nothing(store, db_path, clock) -> None:
    # Claim A, under max_claimed 1, holds its transaction open; claim B, from another
    # store (another process's connections), runs meanwhile. SQLite's one writer makes
    # B wait for A's commit; on PostgreSQL B waits on the queue's row, which A's
    # claim locked (lock_limited_queues): a count in B's statement alone would not
    # see A's uncommitted claim, and B would take the second todo (pgqueuer #761).
    await limit(store, max_claimed=1)
    await new(store, title="B's", assignee="b")  # first in line for B, which A cannot take
    await new(store, title="A's")
    claimed, release = threading.Event(), threading.Event()

    def body(tx: Any) -> Todo | None:
        todo = todos.claims.claim_next_body(store, NextClaim("a", ["limited"]))(tx)
        claimed.set()
        release.wait(timeout=60)  # the test lets it commit once B is waiting (or has answered)
        return todo

    async with await open_store(db_path, clock=clock) as other, anyio.create_task_group() as tasks:
        first: dict[str, Any] = {}

        async def a() -> None:
            first["todo"] = await store.write(body)

        tasks.start_soon(a)
        await anyio.to_thread.run_sync(claimed.wait)
        second: dict[str, Any] = {}

        async def b() -> None:
            second["todo"] = await todos.claim_next(other, owner="b", queues=["limited"])

        tasks.start_soon(b)
        if isinstance(db_path, str):  # PostgreSQL: B waits for A's lock (or, were there none, has answered)
            await until_async(lambda: "todo" in second or value(db_path, WAITING_ON_A_LOCK) == 1, True)
        release.set()
    assert first["todo"].title == "A's" and second["todo"] is None
    assert await claimed_on(store) == 1


WAITING_ON_A_LOCK = ("SELECT count(*) FROM pg_stat_activity"
                     " WHERE datname = current_database() AND wait_event_type = 'Lock'")  # fmt: skip


async def test_a_copy_keeps_the_rolling_minute_of_a_rate_limited_queue(store, clock, tmp_path) -> None:
    from switchboard_local.core import copy

    await limit(store, max_per_minute=2)
    for n in range(4):
        await new(store, title=f"t{n}")
    assert len(await todos.claim_next(store, owner="w", queues=["limited"], max=4)) == 2
    target = tmp_path / "target.db"
    await copy.copy(store, target)
    async with await open_store(target, clock=clock) as copied:
        assert await todos.claim_next(copied, owner="w", queues=["limited"]) is None
        clock.advance(61)
        assert await todos.claim_next(copied, owner="w", queues=["limited"]) is not None
