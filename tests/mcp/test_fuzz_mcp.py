"""Fuzzing the MCP surface: hypothesis-made lines to one real `switchboard-local mcp` child per test.

Invariants, whatever the lines: a request (a JSON object with a method and
an id of ours) gets exactly one answer with that id, within a bounded wait; a
line whose id may not be readable (cut short) gets at most one; no answer
carries an id we never sent; every stdout line is whole JSON; no traceback
reaches stderr; the process stays alive and exits 0 when stdin closes; and
the database passes `PRAGMA integrity_check`.

Budget: tests/support/fuzz.py (SWITCHBOARD_FUZZ_EXAMPLES, default 25).
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from support.fuzz import fuzz_settings
from support.mcp import RawServer

pytestmark = pytest.mark.fuzz

TOOLS = [
    "list_todos", "get_todo", "claim", "claim_next", "heartbeat", "complete", "fail", "release",
    "create_for", "list_events", "get_event", "replay_event", "queue_stats",
]  # fmt: skip
ARGUMENT_NAMES = [
    "id", "lease_token", "lease_seconds", "queue", "state", "limit", "cursor", "result", "error", "claim_next",
    "delay_seconds", "title", "assignee", "payload", "kind", "priority", "idempotency_key", "source", "type",
]  # fmt: skip  (never wait_seconds: a long poll would outlast the bounded wait, by design)
METHODS = ["tools/call", "tools/list", "ping", "initialize", "resources/list", "prompts/list", "logging/setLevel"]
NOTIFICATIONS = ["notifications/initialized", "notifications/progress", "notifications/roots/list_changed"]


@dataclass(frozen=True)
class Raw:
    """JSON text put into a message as it is: numbers json.dumps would not write, nesting it would recurse on."""

    text: str


def render(value: Any) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{render(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(render(v) for v in value) + "]"
    return json.dumps(value)  # lone surrogates written as \udXXX escapes


# ------------------------------------------------------------- the values

texts = st.text(st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=12)  # lone surrogates too
huge_numbers = st.one_of(
    st.integers(min_value=1, max_value=10_000).map(lambda n: Raw("-" * (n % 2) + "9" * n)),
    st.sampled_from(["1e400", "-1e400", "1e-400", "-0", "0.0", "1" * 5000 + ".5", "1." + "1" * 5000]).map(Raw),
    st.integers(min_value=-(2**70), max_value=2**70),
)
deep = st.builds(
    lambda depth, arrays: Raw("[" * depth + "]" * depth if arrays else '{"a":' * depth + "1" + "}" * depth),
    st.integers(min_value=150, max_value=20_000),
    st.booleans(),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.floats() | texts | huge_numbers,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
arguments = st.dictionaries(st.sampled_from(ARGUMENT_NAMES) | texts, json_values | deep, max_size=5)


@dataclass(frozen=True)
class Line:
    """A line to send, made once its id is known: exactly one answer is owed to a request, at most one otherwise."""

    make: Callable[[int], bytes]
    request: bool  # a request carrying our id: exactly one answer; else at most one (a line cut short)


def message(envelope: dict[str, Any], id_last: bool) -> Callable[[int], bytes]:
    """The envelope with our id first (as the Python SDK writes it) or last (as the TypeScript SDK does)."""

    def make(request_id: int) -> bytes:
        rest = {"jsonrpc": "2.0", **envelope}
        if id_last:
            return render({**rest, "id": request_id}).encode()
        return render({"jsonrpc": rest.pop("jsonrpc"), "id": request_id, **rest}).encode()

    return make


def tool_call(name: Any, args: dict[str, Any], id_last: bool) -> Line:
    return Line(message({"method": "tools/call", "params": {"name": name, "arguments": args}}, id_last), True)


def notification(method: Any, params: Any) -> Line:
    return Line(lambda _: render({"jsonrpc": "2.0", "method": method, "params": params}).encode(), False)


tool_calls = st.builds(tool_call, st.sampled_from(TOOLS) | texts, arguments, st.booleans())
wrong_types = st.builds(
    lambda envelope, id_last: Line(message(envelope, id_last), True),
    st.fixed_dictionaries(
        {"method": st.sampled_from(METHODS) | texts | json_values},
        optional={"params": json_values | deep, "jsonrpc": st.sampled_from(["2.0", "1.0", 2, None])},
    ),
    st.booleans(),
)
notifications = st.builds(notification, st.sampled_from(NOTIFICATIONS) | texts, json_values | deep)
garbage = st.binary(max_size=300).map(lambda b: Line(lambda _: b.replace(b"\n", b" "), False))


def cut_short(line: Line, fraction: float) -> Line:
    def make(request_id: int) -> bytes:
        whole = line.make(request_id)
        return whole[: int((len(whole) - 1) * fraction)] or b"{"

    return Line(make, False)


truncated = st.builds(cut_short, tool_calls | wrong_types, st.floats(min_value=0.0, max_value=1.0))


# ------------------------------------------------------------- the runner


class Fuzzer:
    """One server for every example of a test, and the books on what it owes."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.server = RawServer(db)
        self.server.initialize()
        self.ids = itertools.count(1000)
        self.owed: set[int] = set()  # exactly one answer each
        self.maybe: set[int] = set()  # at most one answer each

    def send(self, lines: list[Line]) -> None:
        sent = []
        for line in lines:
            request_id = next(self.ids)
            self.server.send(line.make(request_id))
            if line.request:
                self.owed.add(request_id)
                sent.append(request_id)
            else:
                self.maybe.add(request_id)
        for request_id in sent:
            self.server.answer(request_id)
        assert self.server.proc.poll() is None, "the server died"
        assert "Traceback" not in "\n".join(self.server.stderr)

    def finish(self) -> None:
        try:
            assert self.server.close() == 0
        finally:
            self.server.kill()
        stderr = "\n".join(self.server.stderr)
        assert "Traceback" not in stderr, stderr[-4000:]
        assert not [a for a in self.server.answers if "not a JSON line" in a]
        counts: dict[Any, int] = {}
        for answer in self.server.answers:
            counts[answer.get("id")] = counts.get(answer.get("id"), 0) + 1
        assert all(counts.get(i) == 1 for i in self.owed), {i: counts.get(i) for i in self.owed if counts.get(i) != 1}
        assert all(counts.get(i, 0) <= 1 for i in self.maybe)
        assert set(counts) <= self.owed | self.maybe | {1, None}, set(counts) - self.owed - self.maybe
        with sqlite3.connect(self.db) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def fuzz(db: Path, lines: st.SearchStrategy[Line]) -> None:
    fuzzer = Fuzzer(db)
    try:

        @fuzz_settings
        @given(st.lists(lines, min_size=1, max_size=6))
        def example(batch: list[Line]) -> None:
            fuzzer.send(batch)

        example()
    finally:
        fuzzer.finish()


def test_fuzz_garbage_and_truncated_lines(db_path) -> None:
    fuzz(db_path, garbage | truncated | tool_calls)


def test_fuzz_json_rpc_with_wrong_types_and_notifications(db_path) -> None:
    fuzz(db_path, wrong_types | notifications | tool_calls)


def test_fuzz_tool_calls_with_random_names_and_arguments(db_path) -> None:
    fuzz(db_path, tool_calls)
