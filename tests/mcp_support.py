"""Helpers for the MCP tests: an in-process client, tool calls, the doorbell's messages."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.client.stdio import StdioServerParameters
from pydantic import BaseModel

from switchboard_local import todos
from switchboard_local.agents import Agent
from switchboard_local.mcp_server import build_server
from switchboard_local.store import Store

REPO_ROOT = Path(__file__).resolve().parent.parent


class ChannelParams(BaseModel):
    content: str
    meta: dict[str, str]


class Rings(ClientExtension):
    """Collects notifications/claude/channel messages, as Claude Code would receive them."""

    identifier = "test.switchboard/channel"

    def __init__(self) -> None:
        self.received: list[ChannelParams] = []
        self._arrived = anyio.Event()

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [NotificationBinding(method="notifications/claude/channel", params_type=ChannelParams, handler=self._on)]

    async def _on(self, params: ChannelParams) -> None:
        self.received.append(params)
        self._arrived.set()
        self._arrived = anyio.Event()

    async def until(self, todo_id: int, timeout: float = 10.0) -> list[ChannelParams]:
        """Wait (bounded) until the ring for ``todo_id`` has arrived; all rings so far."""
        with anyio.fail_after(timeout):
            while not any(r.meta.get("todo_id") == str(todo_id) for r in self.received):
                await self._arrived.wait()
        return list(self.received)


def claim_attempts(monkeypatch: pytest.MonkeyPatch) -> anyio.Event:
    """Set once a claim_next is attempted: a long poll's first try, after which it waits
    for work (what lands wakes it; its session counts as polling). Observes only: the
    real verb runs. Call it on the event loop."""
    tried = anyio.Event()
    claim_next = todos.claim_next

    async def observed(*args: Any, **kwargs: Any) -> Any:
        tried.set()
        return await claim_next(*args, **kwargs)

    monkeypatch.setattr(todos, "claim_next", observed)
    return tried


@asynccontextmanager
async def connect(store: Store, agent: Agent | None = None, rings: Rings | None = None) -> AsyncIterator[Client]:
    """An in-process client speaking real JSON-RPC to a server over ``store``."""
    server = build_server(store, agent, session_id="s1")
    async with Client(server, mode="legacy", extensions=[rings] if rings else None) as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    """A tool call that must succeed: its structured content."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text  # type: ignore[union-attr]
    return result.structured_content


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    """A tool call that must fail: its error text."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return result.content[0].text  # type: ignore[union-attr]


def stdio_params(db: Path, *args: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    """``switchboard-local mcp`` as Claude Code launches it: a child process on stdio."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "switchboard_local", "mcp", *args],
        env={"SWITCHBOARD_DB": str(db), "PYTHONPATH": str(REPO_ROOT), **(env or {})},
        cwd=str(REPO_ROOT),
    )


def child_env(db: Path) -> dict[str, str]:
    return {**os.environ, "SWITCHBOARD_DB": str(db), "PYTHONPATH": str(REPO_ROOT)}
