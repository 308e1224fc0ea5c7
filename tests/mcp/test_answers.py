"""What a tool call answers on the wire (issue 28 §3.6): a batch claim's answer
stays within the line cap, claiming only what it carries; each answer's JSON
is sent once, its text repeating it only while it is small."""

from __future__ import annotations

import json

import pytest

from switchboard_local.core import settings, todos
from switchboard_local.core.store.interface import Store
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.todo_model import MAX_TITLE_LENGTH, NewTodo
from switchboard_local.core.todos import MAX_BATCH, Lease
from switchboard_local.mcp.answers import TEXT_COPY_LIMIT
from switchboard_local.mcp.models import ClaimNextResult, TodoFull
from switchboard_local.mcp.stdio import MAX_LINE
from switchboard_local.mcp.tools import BATCH_BUDGET

from support.mcp import RawServer, call, connect

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024


async def big_todos(store: Store, count: int, size: int) -> list[int]:
    await settings.set_value(store, "limits.max_payload", "4MiB")
    made = []
    for n in range(count):
        todo, _ = await todos.create(store, NewTodo(queue="q", title=f"big {n}", payload={"blob": "x" * size}))
        made.append(todo.id)
    return made


@pytest.mark.both_backends
async def test_a_batch_claim_over_stdio_claims_only_what_its_answer_line_can_carry(db_path) -> None:
    async with await open_store(db_path) as store:
        made = await big_todos(store, 8, 3 * MiB)  # 24 MiB of payloads; 12 MiB fit the answer
    server = RawServer(db_path)
    try:
        server.initialize()
        server.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                     "params": {"name": "claim_next", "arguments": {"max": 8}}})  # fmt: skip
        result = server.answer(2, timeout=120)["result"]
        size = server.line_size(2)
    finally:
        assert server.close() == 0
    answer = result["structuredContent"]
    assert size <= MAX_LINE
    assert [t["id"] for t in answer["todos"]] == made[:3] and answer["cut"] is True
    assert all(len(t["payload"]["blob"]) == 3 * MiB and t["lease_token"] for t in answer["todos"])
    # The payloads went once: the text beside them is a line about them.
    (text,) = result["content"]
    assert len(text["text"]) < 2000 and "structuredContent" in text["text"] and "ids 1, 2, 3" in text["text"]
    async with await open_store(db_path) as store:
        states = [(await todos.get(store, todo_id)).state for todo_id in made]
    assert states == ["claimed"] * 3 + ["pending"] * 5  # claimed is exactly what was answered


async def test_a_batch_claim_takes_its_first_todo_alone_when_it_is_over_the_bound(store, clock) -> None:
    """No todo is too big to claim: one that alone is over the bound comes alone, as claim_next without max would."""
    (first,) = await big_todos(store, 1, 4 * MiB - 100)
    claimed = await todos.claim(store, first, owner="earlier")
    await todos.fail(store, Lease.of(claimed), error="e" * (2 * MiB))  # counted six times: 12 MiB
    await todos.create(store, NewTodo(queue="q", title="small"))
    clock.advance(3600)  # past the retry's backoff
    async with connect(store) as client:
        answer = await call(client, "claim_next", max=10)
        rest = await call(client, "claim_next", max=10)
    assert ([t["id"] for t in answer["todos"]], answer["cut"]) == ([first], True)
    assert ([t["title"] for t in rest["todos"]], rest["cut"]) == (["small"], False)


def test_a_batch_of_100_todos_with_every_capped_field_full_fits_the_line_beside_the_budget() -> None:
    """The budget covers what has no fixed cap (payloads, error texts); the rest of each todo is capped."""
    wide = "𝄞"  # four bytes of UTF-8, the most a character of a name or title takes
    name = wide * 512
    fields = {
        "id": 2**63 - 1, "queue": name, "title": wide * MAX_TITLE_LENGTH, "kind": name, "payload": None,
        "state": "claimed", "dead_letter": False, "priority": -(2**63), "assignee": name, "attempt": 1000,
        "max_attempts": 1000, "owner": f"{name}/abcdef ({name})", "lease_expires_at": "2026-11-29T21:20:25.123Z",
        "visible_at": "2026-11-29T21:20:25.123Z", "idempotency_key": name, "event_id": 2**63 - 1, "result": None,
        "last_error": None, "created_at": "2026-11-29T21:20:25.123Z", "updated_at": "2026-11-29T21:20:25.123Z",
        "claimed_at": "2026-11-29T21:20:25.123Z", "completed_at": "2026-11-29T21:20:25.123Z",
        "cancelled_by": name, "cancel_reason": wide * 1000, "lease_token": "t" * 32,
    }  # fmt: skip
    todo = TodoFull.model_validate(fields)
    batch = ClaimNextResult(todos=[todo] * MAX_BATCH, empty=False, cut=True).model_dump_json()
    envelope_and_text = 64 * 1024  # the JSON-RPC frame and the text's one line (ids and counts)
    assert len(batch.encode()) + BATCH_BUDGET + envelope_and_text <= MAX_LINE


async def test_a_small_answer_repeats_its_json_as_text_and_a_large_one_sends_it_once(store) -> None:
    await todos.create(store, NewTodo(queue="q", title="small", payload={"n": 1}))
    await todos.create(store, NewTodo(queue="q", title="large", payload={"blob": "x" * TEXT_COPY_LIMIT}))
    async with connect(store) as client:
        small = await client.call_tool("get_todo", {"id": 1})
        large = await client.call_tool("get_todo", {"id": 2})
    assert json.loads(small.content[0].text) == small.structured_content  # type: ignore[union-attr]
    text = large.content[0].text  # type: ignore[union-attr]
    assert large.structured_content["payload"]["blob"] == "x" * TEXT_COPY_LIMIT
    assert "x" * 100 not in text and len(text) < 1000
    assert text.startswith("get_todo answered ") and "in structuredContent" in text and 'title: "large"' in text
