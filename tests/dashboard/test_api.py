"""The read API (issue 14 §2): every list, its filters and its paging, every detail, never a secret."""

from __future__ import annotations

import base64
import json

import pytest

from switchboard_local.core import events, schedules, sources, todos
from switchboard_local.core.events import NewEvent
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease

from support.receiver import add_source

pytestmark = pytest.mark.anyio


async def make(store, queue="triage", title="a todo", **fields):
    todo, _ = await todos.create(store, NewTodo(queue=queue, title=title, **fields))
    return todo


async def dead_letter(store, queue="triage", error="boom", title="doomed"):
    made = await make(store, queue=queue, title=title, max_attempts=1)
    claimed = await todos.claim(store, made.id, owner="w")
    await todos.fail(store, Lease.of(claimed), error=error)
    return claimed.id


async def event(store, body: bytes, *, source="gh", type="issues", external_id="e-1", content_type=None, made=()):
    new = NewEvent(source=source, family="webhook", type=type, external_id=external_id, trust_mode="github",
                   verified=True, verify_detail="sha256 signature", content_type=content_type,
                   headers={"x-github-event": type, "x-hub-signature-256": "[redacted]"}, body=body)  # fmt: skip
    (ingested,) = await events.ingest_many(store, [(new, list(made))])
    return ingested


# ---------------------------------------------------------------- queues


@pytest.mark.both_backends
async def test_queues_lists_each_queue_with_its_counts(store, board):
    await make(store, title="a")
    await make(store, title="b", delay=60)
    (row,) = board.get_json("/api/queues")["items"]
    assert row["queue"] == "triage"
    assert (row["ready"], row["delayed"], row["claimed"], row["dead"], row["paused"]) == (1, 1, 0, 0, False)
    assert row["oldest_ready_age_seconds"] is not None


async def test_queues_count_the_last_hour_per_minute_and_done(store, board):
    await make(store, title="a")
    claimed = await todos.claim_next(store, owner="w")
    await todos.complete(store, Lease.of(claimed))
    await make(store, title="b")
    (row,) = board.get_json("/api/queues")["items"]
    assert len(row["created_per_minute"]) == 60 and len(row["finished_per_minute"]) == 60
    assert sum(row["created_per_minute"]) == 2 and row["created_per_minute"][-1] == 2  # the newest minute is last
    assert sum(row["finished_per_minute"]) == 1
    assert row["done_last_hour"] == 1


# ---------------------------------------------------------------- todos


@pytest.mark.both_backends
async def test_todos_filter_by_queue_state_kind_assignee_and_title_text(store, board):
    a = await make(store, queue="triage", title="Fix the login page", kind="bug", assignee="ann")
    b = await make(store, queue="triage", title="Write docs", kind="docs")
    c = await make(store, queue="deploy", title="Ship the LOGIN fix", kind="bug")
    d = await dead_letter(store, queue="deploy")

    def ids(query: str) -> list[int]:
        return [t["id"] for t in board.get_json(f"/api/todos?{query}")["items"]]

    assert ids("") == [d, c.id, b.id, a.id]
    assert ids("queue=triage") == [b.id, a.id]
    assert ids("state=failed") == [d]
    assert ids("state=pending&queue=deploy") == [c.id]
    assert ids("kind=bug") == [c.id, a.id]
    assert ids("assignee=ann") == [a.id]
    assert ids("q=login") == [c.id, a.id]  # anywhere in the title, any case
    e = await make(store, queue="deploy", title="Reach 100% coverage")
    assert ids("q=100%25") == [e.id]  # LIKE's wildcards are searched for as themselves
    assert ids("q=10_") == [] and ids("q=%25") == [e.id]


async def test_a_todo_in_a_list_has_the_mcp_rows_fields_without_its_payload(store, board):
    await make(store, payload={"big": "x" * 100})
    (row,) = board.get_json("/api/todos")["items"]
    assert "payload" not in row and "result" not in row
    assert row["payload_size"] == len(json.dumps({"big": "x" * 100}, separators=(",", ":")))
    for name in ("id", "queue", "title", "kind", "state", "dead_letter", "priority", "assignee", "attempt",
                 "max_attempts", "owner", "lease_expires_at", "visible_at", "event_id", "last_error",
                 "created_at", "updated_at"):  # fmt: skip
        assert name in row, name


async def test_todos_page_with_the_cursor_each_page_answers(store, board):
    made = [(await make(store, title=f"t{i}")).id for i in range(5)]
    first = board.get_json("/api/todos?limit=2")
    second = board.get_json(f"/api/todos?limit=2&cursor={first['next_cursor']}")
    third = board.get_json(f"/api/todos?limit=2&cursor={second['next_cursor']}")
    seen = [t["id"] for page in (first, second, third) for t in page["items"]]
    assert seen == made[::-1]
    assert third["next_cursor"] is None


@pytest.mark.parametrize(
    ("query", "named"),
    [("state=lost", "state"), ("limit=0", "limit"), ("limit=x", "limit"), ("cursor=abc", "cursor")],
)
async def test_a_bad_filter_is_refused_naming_it(board, query, named):
    answer = board.get(f"/api/todos?{query}")
    assert answer.status == 400
    assert answer.json()["error"]["code"] == "invalid_argument"
    assert named in answer.json()["error"]["message"]


@pytest.mark.both_backends
async def test_a_todo_shows_payload_result_error_attempts_event_and_key(store, board):
    ingested = await event(store, b'{"n": 1}', made=[NewTodo(queue="triage", title="from an event", payload={"n": 1},
                                                            idempotency_key="k-1", max_attempts=2)])  # fmt: skip
    (todo_id,) = ingested.todo_ids
    first = await todos.claim_next(store, owner="worker-1")
    await todos.fail(store, Lease.of(first), error="timeout talking to the API")
    shown = board.get_json(f"/api/todos/{todo_id}")
    assert shown["payload"] == {"n": 1}
    assert shown["idempotency_key"] == "k-1"
    assert shown["last_error"] == "timeout talking to the API"
    assert shown["result"] is None
    (attempt,) = shown["attempts"]
    assert (attempt["attempt"], attempt["owner"], attempt["outcome"]) == (1, "worker-1", "failed")
    assert attempt["claimed_at"] and attempt["ended_at"]
    assert shown["event"]["id"] == ingested.event_id and shown["event"]["source"] == "gh"


async def test_an_unknown_todo_is_404(board):
    assert board.get("/api/todos/999").status == 404
    assert board.get("/api/todos/nope").status == 404
    assert board.get("/api/todos/9223372036854775808").status == 404  # past what an id can be


# '²' passes str.isdigit() (then int() refuses it); int() reads '١' (Arabic-Indic) and '１' (fullwidth) as 1.
OTHER_DIGITS = ["%C2%B2", "%D9%A1", "%EF%BC%91"]


@pytest.mark.parametrize("digits", OTHER_DIGITS)
async def test_an_id_in_other_digits_than_ascii_names_nothing(store, board, digits):
    todo = await make(store)
    ingested = await event(store, b"{}", made=[])
    assert (todo.id, ingested.event_id) == (1, 1)
    for path in (f"/api/todos/{digits}", f"/api/events/{digits}"):
        answer = board.get(path)
        assert answer.status == 404 and answer.json()["error"]["code"] == "not_found", path


@pytest.mark.parametrize("digits", OTHER_DIGITS)
@pytest.mark.parametrize("name", ["limit", "cursor"])
async def test_a_number_in_other_digits_than_ascii_is_refused_naming_it(store, board, digits, name):
    await make(store)
    answer = board.get(f"/api/todos?{name}={digits}")
    assert answer.status == 400 and name in answer.json()["error"]["message"]


# ---------------------------------------------------------------- events


@pytest.mark.both_backends
async def test_events_filter_by_source_and_type_and_page(store, board):
    a = (await event(store, b"{}", source="gh", type="issues", external_id="1")).event_id
    b = (await event(store, b"{}", source="gh", type="push", external_id="2")).event_id
    c = (await event(store, b"{}", source="stripe", type="charge", external_id="3")).event_id

    def ids(query: str) -> list[int]:
        return [e["id"] for e in board.get_json(f"/api/events?{query}")["items"]]

    assert ids("") == [c, b, a]
    assert ids("source=gh") == [b, a]
    assert ids("type=push") == [b]
    assert ids("source=gh&type=charge") == []
    first = board.get_json("/api/events?limit=2")
    assert [e["id"] for e in first["items"]] == [c, b]
    assert ids(f"limit=2&cursor={first['next_cursor']}") == [a]


async def test_an_event_shows_redacted_headers_verification_and_the_todos_it_made(store, board):
    ingested = await event(store, b'{"action": "opened"}', content_type="application/json",
                           made=[NewTodo(queue="triage", title="look")])  # fmt: skip
    shown = board.get_json(f"/api/events/{ingested.event_id}")
    assert shown["headers"]["x-hub-signature-256"] == "[redacted]"
    assert shown["verified"] is True and shown["verify_detail"] == "sha256 signature"
    assert shown["body_view"] == "json" and shown["body_json"] == {"action": "opened"}
    assert [t["id"] for t in shown["todos"]] == list(ingested.todo_ids)


async def test_an_event_body_is_shown_as_text_or_base64_when_it_is_not_json(store, board):
    text = (await event(store, b"hello <b>there</b>", external_id="t")).event_id
    binary = (await event(store, b"\xff\x00\x01", external_id="b")).event_id
    as_text = board.get_json(f"/api/events/{text}")
    assert (as_text["body_view"], as_text["body_text"], as_text["body_json"]) == ("text", "hello <b>there</b>", None)
    as_bytes = board.get_json(f"/api/events/{binary}")
    assert as_bytes["body_view"] == "base64" and base64.b64decode(as_bytes["body_base64"]) == b"\xff\x00\x01"


# ---------------------------------------------------------------- sources, adapters, dead letters


@pytest.mark.both_backends
async def test_sources_show_kind_state_last_delivery_and_counts_never_a_secret(store, board):
    await add_source(store, "gh", "github", secret="s3cret-value-never-shown", queue="triage")
    await event(store, b"{}", source="gh")
    (shown,) = board.get_json("/api/sources")["items"]
    assert (shown["name"], shown["kind"], shown["enabled"], shown["events"]) == ("gh", "github", True, 1)
    assert shown["last_received_at"] is not None
    assert set(shown["deliveries"]) == {"stored", "duplicate", "unverified", "too_large", "failed"}
    assert "s3cret-value-never-shown" not in board.get("/api/sources").body.decode()


async def test_adapters_show_health_failures_and_lag(store, board):
    await sources.add(store, "jobs", family="queue", kind="stream", trust_mode="queue",
                      config={"mode": "stream", "key": "jobs", "url_env": "NOT_SET_FOR_THIS_TEST"})  # fmt: skip
    await sources.record_health(store, "jobs", error="connection refused")  # (the server's consumer fails too)
    (shown,) = board.get_json("/api/adapters")["items"]
    assert shown["name"] == "jobs" and shown["consecutive_failures"] >= 1
    assert shown["last_error"]
    assert shown["waiting"] is None and "NOT_SET_FOR_THIS_TEST" in shown["lag_error"]


async def test_schedules_show_cron_zone_catch_up_and_their_last_and_next_tick(store, board):
    await schedules.add(store, "new-year", cron="0 0 1 1 *", tz="Asia/Tokyo", catch_up="none", queue="plans")
    (shown,) = board.get_json("/api/schedules")["items"]
    assert (shown["name"], shown["cron"], shown["tz"], shown["catch_up"], shown["queue"]) == (
        "new-year", "0 0 1 1 *", "Asia/Tokyo", "none", "plans")  # fmt: skip
    assert (shown["last_tick"], shown["events"]) == (None, 0)
    assert shown["next_tick_local"].endswith("-01-01T00:00:00+09:00") and shown["next_tick"].endswith("-12-31T15:00:00.000Z")


async def test_dead_letters_are_grouped_by_queue_and_last_error(store, board):
    a = await dead_letter(store, error="boom")
    b = await dead_letter(store, error="boom")
    c = await dead_letter(store, error="bang")
    d = await dead_letter(store, queue="deploy", error="boom")
    groups = board.get_json("/api/dead")["items"]
    assert [(g["queue"], g["last_error"], g["count"]) for g in groups] == [
        ("deploy", "boom", 1), ("triage", "boom", 2), ("triage", "bang", 1)]  # fmt: skip
    assert (groups[1]["first_id"], groups[1]["last_id"]) == (a, b)
    assert groups[2]["first_id"] == c and groups[0]["first_id"] == d
