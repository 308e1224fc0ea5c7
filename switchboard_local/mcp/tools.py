"""The fourteen MCP tools, each a thin call of one core verb inside the caller's scope.

Argument names match the core and the CLI (``id``, ``lease_token``,
``queue``…); a docstring is the tool's description, written for the model
that reads it. A todo or event outside the scope is answered exactly like an
unknown id: the core is asked with the scope and says ``not_found``.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context
from pydantic import BaseModel, ConfigDict, Field

from ..core import agents, events, routing, settings, todos, watch
from ..core.agents import Agent
from ..core.errors import Forbidden, InvalidArgument, NotFound
from ..core.store.interface import Store
from ..core.todo_model import (
    INT64_MAX,
    INT64_MIN,
    LEASE_CAP_SECONDS,
    MAX_DELAY_SECONDS,
    MAX_DEPENDENCIES,
    MAX_WAIT_SECONDS,
    NewTodo,
    State,
)
from ..core.todos import MAX_BATCH, MAX_WAITED, Completion, Failure, Lease, NextClaim
from .channel import Doorbell
from .models import (
    ClaimNextResult,
    CreatedTodo,
    EventFull,
    EventPage,
    EventSummary,
    Finished,
    QueueStatsResult,
    QueueStatsRow,
    Replayed,
    TodoFull,
    TodoPage,
    TodoRow,
    WaitedTodos,
    finished_items,
    finished_row,
    finished_with_next,
)

UNSCOPED_NAME = "mcp"  # the owner prefix when no agent is named
MAX_CREATED = 10_000  # create_for's todos a session remembers as its own
MAX_PAGE = 200


@dataclass(frozen=True)
class Scope:
    """What one server may see and do: its agent's queues and tools (None: all)."""

    agent: str
    queues: tuple[str, ...] | None
    tools: tuple[str, ...] | None
    creates_in: tuple[str, ...] | None = None  # where create_for may put todos (None: anywhere)

    @classmethod
    def of(cls, agent: Agent | None) -> Scope:
        if agent is None:
            return cls(UNSCOPED_NAME, None, None)
        return cls(agent.name, agent.queues, agent.tools, agent.creates_in)

    def may_use(self, tool: str) -> bool:
        return self.tools is None or tool in self.tools

    def has_queue(self, queue: str) -> bool:
        return self.queues is None or queue in self.queues

    def may_create_in(self, queue: str) -> bool:
        return self.creates_in is None or queue in self.creates_in


@dataclass
class Session:
    """The lifespan state every tool reads: one per connection (one per process on stdio)."""

    store: Store
    scope: Scope
    owner: str  # agent name / per-process session id
    changes: watch.Changes
    doorbell: Doorbell = field(default_factory=Doorbell)
    # The queues of this session's claim_next calls that are waiting right now:
    # what lands there is about to be handed over, so the doorbell stays silent.
    polling: list[frozenset[str] | None] = field(default_factory=list)
    # The todos this session made with create_for (the newest MAX_CREATED): wait_todos and
    # get_todo answer them wherever they went.
    created: dict[int, None] = field(default_factory=dict)

    def made(self, todo_id: int) -> None:
        self.created[todo_id] = None
        if len(self.created) > MAX_CREATED:
            del self.created[next(iter(self.created))]  # the oldest: dicts keep their order

    def is_polling(self, queue: str) -> bool:
        return any(queues is None or queue in queues for queues in self.polling)


def _session(ctx: Context) -> Session:
    return ctx.request_context.lifespan_context  # type: ignore[no-any-return]


def _lease(s: Session, todo_id: int, lease_token: str) -> Lease:
    """The lease a tool presents: its todo must be in the session's scope."""
    return Lease(todo_id, lease_token, s.scope.queues)


def _cursor(cursor: str | None) -> int | None:
    if cursor is None:
        return None
    if not re.fullmatch(r"[0-9]{1,18}", cursor):
        raise InvalidArgument("cursor is not one this server gave out; pass next_cursor back unchanged")
    return int(cursor)


# Every parameter says what it is (the model reads these in tools/list), and
# numbers and booleans are strict: "3" or true for a number, 1 for a boolean,
# is refused as invalid_argument rather than read as what it might mean.
TodoId = Annotated[int, Field(strict=True, ge=1, le=INT64_MAX, description="the todo's id")]
EventId = Annotated[int, Field(strict=True, ge=1, le=INT64_MAX, description="the event's id (a todo's event_id)")]
LeaseToken = Annotated[str, Field(min_length=1, description="the lease_token your claim returned")]
LeaseSeconds = Annotated[
    float, Field(strict=True, ge=1, le=LEASE_CAP_SECONDS, description="lease in seconds (default 300)")
]
Limit = Annotated[int, Field(strict=True, ge=1, le=MAX_PAGE, description="rows per page")]
Cursor = Annotated[str, Field(description="next_cursor of the previous page")]
QueueFilter = Annotated[str, Field(description="only this queue")]
BatchMax = Annotated[int, Field(strict=True, ge=1, le=MAX_BATCH, description="claim up to this many at once, as todos")]
WaitSeconds = Annotated[
    float, Field(strict=True, ge=0, le=MAX_WAIT_SECONDS, description="wait up to this long for work")
]

# A batch's answer is one line on stdout, and stays within MCP's line cap
# (MAX_LINE, 16 MiB): the claimed todos' payloads and error texts get this
# much (the core's budget), and the rest of up to 100 todos (titles, names,
# times: each capped, under 24 KiB a todo) fits in what is left.
BATCH_BUDGET = 12 * 1024 * 1024


# ---------------------------------------------------------------- reading


async def list_todos(
    ctx: Context,
    queue: QueueFilter | None = None,
    state: Annotated[State | None, Field(description="only todos in this state")] = None,
    limit: Limit = 50,
    cursor: Cursor | None = None,
) -> TodoPage:
    """List todos in your queues, newest first, as rows without payloads (payload_size says how big each is).
    get_todo shows one in full; claim_next takes work."""
    s = _session(ctx)
    if queue is not None and not s.scope.has_queue(queue):
        return TodoPage(todos=[], next_cursor=None)  # a queue outside the scope looks empty, like an unknown one
    found = await todos.list_todos(
        s.store, queue=queue, state=state, limit=limit + 1, queues=s.scope.queues, before_id=_cursor(cursor)
    )
    page = found[:limit]
    more = len(found) > limit
    return TodoPage(todos=[TodoRow.of(t) for t in page], next_cursor=str(page[-1].id) if more else None)


async def get_todo(ctx: Context, id: TodoId) -> TodoFull:
    """Show one todo in full: payload, result, last error and its attempt history (who claimed it, when, how each
    attempt ended). It does not claim it and never shows a lease token."""
    s = _session(ctx)
    return TodoFull.of(await todos.get(s.store, id, queues=s.scope.queues, own=s.created))


async def queue_stats(ctx: Context) -> QueueStatsResult:
    """Counts per queue in your scope: ready (claimable now), delayed (later: a delay or a retry's backoff),
    pending (both), claimed, done, dead (dead letters, for an operator), cancelled, the oldest ready todo's age in
    seconds, paused (nothing is claimed from it until an operator resumes it), and its limits if any."""
    s = _session(ctx)
    return QueueStatsResult(queues=[QueueStatsRow.of(q) for q in await todos.stats(s.store, queues=s.scope.queues)])


# ---------------------------------------------------------------- claiming


async def claim(ctx: Context, id: TodoId, lease_seconds: LeaseSeconds | None = None) -> TodoFull:
    """Claim one todo by id, e.g. a channel message's todo_id: returns it in full with its payload and the
    lease_token that heartbeat, complete, fail and release require. conflict: someone else holds it, it is finished,
    or it waits out a delay or backoff; forbidden: it is assigned to another agent."""
    s = _session(ctx)
    claimed = await todos.claim(
        s.store, id, owner=s.owner, lease=lease_seconds, agent=s.scope.agent, queues=s.scope.queues
    )
    return TodoFull.of(claimed)


async def claim_next(
    ctx: Context,
    queue: Annotated[str | None, Field(description="claim only from this queue (default: all yours)")] = None,
    wait_seconds: WaitSeconds = 0,
    lease_seconds: LeaseSeconds | None = None,
    max: BatchMax | None = None,
) -> ClaimNextResult:
    """Claim the next claimable todo in your queues, the highest priority then the oldest: it comes back in full
    with its payload and lease_token, or {"todo": null, "empty": true} when none is (not an error); wait_seconds
    makes it wait for work to arrive. With max, each
    comes with its own lease_token in todos; cut true: the answer's size bound (12 MiB of payloads) stopped the
    batch short of max, and the rest wait unclaimed."""
    s = _session(ctx)
    if queue is not None and not s.scope.has_queue(queue):
        await anyio.sleep(wait_seconds)  # answered like a queue that exists but stays empty
        return (
            ClaimNextResult(todo=None, empty=True) if max is None else ClaimNextResult(todos=[], empty=True, cut=False)
        )
    queues = [queue] if queue is not None else s.scope.queues
    polled = None if queues is None else frozenset(queues)
    s.polling.append(polled)
    try:
        claim = NextClaim(s.owner, queues, lease_seconds, s.scope.agent, budget=BATCH_BUDGET)
        if max is not None:
            found = await todos.claim_next_waiting(s.store, claim, wait=wait_seconds, changes=s.changes, max=max)
            return ClaimNextResult(todos=[TodoFull.of(t) for t in found], empty=not found, cut=found.over_budget > 0)
        todo = await todos.claim_next_waiting(s.store, claim, wait=wait_seconds, changes=s.changes)
        return ClaimNextResult(todo=None if todo is None else TodoFull.of(todo), empty=todo is None)
    finally:
        s.polling.remove(polled)


# ---------------------------------------------------------------- the leased verbs


async def heartbeat(
    ctx: Context,
    id: TodoId,
    lease_token: LeaseToken,
    lease_seconds: Annotated[LeaseSeconds | None, Field(description="the new lease from now (default 300 s)")] = None,
) -> TodoRow:
    """Keep working on a claimed todo: its lease ends lease_seconds (default 300) from now; one attempt never runs
    past 12 hours. Call it before lease_expires_at. conflict: the lease lapsed and the todo may be someone else's
    now: stop working on it."""
    s = _session(ctx)
    return TodoRow.of(await todos.heartbeat(s.store, _lease(s, id, lease_token), lease_seconds=lease_seconds))


ClaimNext = Annotated[
    bool, Field(strict=True, description="also claim your next todo in the same commit, returned as next (null: none)")
]
NextQueue = Annotated[str | None, Field(description="with claim_next: claim from this queue (default: all yours)")]
NextLease = Annotated[LeaseSeconds | None, Field(description="with claim_next: the next todo's lease")]
NextMax = Annotated[
    int,
    Field(
        strict=True,
        ge=1,
        le=MAX_BATCH,
        description="with items and claim_next: claim up to this many next (default: as many as items)",
    ),
]
Result = Annotated[Any, Field(description="JSON kept on the todo: what you did, links, numbers")]
Error = Annotated[str | None, Field(description="why this attempt failed (kept as last_error)")]


# One todo of a batch complete (no docstring: it would be its description in tools/list).
class CompleteItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: TodoId
    lease_token: LeaseToken
    result: Result = None


class FailItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: TodoId
    lease_token: LeaseToken
    error: Error = None


Items = Field(min_length=1, max_length=MAX_BATCH,
              description="instead of id and lease_token: many todos in one commit, each answered on its own (a "
                          "refused one changes nothing, the others go through)")  # fmt: skip


async def complete(
    ctx: Context,
    id: TodoId | None = None,
    lease_token: LeaseToken | None = None,
    result: Result = None,
    claim_next: ClaimNext = False,
    queue: NextQueue = None,
    lease_seconds: NextLease = None,
    items: Annotated[list[CompleteItem] | None, Items] = None,
    max: NextMax | None = None,
) -> Finished:
    """Finish a claimed todo: it becomes done, keeping result. conflict: your lease lapsed and the todo was taken
    over; nothing was recorded. With items, the answer's items say per todo ok with the todo, or its error; with
    claim_next too, next is a list (cut as for claim_next)."""
    s = _session(ctx)
    if items is not None:
        _only_items(id, lease_token, "result" if result is not None else None)
        batch = [Completion(_lease(s, i.id, i.lease_token), i.result) for i in items]
        return await _finish_many(s, claim_next, queue, lease_seconds, max,
                                  lambda then, most: todos.complete_many(s.store, batch, then=then, max=most))  # fmt: skip
    lease = _lease(s, *_one(id, lease_token, max))
    return await _finish(
        s, claim_next, queue, lease_seconds, lambda then: todos.complete(s.store, lease, result=result, then=then)
    )


async def fail(
    ctx: Context,
    id: TodoId | None = None,
    lease_token: LeaseToken | None = None,
    error: Error = None,
    claim_next: ClaimNext = False,
    queue: NextQueue = None,
    lease_seconds: NextLease = None,
    items: Annotated[list[FailItem] | None, Items] = None,
    max: NextMax | None = None,
) -> Finished:
    """Give up on this attempt at a claimed todo. It is pending again after a backoff (visible_at) until its
    attempts run out; then it is failed, a dead letter (dead_letter true) for an operator. The rest as complete."""
    s = _session(ctx)
    if items is not None:
        _only_items(id, lease_token, "error" if error is not None else None)
        batch = [Failure(_lease(s, i.id, i.lease_token), i.error) for i in items]
        return await _finish_many(s, claim_next, queue, lease_seconds, max,
                                  lambda then, most: todos.fail_many(s.store, batch, then=then, max=most))  # fmt: skip
    lease = _lease(s, *_one(id, lease_token, max))
    return await _finish(
        s, claim_next, queue, lease_seconds, lambda then: todos.fail(s.store, lease, error=error, then=then)
    )


def _one(id: int | None, lease_token: str | None, max: int | None) -> tuple[int, str]:
    """The todo of a call for one: id and lease_token both given."""
    if max is not None:
        raise InvalidArgument("max goes with items and claim_next: true")
    if id is None:
        raise InvalidArgument("id: Field required (or items, for many todos)")
    if lease_token is None:
        raise InvalidArgument("lease_token: Field required")  # as pydantic words a missing argument
    return id, lease_token


def _only_items(id: int | None, lease_token: str | None, value: str | None) -> None:
    """A call for many takes everything per todo from its items."""
    given = [name for name, v in (("id", id), ("lease_token", lease_token), (value, value)) if v is not None]
    if given:
        raise InvalidArgument(f"{given[0]}: give it in each of items, not beside them")


def _next_claim(s: Session, claim_next: bool, queue: str | None, lease_seconds: float | None,
                      max: int | None) -> NextClaim | None | bool:  # fmt: skip
    """The claim that follows a finish: None when not asked, False when queue is outside the scope."""
    if not claim_next:
        if queue is not None or lease_seconds is not None or max is not None:
            raise InvalidArgument("queue, lease_seconds and max go with claim_next: true")
        return None
    if not s.scope.may_use("claim_next"):
        raise Forbidden("claim_next is not one of this agent's tools; complete or fail without it")
    if queue is not None and not s.scope.has_queue(queue):
        return False  # answered like a queue that exists but is empty
    queues = [queue] if queue is not None else s.scope.queues
    return NextClaim(s.owner, queues, lease_seconds, s.scope.agent, budget=BATCH_BUDGET)


async def _finish(
    s: Session,
    claim_next: bool,
    queue: str | None,
    lease_seconds: float | None,
    finish: Callable[[NextClaim | None], Awaitable[todos.Finished]],
) -> Finished:
    """complete or fail, alone or with the next claim in the same commit."""
    then = _next_claim(s, claim_next, queue, lease_seconds, None)
    finished = await finish(then or None)
    if then is None:
        return finished_row(finished.todo)
    return finished_with_next(finished.todo, finished.next)


async def _finish_many(
    s: Session,
    claim_next: bool,
    queue: str | None,
    lease_seconds: float | None,
    max: int | None,
    finish: Callable[[NextClaim | None, int | None], Awaitable[todos.Outcomes]],
) -> Finished:
    """complete or fail for items, alone or with the next claims in the same commit."""
    then = _next_claim(s, claim_next, queue, lease_seconds, max)
    outcomes = await finish(then or None, max if then else None)
    return finished_items(outcomes, claim_next=claim_next)


async def release(
    ctx: Context,
    id: TodoId,
    lease_token: LeaseToken,
    delay_seconds: Annotated[
        float, Field(strict=True, ge=0, le=MAX_DELAY_SECONDS, description="claimable again after this long")
    ] = 0,
) -> TodoRow:
    """Hand a claimed todo back untouched, e.g. when it is not yours to do: it is pending again and the attempt does
    not count."""
    s = _session(ctx)
    return TodoRow.of(await todos.release(s.store, _lease(s, id, lease_token), delay=delay_seconds))


# ---------------------------------------------------------------- handing work on


async def create_for(
    ctx: Context,
    title: Annotated[str, Field(description="what to do, in one line")],
    queue: Annotated[str | None, Field(description="the queue to put it on")] = None,
    assignee: Annotated[str | None, Field(description="the agent that alone may claim it (queue: its first)")] = None,
    payload: Annotated[Any, Field(description="JSON the work needs")] = None,
    kind: Annotated[str | None, Field(description="a label for the kind of work")] = None,
    priority: Annotated[int, Field(strict=True, ge=INT64_MIN, le=INT64_MAX, description="higher is claimed first")] = 0,
    idempotency_key: Annotated[
        str | None, Field(description="while its todo is live, the same key gives it back")
    ] = None,
    depends_on: Annotated[
        list[Annotated[int, Field(strict=True, ge=1, le=INT64_MAX)]] | None,
        Field(max_length=MAX_DEPENDENCIES, description="ids of todos it waits for: blocked until all are done"),
    ] = None,
) -> CreatedTodo:
    """Hand work to another queue or agent: creates a pending todo (give queue, or assignee). Your profile may limit
    the queues you can create in (forbidden otherwise). A live todo already holding the idempotency_key comes back
    with created false instead of a duplicate (todo null when it is on a queue you cannot read). With depends_on,
    its claim carries their results; one cancelled cancels it."""
    s = _session(ctx)
    allowed = ", ".join(s.scope.creates_in or ())
    if queue is None:
        if assignee is None:
            raise InvalidArgument("give a queue or an assignee")
        try:
            queue = (await agents.get(s.store, assignee)).queues[0]
        except NotFound:
            queue = None
        if queue is None or not s.scope.may_create_in(queue):
            # Whether that agent exists, and where it works, is not this agent's to learn.
            if s.scope.creates_in is not None:
                raise Forbidden(f"agent {s.scope.agent!r} may not create todos for {assignee!r}; give a queue "
                                f"(it may on: {allowed})")  # fmt: skip
            raise InvalidArgument(f"there is no agent named {assignee!r} to take a default queue from; give a queue")
    if not s.scope.may_create_in(queue):
        raise Forbidden(f"agent {s.scope.agent!r} may not create todos on queue {queue!r} (it may on: {allowed})")
    new = NewTodo(
        queue=queue,
        title=title,
        payload=payload,
        kind=kind,
        assignee=assignee,
        priority=priority,
        idempotency_key=idempotency_key,
        after=tuple(depends_on or ()),
    )
    todo, created = await todos.create(s.store, new, by=s.owner, scope=s.scope.queues, own=s.created)
    if created:
        s.made(todo.id)
    if not created and not s.scope.has_queue(todo.queue):
        # A live todo the agent cannot read holds the key: it learns that much
        # (what idempotency promises), and nothing of the todo.
        return CreatedTodo(todo=None, created=False)
    return CreatedTodo(todo=TodoRow.of(todo), created=created)


WaitIds = Annotated[
    list[Annotated[int, Field(strict=True, ge=1, le=INT64_MAX)]],
    Field(min_length=1, max_length=MAX_WAITED, description="ids of the todos to wait for (e.g. create_for's)"),
]


async def wait_todos(
    ctx: Context,
    ids: WaitIds,
    wait_seconds: Annotated[
        float, Field(strict=True, ge=0, le=MAX_WAIT_SECONDS, description="wait up to this long for all to finish")
    ] = 0,
) -> WaitedTodos:
    """Wait for todos to finish, e.g. the ones you handed on with create_for: answers each one's state (done,
    failed: a dead letter, cancelled, or still pending or claimed) and result as soon as all are finished, or when
    wait_seconds pass (finished false: call again to wait on). Todos in your queues, or made by your create_for."""
    s = _session(ctx)
    found = await todos.wait_finished(
        s.store, ids, wait=wait_seconds, changes=s.changes, queues=s.scope.queues, own=s.created
    )
    return WaitedTodos.of(found, BATCH_BUDGET)


# ---------------------------------------------------------------- events


async def list_events(
    ctx: Context,
    cursor: Cursor | None = None,
    limit: Limit = 50,
    source: Annotated[str | None, Field(description="only events from this source")] = None,
    type: Annotated[str | None, Field(description="only events of this type")] = None,
) -> EventPage:
    """List stored events (the deliveries todos came from: webhooks, queue messages), oldest first, as summaries
    without bodies; only those a todo in your queues came from."""
    s = _session(ctx)
    found = await events.list_events(
        s.store, source=source, type=type, after_id=_cursor(cursor), limit=limit + 1, queues=s.scope.queues
    )
    page = found[:limit]
    more = len(found) > limit
    return EventPage(events=[EventSummary.of(e) for e in page], next_cursor=str(page[-1].id) if more else None)


async def get_event(ctx: Context, id: EventId) -> EventFull:
    """Show one stored event: its source, whether it was verified, its headers (secrets redacted) and body (text if
    UTF-8, else base64, per body_encoding; null with body_omitted when over the payload cap)."""
    s = _session(ctx)
    event = await events.get_event(s.store, id, queues=s.scope.queues)
    cap = (await settings.get(s.store, settings.MAX_PAYLOAD.name)).value
    return EventFull.of(event, max_body=cap)


async def replay_event(ctx: Context, id: EventId) -> Replayed:
    """Run a stored event through the routing rules again, as if it had just arrived; returns the ids of the todos
    they give (one still live under the same key is found, not duplicated)."""
    s = _session(ctx)
    # Outside the scope the event is not found; inside it, only the scope's queues get todos.
    return Replayed(event_id=id, todo_ids=await routing.replay(s.store, id, queues=s.scope.queues))


# ---------------------------------------------------------------- the list


@dataclass(frozen=True)
class ToolSpec:
    name: str
    fn: Callable[..., Any]
    read_only: bool


TOOLS = tuple(
    ToolSpec(fn.__name__, fn, read_only=fn in (list_todos, get_todo, wait_todos, list_events, get_event, queue_stats))
    for fn in (
        list_todos,
        get_todo,
        claim,
        claim_next,
        heartbeat,
        complete,
        fail,
        release,
        create_for,
        wait_todos,
        list_events,
        get_event,
        replay_event,
        queue_stats,
    )
)
assert tuple(t.name for t in TOOLS) == agents.TOOL_NAMES
