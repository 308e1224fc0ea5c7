"""Agent profiles: the queues an agent may drain, those it may create todos
in, and the tools it may use.

An MCP server started for an agent sees only that agent's queues (todos in
them, and the events those todos came from) and offers only its tools. Its
``create_for`` puts todos only on its create queues (by default its own
queues). A profile with no tool list may use every tool. The tool names are
the MCP surface's contract, so they are checked here, where profiles are
written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import audit
from .clock import rfc3339
from .errors import Conflict, InvalidArgument, NotFound
from .store.interface import Store, Transaction
from .store.queries import Q
from .todo_model import require_name

TOOL_NAMES = (
    "list_todos",
    "get_todo",
    "claim",
    "claim_next",
    "heartbeat",
    "complete",
    "fail",
    "release",
    "create_for",
    "wait_todos",
    "list_events",
    "get_event",
    "replay_event",
    "queue_stats",
)

# Agent names appear in owners (``name/session``), in assignees and in
# .mcp.json arguments: keep them to one plain word.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_QUEUES = 100


@dataclass(frozen=True)
class Agent:
    name: str
    queues: tuple[str, ...]
    tools: tuple[str, ...] | None  # None: every tool
    created_at: int
    create_queues: tuple[str, ...] | None = None  # None: its own queues
    owner: str | None = None  # the person it works for; shown with its claims

    def may_use(self, tool: str) -> bool:
        return self.tools is None or tool in self.tools

    @property
    def creates_in(self) -> tuple[str, ...]:
        """The queues its create_for may put todos on."""
        return self.queues if self.create_queues is None else self.create_queues

    @classmethod
    def from_row(cls, row: Any) -> Agent:
        tools, create_queues = row["tools"], row["create_queues"]
        return cls(
            name=row["name"],
            queues=tuple(json.loads(row["queues"])),
            tools=None if tools is None else tuple(json.loads(tools)),
            created_at=row["created_at"],
            create_queues=None if create_queues is None else tuple(json.loads(create_queues)),
            owner=row["owner"],
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "queues": list(self.queues),
            "create_queues": list(self.creates_in),
            "tools": None if self.tools is None else list(self.tools),
            "owner": self.owner,
            "created_at": rfc3339(self.created_at),
        }


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InvalidArgument(
            f"agent name must be 1 to 64 letters, digits, '.', '_' or '-' (starting with a letter or digit), got {name!r}"
        )
    return name


def _unique(values: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _check_queues(queues: Sequence[str], what: str = "queue") -> list[str]:
    if isinstance(queues, str) or not queues:
        raise InvalidArgument(f"an agent needs at least one {what}")
    for queue in queues:
        require_name(what, queue)
    unique = _unique(queues)
    if len(unique) > MAX_QUEUES:
        raise InvalidArgument(f"an agent may have at most {MAX_QUEUES} {what}s")
    return unique


def _check_tools(tools: Sequence[str] | None) -> list[str] | None:
    if tools is None:
        return None
    if isinstance(tools, str) or not tools:
        raise InvalidArgument("give at least one tool, or none at all for every tool")
    unknown = [t for t in tools if t not in TOOL_NAMES]
    if unknown:
        raise InvalidArgument(f"unknown tool {unknown[0]!r}; the tools are {', '.join(TOOL_NAMES)}")
    return _unique(tools)


async def add(
    store: Store,
    name: str,
    *,
    queues: Sequence[str],
    tools: Sequence[str] | None = None,
    create_queues: Sequence[str] | None = None,
    owner: str | None = None,
    by: str | None = None,
) -> Agent:
    """Create a profile; an existing name is refused (remove it first).

    ``create_queues``: where its create_for may put todos (None: its own
    queues). ``owner``: the person the agent works for, shown with its claims.
    """
    if owner is not None:
        require_name("owner", owner)
    params = {
        "name": _check_name(name),
        "queues": json.dumps(_check_queues(queues), ensure_ascii=False),
        "tools": None if (checked := _check_tools(tools)) is None else json.dumps(checked),
        "create_queues": None
        if create_queues is None
        else json.dumps(_check_queues(create_queues, "create queue"), ensure_ascii=False),
        "owner": owner,
    }

    def body(tx: Transaction) -> Agent:
        now = store.clock.now_ms()
        row = tx.one(Q.insert_agent, {**params, "now": now})
        if row is None:
            raise Conflict(f"agent {name!r} exists already; remove it first to change it")
        agent = Agent.from_row(row)
        if by is not None:
            audit.record(tx, now, by=by, action="agent.add", subject=name, queues=list(agent.queues),
                         tools=None if agent.tools is None else list(agent.tools), owner=agent.owner)  # fmt: skip
        return agent

    return await store.write(body)


async def get(store: Store, name: str) -> Agent:
    row = await store.read_one(Q.get_agent, {"name": name})
    if row is None:
        raise NotFound(f"agent {name!r} does not exist")
    return Agent.from_row(row)


async def list_agents(store: Store) -> list[Agent]:
    rows = await store.read_all(Q.list_agents, {})
    return [Agent.from_row(r) for r in rows]


async def remove(store: Store, name: str, *, by: str | None = None) -> Agent:
    """Delete a profile. Todos assigned to the name and their history stay."""

    def body(tx: Transaction) -> Agent:
        row = tx.one(Q.delete_agent, {"name": name})
        if row is None:
            raise NotFound(f"agent {name!r} does not exist")
        if by is not None:
            audit.record(tx, store.clock.now_ms(), by=by, action="agent.remove", subject=name)
        return Agent.from_row(row)

    return await store.write(body)
