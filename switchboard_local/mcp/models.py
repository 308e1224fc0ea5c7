"""The MCP tools' typed outputs: pydantic models named like the schema.

Clients get an ``outputSchema`` per tool and ``structuredContent`` per call.
Field names are the schema's (``id``, ``state``, ``attempt``,
``lease_token``…); times are RFC 3339 UTC strings, as in the CLI's JSON.
Imported only by the MCP edge (pydantic comes with the SDK).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

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

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: Any) -> Any:
        # lease_token only in a claim's answer, attempts only in get_todo's: absent, not null.
        data = handler(self)
        for key in ("lease_token", "attempts"):
            if isinstance(data, dict) and data.get(key) is None:
                data.pop(key, None)
        return data

    @classmethod
    def of(cls, todo: Todo) -> TodoFull:
        return cls.model_validate(todo.to_dict())


class FinishedRow(TodoRow):
    """complete's and fail's answer: the finished todo's row and, when claim_next
    was asked, the next todo claimed in the same commit (null when none was)."""

    next: TodoFull | None = Field(
        default=None,
        description="only with claim_next: the next todo, claimed for you with its lease_token; null when none was",
    )

    @model_serializer(mode="wrap")
    def _omit_unasked(self, handler: Any) -> Any:
        data = handler(self)
        if isinstance(data, dict) and "next" not in self.model_fields_set:
            data.pop("next", None)  # no claim_next asked: absent, not null
        return data

    @classmethod
    def with_next(cls, todo: Todo, next_todo: Todo | None) -> FinishedRow:
        fields = TodoRow.of(todo).model_dump()
        fields["next"] = None if next_todo is None else TodoFull.of(next_todo)
        return cls.model_validate(fields)


class TodoPage(Out):
    todos: list[TodoRow]
    next_cursor: str | None = Field(description="pass as cursor for older todos; null when this is the last page")


class ClaimNextResult(Out):
    todo: TodoFull | None
    empty: bool = Field(description="true when nothing claimable arrived within wait_seconds")


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
    pending: int = Field(description="ready + delayed")
    claimed: int
    done: int
    dead: int = Field(description="dead letters: failed for good, waiting for an operator")
    cancelled: int
    oldest_ready_age_seconds: float | None
    paused: bool = Field(description="true while an operator has paused the queue: nothing is claimed from it")

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
