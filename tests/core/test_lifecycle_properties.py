"""Random sequences of lifecycle calls keep every invariant of DESIGN §2.

A hypothesis state machine drives a real store (a file on disk, or a
PostgreSQL database on a real server; a clock that it moves, pinned jitter)
beside a model of what the store should hold. Its
steps: creates on three queues (priorities, delays, assignees, idempotency
keys); claim_next with no queue, one queue and several (the three statements
that claim), and claim by id; heartbeat, complete, fail (a backoff, or a dead
letter at the cap), release (with a delay), complete and fail that
claim the next todo too, each with any token ever handed out; redrive; an
operator's cancel and forced release (often of a claimed todo); creates that
wait for other todos (dependencies: blocked until those are done, cancelled
with them, refused when one is cancelled or unknown); per-queue limits set,
changed and cleared (queue limit: max_claimed, max_per_minute); reads; time
passing leases and backoffs; and groups of these issued at once, which the
SQLite store's group commit runs in one transaction (PostgreSQL has no group
commit: there a group is issued in order, one after another, since concurrent
writers there are ordered by the server and the model expects the order
issued). Every answer is the model's prediction: which todo a claim takes,
which error a refusal raises, when a failed todo comes back. After every step
the database is checked, through a connection of its own: each row and its
attempt history are what the model holds; states and lease fields agree; no
todo is both claimable and claimed; no blocked todo is claimable, and each
one's count of todos not done is the model's (so a completion readies exactly
the todos it was the last one of); a claimable todo has an attempt left; a
claimed todo has exactly one open attempt, under the token its claimer was
given; no queue has more todos claimed than its max_claimed (unless it had
more when the limit was set, and then never more than before), nor more than
max_per_minute claims in any 60 s; and stats agree with a recount of the rows as
the next claim sees them, limits included.
The model's rules are in lifecycle_model.py.

Both backends run the same machine, with the same rules and checks.
PostgreSQL's examples share one database, emptied before each (ids from 1
again); each example opens a store on it and closes it.

CI runs a modest budget (fewer examples on PostgreSQL, where each costs more);
SWITCHBOARD_FUZZ_EXAMPLES (tests/support/fuzz.py) raises it.
"""

from __future__ import annotations

import asyncio
import functools
import random
import sqlite3
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from switchboard_local.core import queues, todos
from switchboard_local.core.clock import ManualClock
from switchboard_local.core.errors import (
    Conflict,
    Forbidden,
    InvalidArgument,
    NotFound,
    SwitchboardError,
)
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.store.postgres.statements import convert_params
from switchboard_local.core.store.queries import POSTGRES, Q
from switchboard_local.core.todo_model import (
    MAX_LIST_LIMIT,
    STATES,
    NewTodo,
    QueueStats,
    Todo,
    hash_token,
)
from switchboard_local.core.todos import Lease, NextClaim

from support.fuzz import FUZZ_EXAMPLES, fuzz_settings
from support.lifecycle_model import Model, Modeled, count_as_the_next_claim_sees
from support.postgres import PostgresServer
from support.sql import pg_connection
from support.store import hold_the_thread

QUEUES = ("a", "b", "c")
NOT_A_TOKEN = "not-a-token"

LEASES = st.sampled_from([30, 300])
AGENTS = st.sampled_from([None, "x", "y", "z"])  # the name an assignee must equal (default: the owner)
CREATES = st.tuples(
    st.sampled_from(QUEUES),
    st.sampled_from([None, None, "k1", "k2"]),  # idempotency key
    st.sampled_from([0, 0, 1, 5]),  # priority
    st.sampled_from([0, 0, 5, 60]),  # delay
    st.sampled_from([None, None, "x", "y"]),  # assignee
    st.integers(1, 3),  # max_attempts
)
NEXT_CLAIMS = st.builds(
    NextClaim,
    owner=st.sampled_from(["x", "y"]),
    # None, one queue, or several (duplicates and a queue nobody uses included), as
    # often each: claim_next's three forms.
    queues=st.one_of(
        st.none(),
        st.lists(st.sampled_from(QUEUES), min_size=1, max_size=1),
        st.lists(st.sampled_from([*QUEUES, "d"]), min_size=2, max_size=3),
    ),
    lease=LEASES,
    agent=AGENTS,
)
PG_EXAMPLES = 25  # PostgreSQL's examples in CI (SQLite's: 100)
WRITES = ["create", "create", "create_after", "claim_next", "claim", "heartbeat", "complete", "fail", "release",
          "complete_then_claim", "fail_then_claim", "redrive", "cancel", "force_release", "limit"]  # fmt: skip
LIMITS = st.tuples(
    st.sampled_from(QUEUES),
    st.sampled_from([None, None, 1, 2, 3]),  # max_claimed
    st.sampled_from([None, None, 1, 2, 4]),  # max_per_minute
    st.sampled_from([False, False, False, True]),  # clear
)


@dataclass
class Op:
    """One verb: how to issue it, and how to judge its outcome (an answer or an
    error) against the model, which it then moves as the store should have."""

    name: str
    call: Callable[[], Awaitable[Any]]
    judge: Callable[[Any], None]


def answer(op: str, outcome: Any) -> Any:
    if isinstance(outcome, Exception):
        raise AssertionError(f"{op} was refused though the model accepts it: {outcome!r}")
    return outcome


def refused(op: str, outcome: Any, expected: type[Exception]) -> None:
    assert type(outcome) is expected, f"{op}: expected {expected.__name__}, got {outcome!r}"


@functools.cache
def empty_store() -> bytes:
    """A new store's file, made once: each example starts from a copy (making one costs more than a short run)."""

    async def make(path: Path) -> bytes:
        await (await open_store(path)).close()
        return path.read_bytes()

    with tempfile.TemporaryDirectory() as folder:
        return asyncio.run(make(Path(folder) / "empty.db"))


@dataclass(frozen=True)
class Database:
    """Where an example's store is: a new SQLite file (a copy of an empty one), or
    the test's PostgreSQL database at ``url``, which ``server`` empties first."""

    backend: str
    url: str = ""
    server: PostgresServer | None = None


class Lifecycle(RuleBasedStateMachine):
    def __init__(self, database: Database) -> None:
        super().__init__()
        self.closing = ExitStack()
        self.group_commit = database.backend == "sqlite"
        if database.server is not None:
            database.server.empty(database.url)
            where: Path | str = database.url
            # The database as committed, beside the store's connections; values read as SQLite gives them.
            self.reader: Any = self.closing.enter_context(pg_connection(database.url))
            self.attempts_of_todo = convert_params(POSTGRES[Q.attempts_of_todo.name])
        else:
            folder = self.closing.enter_context(tempfile.TemporaryDirectory())
            where = Path(folder) / "switchboard.db"
            where.write_bytes(empty_store())
            self.reader = sqlite3.connect(where)  # the file as committed, beside the store's connection
            self.closing.callback(self.reader.close)
            self.reader.row_factory = sqlite3.Row
            self.attempts_of_todo = Q.attempts_of_todo
        self.clock = ManualClock()
        self.loop = asyncio.new_event_loop()
        # Not FULL: durability is not what this checks, and fsyncs would cost most of its time.
        self.store = self.run(open_store(where, clock=self.clock, rng=random.Random(0), synchronous="NORMAL"))
        self.jitter = random.Random(0)  # the store's, drawn in the same order: once per fail
        self.model = Model(self.clock)
        self.claimed_before: dict[str, int] = {}  # each queue's claimed todos after the last step
        self.tokens: list[tuple[int, str]] = [(1, NOT_A_TOKEN)]  # every (todo id, token) handed out

    def run(self, coro):  # noqa: ANN001, ANN201
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        try:
            self.run(self.store.close())
            self.loop.close()
        finally:
            self.closing.close()

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    # ------------------------------------------------------------ the verbs

    def take(self, t: Modeled, owner: str, lease: float | None, claimed: Todo) -> None:
        assert claimed.lease_token, "a claim answered without a lease token"
        self.model.claim(t, owner, lease, claimed.lease_token)
        self.tokens.append((t.id, claimed.lease_token))
        self.agrees(claimed, t)

    def agrees(self, got: Todo, t: Modeled) -> None:
        seen = (got.id, got.queue, got.state, got.attempt, got.visible_at, got.owner, got.lease_expires_at)
        want = (t.id, t.queue, t.state, t.attempt, t.visible_at, t.owner, t.lease_end)
        assert seen == want, f"answered {seen}, the model holds {want}"

    def op_create(self, spec: tuple, after: tuple[int, ...] = ()) -> Op:
        queue, key, priority, delay, assignee, max_attempts = spec
        delay = 0 if after else delay  # a todo that waits is not delayed as well (refused)
        new = NewTodo(queue=queue, title="t", idempotency_key=key, priority=priority, delay=delay,
                      assignee=assignee, max_attempts=max_attempts, after=after)  # fmt: skip

        def judge(outcome: Any) -> None:
            live = self.model.holder(queue, key) if after and key is not None else None
            if live is not None and not (live.state == "claimed" and live.lease_end <= self.now):
                # A retried create is answered by its key's holder, whatever became of what it waits for.
                if live.id in after:
                    refused(f"create after {after} onto its own key's holder", outcome, InvalidArgument)
                    return
                got, created = answer("create", outcome)
                assert not created, f"create made todo {got.id} though todo {live.id} holds the key"
                self.agrees(got, live)
                return
            for a in sorted(set(after)):  # then the dependencies, oldest first
                if a not in self.model.todos or self.model.todos[a].state == "cancelled":
                    refused(f"create after {after}", outcome, NotFound if a not in self.model.todos else Conflict)
                    return
            before = self.model.snapshot()
            holder = self.model.holder(queue, key)
            if holder is not None and holder.state == "claimed" and holder.lease_end <= self.now:
                self.model.recover()
                holder = self.model.holder(queue, key)
            if holder is not None and holder.id in after:
                self.model.restore(before)
                refused(f"create after {after} onto its own key's holder", outcome, InvalidArgument)
                return
            self.model.restore(before)
            got, created = answer("create", outcome)
            holder = self.model.holder(queue, key)
            if holder is not None and holder.state == "claimed" and holder.lease_end <= self.now:
                self.model.recover()  # a lapsed last attempt is a dead letter, which frees the key
                holder = self.model.holder(queue, key)
            if holder is None:
                holder = self.model.create(queue, priority, assignee, max_attempts, key, delay, after)
                assert created, f"create answered todo {got.id} as existing; the key is free"
            else:
                assert not created, f"create made todo {got.id} though todo {holder.id} holds the key"
            self.agrees(got, holder)

        return Op(f"create {spec}", lambda: todos.create(self.store, new), judge)

    def op_claim_next(self, claim: NextClaim) -> Op:
        def judge(outcome: Any) -> None:
            self.judge_next(claim, answer("claim_next", outcome))

        def call() -> Awaitable[Todo | None]:
            return todos.claim_next(self.store, owner=claim.owner, queues=claim.queues, lease=claim.lease,
                                    agent=claim.agent)  # fmt: skip

        return Op(f"claim_next {claim}", call, judge)

    def judge_next(self, claim: NextClaim, got: Todo | None) -> None:
        self.model.recover()
        t = self.model.next_for(claim.queues, claim.agent or claim.owner)
        if t is None:
            assert got is None, f"{claim} took todo {got and got.id}; the model has nothing claimable there"
            return
        assert got is not None, f"{claim} took nothing; the model says todo {t.id}"
        assert got.id == t.id, f"{claim} took todo {got.id}; the model says todo {t.id}"
        self.take(t, claim.owner, claim.lease, got)

    def op_claim(self, todo_id: int, claim: NextClaim) -> Op:
        def judge(outcome: Any) -> None:
            before = self.model.snapshot()
            self.model.recover()
            t = self.model.todos.get(todo_id)
            expected: type[Exception] | None = None
            if t is None:
                expected = NotFound
            elif t.assignee not in (None, claim.agent or claim.owner):
                expected = Forbidden
            elif not t.claimable(self.now) or not self.model.has_room(t.queue):
                expected = Conflict
            if expected is not None:
                self.model.restore(before)
                refused(f"claim {todo_id}", outcome, expected)
            else:
                self.take(t, claim.owner, claim.lease, answer(f"claim {todo_id}", outcome))

        def call() -> Awaitable[Todo]:
            return todos.claim(self.store, todo_id, owner=claim.owner, lease=claim.lease, agent=claim.agent)

        return Op(f"claim {todo_id} {claim}", call, judge)

    def op_leased(self, verb: str, todo_id: int, token: str, data: st.DataObject) -> Op:
        """heartbeat, complete, fail, release, or one of the then-claims, with a token."""
        lease = data.draw(st.sampled_from([30, 60, 300])) if verb == "heartbeat" else None
        delay = data.draw(st.sampled_from([0, 10, 60])) if verb == "release" else 0
        then = data.draw(NEXT_CLAIMS) if verb.endswith("then_claim") else None
        jitter = self.jitter.uniform(0.5, 1.0) if verb.startswith("fail") else 0.0
        name = f"{verb} {todo_id} {'a bogus token' if token == NOT_A_TOKEN else 'token ' + token[:6]} {then or ''}"

        def finish(t: Modeled) -> None:
            if verb == "heartbeat":
                self.model.heartbeat(t, lease)
            elif verb.startswith("complete"):
                self.model.complete(t)
            elif verb.startswith("fail"):
                self.model.fail(t, jitter)
            else:
                self.model.release(t, delay)

        def judge(outcome: Any) -> None:
            t = self.model.todos.get(todo_id)
            if t is None or not t.held_by(token, self.now):
                refused(name, outcome, NotFound if t is None else Conflict)  # and nothing claimed either
                return
            finish(t)
            got = answer(name, outcome)
            if verb in ("heartbeat", "release"):
                self.agrees(got, t)
                return
            self.agrees(got.todo, t)
            if then is None:
                assert got.next is None, f"{name} claimed todo {got.next.id} though no next claim was asked"
                return
            self.judge_next(then, got.next)

        held = Lease(todo_id, token)
        call = {
            "heartbeat": lambda: todos.heartbeat(self.store, held, lease_seconds=lease),
            "complete": lambda: todos.complete(self.store, held),
            "fail": lambda: todos.fail(self.store, held, error="boom"),
            "release": lambda: todos.release(self.store, held, delay=delay),
            "complete_then_claim": lambda: todos.complete(self.store, held, then=then),
            "fail_then_claim": lambda: todos.fail(self.store, held, then=then),
        }[verb]
        return Op(name, call, judge)

    def op_redrive(self, todo_id: int) -> Op:
        def judge(outcome: Any) -> None:
            before = self.model.snapshot()
            self.model.recover()
            t = self.model.todos.get(todo_id)
            expected: type[Exception] | None = None
            if t is None:
                expected = NotFound
            elif not t.dead_letter():
                expected = Conflict
            elif self.model.holder(t.queue, t.key) is not None:
                expected = Conflict  # a newer live todo holds its key
            if expected is not None:
                self.model.restore(before)  # a refused verb rolls back the recovery it began with
                refused(f"redrive {todo_id}", outcome, expected)
                return
            self.model.redrive(t)
            self.agrees(answer(f"redrive {todo_id}", outcome), t)

        return Op(f"redrive {todo_id}", lambda: todos.redrive(self.store, todo_id), judge)

    def op_operator(self, verb: str, todo_id: int) -> Op:
        """An operator's verb on a todo in one of ``states``: cancel (pending or
        claimed) or force_release (claimed), after lapsed leases are recovered."""
        states = {"cancel": ("pending", "claimed"), "force_release": ("claimed",)}[verb]

        def judge(outcome: Any) -> None:
            before = self.model.snapshot()
            self.model.recover()
            t = self.model.todos.get(todo_id)
            if t is None or t.state not in states:
                self.model.restore(before)  # a refused verb rolls back the recovery it began with
                refused(f"{verb} {todo_id}", outcome, NotFound if t is None else Conflict)
                return
            getattr(self.model, verb)(t)
            self.agrees(answer(f"{verb} {todo_id}", outcome), t)

        call = {
            "cancel": lambda: todos.cancel(self.store, todo_id, by="operator", reason="modelled"),
            "force_release": lambda: todos.force_release(self.store, todo_id, by="operator"),
        }[verb]
        return Op(f"{verb} {todo_id}", call, judge)

    def op_limit(self, spec: tuple) -> Op:
        queue, max_claimed, max_per_minute, clear = spec

        def judge(outcome: Any) -> None:
            if clear == (max_claimed is not None or max_per_minute is not None):
                refused(f"limit {spec}", outcome, InvalidArgument)  # --clear with a limit, or nothing given
                return
            limit = self.model.set_limit(queue, max_claimed, max_per_minute, clear)
            got = answer(f"limit {spec}", outcome)
            assert (got.max_claimed, got.max_per_minute) == (limit.max_claimed, limit.max_per_minute)

        def call() -> Awaitable[queues.Limit]:
            return queues.set_limit(self.store, queue, max_claimed=max_claimed, max_per_minute=max_per_minute,
                                    clear=clear, by="operator")  # fmt: skip

        return Op(f"limit {spec}", call, judge)

    def draw_op(self, data: st.DataObject, kind: str) -> Op:
        if kind == "limit":
            return self.op_limit(data.draw(LIMITS))
        if kind == "create":
            return self.op_create(data.draw(CREATES))
        if kind == "create_after":  # one or two todos it waits for, now and then one that does not exist
            some = st.integers(1, len(self.model.todos) + 1)
            return self.op_create(data.draw(CREATES), tuple(data.draw(st.lists(some, min_size=1, max_size=2))))
        if kind == "claim_next":
            return self.op_claim_next(data.draw(NEXT_CLAIMS))
        some_id = st.integers(1, len(self.model.todos) + 1)  # one more than exists: not found
        if kind == "claim":
            return self.op_claim(data.draw(some_id), data.draw(NEXT_CLAIMS))
        if kind == "redrive":  # often a dead letter, which random ids seldom are
            dead = [t.id for t in self.model.todos.values() if t.dead_letter()]
            return self.op_redrive(data.draw(st.sampled_from(dead) | some_id if dead else some_id))
        if kind in ("cancel", "force_release"):  # often a claimed todo, which random ids seldom are
            held = [t.id for t in self.model.todos.values() if t.state == "claimed"]
            return self.op_operator(kind, data.draw(st.sampled_from(held) | some_id if held else some_id))
        # Any token ever handed out, often one that is current (random ones seldom are).
        current = [(t.id, t.token) for t in self.model.todos.values() if t.token is not None]
        tokens = st.sampled_from(self.tokens)
        todo_id, token = data.draw(st.sampled_from(current) | tokens if current else tokens)
        return self.op_leased(kind, todo_id, token, data)

    async def issue(self, ops: list[Op]) -> list[Any]:
        """Each op's answer, or the error it was refused with. Several are issued
        at once while the store's thread is held, so that they queue up and
        share one transaction (the model expects them in the order issued)."""

        async def outcome(op: Op) -> Any:
            try:
                return await op.call()
            except SwitchboardError as exc:
                return exc

        if len(ops) == 1 or not self.group_commit:
            return [await outcome(op) for op in ops]
        gate, held = await hold_the_thread(self.store)
        try:
            tasks = [asyncio.create_task(outcome(op)) for op in ops]
            await asyncio.sleep(0)  # each task queues its write in its first step, in order
        finally:
            gate.set()
        await held
        return await asyncio.gather(*tasks)

    def do(self, ops: list[Op]) -> None:
        for op, outcome in zip(ops, self.run(self.issue(ops)), strict=True):
            op.judge(outcome)

    # ------------------------------------------------------------ the rules

    @rule(data=st.data(), kind=st.sampled_from(WRITES))
    def one_verb(self, data: st.DataObject, kind: str) -> None:
        self.do([self.draw_op(data, kind)])

    @rule(data=st.data(), kinds=st.lists(st.sampled_from(WRITES), min_size=2, max_size=5))
    def a_group(self, data: st.DataObject, kinds: list[str]) -> None:
        self.do([self.draw_op(data, kind) for kind in kinds])

    @rule(seconds=st.sampled_from([1, 5, 29, 31, 61, 301, 1000]))
    def time_passes(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        """get and list show a lapsed todo as the next claim would find it."""
        todo_id = data.draw(st.integers(1, len(self.model.todos) + 1))
        queue = data.draw(st.sampled_from([None, *QUEUES]))
        state = data.draw(st.sampled_from([None, *STATES]))
        try:
            got: Todo | None = self.run(todos.get(self.store, todo_id))
        except NotFound:
            got = None
        listed = self.run(todos.list_todos(self.store, queue=queue, state=state, limit=MAX_LIST_LIMIT))
        self.model.recover()
        t = self.model.todos.get(todo_id)
        assert (got is None) == (t is None), f"get {todo_id}: {got}, the model holds {t}"
        if got is not None and t is not None:
            self.agrees(got, t)
            assert [[a.attempt, a.owner, a.outcome] for a in got.attempts or ()] == t.history
        want = sorted(
            (t.id for t in self.model.todos.values() if queue in (None, t.queue) and state in (None, t.state)), reverse=True
        )
        assert [t.id for t in listed] == want, f"list_todos(queue={queue}, state={state})"

    # ------------------------------------------------------------ after every step

    @invariant()
    def after_every_step(self) -> None:
        rows = self.reader.execute("SELECT * FROM todos ORDER BY id").fetchall()
        # Each todo's history as every surface reads it: the ended attempts and
        # the open (or completing) one on the todo's own row.
        attempts = [
            {**dict(a), "todo_id": r["id"]}
            for r in rows
            for a in self.reader.execute(self.attempts_of_todo, {"todo_id": r["id"]}).fetchall()
        ]
        self.the_file_is_what_the_model_holds(rows, attempts)
        self.states_leases_and_attempts_agree(rows, attempts)
        self.no_queue_passes_its_limits(rows)
        self.stats_agree_with_a_recount(rows)

    def the_file_is_what_the_model_holds(self, rows: list[sqlite3.Row], attempts: list[dict]) -> None:
        assert [r["id"] for r in rows] == sorted(self.model.todos)
        for r in rows:
            t = self.model.todos[r["id"]]
            stored = (r["queue"], r["priority"], r["assignee"], r["max_attempts"], r["idempotency_key"], r["state"],
                      r["attempt"], r["visible_at"], r["owner"], r["lease_expires_at"], r["claimed_at"],
                      r["blocked_by"], r["waits_for"])  # fmt: skip
            modeled = (t.queue, t.priority, t.assignee, t.max_attempts, t.key, t.state,
                       t.attempt, t.visible_at, t.owner, t.lease_end, t.claimed_at,
                       t.blocked_by if t.state in ("pending", "cancelled") else 0, len(t.after))  # fmt: skip
            assert stored == modeled, f"todo {t.id}: the file holds {stored}, the model {modeled}"
            history = [[a["attempt"], a["owner"], a["outcome"]] for a in attempts if a["todo_id"] == t.id]
            assert history == t.history, f"todo {t.id}: attempts {history}, the model {t.history}"
            if t.token is not None:
                assert r["lease_token_hash"] == hash_token(t.token), f"todo {t.id}: not its claimer's token"

    def states_leases_and_attempts_agree(self, rows: list[sqlite3.Row], attempts: list[dict]) -> None:
        now = self.now
        for r in rows:
            todo_id, state, visible = r["id"], r["state"], r["visible_at"]
            assert state in STATES
            assert 0 <= r["attempt"] <= r["max_attempts"], f"todo {todo_id}: attempt {r['attempt']} over the max"
            claimed = state == "claimed"
            lease_fields = (r["lease_expires_at"], r["lease_token_hash"], r["owner"])
            assert all((f is not None) == claimed for f in lease_fields), f"todo {todo_id}: {state} with {lease_fields}"
            claimable = visible is not None and visible <= now
            assert not (claimable and claimed), f"todo {todo_id} is claimed and claimable"
            if claimable:
                assert state == "pending" and r["attempt"] < r["max_attempts"], (
                    f"todo {todo_id} is claimable as {state} with attempt {r['attempt']} of {r['max_attempts']}"
                )
            blocked = state == "pending" and r["blocked_by"] > 0
            assert not (blocked and visible is not None), f"todo {todo_id} is blocked and claimable at {visible}"
            assert (state == "pending" and not blocked) == (visible is not None), (
                f"todo {todo_id} is {state} (blocked by {r['blocked_by']}) with visible_at {visible}"
            )
            open_attempts = [a for a in attempts if a["todo_id"] == todo_id and a["ended_at"] is None]
            assert len(open_attempts) == (1 if claimed else 0), f"todo {todo_id}: {len(open_attempts)} open attempts"
            if claimed:
                assert (open_attempts[0]["attempt"], open_attempts[0]["owner"]) == (r["attempt"], r["owner"])

    def no_queue_passes_its_limits(self, rows: list[sqlite3.Row]) -> None:
        """No claim takes a queue past max_claimed (a limit set below what was claimed then holds
        the count from growing), nor past max_per_minute claims in any 60 s (each claim counted
        against the limit in force when it was made)."""
        for queue in QUEUES:
            claimed = sum(1 for r in rows if r["queue"] == queue and r["state"] == "claimed")
            limit = self.model.limits.get(queue)
            before = self.claimed_before.get(queue, 0)
            if limit is not None and limit.max_claimed is not None:
                assert claimed <= max(limit.max_claimed, before), (
                    f"queue {queue}: {claimed} claimed, over --max-claimed {limit.max_claimed} (was {before})")
            self.claimed_before[queue] = claimed
            for n, (at, most) in enumerate(limit.claims if limit is not None else ()):
                window = [a for a, _ in limit.claims[: n + 1] if a > at - 60_000]
                assert len(window) <= most, f"queue {queue}: {len(window)} claims in the minute to {at}, over {most}"

    def stats_agree_with_a_recount(self, rows: list[sqlite3.Row]) -> None:
        recount = count_as_the_next_claim_sees(rows, self.model)
        assert self.run(todos.stats(self.store)) == recount
        empty = QueueStats.empty("d")
        scoped = [s for s in recount if s.queue == "b"] or [QueueStats.empty("b")]
        assert self.run(todos.stats(self.store, queues=["d", "b"])) == [*scoped, empty]


# Examples per backend: a PostgreSQL step is round trips to a server, some times an SQLite one's.
EXAMPLES = {"sqlite": max(100, FUZZ_EXAMPLES), "postgres": max(PG_EXAMPLES, FUZZ_EXAMPLES // 4)}


def test_random_lifecycle_calls_keep_every_invariant(backend: str, request: pytest.FixtureRequest) -> None:
    database = Database(backend)
    if backend == "postgres":
        database = Database(backend, request.getfixturevalue("db_path"), request.getfixturevalue("postgres_server"))
    run_state_machine_as_test(
        lambda: Lifecycle(database),
        settings=settings(
            fuzz_settings,  # the same examples every CI run (SWITCHBOARD_FUZZ_RANDOM for fresh ones)
            max_examples=EXAMPLES[backend],
            stateful_step_count=50,
            database=None,
            report_multiple_bugs=False,  # shrink the first failure only: a failing run reports sooner
        ),
    )


# The three statements claim_next runs, one example each (what the machine
# finds among many, here in a form that fails fast and reads as the promise).
@pytest.mark.anyio
@pytest.mark.parametrize("queues", [None, ["b"], ["a", "b"]], ids=["any queue", "one queue", "several queues"])
async def test_claim_next_counts_an_attempt_and_takes_no_todo_before_it_is_visible(store, clock, queues) -> None:
    delayed, _ = await todos.create(store, NewTodo(queue="b", title="later", priority=9, delay=60))
    ready, _ = await todos.create(store, NewTodo(queue="b", title="now"))
    first = await todos.claim_next(store, owner="w", queues=queues)
    assert first is not None and (first.id, first.attempt) == (ready.id, 1)
    assert await todos.claim_next(store, owner="w", queues=queues) is None  # the delayed one waits
    await todos.fail(store, Lease.of(first))
    assert await todos.claim_next(store, owner="w", queues=queues) is None  # and the failed one backs off
    clock.advance(60)
    taken = [await todos.claim_next(store, owner="w", queues=queues) for _ in range(2)]
    assert [(t.id, t.attempt) for t in taken if t is not None] == [(delayed.id, 1), (ready.id, 2)]
