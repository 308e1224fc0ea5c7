"""Helpers for the MCP tests: an in-process client, tool calls, the doorbell's messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.client.stdio import StdioServerParameters
from pydantic import BaseModel

from switchboard_local.core import todos
from switchboard_local.core.agents import Agent
from switchboard_local.core.store.interface import Store
from switchboard_local.mcp.server import build_server

REPO_ROOT = Path(__file__).resolve().parents[2]


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
    claim_next = todos.claims.claim_next  # what a waiting claim calls

    async def observed(*args: Any, **kwargs: Any) -> Any:
        tried.set()
        return await claim_next(*args, **kwargs)

    monkeypatch.setattr(todos.claims, "claim_next", observed)
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


# `switchboard-local` as the tests run it: this interpreter, the checkout's package.
PROGRAM = (sys.executable, "-m", "switchboard_local")


def child_env(db: Path) -> dict[str, str]:
    return {**os.environ, "SWITCHBOARD_DB": str(db), "PYTHONPATH": str(REPO_ROOT)}


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}  # fmt: skip
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


class RawServer:
    """`switchboard-local mcp` as a child on pipes, spoken to in raw lines.

    Threads drain stdout (each line parsed as JSON, or kept raw to fail the
    test) and stderr as they come, so a server writing a lot never blocks on a
    full pipe; waits are bounded and only run out when something is wrong.
    """

    def __init__(
        self, db: Path, *args: str, program: Sequence[str] = PROGRAM, environ: Mapping[str, str] | None = None
    ) -> None:
        """``program``: what runs `switchboard-local` (the single-file binary, say); ``environ``:
        the child's whole environment, else this process's (SWITCHBOARD_DB is ``db`` in both)."""
        env = {**environ, "SWITCHBOARD_DB": str(db)} if environ is not None else child_env(db)
        self.proc = subprocess.Popen(
            [*program, "mcp", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        )  # fmt: skip
        self.answers: list[dict[str, Any]] = []
        self.line_sizes: list[int] = []  # bytes of each answer's line, newline aside, as answers
        self.stderr: list[str] = []
        self._changed = threading.Condition()
        self._threads = [
            threading.Thread(target=self._drain, args=(self.proc.stdout, self._on_answer), daemon=True),
            threading.Thread(target=self._drain, args=(self.proc.stderr, self._on_stderr), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _drain(self, pipe: Any, on_line: Any) -> None:
        for line in pipe:
            with self._changed:
                on_line(line)
                self._changed.notify_all()

    def _on_answer(self, line: bytes) -> None:
        self.line_sizes.append(len(line.rstrip(b"\n")))
        try:
            self.answers.append(json.loads(line))
        except ValueError:
            self.answers.append({"not a JSON line": line[:200]})

    def _on_stderr(self, line: bytes) -> None:
        self.stderr.append(line.decode("utf-8", "replace").rstrip("\n"))

    def send(self, line: bytes | str | dict[str, Any]) -> None:
        """One line to the server's stdin: raw bytes, text (lone surrogates kept as UTF-8 would refuse), or JSON."""
        if isinstance(line, dict):
            line = json.dumps(line)
        if isinstance(line, str):
            line = line.encode("utf-8", "surrogatepass")
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def answer(self, request_id: str | int, timeout: float = 30.0) -> dict[str, Any]:
        """The answer with this id, once it has come."""
        with self._changed:
            found = self._changed.wait_for(lambda: self._answers_to(request_id), timeout)
        assert found, f"no answer with id {request_id!r} within {timeout} s; answers: {self.answers}"
        return found[0]

    def line_size(self, request_id: str | int) -> int:
        """Bytes of the line that answered ``request_id`` (once it has come)."""
        with self._changed:
            return next(size for a, size in zip(self.answers, self.line_sizes) if a.get("id") == request_id)

    def answers_to(self, request_id: str | int | None) -> list[dict[str, Any]]:
        """Every answer so far with this id (None: the answers with id null)."""
        with self._changed:
            return self._answers_to(request_id)

    def _answers_to(self, request_id: str | int | None) -> list[dict[str, Any]]:
        return [a for a in self.answers if "id" in a and a["id"] == request_id]

    def wait_for(self, condition: Any, timeout: float = 30.0) -> None:
        with self._changed:
            assert self._changed.wait_for(condition, timeout), f"waited {timeout} s in vain; answers: {self.answers}"

    def initialize(self) -> None:
        self.send(INITIALIZE)
        self.answer(1)
        self.send(INITIALIZED)

    def close(self) -> int:
        """Hang up (close stdin) and wait for the server to exit; its exit status."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        status = self.proc.wait(timeout=60)
        for thread in self._threads:
            thread.join(timeout=30)
        return status

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
