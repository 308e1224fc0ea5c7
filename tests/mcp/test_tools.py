"""Every MCP tool, in process over real JSON-RPC (issue 5 §2): names, shapes, errors."""

from __future__ import annotations

import base64
import re

import anyio
import pytest

from switchboard_local.core import routing, todos
from switchboard_local.core.agents import TOOL_NAMES
from switchboard_local.core.clock import rfc3339
from switchboard_local.core.events import NewEvent
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease
from switchboard_local.mcp.server import INSTRUCTIONS

from support.mcp import call, claim_attempts, connect, refused

pytestmark = pytest.mark.anyio

READ_ONLY = {"list_todos", "get_todo", "wait_todos", "list_events", "get_event", "queue_stats"}
ROW_FIELDS = {
    "id", "queue", "title", "kind", "state", "dead_letter", "priority", "assignee", "attempt", "max_attempts",
    "owner", "lease_expires_at", "visible_at", "event_id", "last_error", "created_at", "updated_at", "payload_size", "blocked",
}  # fmt: skip
CODE = re.compile(r"^(not_found|conflict|invalid_argument|forbidden): \S.*[^\s]$")


async def new(store, queue="q", title="t", **fields):
    todo, _ = await todos.create(store, NewTodo(queue=queue, title=title, **fields))
    return todo


async def webhook(store, source="gh", external_id="d1", body=b'{"action": "opened"}', **fields):
    event = NewEvent(
        source=source, family="webhook", type=fields.pop("type", "pull_request"), external_id=external_id,
        trust_mode="hmac-sha256", verified=True, body=body, content_type="application/json",
        headers={"X-GitHub-Event": "pull_request", "X-Hub-Signature-256": "[redacted]"}, **fields,
    )  # fmt: skip
    return await routing.deliver(store, event)


async def test_tools_list_offers_the_fourteen_tools_typed_and_read_only_where_they_only_read(store) -> None:
    async with connect(store) as client:
        listed = (await client.list_tools()).tools
    assert [t.name for t in listed] == list(TOOL_NAMES)
    for tool in listed:
        assert tool.description and "\n" not in tool.description
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        assert tool.annotations is not None and tool.annotations.read_only_hint is (tool.name in READ_ONLY)


async def test_instructions_tell_the_model_what_a_channel_message_means_and_to_claim(store) -> None:
    async with connect(store) as client:
        assert client.instructions == INSTRUCTIONS
    assert "<channel" in INSTRUCTIONS and "call claim with that todo_id" in INSTRUCTIONS


async def test_list_todos_shows_compact_rows_with_payload_size_filtered_by_queue_and_state(store) -> None:
    first = await new(store, "a", "one", payload={"big": "x" * 100})
    await new(store, "b", "two")
    await new(store, "a", "three")
    await todos.claim(store, first.id, owner="w")
    async with connect(store) as client:
        everything = await call(client, "list_todos")
        in_a = await call(client, "list_todos", queue="a")
        claimed = await call(client, "list_todos", state="claimed")
    assert [t["title"] for t in everything["todos"]] == ["three", "two", "one"]
    assert set(everything["todos"][0]) == ROW_FIELDS  # no payload, no token
    assert everything["todos"][2]["payload_size"] == len('{"big":"' + "x" * 100 + '"}')
    assert [t["title"] for t in in_a["todos"]] == ["three", "one"]
    assert [t["title"] for t in claimed["todos"]] == ["one"]


async def test_list_todos_pages_newest_first_with_a_cursor_and_caps_the_limit_at_200(store) -> None:
    for n in range(5):
        await new(store, title=f"t{n}")
    async with connect(store) as client:
        first = await call(client, "list_todos", limit=2)
        second = await call(client, "list_todos", limit=2, cursor=first["next_cursor"])
        last = await call(client, "list_todos", limit=2, cursor=second["next_cursor"])
        too_many = await refused(client, "list_todos", limit=201)
        bad_cursor = await refused(client, "list_todos", cursor="abc")
    assert [[t["title"] for t in page["todos"]] for page in (first, second, last)] == [
        ["t4", "t3"], ["t2", "t1"], ["t0"]
    ]  # fmt: skip
    assert last["next_cursor"] is None
    assert too_many.startswith("invalid_argument: limit:")
    assert bad_cursor.startswith("invalid_argument: cursor")


async def test_get_todo_shows_the_payload_and_the_attempt_history(store, clock) -> None:
    todo = await new(store, payload={"pr": 42})
    claimed = await todos.claim(store, todo.id, owner="earlier")
    await todos.fail(store, Lease(todo.id, claimed.lease_token), error="flaky")
    async with connect(store) as client:
        shown = await call(client, "get_todo", id=todo.id)
    assert shown["payload"] == {"pr": 42} and shown["state"] == "pending" and shown["last_error"] == "flaky"
    assert "lease_token" not in shown  # only a claim's answer carries one
    assert [(a["attempt"], a["owner"], a["outcome"], a["error"]) for a in shown["attempts"]] == [
        (1, "earlier", "failed", "flaky")
    ]


async def test_claim_returns_the_full_todo_with_a_lease_token_and_owner_agent_slash_session(store) -> None:
    todo = await new(store, payload={"pr": 42})
    async with connect(store) as client:
        claimed = await call(client, "claim", id=todo.id, lease_seconds=60)
        again = await refused(client, "claim", id=todo.id)
    assert claimed["payload"] == {"pr": 42} and claimed["state"] == "claimed" and claimed["attempt"] == 1
    assert claimed["lease_token"] and claimed["owner"] == "mcp/s1" and "attempts" not in claimed
    assert again.startswith("conflict: todo 1 is claimed by mcp/s1")


async def test_claim_next_takes_the_best_todo_or_answers_empty_without_an_error(store) -> None:
    await new(store, title="low")
    await new(store, title="high", priority=5, payload=[1, 2])
    async with connect(store) as client:
        best = await call(client, "claim_next")
        other = await call(client, "claim_next", queue="q")
        empty = await call(client, "claim_next")
    assert best["empty"] is False and best["todo"]["title"] == "high" and best["todo"]["payload"] == [1, 2]
    assert best["todo"]["lease_token"]
    assert other["todo"]["title"] == "low"
    assert empty == {"todo": None, "empty": True}


async def test_claim_next_waits_at_most_wait_seconds_and_refuses_more_than_20(store) -> None:
    async with connect(store) as client:
        started = anyio.current_time()
        empty = await call(client, "claim_next", wait_seconds=0.3)
        waited = anyio.current_time() - started
        too_long = await refused(client, "claim_next", wait_seconds=21)
    assert empty == {"todo": None, "empty": True}
    assert waited >= 0.3  # it did wait (how much longer is load, not behaviour)
    assert too_long.startswith("invalid_argument: wait_seconds:")


async def test_claim_next_wakes_when_a_todo_lands_while_it_waits(store, monkeypatch) -> None:
    # No periodic re-check to fall back on: only the change feed can wake it
    # before its 15 s are up (and then it would answer empty).
    monkeypatch.setattr(todos.claims, "RECHECK_SECONDS", 60.0)
    tried = claim_attempts(monkeypatch)
    async with connect(store) as client:
        async with anyio.create_task_group() as tasks:
            answer = {}

            async def wait_for_work() -> None:
                answer.update(await call(client, "claim_next", wait_seconds=15))

            tasks.start_soon(wait_for_work)
            with anyio.fail_after(10):
                await tried.wait()  # it found nothing and waits
            created = await new(store, title="late")  # this process's own commit wakes it too
    assert answer["todo"]["id"] == created.id


async def test_heartbeat_resets_the_lease_from_now(store, clock) -> None:
    await new(store)
    async with connect(store) as client:
        claimed = (await call(client, "claim_next", lease_seconds=60))["todo"]
        clock.advance(50)
        beat = await call(client, "heartbeat", id=claimed["id"], lease_token=claimed["lease_token"], lease_seconds=60)
        clock.advance(50)  # past the first lease, inside the renewed one
        done = await call(client, "complete", id=claimed["id"], lease_token=claimed["lease_token"])
    assert beat["lease_expires_at"] > claimed["lease_expires_at"]
    assert "lease_token" not in beat and "payload" not in beat
    assert done["state"] == "done"


async def test_complete_records_the_result(store) -> None:
    todo = await new(store)
    async with connect(store) as client:
        claimed = await call(client, "claim", id=todo.id)
        done = await call(client, "complete", id=todo.id, lease_token=claimed["lease_token"], result={"merged": True})
        shown = await call(client, "get_todo", id=todo.id)
    assert done["state"] == "done"
    assert shown["result"] == {"merged": True} and shown["attempts"][0]["outcome"] == "completed"


async def test_fail_retries_after_a_backoff_then_dead_letters(store, clock) -> None:
    todo = await new(store, max_attempts=2)
    async with connect(store) as client:
        first = await call(client, "claim", id=todo.id)
        retrying = await call(client, "fail", id=todo.id, lease_token=first["lease_token"], error="boom")
        clock.advance(60)  # the first backoff is at most 30 s
        second = (await call(client, "claim_next"))["todo"]
        dead = await call(client, "fail", id=todo.id, lease_token=second["lease_token"], error="boom again")
    assert (retrying["state"], retrying["dead_letter"], retrying["last_error"]) == ("pending", False, "boom")
    assert retrying["visible_at"] is not None
    assert (dead["state"], dead["dead_letter"], dead["attempt"]) == ("failed", True, 2)


async def test_complete_with_claim_next_finishes_and_claims_the_next_todo_in_one_commit(store) -> None:
    first, second = await new(store, title="first"), await new(store, title="second")
    async with connect(store) as client:
        claimed = (await call(client, "claim_next"))["todo"]
        commits = store._commits
        done = await call(client, "complete", id=first.id, lease_token=claimed["lease_token"], claim_next=True)
        commits = store._commits - commits
        last = await call(client, "complete", id=second.id, lease_token=done["next"]["lease_token"], claim_next=True)
        plain = await call(client, "get_todo", id=second.id)
    assert (done["state"], done["next"]["id"], done["next"]["state"]) == ("done", second.id, "claimed")
    assert done["next"]["payload"] is None and done["next"]["lease_token"]
    assert commits == 1
    assert last["state"] == "done" and last["next"] is None  # asked, and nothing was left: null
    assert plain["state"] == "done"


async def test_complete_without_claim_next_answers_the_row_alone_and_refuses_next_options(store) -> None:
    todo = await new(store)
    async with connect(store) as client:
        claimed = await call(client, "claim", id=todo.id)
        stray = await refused(client, "complete", id=todo.id, lease_token=claimed["lease_token"], queue="q")
        done = await call(client, "complete", id=todo.id, lease_token=claimed["lease_token"])
    assert stray.startswith("invalid_argument: ") and "claim_next" in stray
    assert done["state"] == "done" and set(done) == ROW_FIELDS


async def test_complete_with_claim_next_from_a_bad_queue_name_is_refused_and_completes_nothing(store) -> None:
    todo = await new(store)
    async with connect(store) as client:
        claimed = await call(client, "claim", id=todo.id)
        text = await refused(client, "complete", id=todo.id, lease_token=claimed["lease_token"],
                             claim_next=True, queue=" ")  # fmt: skip
    assert text.startswith("invalid_argument: ") and "queue" in text
    assert (await todos.get(store, todo.id)).state == "claimed"


async def test_fail_with_claim_next_claims_from_the_queue_asked_with_the_lease_asked(store, clock) -> None:
    todo = await new(store, queue="a")
    await new(store, queue="b", title="other queue", priority=5)
    wanted = await new(store, queue="a", title="next in a")
    async with connect(store) as client:
        claimed = await call(client, "claim", id=todo.id)
        failed = await call(
            client, "fail", id=todo.id, lease_token=claimed["lease_token"], error="boom",
            claim_next=True, queue="a", lease_seconds=60,
        )  # fmt: skip
    assert (failed["state"], failed["last_error"]) == ("pending", "boom")
    assert failed["next"]["id"] == wanted.id
    assert failed["next"]["lease_expires_at"] == rfc3339(clock.now_ms() + 60_000)


async def test_release_puts_the_todo_back_with_the_attempt_refunded(store, clock) -> None:
    todo = await new(store)
    async with connect(store) as client:
        claimed = await call(client, "claim", id=todo.id)
        released = await call(client, "release", id=todo.id, lease_token=claimed["lease_token"], delay_seconds=10)
        hidden = await call(client, "claim_next")
        clock.advance(10)
        again = await call(client, "claim_next")
    assert (released["state"], released["attempt"], released["owner"]) == ("pending", 0, None)
    assert hidden["empty"] is True and again["todo"]["id"] == todo.id


async def test_a_stale_lease_token_is_refused_with_conflict_and_changes_nothing(store, clock) -> None:
    todo = await new(store)
    async with connect(store) as client:
        first = await call(client, "claim", id=todo.id, lease_seconds=10)
        clock.advance(11)
        second = await call(client, "claim", id=todo.id)  # takeover after the lapse
        texts = [
            await refused(client, "complete", id=todo.id, lease_token=first["lease_token"], result="late"),
            await refused(client, "heartbeat", id=todo.id, lease_token=first["lease_token"]),
            await refused(client, "fail", id=todo.id, lease_token=first["lease_token"]),
            await refused(client, "release", id=todo.id, lease_token=first["lease_token"]),
        ]
    assert all(text.startswith("conflict: ") for text in texts)
    current = await todos.get(store, todo.id)
    assert (current.state, current.attempt, current.result) == ("claimed", 2, None)
    assert second["lease_token"] != first["lease_token"]


async def test_create_for_hands_work_to_a_queue_once_per_idempotency_key(store) -> None:
    async with connect(store) as client:
        made = await call(client, "create_for", queue="review", title="Review PR 7", payload={"pr": 7},
                          kind="review", priority=3, idempotency_key="pr-7")  # fmt: skip
        again = await call(client, "create_for", queue="review", title="Review PR 7 again", idempotency_key="pr-7")
        missing = await refused(client, "create_for", title="nowhere")
    assert made["created"] is True and again["created"] is False
    assert again["todo"]["id"] == made["todo"]["id"] and again["todo"]["title"] == "Review PR 7"
    stored = await todos.get(store, made["todo"]["id"])
    assert (stored.queue, stored.payload, stored.kind, stored.priority) == ("review", {"pr": 7}, "review", 3)
    assert missing == "invalid_argument: give a queue or an assignee"


async def test_create_for_an_assignee_lands_on_its_first_queue_and_only_it_may_claim(store) -> None:
    from switchboard_local.core import agents

    reviewer = await agents.add(store, "reviewer", queues=["review", "triage"])
    async with connect(store) as anyone:
        made = await call(anyone, "create_for", assignee="reviewer", title="Look at this")
        not_yours = await refused(anyone, "claim", id=made["todo"]["id"])
        unknown = await refused(anyone, "create_for", assignee="ghost", title="t")
    async with connect(store, reviewer) as client:
        mine = await call(client, "claim_next")
    assert (made["todo"]["queue"], made["todo"]["assignee"]) == ("review", "reviewer")
    assert not_yours == "forbidden: todo 1 is assigned to 'reviewer'"
    assert unknown.startswith("invalid_argument: there is no agent named 'ghost'")
    assert mine["todo"]["id"] == made["todo"]["id"] and mine["todo"]["owner"] == "reviewer/s1"


async def test_list_events_pages_summaries_oldest_first_with_a_cursor(store) -> None:
    for n in range(3):
        await webhook(store, external_id=f"d{n}", type="push" if n == 1 else "pull_request")
    async with connect(store) as client:
        first = await call(client, "list_events", limit=2)
        rest = await call(client, "list_events", limit=2, cursor=first["next_cursor"])
        pushes = await call(client, "list_events", type="push")
    assert [e["external_id"] for e in first["events"]] == ["d0", "d1"]
    assert [e["external_id"] for e in rest["events"]] == ["d2"] and rest["next_cursor"] is None
    assert [e["external_id"] for e in pushes["events"]] == ["d1"]
    assert "body" not in first["events"][0] and first["events"][0]["verified"] is True


async def test_get_event_shows_redacted_headers_and_the_body_as_text_or_base64(store) -> None:
    text = await webhook(store, external_id="text")
    binary = await webhook(store, external_id="bin", body=b"\xff\x00raw")
    async with connect(store) as client:
        shown = await call(client, "get_event", id=text.event_id)
        raw = await call(client, "get_event", id=binary.event_id)
    assert shown["body"] == '{"action": "opened"}' and shown["body_encoding"] == "utf-8"
    assert shown["headers"]["X-Hub-Signature-256"] == "[redacted]"
    assert (raw["body"], raw["body_encoding"]) == (base64.b64encode(b"\xff\x00raw").decode(), "base64")


async def test_get_event_leaves_out_a_body_larger_than_the_payload_cap(store) -> None:
    from switchboard_local.core import settings

    await settings.set_value(store, "limits.max_payload", "1KiB")
    big = await webhook(store, external_id="big", body=b"x" * 1025)
    small = await webhook(store, external_id="small", body=b"x" * 1024)
    async with connect(store) as client:
        shown_big = await call(client, "get_event", id=big.event_id)
        shown_small = await call(client, "get_event", id=small.event_id)
    assert (shown_big["body"], shown_big["body_omitted"], shown_big["size"]) == (None, True, 1025)
    assert (shown_small["body"], shown_small["body_omitted"]) == ("x" * 1024, False)


async def test_replay_event_routes_a_stored_event_again(store) -> None:
    delivered = await webhook(store)
    async with connect(store) as client:
        replayed = await call(client, "replay_event", id=delivered.event_id)
        again = await call(client, "replay_event", id=delivered.event_id)
        missing = await refused(client, "replay_event", id=999)
    assert replayed["event_id"] == delivered.event_id and len(replayed["todo_ids"]) == 1
    assert replayed["todo_ids"][0] not in delivered.todo_ids
    assert again["todo_ids"] == replayed["todo_ids"]  # still live: found, not duplicated
    replay = await todos.get(store, replayed["todo_ids"][0])
    assert replay.event_id == delivered.event_id and replay.payload["replay"] is True
    assert missing == "not_found: event 999 does not exist"


async def test_queue_stats_counts_each_queue_by_state(store) -> None:
    await new(store, "a")
    done = await new(store, "a")
    await new(store, "b")
    claimed = await todos.claim(store, done.id, owner="w")
    await todos.complete(store, Lease(done.id, claimed.lease_token))
    async with connect(store) as client:
        stats = await call(client, "queue_stats")
    assert [(q["queue"], q["pending"], q["done"]) for q in stats["queues"]] == [("a", 1, 1), ("b", 1, 0)]


async def test_errors_start_with_a_stable_code_and_one_plain_sentence(store) -> None:
    async with connect(store) as client:
        texts = {
            "unknown todo": await refused(client, "get_todo", id=404),
            "unknown event": await refused(client, "get_event", id=404),
            "missing argument": await refused(client, "complete", id=1),
            "wrong type": await refused(client, "get_todo", id="four"),
            "unknown tool": await refused(client, "delete_everything"),
        }
    assert texts["unknown todo"] == "not_found: todo 404 does not exist"
    assert texts["unknown event"] == "not_found: event 404 does not exist"
    assert texts["missing argument"] == "invalid_argument: lease_token: Field required"
    assert texts["wrong type"].startswith("invalid_argument: id:") and "four" not in texts["wrong type"]
    assert texts["unknown tool"] == "not_found: there is no tool named 'delete_everything'"
    assert all(CODE.match(text) and "\n" not in text for text in texts.values())


async def test_an_unexpected_failure_is_answered_without_internal_details(store, monkeypatch) -> None:
    async def broken(*args, **kwargs):
        raise RuntimeError("disk at /secret/path exploded")

    monkeypatch.setattr(todos, "stats", broken)  # a fault that is hard to cause for real
    async with connect(store) as client:
        text = await refused(client, "queue_stats")
    assert text.startswith("internal_error: ") and "secret" not in text and "RuntimeError" not in text
