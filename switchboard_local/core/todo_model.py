"""What a todo is: its fields, what a producer may ask for, and the checks on both.

The verbs that move a todo through its lifecycle are in the todos package (core/todos/).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import InitVar, dataclass, field, fields
from operator import itemgetter
from typing import Any, Literal, get_args

from .clock import rfc3339
from .errors import InvalidArgument
from .text import first_control

# failed: a dead letter (its attempts used up); a failed attempt with attempts
# left makes the todo pending again, after a backoff.
State = Literal["pending", "claimed", "done", "failed", "cancelled"]
STATES: tuple[State, ...] = get_args(State)

DEFAULT_MAX_ATTEMPTS = 5
MAX_ATTEMPTS_CAP = 1000  # the most max_attempts a todo may ask for
DEFAULT_LEASE_SECONDS = 300.0
LEASE_CAP_SECONDS = 12 * 3600.0  # total lease of one attempt, heartbeats included (as SQS)
MAX_WAIT_SECONDS = 20.0  # the longest a claim may wait for work (SQS's long poll is at most 20 s too)
BACKOFF_BASE_SECONDS = 30.0
BACKOFF_CAP_SECONDS = 15 * 60.0
MAX_TITLE_LENGTH = 1000
MAX_DELAY_SECONDS = 365 * 86400.0
# An SQLite integer (ids, priorities): what the column can hold.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_LIST_LIMIT = 1000
# Idempotency keys of todos derived from events start with this; no direct
# producer (CLI, agent) may use it, so none can squat a key a delivery will derive.
DERIVED_KEY_PREFIX = "event:"
MAX_DEPENDENCIES = 100  # the most todos one todo may wait for


@dataclass(frozen=True)
class Attempt:
    attempt: int
    owner: str
    claimed_at: int
    ended_at: int | None
    outcome: str | None
    error: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "owner": self.owner,
            "claimed_at": rfc3339(self.claimed_at),
            "ended_at": rfc3339(self.ended_at),
            "outcome": self.outcome,
            "error": self.error,
        }


@dataclass(frozen=True)
class Dependency:
    """A todo another waits for, as the waiting todo shows it: its state and, when done, its
    result (``result_omitted`` when the results of a todo's dependencies together are larger
    than limits.max_payload: then it is named, and read with ``todo show`` of its id)."""

    id: int
    state: str
    result: Any = None
    result_omitted: bool = False

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "state": self.state, "result": self.result}
        if self.result_omitted:
            out["result_omitted"] = True
        return out


@dataclass(frozen=True)
class Todo:
    id: int
    queue: str
    title: str
    kind: str | None
    payload: Any
    state: str
    priority: int
    assignee: str | None
    attempt: int
    max_attempts: int
    owner: str | None
    lease_expires_at: int | None
    visible_at: int | None
    idempotency_key: str | None
    event_id: int | None
    result: Any
    last_error: str | None
    created_at: int
    updated_at: int
    claimed_at: int | None
    completed_at: int | None
    cancelled_by: str | None = None
    cancel_reason: str | None = None
    # Only in the answer to a claim: the token is shown once and stored hashed.
    lease_token: str | None = None
    # Dependencies: how many of the todos it waits for are not done yet (blocked while > 0, and
    # then pending with no visible_at), and how many it waits for at all.
    blocked_by: int = 0
    waits_for: int = 0
    attempts: tuple[Attempt, ...] | None = field(default=None, compare=False)
    # What it waits for, where a reader asked (show, a claim): dependencies.with_dependencies.
    dependencies: tuple[Dependency, ...] | None = field(default=None, compare=False)

    @property
    def blocked(self) -> bool:
        """Pending, and waiting for a todo that is not done: never claimed until it is."""
        return self.state == "pending" and self.blocked_by > 0

    @property
    def dead_letter(self) -> bool:
        """Failed for good (its attempts used up): waits for an operator's redrive.
        Kept beside ``state`` for clients of the time when a retry read as failed."""
        return self.state == "failed"

    @classmethod
    def from_row(cls, row: Any, lease_token: str | None = None) -> Todo:
        # Every claim and finish makes one or two of these: the columns are picked by
        # position (a row's place for each, found once per shape of row), and the frozen
        # instance is filled without its generated __init__, which sets each of its 28
        # fields through object.__setattr__ (6.3 us a todo, against 2.8 this way).
        keys = tuple(row.keys())
        pick = _PICKS.get(keys, False)
        if pick is False:
            pick = _PICKS[keys] = _picker(keys)
        values = tuple(row.values()) if isinstance(row, Mapping) else tuple(row)
        if pick is not None and len(values) == len(keys):
            columns = pick(values)
        else:  # a column named twice, or in another case: each as the row itself finds it
            columns = tuple(row[column] for column in _COLUMNS)
        state = dict(zip(_COLUMNS, columns))
        # Most payloads and results of a drain are null.
        payload, result = state["payload"], state["result"]
        state["payload"] = None if payload == "null" else json.loads(payload)
        state["result"] = None if result is None or result == "null" else json.loads(result)
        state["lease_token"] = lease_token
        state["attempts"] = state["dependencies"] = None
        todo = object.__new__(cls)
        todo.__dict__.update(state)
        return todo

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape every edge shows: schema names, RFC 3339 UTC times."""
        out: dict[str, Any] = {
            "id": self.id,
            "queue": self.queue,
            "title": self.title,
            "kind": self.kind,
            "payload": self.payload,
            "state": self.state,
            "dead_letter": self.dead_letter,
            "priority": self.priority,
            "assignee": self.assignee,
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "owner": self.owner,
            "lease_expires_at": rfc3339(self.lease_expires_at),
            "visible_at": rfc3339(self.visible_at),
            "idempotency_key": self.idempotency_key,
            "event_id": self.event_id,
            "result": self.result,
            "last_error": self.last_error,
            "created_at": rfc3339(self.created_at),
            "updated_at": rfc3339(self.updated_at),
            "claimed_at": rfc3339(self.claimed_at),
            "completed_at": rfc3339(self.completed_at),
            "cancelled_by": self.cancelled_by,
            "cancel_reason": self.cancel_reason,
            "blocked": self.blocked,
        }
        if self.waits_for:
            out["blocked_by"] = self.blocked_by
            out["waits_for"] = self.waits_for
        if self.dependencies is not None:
            out["dependencies"] = [d.to_dict() for d in self.dependencies]
        if self.lease_token is not None:
            out["lease_token"] = self.lease_token
        if self.attempts is not None:
            out["attempts"] = [a.to_dict() for a in self.attempts]
        return out


# Todo.from_row's columns: every field but the claim's token and what readers add.
_COLUMNS = tuple(f.name for f in fields(Todo) if f.name not in ("lease_token", "attempts", "dependencies"))
_PICKS: dict[tuple[str, ...], itemgetter[tuple[Any, ...]] | None] = {}  # a row's keys -> its _COLUMNS, in order


def _picker(keys: tuple[str, ...]) -> itemgetter[tuple[Any, ...]] | None:
    """Where each of _COLUMNS is in a row of these keys; None when one is missing, or when a
    name is there twice or in another case (sqlite3.Row and PgRow find names regardless of case)."""
    lowered = [key.lower() for key in keys]
    if len(set(lowered)) < len(lowered) or not set(_COLUMNS) <= set(keys):
        return None
    return itemgetter(*(keys.index(column) for column in _COLUMNS))


@dataclass(frozen=True)
class NewTodo:
    """What a producer asks for; validated on construction."""

    queue: str
    title: str
    payload: Any = None
    kind: str | None = None
    assignee: str | None = None
    priority: int = 0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    idempotency_key: str | None = None
    delay: float = 0.0
    # The todos it waits for: their ids, and the idempotency keys of live todos (any queue).
    after: tuple[int, ...] = ()
    after_keys: tuple[str, ...] = ()
    # The payload's JSON text, made (and checked) once on construction.
    payload_json: str = field(init=False, repr=False, compare=False)
    # That text when the caller made it already, exactly as dump_json makes it
    # from ``payload`` (routing: a delivery's body, checked once, within its
    # context); taken as it is, not made again.
    checked_json: InitVar[str | None] = None

    def __post_init__(self, checked_json: str | None) -> None:
        require_name("queue", self.queue)
        if not isinstance(self.title, str):
            raise InvalidArgument("title must be a string")
        # A title is one human-readable line: fold newlines and runs of blanks.
        title = " ".join(self.title.split())
        if not title:
            raise InvalidArgument("title must not be empty")
        if len(title) > MAX_TITLE_LENGTH:
            raise InvalidArgument(f"title is longer than {MAX_TITLE_LENGTH} characters")
        require_text("title", title)
        object.__setattr__(self, "title", title)
        if self.kind is not None:
            require_name("kind", self.kind)
        if self.assignee is not None:
            require_name("assignee", self.assignee)
        if self.idempotency_key is not None:
            require_name("idempotency_key", self.idempotency_key)
        require_int("priority", self.priority, INT64_MIN, INT64_MAX)
        require_int("max_attempts", self.max_attempts, low=1, high=MAX_ATTEMPTS_CAP)
        if self.delay.__class__ is not float or self.delay != 0.0:  # the default needs no look
            require_seconds("delay", self.delay, low=0.0, high=MAX_DELAY_SECONDS)
        if self.after or self.after_keys or self.after.__class__ is not tuple or self.after_keys.__class__ is not tuple:
            self._check_after()
        text = dump_json("payload", self.payload) if checked_json is None else checked_json
        object.__setattr__(self, "payload_json", text)

    def _check_after(self) -> None:
        """``after`` and ``after_keys``: ids and names, each once, at most MAX_DEPENDENCIES in all;
        a todo that waits is not delayed as well (it becomes claimable when its last dependency is done)."""
        after, keys = tuple(self.after), tuple(self.after_keys)
        for todo_id in after:
            require_int("after", todo_id, low=1, high=INT64_MAX)
        for key in keys:
            require_name("after_key", key)
        after, keys = tuple(dict.fromkeys(after)), tuple(dict.fromkeys(keys))
        if len(after) + len(keys) > MAX_DEPENDENCIES:
            raise InvalidArgument(f"a todo may wait for at most {MAX_DEPENDENCIES} todos")
        if (after or keys) and self.delay:
            raise InvalidArgument("a todo that waits for others cannot also be delayed")
        object.__setattr__(self, "after", after)
        object.__setattr__(self, "after_keys", keys)


# ---------------------------------------------------------------- validation


def require_name(name: str, value: object) -> None:
    """A name (queue, owner, assignee, kind, key): non-empty one-line text."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{name} must be a non-empty string")
    if len(value) > 512:
        raise InvalidArgument(f"{name} is longer than 512 characters")
    require_text(name, value)


def require_text(name: str, value: str) -> None:
    """Text to store and show: valid Unicode (no lone surrogates, as undecodable
    bytes become) without control characters, which could rewrite a terminal
    or forge a log line wherever the text is shown."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{name} is not valid UTF-8 text") from None
    control = first_control(value)
    if control is not None:
        raise InvalidArgument(f"{name} holds a control character ({control})")


def require_int(name: str, value: object, low: int | None = None, high: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(f"{name} must be an integer")
    if low is not None and value < low or high is not None and value > high:
        raise InvalidArgument(f"{name} must be between {low} and {high}, got {value}")


def require_seconds(name: str, value: object, low: float, high: float | None = None) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise InvalidArgument(f"{name} must be a finite number of seconds")
    if value < low or (high is not None and value > high):
        bound = f"at least {low:.15g}" if high is None else f"between {low:.15g} and {high:.15g}"
        raise InvalidArgument(f"{name} must be {bound} seconds, got {value:.15g}")


MAX_JSON_DEPTH = 64
SHALLOW_JSON = MAX_JSON_DEPTH // 2  # a depth every caller may take as it is (see dump_json_depth)


# json.dumps with these options would make a new encoder at every call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def dump_json(name: str, value: Any) -> str:
    """The JSON text of a payload or result: standard JSON, valid UTF-8, at most MAX_JSON_DEPTH deep."""
    return dump_json_depth(name, value)[0]


def dump_json_depth(name: str, value: Any) -> tuple[str, int]:
    """``dump_json``'s text, and how deep the value is nested (to nest it in another) or, when
    that is at most SHALLOW_JSON, a bound on it as small: the count of brackets its text opens
    (a value opens one for each level it nests, so most values, small, are never walked)."""
    if value is None:  # most results and many payloads
        return "null", 0
    try:
        text = _ENCODER.encode(value)
        text.encode("utf-8")
    except RecursionError:  # deeper than the interpreter goes: far past the limit
        raise InvalidArgument(f"{name} is nested deeper than {MAX_JSON_DEPTH} levels") from None
    except UnicodeEncodeError:
        raise InvalidArgument(f"{name} holds text that is not valid UTF-8") from None
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{name} is not JSON-serialisable: {exc}") from None
    opened = text.count("{") + text.count("[")
    if opened <= SHALLOW_JSON:
        return text, opened
    depth = json_depth(value)
    if depth > MAX_JSON_DEPTH:
        raise InvalidArgument(f"{name} is nested deeper than {MAX_JSON_DEPTH} levels")
    return text, depth


def json_depth(value: Any) -> int:
    """Nesting depth of lists and objects, without recursion (stops counting past the limit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list | tuple):
            deepest = max(deepest, level)
            if level > MAX_JSON_DEPTH:
                break
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children if isinstance(child, dict | list | tuple))
    return deepest


def lease_millis(lease: float | None) -> int:
    seconds = DEFAULT_LEASE_SECONDS if lease is None else lease
    require_seconds("lease", seconds, low=1.0, high=LEASE_CAP_SECONDS)
    return round(seconds * 1000)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class QueueStats:
    """One queue's todos by where they stand: pending ones split into ready
    (claimable now), delayed (a delay, or a retry's backoff) and blocked
    (waiting for todos not done)."""

    queue: str
    ready: int
    delayed: int
    claimed: int
    done: int
    dead: int  # failed for good: dead letters
    cancelled: int
    oldest_ready_age_seconds: float | None
    paused: bool = False  # an operator paused the queue: nothing is claimed from it
    blocked: int = 0  # pending, waiting for todos not done
    # Its limits (queues.set_limit; None: none) and how close it is: claims since a minute ago
    # (None without max_per_minute); how many are claimed now is ``claimed``.
    max_claimed: int | None = None
    max_per_minute: int | None = None
    claims_last_minute: int | None = None

    @classmethod
    def empty(cls, queue: str) -> QueueStats:
        return cls(queue, 0, 0, 0, 0, 0, 0, None)

    @classmethod
    def from_row(cls, row: Any, now: int) -> QueueStats:
        """A row of the stats statement, as it stands at ``now``."""
        oldest = row["oldest_ready_created_at"]
        return cls(
            queue=row["queue"],
            ready=row["ready"],
            delayed=row["delayed"],
            claimed=row["claimed"],
            done=row["done"],
            dead=row["dead"],
            cancelled=row["cancelled"],
            oldest_ready_age_seconds=None if oldest is None else max(0, now - oldest) / 1000,
            paused=row["paused_at"] is not None,
            blocked=row["blocked"],
            max_claimed=row["max_claimed"],
            max_per_minute=row["max_per_minute"],
            claims_last_minute=row["claims_last_minute"],
        )

    @property
    def limited(self) -> bool:
        return self.max_claimed is not None or self.max_per_minute is not None

    @property
    def limit_text(self) -> str:
        """How close the queue is to its limits, in words ('' with none): '2/3 claimed, 5/10 a minute'."""
        parts = []
        if self.max_claimed is not None:
            parts.append(f"{self.claimed}/{self.max_claimed} claimed")
        if self.max_per_minute is not None:
            parts.append(f"{self.claims_last_minute or 0}/{self.max_per_minute} a minute")
        return ", ".join(parts)

    @property
    def pending(self) -> int:
        """Waiting to be claimed: ready, delayed or blocked."""
        return self.ready + self.delayed + self.blocked

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "pending": self.pending}
