"""The batch verbs over MCP: claim_next with max, complete and fail with items;
each item answered on its own, validation errors naming the field; in process
over real JSON-RPC, and once over the real stdio wire."""

from __future__ import annotations

import pytest
from mcp import Client

from switchboard_local.core import agents, todos
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease

from support.mcp import call, connect, refused, stdio_params

pytestmark = pytest.mark.anyio

ROW_FIELDS = {
    "id", "queue", "title", "kind", "state", "dead_letter", "priority", "assignee", "attempt", "max_attempts",
    "owner", "lease_expires_at", "visible_at", "event_id", "last_error", "created_at", "updated_at", "payload_size", "blocked",
}  # fmt: skip


async def new(store, queue="q", title="t", **fields):
    todo, _ = await todos.create(store, NewTodo(queue=queue, title=title, **fields))
    return todo


async def test_claim_next_with_max_answers_todos_each_with_its_own_lease_token(store) -> None:
    made = [await new(store, title=f"t{i}", priority=i % 2) for i in range(5)]
    async with connect(store) as client:
        got = await call(client, "claim_next", max=3)
        rest = await call(client, "claim_next", max=3)
        none = await call(client, "claim_next", max=3)
    assert set(got) == {"todos", "empty", "cut"} and got["empty"] is False and got["cut"] is False
    expected = [t.id for t in sorted(made, key=lambda t: (-t.priority, t.id))]
    assert [t["id"] for t in got["todos"] + rest["todos"]] == expected  # claim order kept
    tokens = [t["lease_token"] for t in got["todos"] + rest["todos"]]
    assert all(tokens) and len(set(tokens)) == 5
    assert all("payload" in t for t in got["todos"])
    assert none == {"todos": [], "empty": True, "cut": False}


async def test_claim_next_without_max_keeps_its_shape(store) -> None:
    async with connect(store) as client:
        assert await call(client, "claim_next") == {"todo": None, "empty": True}
        await new(store)
        one = await call(client, "claim_next")
    assert set(one) == {"todo", "empty"} and one["todo"]["lease_token"]


@pytest.mark.parametrize("max", [0, 101, "ten"])
async def test_claim_next_max_out_of_bounds_is_invalid_argument_naming_max(store, max) -> None:
    await new(store)
    async with connect(store) as client:
        text = await refused(client, "claim_next", max=max)
    assert text.startswith("invalid_argument: max:")
    assert (await todos.get(store, 1)).state == "pending"


async def test_claim_next_with_max_outside_the_scope_is_empty(store) -> None:
    await new(store, queue="theirs")
    async with connect(store, await agents.add(store, "a", queues=["mine"])) as client:
        assert await call(client, "claim_next", queue="theirs", max=5) == {"todos": [], "empty": True, "cut": False}


async def test_complete_with_items_answers_each_item_and_a_stale_token_refuses_only_its_own(store) -> None:
    for i in range(3):
        await new(store, title=f"t{i}")
    async with connect(store) as client:
        claimed = (await call(client, "claim_next", max=3))["todos"]
        items = [{"id": t["id"], "lease_token": t["lease_token"], "result": {"n": t["id"]}} for t in claimed]
        items[1]["lease_token"] = "stale"
        answer = await call(client, "complete", items=items)
    assert set(answer) == {"items"}
    assert [o["ok"] for o in answer["items"]] == [True, False, True]
    assert set(answer["items"][0]) == {"id", "ok", "todo"} and set(answer["items"][0]["todo"]) == ROW_FIELDS
    assert answer["items"][0]["todo"]["state"] == "done"
    refusal = answer["items"][1]
    assert set(refusal) == {"id", "ok", "error"} and refusal["id"] == claimed[1]["id"]
    assert refusal["error"]["code"] == "conflict" and "does not match" in refusal["error"]["message"]
    assert (await todos.get(store, claimed[1]["id"])).state == "claimed"
    assert (await todos.get(store, claimed[2]["id"])).result == {"n": claimed[2]["id"]}


async def test_fail_with_items_fails_each_one(store) -> None:
    await new(store, max_attempts=1)
    await new(store)
    async with connect(store) as client:
        claimed = (await call(client, "claim_next", max=2))["todos"]
        items = [{"id": t["id"], "lease_token": t["lease_token"], "error": "broke"} for t in claimed]
        answer = await call(client, "fail", items=items + [{"id": 404, "lease_token": "x"}])
    outcomes = answer["items"]
    assert [(o["ok"], o.get("todo", {}).get("dead_letter")) for o in outcomes] == [(True, True), (True, False), (False, None)]
    assert outcomes[2]["error"] == {"code": "not_found", "message": "todo 404 does not exist"}


async def test_items_with_claim_next_claim_the_next_batch_in_the_same_commit(store) -> None:
    for i in range(5):
        await new(store, title=f"t{i}")
    async with connect(store) as client:
        claimed = (await call(client, "claim_next", max=2))["todos"]
        items = [{"id": t["id"], "lease_token": t["lease_token"]} for t in claimed]
        answer = await call(client, "complete", items=items, claim_next=True, max=10)
        empty = await call(client, "complete", claim_next=True,
                           items=[{"id": t["id"], "lease_token": t["lease_token"]} for t in answer["next"]])  # fmt: skip
    assert [o["ok"] for o in answer["items"]] == [True, True]
    assert len(answer["next"]) == 3 and all(t["lease_token"] and t["state"] == "claimed" for t in answer["next"])
    assert empty["next"] == [] and all(o["ok"] for o in empty["items"])


async def test_a_single_complete_keeps_its_shape(store) -> None:
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    async with connect(store) as client:
        done = await call(client, "complete", id=todo.id, lease_token=claimed.lease_token)
    assert set(done) == ROW_FIELDS and done["state"] == "done"


@pytest.mark.parametrize(
    ("arguments", "starts"),
    [
        ({"items": [{"id": 1}]}, "invalid_argument: items.0.lease_token: Field required"),
        ({"items": [{"id": 1, "lease_token": "x"}, {"id": 0, "lease_token": "x"}]}, "invalid_argument: items.1.id:"),
        ({"items": [{"id": 1, "lease_token": "x", "colour": "crimson"}]}, "invalid_argument: items.0.colour:"),
        ({"items": []}, "invalid_argument: items:"),
        ({"items": [{"id": 1, "lease_token": "x"}] * 101}, "invalid_argument: items:"),
        ({"items": "all of them"}, "invalid_argument: items:"),
        ({"id": 1, "lease_token": "x", "items": [{"id": 1, "lease_token": "x"}]}, "invalid_argument: id:"),
        ({"result": 5, "items": [{"id": 1, "lease_token": "x"}]}, "invalid_argument: result:"),
        ({}, "invalid_argument: id: Field required"),
        ({"id": 1, "lease_token": "x", "max": 3}, "invalid_argument: max goes with items"),
        ({"items": [{"id": 1, "lease_token": "x"}], "max": 3}, "invalid_argument: queue, lease_seconds and max go"),
        ({"items": [{"id": 1, "lease_token": "x"}], "claim_next": True, "max": 0}, "invalid_argument: max:"),
    ],
    ids=["no token", "a bad id", "an unknown field", "empty", "over 100", "not a list", "id beside items",
         "result beside items", "nothing", "max for one", "max without claim_next", "max zero"],  # fmt: skip
)
async def test_bad_items_are_refused_whole_naming_the_field(store, arguments, starts) -> None:
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    async with connect(store) as client:
        text = await refused(client, "complete", **arguments)
    assert text.startswith(starts), text
    assert "crimson" not in text and "all of them" not in text  # field names, never the values
    assert (await todos.get(store, todo.id)).state == "claimed"
    await todos.complete(store, Lease.of(claimed))


async def test_fail_items_take_an_error_and_nothing_else(store) -> None:
    async with connect(store) as client:
        text = await refused(client, "fail", items=[{"id": 1, "lease_token": "x", "result": 1}])
    assert text.startswith("invalid_argument: items.0.result:")


async def test_an_item_outside_the_agents_queues_is_answered_like_an_unknown_todo(store) -> None:
    mine, theirs = await new(store, queue="mine"), await new(store, queue="theirs")
    cm, ct = [await todos.claim(store, t.id, owner="w") for t in (mine, theirs)]
    async with connect(store, await agents.add(store, "a", queues=["mine"])) as client:
        answer = await call(client, "complete", items=[{"id": t.id, "lease_token": t.lease_token} for t in (cm, ct)])
    assert answer["items"][0]["ok"] is True
    assert answer["items"][1]["error"] == {"code": "not_found", "message": f"todo {theirs.id} does not exist"}
    assert (await todos.get(store, theirs.id)).state == "claimed"


@pytest.mark.both_backends
async def test_the_batch_verbs_over_the_real_stdio_wire(db_path, store) -> None:
    for i in range(4):
        await new(store, title=f"t{i}")
    async with Client(stdio_params(db_path), mode="legacy") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert "max" in tools["claim_next"].input_schema["properties"]
        assert "items" in tools["complete"].input_schema["properties"]
        assert tools["complete"].output_schema["type"] == "object"
        claimed = (await call(client, "claim_next", max=3))["todos"]
        items = [{"id": t["id"], "lease_token": t["lease_token"], "result": "ok"} for t in claimed]
        items[0]["lease_token"] = "stale"
        answer = await call(client, "complete", items=items, claim_next=True)
        bad = await refused(client, "fail", items=[{"id": 1}])
    assert [o["ok"] for o in answer["items"]] == [False, True, True]
    assert answer["items"][0]["error"]["code"] == "conflict"
    assert [t["title"] for t in answer["next"]] == ["t3"]
    assert bad == "invalid_argument: items.0.lease_token: Field required"
    assert [t.state for t in await todos.list_todos(store)] == ["claimed", "done", "done", "claimed"]
