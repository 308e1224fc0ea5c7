"""What a model is shown of the tools, and what it may pass them (issue 28 §3.9, §4):
strict numbers and booleans, a description for every parameter, a tools/list
that fits its byte budget, and refusals whose code is structured as well as text."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from switchboard_local.core import todos
from switchboard_local.core.errors import Busy, StoreUnusable, Unavailable
from switchboard_local.core.store.interface import Store
from switchboard_local.core.todo_model import NewTodo

from support.mcp import RawServer, connect

pytestmark = pytest.mark.anyio

# Every number a tool takes, as (tool, parameter path): test_the_numeric_parameters_are_all_listed_here keeps it whole.
NUMERIC = [
    ("list_todos", "limit"), ("get_todo", "id"), ("claim", "id"), ("claim", "lease_seconds"),
    ("claim_next", "wait_seconds"), ("claim_next", "lease_seconds"), ("claim_next", "max"),
    ("heartbeat", "id"), ("heartbeat", "lease_seconds"),
    ("complete", "id"), ("complete", "lease_seconds"), ("complete", "max"), ("complete", "items.id"),
    ("fail", "id"), ("fail", "lease_seconds"), ("fail", "max"), ("fail", "items.id"),
    ("release", "id"), ("release", "delay_seconds"), ("create_for", "priority"), ("wait_todos", "wait_seconds"),
    ("list_events", "limit"), ("get_event", "id"), ("replay_event", "id"),
]  # fmt: skip
BOOLEAN = [("complete", "claim_next"), ("fail", "claim_next")]

# The budget of what the model reads of the tools on every turn.
TOOLS_LIST_BUDGET = 12_000


def model_visible(tools: list[dict[str, Any]]) -> str:
    """The tools as Claude Code puts them before the model: prefixed name, description, input schema.

    Encoded with Python's default separators (", ", ": "), a few hundred bytes
    more than the compact JSON a client sends: the larger of the two.
    """
    shown = [
        {"name": f"mcp__switchboard__{t['name']}", "description": t["description"], "input_schema": t["inputSchema"]}
        for t in tools
    ]
    return json.dumps(shown)


def listed_over_stdio(db_path) -> list[dict[str, Any]]:
    """tools/list as a real `switchboard-local mcp` answers it on its stdout."""
    server = RawServer(db_path)
    try:
        server.initialize()
        server.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        return server.answer(2)["result"]["tools"]
    finally:
        assert server.close() == 0


def parameters(schema: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    """Every parameter of an input schema by path, the fields of a list's items too (``items.id``)."""
    found = {}
    for name, prop in schema.get("properties", {}).items():
        found[prefix + name] = prop
        if isinstance(prop.get("items"), dict):
            found.update(parameters(prop["items"], f"{prefix}{name}."))
    return found


def test_every_parameter_of_every_tool_has_its_own_description(db_path) -> None:
    undescribed = [
        f"{tool['name']}.{path}"
        for tool in listed_over_stdio(db_path)
        for path, prop in parameters(tool["inputSchema"]).items()
        if not str(prop.get("description", "")).strip()
    ]
    assert undescribed == []


def test_what_the_model_reads_of_the_tools_stays_within_12_kb(db_path) -> None:
    tools = listed_over_stdio(db_path)
    assert len(tools) == 14
    assert len(model_visible(tools).encode()) <= TOOLS_LIST_BUDGET
    # Nothing pydantic adds that says nothing: titles, null branches, null defaults.
    noise = [path for tool in tools for path in _noise(tool["inputSchema"], tool["name"])]
    assert noise == []


def _noise(node: Any, path: str) -> list[str]:
    """Where a schema says what says nothing: a title string, a null branch, a null default."""
    if isinstance(node, list):
        return [found for n, item in enumerate(node) for found in _noise(item, f"{path}[{n}]")]
    if not isinstance(node, dict):
        return []
    found = [f"{path}.title"] if isinstance(node.get("title"), str) else []  # a property named title is a dict
    found += [f"{path}.default"] if "default" in node and node["default"] is None else []
    found += [f"{path}.anyOf" for branch in node.get("anyOf", []) if branch == {"type": "null"}]
    return found + [deeper for key, value in node.items() for deeper in _noise(value, f"{path}.{key}")]


async def test_the_numeric_parameters_are_all_listed_here(store) -> None:
    async with connect(store) as client:
        listed = (await client.list_tools()).tools
    numeric = {
        (tool.name, path)
        for tool in listed
        for path, prop in parameters(tool.input_schema).items()
        if prop.get("type") in ("integer", "number")
    }
    assert numeric == set(NUMERIC)


async def state_of(store: Store) -> list[tuple]:
    return [
        (t.id, t.state, t.owner, t.attempt, t.lease_expires_at, t.updated_at)
        for t in await todos.list_todos(store, limit=100)
    ]


async def calls(store: Store, tool: str, path: str, bad: Any) -> dict[str, Any]:
    """Arguments for ``tool`` that would be accepted, but for ``bad`` at ``path``."""
    claimed = await todos.claim(store, 2, owner="worker")
    token = claimed.lease_token
    base: dict[str, dict[str, Any]] = {
        "list_todos": {}, "get_todo": {"id": 1}, "claim": {"id": 1}, "claim_next": {},
        "heartbeat": {"id": 2, "lease_token": token},
        "complete": {"id": 2, "lease_token": token, "claim_next": True},
        "fail": {"id": 2, "lease_token": token, "claim_next": True},
        "release": {"id": 2, "lease_token": token}, "create_for": {"title": "t", "queue": "q"},
        "wait_todos": {"ids": [1]},
        "list_events": {}, "get_event": {"id": 1}, "replay_event": {"id": 1},
    }  # fmt: skip
    arguments = base[tool]
    if path == "items.id":
        return {"items": [{"id": bad, "lease_token": token}]}
    if path == "max" and tool in ("complete", "fail"):
        return {"items": [{"id": 2, "lease_token": token}], "claim_next": True, "max": bad}
    return {**arguments, path: bad}


@pytest.mark.parametrize(("tool", "path"), NUMERIC, ids=[f"{t}.{p}" for t, p in NUMERIC])
@pytest.mark.parametrize("bad", [True, False, "1", "2.0"], ids=["true", "false", "'1'", "'2.0'"])
async def test_a_number_given_as_a_boolean_or_a_string_is_refused_and_nothing_changes(store, tool, path, bad):
    for n in range(3):
        await todos.create(store, NewTodo(queue="q", title=f"t{n}"))
    arguments = await calls(store, tool, path, bad)
    before = await state_of(store)
    async with connect(store) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error
    where = "items.0.id" if path == "items.id" else path
    assert result.content[0].text.startswith(f"invalid_argument: {where}: ")  # type: ignore[union-attr]
    assert result.structured_content["error"]["code"] == "invalid_argument"  # type: ignore[index]
    assert await state_of(store) == before  # nothing claimed, created, finished or moved


@pytest.mark.parametrize(("tool", "path"), BOOLEAN, ids=[f"{t}.{p}" for t, p in BOOLEAN])
@pytest.mark.parametrize("bad", [1, "true"], ids=["1", "'true'"])
async def test_a_boolean_given_as_a_number_or_a_string_is_refused_and_nothing_changes(store, tool, path, bad):
    for n in range(3):
        await todos.create(store, NewTodo(queue="q", title=f"t{n}"))
    arguments = await calls(store, tool, path, bad)
    before = await state_of(store)
    async with connect(store) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error and result.content[0].text.startswith(f"invalid_argument: {path}: ")  # type: ignore[union-attr]
    assert await state_of(store) == before


async def test_numbers_given_as_numbers_are_taken(store) -> None:
    for n in range(3):
        await todos.create(store, NewTodo(queue="q", title=f"t{n}"))
    async with connect(store) as client:
        got = await client.call_tool("claim_next", {"max": 2, "wait_seconds": 0, "lease_seconds": 60.5})
        one = await client.call_tool("claim_next", {"lease_seconds": 60})  # an integer where a number goes
    assert not got.is_error and len(got.structured_content["todos"]) == 2  # type: ignore[index]
    assert not one.is_error and one.structured_content["todo"]["id"] == 3  # type: ignore[index]


# ---------------------------------------------------------------- refusals


def _raises(error: Exception):
    async def verb(*args: Any, **kwargs: Any) -> Any:
        raise error

    return verb


# A refusal for each code: (tool, arguments, a fault to put in the core's stats verb or None).
REFUSALS = {
    "not_found": ("get_todo", {"id": 404}, None),
    "conflict": ("claim", {"id": 2}, None),
    "invalid_argument": ("get_todo", {"id": "one"}, None),
    "forbidden": ("claim", {"id": 3}, None),
    "busy": ("queue_stats", {}, Busy("the database was locked for 5.0 s")),
    "unavailable": ("queue_stats", {}, Unavailable("the database cannot be written: disk full")),
    "store_unusable": ("queue_stats", {}, StoreUnusable("not a switchboard-local database")),
    "internal_error": ("queue_stats", {}, RuntimeError("something no one planned for")),
}


@pytest.mark.parametrize("code", list(REFUSALS))
async def test_a_refusal_carries_its_code_as_structured_content_and_at_the_start_of_its_text(
    store, monkeypatch, code
) -> None:
    await todos.create(store, NewTodo(queue="q", title="pending"))
    taken, _ = await todos.create(store, NewTodo(queue="q", title="taken"))
    await todos.claim(store, taken.id, owner="someone")
    await todos.create(store, NewTodo(queue="q", title="theirs", assignee="reviewer"))
    tool, arguments, fault = REFUSALS[code]
    if fault is not None:  # a store fault is hard to cause on demand; the mapping is what is tested
        monkeypatch.setattr(todos, "stats", _raises(fault))
    async with connect(store) as client:
        schemas = {t.name: t.output_schema for t in (await client.list_tools()).tools}
        result = await client.call_tool(tool, arguments)
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    error = result.structured_content["error"]  # type: ignore[index]
    assert error["code"] == code and text == f"{code}: {error['message']}"
    # A client that checks structured content against the output schema, errors too
    # (the TypeScript SDK's does), accepts it.
    jsonschema.validate(result.structured_content, schemas[tool])


async def test_an_answer_still_matches_its_output_schema(store) -> None:
    await todos.create(store, NewTodo(queue="q", title="t", payload={"n": 1}))
    async with connect(store) as client:
        schemas = {t.name: t.output_schema for t in (await client.list_tools()).tools}
        answers = {
            "claim_next": await client.call_tool("claim_next", {"max": 3}),
            "queue_stats": await client.call_tool("queue_stats", {}),
            "list_todos": await client.call_tool("list_todos", {}),
        }
    for tool, result in answers.items():
        assert not result.is_error
        jsonschema.validate(result.structured_content, schemas[tool])
