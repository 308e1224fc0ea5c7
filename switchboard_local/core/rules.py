"""Routing rules: stored, ordered, validated when added.

A rule matches an event of its source when the event type matches its type
glob (if any) and every condition holds on the JSON payload. Conditions come
from ``--where`` text: ``PATH=VALUE`` (equals), ``PATH=A|B`` (one of),
``PATH~GLOB`` (glob), ``PATH?`` (exists). PATH is dotted
(``pull_request.base.ref``; a number indexes a list).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Any

from . import audit
from .errors import InvalidArgument, NotFound
from .sources import changed
from .store.interface import Store, Transaction
from .store.queries import Q
from .todo_model import DEFAULT_MAX_ATTEMPTS, NewTodo

PATH = re.compile(r"^[^.=~?{}\s]+(\.[^.=~?{}\s]+)*$")
# A path segment that indexes a list: ASCII digits, few enough to be an index
# (int() refuses 4,300 digits and more; a list is never longer than 10**18).
INDEX = re.compile(r"[0-9]{1,18}")
PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
SPECIALS = ("@source", "@type", "@id")


@dataclass(frozen=True)
class Condition:
    path: str
    op: str
    value: Any = None

    @classmethod
    def parse(cls, text: str) -> Condition:
        """``PATH=VALUE``, ``PATH=A|B``, ``PATH~GLOB`` or ``PATH?``."""
        if text.endswith("?") and "=" not in text and "~" not in text:
            path, op, value = text[:-1], "exists", None
        else:
            match = re.match(r"^([^=~]+)([=~])(.*)$", text, re.S)
            if not match:
                raise InvalidArgument(f"--where {text!r} is not PATH=VALUE, PATH~GLOB or PATH?")
            path, sign, raw = match.groups()
            if sign == "~":
                op, value = "glob", raw
            elif "|" in raw:
                op, value = "in", raw.split("|")
            else:
                op, value = "eq", raw
        why = path_fault(path)
        if why is not None:
            raise InvalidArgument(f"--where {text!r}: {path!r} {why}")
        return cls(path, op, value)

    def holds(self, payload: Any) -> bool:
        found, value = lookup(payload, self.path)
        if self.op == "exists":
            return found
        if not found:
            return False
        text = as_text(value)
        if self.op == "eq":
            return text == self.value
        if self.op == "in":
            return text in self.value
        return fnmatchcase(text, self.value)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "op": self.op, "value": self.value}

    def __str__(self) -> str:
        if self.op == "exists":
            return f"{self.path}?"
        if self.op == "glob":
            return f"{self.path}~{self.value}"
        return f"{self.path}={'|'.join(self.value) if self.op == 'in' else self.value}"


@dataclass(frozen=True)
class Rule:
    id: int
    position: int
    source: str
    type: str | None
    conditions: tuple[Condition, ...]
    action: str  # 'todo' or 'drop'
    queue: str | None
    title: str | None
    assignee: str | None
    priority: int
    max_attempts: int
    stop: bool
    # Its todo waits for the todos the event's earlier rules made (a chain; a join after a fan-out).
    chain: bool = False

    @classmethod
    def from_row(cls, row: Any) -> Rule:
        return cls(
            id=row["id"],
            position=row["position"],
            source=row["source"],
            type=row["type"],
            conditions=tuple(Condition(**c) for c in json.loads(row["conditions"])),
            action=row["action"],
            queue=row["queue"],
            title=row["title"],
            assignee=row["assignee"],
            priority=row["priority"],
            max_attempts=row["max_attempts"],
            stop=bool(row["stop"]),
            chain=bool(row["chain"]),
        )

    def matches(self, event_type: str, payload: Any) -> bool:
        if self.type is not None and not fnmatchcase(event_type, self.type):
            return False
        return all(c.holds(payload) for c in self.conditions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "position": self.position,
            "source": self.source,
            "type": self.type,
            "where": [str(c) for c in self.conditions],
            "action": self.action,
            "queue": self.queue,
            "title": self.title,
            "assignee": self.assignee,
            "priority": self.priority,
            "max_attempts": self.max_attempts,
            "stop": self.stop,
            "chain": self.chain,
        }


@lru_cache(maxsize=1024)
def parse_path(path: str) -> tuple[tuple[str, int | None], ...]:
    """A dotted path's segments: each an object key and, for ASCII digits, a list index.

    The one parser of paths: rules and templates are checked with it when
    added and looked up with it at delivery, so whatever is accepted applies.
    """
    if not isinstance(path, str) or not PATH.fullmatch(path):
        raise InvalidArgument(f"{path!r} is not a dotted path")
    return tuple((key, int(key) if INDEX.fullmatch(key) else None) for key in path.split("."))


def path_fault(path: str) -> str | None:
    """What is wrong with a rule's ``path`` as it is added (None: nothing).

    A segment that reads as a number in other digits ('²', '١', fullwidth
    '１') would be an object key, never a list index: refused, so that no
    rule silently never matches. (Rules stored before are looked up as they were.)
    """
    try:
        segments = parse_path(path)
    except InvalidArgument:
        return "is not a dotted path"
    for key, _ in segments:
        if key.isnumeric() and not key.isascii():  # (the only ASCII numerics are 0-9)
            return f"has {key!r}, a number not in ASCII digits: a list index is written with 0-9"
    return None


def lookup(payload: Any, path: str) -> tuple[bool, Any]:
    value = payload
    for key, index in parse_path(path):
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and index is not None and index < len(value):
            value = value[index]
        else:
            return False, None
    return True, value


def as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def check_template(template: str) -> None:
    """Refuse a malformed title template when the rule is added."""
    stripped = PLACEHOLDER.sub("", template)
    if "{" in stripped or "}" in stripped:
        raise InvalidArgument(f"--title {template!r} has an unbalanced brace")
    for name in PLACEHOLDER.findall(template):
        if name.startswith("@"):
            if name not in SPECIALS:
                raise InvalidArgument(f"--title: {{{name}}} is not one of {', '.join(SPECIALS)}")
        else:
            why = path_fault(name)
            if why is not None:
                raise InvalidArgument(f"--title: {{{name}}} {why}")


def render(template: str, payload: Any, specials: dict[str, str]) -> str:
    """Fill ``{dotted.path}`` from the payload; a missing field renders empty."""

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("@"):
            return specials.get(name, "")
        found, value = lookup(payload, name)
        return as_text(value) if found and value is not None else ""

    return PLACEHOLDER.sub(fill, template)


# ---------------------------------------------------------------- stored rules


async def add(
    store: Store,
    *,
    source: str,
    type: str | None = None,
    where: list[str] = (),  # type: ignore[assignment]
    queue: str | None = None,
    title: str | None = None,
    assignee: str | None = None,
    priority: int = 0,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    stop: bool = False,
    drop: bool = False,
    chain: bool = False,
    by: str | None = None,
) -> Rule:
    """Append a rule; everything about it is checked now, not at delivery time."""
    conditions = [Condition.parse(w) for w in where]
    if drop == (queue is not None):
        raise InvalidArgument("a rule needs exactly one of --queue and --drop")
    if drop and (title or assignee):
        raise InvalidArgument("a --drop rule makes no todo: --title and --assignee do not apply")
    if drop and chain:
        raise InvalidArgument("a --drop rule makes no todo: --chain does not apply")
    if title is not None:
        check_template(title)
    if queue is not None:
        # The todo fields a match will produce must themselves be valid.
        NewTodo(queue=queue, title="check", assignee=assignee, priority=priority, max_attempts=max_attempts)
    params = {
        "source": source,
        "type": type,
        "conditions": json.dumps([c.to_dict() for c in conditions]),
        "action": "drop" if drop else "todo",
        "queue": queue,
        "title": title,
        "assignee": assignee,
        "priority": priority,
        "max_attempts": max_attempts,
        "stop": int(stop),
        "chain": int(chain),
    }

    def body(tx: Transaction) -> Rule:
        if tx.one(Q.get_source, {"name": source}) is None:
            raise InvalidArgument(f"no source named {source!r}; add it first")
        now = store.clock.now_ms()
        rule = Rule.from_row(tx.one(Q.insert_rule, {**params, "now": now}))
        changed(tx)
        if by is not None:
            audit.record(tx, now, by=by, action="rule.add", subject=rule.id, source=source, queue=queue, drop=drop)
        return rule

    return await store.write(body)


async def list_rules(store: Store, *, source: str | None = None) -> list[Rule]:
    rows = await store.read_all(Q.list_rules, {"source": source})
    return [Rule.from_row(r) for r in rows]


def rules_of(tx: Transaction, source: str) -> list[Rule]:
    return [Rule.from_row(r) for r in tx.all(Q.rules_of_source, {"source": source})]


async def remove(store: Store, rule_id: int, *, by: str | None = None) -> None:
    def body(tx: Transaction) -> None:
        if tx.run(Q.delete_rule, {"id": rule_id}) == 0:
            raise NotFound(f"rule {rule_id} does not exist")
        _renumber(tx, [r["id"] for r in tx.all(Q.list_rules, {"source": None})])
        changed(tx)
        if by is not None:
            audit.record(tx, store.clock.now_ms(), by=by, action="rule.remove", subject=rule_id)

    await store.write(body)


async def move(store: Store, rule_id: int, to: int, *, by: str | None = None) -> list[Rule]:
    """Move a rule to a 1-based position; the others keep their order."""

    def body(tx: Transaction) -> list[Rule]:
        ids = [r["id"] for r in tx.all(Q.list_rules, {"source": None})]
        if rule_id not in ids:
            raise NotFound(f"rule {rule_id} does not exist")
        if not 1 <= to <= len(ids):
            raise InvalidArgument(f"--to must be between 1 and {len(ids)}")
        ids.remove(rule_id)
        ids.insert(to - 1, rule_id)
        _renumber(tx, ids)
        changed(tx)
        if by is not None:
            audit.record(tx, store.clock.now_ms(), by=by, action="rule.move", subject=rule_id, to=to)
        return [Rule.from_row(r) for r in tx.all(Q.list_rules, {"source": None})]

    return await store.write(body)


def _renumber(tx: Transaction, ids: list[int]) -> None:
    for position, rule_id in enumerate(ids, start=1):
        tx.run(Q.set_rule_position, {"id": rule_id, "position": position})
