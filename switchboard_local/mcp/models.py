"""The MCP tools' typed outputs: pydantic models named like the schema.

Clients get an ``outputSchema`` per tool and ``structuredContent`` per call.
Field names are the schema's (``id``, ``state``, ``attempt``,
``lease_token``…); times are RFC 3339 UTC strings, as in the CLI's JSON.
Imported only by the MCP edge (pydantic comes with the SDK).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_serializer

from ..core import todos
from ..core.events import Event
from ..core.todo_model import QueueStats, State, Todo
from ..core.watch import Arrival


def _untitled(schema: dict[str, Any]) -> None:
    """Drop the titles pydantic derives from names: they repeat the names in every tools/list."""
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)


class Out(BaseModel):
    model_config = ConfigDict(json_schema_extra=_untitled)


class TodoRow(Out):
    """A todo without its payload: what lists and lifecycle answers show."""

    id: int
    queue: str
    title: str
    kind: str | None
    state: State
    dead_letter: bool = Field(description="state is failed: no retry coming until an operator redrives it")
    priority: int
    assignee: str | None
    attempt: int
    max_attempts: int
    owner: str | None
    lease_expires_at: str | None
    visible_at: str | None = Field(description="when a pending todo becomes claimable (after a delay or a retry's backoff)")
    event_id: int | None
    last_error: str | None
    created_at: str
    updated_at: str
    payload_size: int = Field(description="bytes of the payload's JSON; get_todo or a claim shows it")
    blocked: bool = Field(default=False, description="pending, waiting for todos not done: not claimable yet")

    @classmethod
    def of(cls, todo: Todo) -> TodoRow:
        fields = todo.to_dict()
        fields["payload_size"] = len(json.dumps(todo.payload, ensure_ascii=False, separators=(",", ":")).encode())
        return cls.model_validate(fields)


class AttemptOut(Out):
    attempt: int
    owner: str
    claimed_at: str
    ended_at: str | None
    outcome: Literal["completed", "failed", "released", "lease_expired", "released_by_operator", "cancelled"] | None
    error: str | None


class DependencyOut(Out):
    id: int
    state: State
    result: Any = Field(description="what its complete gave (null until done, or when result_omitted)")
    result_omitted: bool = Field(default=False, description="true when too large to inline: get_todo of its id shows it")


class TodoFull(Out):
    """A todo in full: payload, result, and (when asked) its attempts or lease token."""

    id: int
    queue: str
    title: str
    kind: str | None
    payload: Any
    state: State
    dead_letter: bool
    priority: int
    assignee: str | None
    attempt: int
    max_attempts: int
    owner: str | None
    lease_expires_at: str | None
    visible_at: str | None
    idempotency_key: str | None
    event_id: int | None
    result: Any
    last_error: str | None
    created_at: str
    updated_at: str
    claimed_at: str | None
    completed_at: str | None
    cancelled_by: str | None = None
    cancel_reason: str | None = None
    lease_token: str | None = Field(
        default=None, description="only in a claim's answer: pass it to heartbeat, complete, fail, release"
    )
    attempts: list[AttemptOut] | None = Field(default=None, description="one per claim, oldest first (get_todo)")
    blocked: bool = Field(default=False, description="pending, waiting for todos not done: not claimable yet")
    dependencies: list[DependencyOut] | None = Field(
        default=None, description="the todos it waits for, with their states and results (absent when none)"
    )

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: Any) -> Any:
        # lease_token only in a claim's answer, attempts only in get_todo's: absent, not null.
        data = handler(self)
        for key in ("lease_token", "attempts", "dependencies"):
            if isinstance(data, dict) and data.get(key) is None:
                data.pop(key, None)
        return data

    @classmethod
    def of(cls, todo: Todo) -> TodoFull:
        return cls.model_validate(todo.to_dict())


class ItemError(Out):
    code: str = Field(description="not_found, conflict, invalid_argument or forbidden")
    message: str


class ItemOutcome(Out):
    """One item of a batch complete or fail: the finished todo, or why this item was refused."""

    id: int
    ok: bool
    todo: TodoRow | None = Field(default=None, description="when ok: the todo, finished")
    error: ItemError | None = Field(
        default=None, description="when not ok: the refusal complete or fail would have answered for this item alone"
    )

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: Any) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            data.pop("error" if self.ok else "todo", None)
        return data

    @classmethod
    def of(cls, outcome: todos.ItemOutcome) -> ItemOutcome:
        if outcome.error is not None:
            error = ItemError.model_validate({"code": outcome.error.code, "message": outcome.error.message})
            return cls(id=outcome.todo_id, ok=False, error=error)
        assert outcome.todo is not None
        return cls(id=outcome.todo_id, ok=True, todo=TodoRow.of(outcome.todo))


class _OnlyWhatIsSet(Out):
    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: Any) -> Any:
        data = handler(self)
        return {k: v for k, v in data.items() if k in self.model_fields_set} if isinstance(data, dict) else data


# complete's and fail's answer, one schema for both shapes: a finished todo's
# row (every TodoRow field) and, with claim_next, next; or, for items, items
# and, with claim_next, next as a list. What a call did not ask for is absent.
Finished = create_model(
    "Finished",
    __base__=_OnlyWhatIsSet,
    __doc__="complete's and fail's answer: the finished todo's row, or with items one outcome per item.",
    **{  # type: ignore[call-overload]
        name: (info.annotation | None, Field(default=None, description=info.description))
        for name, info in TodoRow.model_fields.items()
    },
    next=(
        TodoFull | list[TodoFull] | None,
        Field(
            default=None,
            description="only with claim_next: the next todo claimed for you with its lease_token (null when none "
            "was); with items, a list of them (empty when none was)",
        ),
    ),
    items=(
        list[ItemOutcome] | None,
        Field(default=None, description="only with items: one outcome per item, in their order"),
    ),
    cut=(
        bool | None,
        Field(default=None, description="only with items and claim_next: as claim_next's cut, for next"),
    ),
)


def finished_row(todo: Todo) -> Any:
    """The answer of complete or fail for one todo, without claim_next."""
    return Finished.model_validate(TodoRow.of(todo).model_dump())


def finished_with_next(todo: Todo, next_todo: Todo | None) -> Any:
    """... with claim_next: the next todo (None: nothing was claimable)."""
    return Finished.model_validate({**TodoRow.of(todo).model_dump(), "next": next_todo and TodoFull.of(next_todo)})


def finished_items(outcomes: todos.Outcomes, *, claim_next: bool) -> Any:
    """... for items: one outcome per item, and with claim_next the todos claimed next."""
    fields: dict[str, Any] = {"items": [ItemOutcome.of(o) for o in outcomes]}
    if claim_next:
        fields["next"] = [TodoFull.of(t) for t in outcomes.next]
        fields["cut"] = outcomes.next.over_budget > 0
    return Finished.model_validate(fields)


class TodoPage(Out):
    todos: list[TodoRow]
    next_cursor: str | None = Field(description="pass as cursor for older todos; null when this is the last page")


class ClaimNextResult(Out):
    """claim_next's answer: ``todo`` (null: nothing), or with max ``todos`` (empty: nothing) and ``cut``."""

    todo: TodoFull | None = Field(default=None, description="without max: the todo claimed for you, or null")
    todos: list[TodoFull] | None = Field(
        default=None, description="only with max: the todos claimed for you, each with its own lease_token"
    )
    empty: bool = Field(description="true when nothing claimable arrived within wait_seconds")
    cut: bool | None = Field(
        default=None,
        description="only with max: true when the answer's size bound (12 MiB of payloads and error texts) stopped "
        "the batch short of max; the todos next in line stay pending, unclaimed",
    )

    @model_serializer(mode="wrap")
    def _omit_unasked(self, handler: Any) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for key in ("todo", "todos", "cut"):
                if key not in self.model_fields_set:
                    data.pop(key, None)
        return data


class WaitedTodo(Out):
    """A todo waited on: how it stands, and what it ended with."""

    id: int
    queue: str
    title: str
    state: State
    dead_letter: bool = Field(description="state is failed: its attempts are used up (no retry unless redriven)")
    result: Any = Field(description="what its complete gave; null when result_omitted")
    result_omitted: bool = Field(description="true when the answer's size bound left its result out: get_todo shows it")
    last_error: str | None
    cancel_reason: str | None

    @classmethod
    def of(cls, todo: Todo, *, with_result: bool = True) -> WaitedTodo:
        return cls.model_validate({
            "id": todo.id, "queue": todo.queue, "title": todo.title, "state": todo.state,
            "dead_letter": todo.dead_letter, "result": todo.result if with_result else None,
            "result_omitted": not with_result, "last_error": todo.last_error, "cancel_reason": todo.cancel_reason,
        })  # fmt: skip


class WaitedTodos(Out):
    todos: list[WaitedTodo] = Field(description="the todos named, in the order named")
    finished: bool = Field(description="true once every one is done, failed (a dead letter) or cancelled")

    @classmethod
    def of(cls, found: list[Todo], budget: int) -> WaitedTodos:
        """Each result inlined while the results so far fit ``budget`` bytes (the answer is one stdio line)."""
        rows = []
        for todo in found:
            size = len(json.dumps(todo.result, ensure_ascii=False).encode())
            rows.append(WaitedTodo.of(todo, with_result=size <= budget))
            budget -= size if size <= budget else 0
        return cls(todos=rows, finished=all(map(todos.finished, found)))


class CreatedTodo(Out):
    todo: TodoRow | None = Field(
        description="the todo created, or the live one holding the key; null when that one is on a queue you cannot read"
    )
    created: bool = Field(description="false when a live todo already held the idempotency key (it is returned)")


class EventSummary(Out):
    id: int
    source: str
    family: str
    type: str
    external_id: str
    trust_mode: str
    verified: bool
    verify_detail: str | None
    content_type: str | None
    size: int
    received_at: str

    @classmethod
    def of(cls, event: Event) -> EventSummary:
        return cls.model_validate(event.summary())


class EventPage(Out):
    events: list[EventSummary]
    next_cursor: str | None = Field(description="pass as cursor for newer events; null when there are none yet")


class EventFull(EventSummary):
    headers: dict[str, str] = Field(description="as received, secrets redacted")
    body: str | None = Field(description="the body; null when it is larger than the payload cap (body_omitted)")
    body_encoding: Literal["utf-8", "base64"] = Field(description="utf-8 text, or base64 when the bytes are not UTF-8")
    body_omitted: bool = Field(
        default=False, description="true when the body (size bytes) is over limits.max_payload and not shown"
    )

    @classmethod
    def of(cls, event: Event, *, max_body: int | None = None) -> EventFull:  # type: ignore[override]
        """The event in full; a body over ``max_body`` bytes is left out (an agent's context is finite)."""
        if max_body is not None and event.size > max_body:
            return cls.model_validate({**event.full(), "body": None, "body_omitted": True})
        return cls.model_validate(event.full())


class Replayed(Out):
    event_id: int
    todo_ids: list[int] = Field(description="the todos the replay created or found live, within your queues")


class QueueStatsRow(Out):
    queue: str
    ready: int = Field(description="pending todos claimable now")
    delayed: int = Field(description="pending todos claimable later: a delay, or a failed attempt's backoff")
    blocked: int = Field(default=0, description="pending todos waiting for todos not done")
    pending: int = Field(description="ready + delayed + blocked")
    claimed: int
    done: int
    dead: int = Field(description="dead letters: failed for good, waiting for an operator")
    cancelled: int
    oldest_ready_age_seconds: float | None
    paused: bool = Field(description="true while an operator has paused the queue: nothing is claimed from it")
    max_claimed: int | None = Field(description="at most this many claimed at once (null: no limit)")
    max_per_minute: int | None = Field(description="at most this many claims a rolling minute (null: no limit)")
    claims_last_minute: int | None = Field(description="claims in the last minute, if max_per_minute is set")

    @classmethod
    def of(cls, stats: QueueStats) -> QueueStatsRow:
        return cls.model_validate(stats.to_dict())


class QueueStatsResult(Out):
    queues: list[QueueStatsRow]


# The doorbell's words. Claude Code shows a channel message to the model as
# <channel source="…" todo_id="…">content</channel>: nothing that came from
# outside (a title, a queue name) may close that tag, open another one, quote
# its way out of an attribute or start a new line; and it stays short.
MAX_DOORBELL_TITLE = 200
MAX_DOORBELL_NAME = 100


def _plain(text: str, cap: int) -> str:
    text = " ".join(text.split())  # newlines and runs of blanks become one space
    text = text.replace("<", "‹").replace(">", "›").replace('"', "'")
    return text if len(text) <= cap else text[: cap - 1] + "…"


def doorbell_content(arrival: Arrival) -> str:
    return (
        f"todo {arrival.id} on {_plain(arrival.queue, MAX_DOORBELL_NAME)}: {_plain(arrival.title, MAX_DOORBELL_TITLE)}"
    )


def doorbell_meta(arrival: Arrival) -> dict[str, str]:
    return {
        "todo_id": str(arrival.id),
        "queue": _plain(arrival.queue, MAX_DOORBELL_NAME),
        "source": _plain(arrival.source or "direct", MAX_DOORBELL_NAME),
    }
