"""The thirteen MCP tools, each a thin call of one core verb inside the caller's scope.

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
from ..core.store import Store
from ..core.todo_model import (
    INT64_MAX,
    INT64_MIN,
    LEASE_CAP_SECONDS,
    MAX_DELAY_SECONDS,
    MAX_WAIT_SECONDS,
    NewTodo,
    State,
)
from ..core.todos import MAX_BATCH, Completion, Failure, Lease, NextClaim
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
    finished_items,
    finished_row,
    finished_with_next,
)

UNSCOPED_NAME = "mcp"  # the owner prefix when no agent is named
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


Id = Annotated[int, Field(ge=1, le=INT64_MAX)]  # an SQLite integer
LeaseToken = Annotated[str, Field(min_length=1, description="the lease_token your claim returned")]
LeaseSeconds = Annotated[float, Field(ge=1, le=LEASE_CAP_SECONDS, description="seconds (default 300)")]
Limit = Annotated[int, Field(ge=1, le=MAX_PAGE)]
Cursor = Annotated[str, Field(description="next_cursor of the previous page")]
BatchMax = Annotated[int, Field(ge=1, le=MAX_BATCH, description="claim up to this many (1-100); todos comes back")]


# ---------------------------------------------------------------- reading


async def list_todos(
    ctx: Context, queue: str | None = None, state: State | None = None, limit: Limit = 50, cursor: Cursor | None = None
) -> TodoPage:
    """List todos in your queues, newest first, as compact rows without payloads (payload_size tells how big each
    is). Filter by queue and state; page with cursor. Use get_todo for one todo in full, claim_next to take work."""
    s = _session(ctx)
    if queue is not None and not s.scope.has_queue(queue):
        return TodoPage(todos=[], next_cursor=None)  # a queue outside the scope looks empty, like an unknown one
    found = await todos.list_todos(
        s.store, queue=queue, state=state, limit=limit + 1, queues=s.scope.queues, before_id=_cursor(cursor)
    )
    page = found[:limit]
    more = len(found) > limit
    return TodoPage(todos=[TodoRow.of(t) for t in page], next_cursor=str(page[-1].id) if more else None)


async def get_todo(ctx: Context, id: Id) -> TodoFull:
    """Show one todo in full: payload, result, last error and its attempt history (who claimed it, when, and how each
    attempt ended). It does not claim the todo and never shows a lease token."""
    s = _session(ctx)
    return TodoFull.of(await todos.get(s.store, id, queues=s.scope.queues))


async def queue_stats(ctx: Context) -> QueueStatsResult:
    """Counts per queue in your scope: ready (claimable now), delayed (claimable later: a delay or a retry's
    backoff), pending (the two), claimed, done, dead (dead letters: failed for good, waiting for an operator),
    cancelled, the age in seconds of the oldest ready todo, and paused (an operator paused it: nothing can be
    claimed from it until it is resumed)."""
    s = _session(ctx)
    return QueueStatsResult(queues=[QueueStatsRow.of(q) for q in await todos.stats(s.store, queues=s.scope.queues)])


# ---------------------------------------------------------------- claiming


async def claim(ctx: Context, id: Id, lease_seconds: LeaseSeconds | None = None) -> TodoFull:
    """Claim one todo by id, e.g. the todo_id of a channel message. Returns it in full with its payload and a
    lease_token that heartbeat, complete, fail and release require. A todo someone else holds, a finished one or one
    waiting out a delay or a retry's backoff is refused with conflict; one assigned to another agent with forbidden."""
    s = _session(ctx)
    claimed = await todos.claim(
        s.store, id, owner=s.owner, lease=lease_seconds, agent=s.scope.agent, queues=s.scope.queues
    )
    return TodoFull.of(claimed)


async def claim_next(
    ctx: Context,
    queue: str | None = None,
    wait_seconds: Annotated[float, Field(ge=0, le=MAX_WAIT_SECONDS)] = 0,
    lease_seconds: LeaseSeconds | None = None,
    max: BatchMax | None = None,
) -> ClaimNextResult:
    """Claim the next todo: the highest priority, then the oldest, that is claimable in queue (default: all your
    queues). Returns it in full with its payload and a lease_token. With wait_seconds (up to 20) it waits for work
    to arrive; when nothing does it returns {"todo": null, "empty": true}, which is not an error. With max (1-100)
    it claims up to that many in one go, each with its own lease_token, returned as todos (a list); a wait ends
    as soon as one is claimable."""
    s = _session(ctx)
    if queue is not None and not s.scope.has_queue(queue):
        await anyio.sleep(wait_seconds)  # answered like a queue that exists but stays empty
        return ClaimNextResult(todo=None, empty=True) if max is None else ClaimNextResult(todos=[], empty=True)
    queues = [queue] if queue is not None else s.scope.queues
    polled = None if queues is None else frozenset(queues)
    s.polling.append(polled)
    try:
        claim = NextClaim(s.owner, queues, lease_seconds, s.scope.agent)
        if max is not None:
            found = await todos.claim_next_waiting(s.store, claim, wait=wait_seconds, changes=s.changes, max=max)
            return ClaimNextResult(todos=[TodoFull.of(t) for t in found], empty=not found)
        todo = await todos.claim_next_waiting(s.store, claim, wait=wait_seconds, changes=s.changes)
        return ClaimNextResult(todo=None if todo is None else TodoFull.of(todo), empty=todo is None)
    finally:
        s.polling.remove(polled)


# ---------------------------------------------------------------- the leased verbs


async def heartbeat(
    ctx: Context, id: Id, lease_token: LeaseToken, lease_seconds: LeaseSeconds | None = None
) -> TodoRow:
    """Keep working on a claimed todo: resets its lease to now + lease_seconds (default 300; one attempt can never
    run past 12 hours). Call it before lease_expires_at. conflict means the lease already lapsed and the todo may be
    someone else's now: stop working on it."""
    s = _session(ctx)
    return TodoRow.of(await todos.heartbeat(s.store, _lease(s, id, lease_token), lease_seconds=lease_seconds))


ClaimNext = Annotated[
    bool, Field(description="also claim your next todo in the same commit; it comes back as next, with its lease_token")
]
NextQueue = Annotated[str | None, Field(description="with claim_next: the queue to claim from (default: all yours)")]
NextMax = Annotated[
    int, Field(ge=1, le=MAX_BATCH, description="with items and claim_next: claim up to this many next (default: "
                                               "as many as the items)")  # fmt: skip
]


class CompleteItem(BaseModel):
    """One todo of a batch complete."""

    model_config = ConfigDict(extra="forbid")
    id: Id
    lease_token: LeaseToken
    result: Any = None


class FailItem(BaseModel):
    """One todo of a batch fail."""

    model_config = ConfigDict(extra="forbid")
    id: Id
    lease_token: LeaseToken
    error: str | None = None


Items = Field(min_length=1, max_length=MAX_BATCH,
              description="instead of id and lease_token: many todos (up to 100) in one commit, each answered on its "
                          "own in items (a refused one changes nothing; the others go through)")  # fmt: skip


async def complete(
    ctx: Context,
    id: Id | None = None,
    lease_token: LeaseToken | None = None,
    result: Any = None,
    claim_next: ClaimNext = False,
    queue: NextQueue = None,
    lease_seconds: LeaseSeconds | None = None,
    items: Annotated[list[CompleteItem] | None, Items] = None,
    max: NextMax | None = None,
) -> Finished:
    """Finish a claimed todo: it becomes done, with an optional JSON result (what you did, links, numbers) kept on
    the todo. conflict means your lease lapsed and the todo was taken over; your result was not recorded. With
    claim_next the next todo is claimed in the same commit and returned as next (null when nothing is claimable).
    For many at once pass items ([{id, lease_token, result}]) instead of id and lease_token: the answer's items
    say, per todo, ok with the todo or the error; with claim_next, next is a list of up to max todos."""
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
    id: Id | None = None,
    lease_token: LeaseToken | None = None,
    error: str | None = None,
    claim_next: ClaimNext = False,
    queue: NextQueue = None,
    lease_seconds: LeaseSeconds | None = None,
    items: Annotated[list[FailItem] | None, Items] = None,
    max: NextMax | None = None,
) -> Finished:
    """Give up on this attempt at a claimed todo, saying why in error. It is pending again, claimable after a
    backoff (visible_at says when), until its attempts run out; then it is failed, a dead letter (dead_letter true)
    for an operator to look at.
    With claim_next the next todo is claimed in the same commit and returned as next (null when none is).
    For many at once pass items ([{id, lease_token, error}]) instead of id and lease_token, answered as by complete."""
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
    return NextClaim(s.owner, queues, lease_seconds, s.scope.agent)


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
    id: Id,
    lease_token: LeaseToken,
    delay_seconds: Annotated[float, Field(ge=0, le=MAX_DELAY_SECONDS)] = 0,
) -> TodoRow:
    """Hand a claimed todo back untouched, e.g. when it is not yours to do: it is pending again (after
    delay_seconds) and the attempt does not count."""
    s = _session(ctx)
    return TodoRow.of(await todos.release(s.store, _lease(s, id, lease_token), delay=delay_seconds))


# ---------------------------------------------------------------- handing work on


async def create_for(
    ctx: Context,
    title: str,
    queue: str | None = None,
    assignee: str | None = None,
    payload: Any = None,
    kind: str | None = None,
    priority: Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)] = 0,
    idempotency_key: str | None = None,
) -> CreatedTodo:
    """Hand work to another queue or agent: creates a pending todo with a one-line title and an optional JSON
    payload. Give queue, or assignee (an agent name: only that agent may claim it; the queue defaults to the
    agent's first). Higher priority is claimed first. With an idempotency_key, asking again while that todo is
    live returns it with created false instead of a duplicate (todo is null when it is on a queue you cannot
    read). Your profile may limit the queues you can create todos in (forbidden otherwise)."""
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
    )
    todo, created = await todos.create(s.store, new, by=s.owner)
    if not created and not s.scope.has_queue(todo.queue):
        # A live todo the agent cannot read holds the key: it learns that much
        # (what idempotency promises), and nothing of the todo.
        return CreatedTodo(todo=None, created=False)
    return CreatedTodo(todo=TodoRow.of(todo), created=created)


# ---------------------------------------------------------------- events


async def list_events(
    ctx: Context, cursor: Cursor | None = None, limit: Limit = 50, source: str | None = None, type: str | None = None
) -> EventPage:
    """List stored events (the deliveries todos came from: webhooks, queue messages), oldest first, as summaries
    without bodies; only events that a todo in your queues came from. Filter by source and type; pass next_cursor
    as cursor for the next page."""
    s = _session(ctx)
    found = await events.list_events(
        s.store, source=source, type=type, after_id=_cursor(cursor), limit=limit + 1, queues=s.scope.queues
    )
    page = found[:limit]
    more = len(found) > limit
    return EventPage(events=[EventSummary.of(e) for e in page], next_cursor=str(page[-1].id) if more else None)


async def get_event(ctx: Context, id: Id) -> EventFull:
    """Show one stored event: where it came from, whether it was verified, its headers (secrets redacted) and its
    body (text when it is UTF-8, else base64, as body_encoding says; null with body_omitted when it is larger than
    the payload cap). A todo's event_id names its event."""
    s = _session(ctx)
    event = await events.get_event(s.store, id, queues=s.scope.queues)
    cap = (await settings.get(s.store, settings.MAX_PAYLOAD.name)).value
    return EventFull.of(event, max_body=cap)


async def replay_event(ctx: Context, id: Id) -> Replayed:
    """Run a stored event through the routing rules again, as if it had just arrived: creates the todos the rules
    give now (a todo still live under the same key is found, not duplicated). Returns their ids."""
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
    ToolSpec(fn.__name__, fn, read_only=fn in (list_todos, get_todo, list_events, get_event, queue_stats))
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
        list_events,
        get_event,
        replay_event,
        queue_stats,
    )
)
assert tuple(t.name for t in TOOLS) == agents.TOOL_NAMES
