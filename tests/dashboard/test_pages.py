"""The pages' first paint (issue 28 §4): each page's HTML, as a plain GET answers it (no script
run), carries its data: a page is useful before or without its script, and a headless
screenshot shows the data, not "Loading…". The todos list shows each claimed todo's owner, a
zero count is never styled as an alarm, and an absent payload says so instead of `null`."""

from __future__ import annotations

import json

import pytest

from switchboard_local.core import events, queues, schedules, todos
from switchboard_local.core.events import NewEvent
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease

from support.html import Node, parse
from support.receiver import add_source
from support.signing import github, secret_for
from support.sql import ms, run

pytestmark = pytest.mark.anyio

ALARMS = {"hot", "bad", "failed"}  # the classes the style sheet paints red


def page(board, path: str, status: int = 200) -> Node:
    """The page at ``path`` as the server sends it: HTML, no script run."""
    answer = board.get(path)
    assert answer.status == status, (path, answer.status, answer.body[:500])
    assert answer.headers["content-type"].startswith("text/html")
    html = answer.body.decode()
    assert "Loading" not in html
    return parse(html)


def cell(row: Node, label: str) -> Node:
    return row.one("td", data_label=label)


async def make(store, queue="triage", title="a todo", **fields):
    todo, _ = await todos.create(store, NewTodo(queue=queue, title=title, **fields))
    return todo


async def dead_letter(store, queue="deploy", error="deploy refused: no credentials", title="Ship it"):
    made = await make(store, queue=queue, title=title, max_attempts=1)
    claimed = await todos.claim(store, made.id, owner="w")
    await todos.fail(store, Lease.of(claimed), error=error)
    return claimed.id


async def webhook_event(store, body: bytes, made=()):
    new = NewEvent(source="gh", family="webhook", type="issues", external_id="delivery-7", trust_mode="github",
                   verified=True, verify_detail="sha256 signature", content_type="application/json",
                   headers={"x-github-event": "issues", "x-hub-signature-256": "[redacted]"}, body=body)  # fmt: skip
    (ingested,) = await events.ingest_many(store, [(new, list(made))])
    return ingested


@pytest.mark.both_backends
async def test_the_queues_page_arrives_with_its_counts_and_latest_events(store, board):
    await make(store, title="a")
    claimed = await make(store, title="b")
    await todos.claim(store, claimed.id, owner="worker-7")
    await dead_letter(store)
    await webhook_event(store, b'{"action": "opened"}')

    doc = page(board, "/")

    row = doc.one("tr", data_queue="triage")
    assert [cell(row, name).text for name in ("Ready", "Delayed", "Claimed", "Dead")] == ["1", "0", "1", "0"]
    assert cell(doc.one("tr", data_queue="deploy"), "Dead").text == "1"
    assert doc.by_id("summary").text == "2 queues · 1 ready · 1 dead"
    event = doc.one("tr", data_event="1")
    assert cell(event, "Source").text == "gh" and cell(event, "Type").text == "issues"


@pytest.mark.both_backends
async def test_the_queues_page_shows_a_limited_queues_limit_and_how_close_it_is(store, board):
    for title in ("a", "b"):
        await make(store, queue="deploy", title=title)
    await make(store, title="plain")
    await queues.set_limit(store, "deploy", max_claimed=1, max_per_minute=5, by="op")
    await todos.claim_next(store, owner="w", queues=["deploy"])

    doc = page(board, "/")

    badges = [b.text for b in cell(doc.one("tr", data_queue="deploy"), "Queue").all("span", class_="limit")]
    assert badges == ["1/1 claimed", "1/5 a minute"]
    assert cell(doc.one("tr", data_queue="triage"), "Queue").all("span", class_="limit") == []


@pytest.mark.both_backends
async def test_the_todos_list_shows_each_claimed_todos_owner_and_its_assignee(store, board):
    held = await make(store, title="Fix the login page", assignee="ann")
    await todos.claim(store, held.id, owner="worker-7", agent="ann")
    waiting = await make(store, title="Write the docs")

    doc = page(board, "/todos")

    row = doc.one("tr", data_todo=str(held.id))
    assert cell(row, "Title").text == "Fix the login page"
    assert cell(row, "State").text == "claimed"
    assert cell(row, "Owner").text == "worker-7"
    assert cell(row, "Assignee").text == "ann"
    other = doc.one("tr", data_todo=str(waiting.id))
    assert cell(other, "Owner").text == "—" and cell(other, "Assignee").text == "—"


async def test_the_todos_page_filters_and_pages_on_the_server(store, board):
    first = await make(store, title="first")
    second = await make(store, title="second")
    third = await make(store, queue="deploy", title="third")

    def ids(doc: Node) -> list[int]:
        return [int(r.attrs["data-todo"]) for r in doc.by_id("todo-rows").all("tr")]

    assert ids(page(board, "/todos?queue=triage")) == [second.id, first.id]
    assert page(board, "/todos?queue=deploy").one("option", value="deploy").attrs.get("selected") == ""
    top = page(board, "/todos?limit=2")
    assert ids(top) == [third.id, second.id]
    older = top.one("a", id="more").attrs["href"]
    assert ids(page(board, older)) == [first.id]
    assert ids(page(board, "/todos?limit=1&rows=3")) == [third.id, second.id, first.id]


async def test_a_bad_filter_answers_400_naming_it_on_the_page(board):
    doc = page(board, "/todos?state=bogus", status=400)
    assert "state must be one of" in doc.by_id("todo-rows").text and "'bogus'" in doc.by_id("todo-rows").text


async def test_a_missing_todo_answers_404_with_its_message(board):
    assert "todo 404 does not exist" in page(board, "/todos/404", status=404).by_id("todo").text


@pytest.mark.both_backends
async def test_a_todo_page_arrives_with_its_facts_payload_result_and_attempts(store, board):
    made = await make(store, title="Bump the parser", payload={"message": "Bump the parser"}, kind="build")
    claimed = await todos.claim(store, made.id, owner="builder-1")
    await todos.complete(store, Lease.of(claimed), result={"status": "passed"})

    doc = page(board, f"/todos/{made.id}")

    assert doc.by_id("title").text == "Bump the parser done"
    assert json.loads(doc.by_id("payload").one("pre").raw_text()) == {"message": "Bump the parser"}
    assert json.loads(doc.by_id("result").one("pre").raw_text()) == {"status": "passed"}
    (attempt,) = doc.by_id("attempts").one("tbody").all("tr")
    assert cell(attempt, "Owner").text == "builder-1" and cell(attempt, "Outcome").text == "completed"


async def test_an_absent_payload_shows_as_absent_not_as_null(store, board):
    bare = await make(store, title="nothing attached")

    payload = page(board, f"/todos/{bare.id}").by_id("payload")

    assert payload.one(class_="absent").text == "no payload"
    assert "null" not in payload.text and payload.all("pre") == []


async def test_the_events_page_and_an_event_page_arrive_with_their_data(store, board):
    ingested = await webhook_event(store, b'{"action": "opened"}', made=[NewTodo(queue="triage", title="Triage it")])
    (made,) = ingested.todo_ids

    row = page(board, "/events?source=gh").one("tr", data_event=str(ingested.event_id))
    assert cell(row, "External id").text == "delivery-7" and cell(row, "Verified").text == "verified"

    doc = page(board, f"/events/{ingested.event_id}")
    assert doc.by_id("title").text == "gh · issues"
    assert cell(doc.by_id("produced").one("tr", data_todo=str(made)), "Title").text == "Triage it"
    assert json.loads(doc.by_id("body").one("pre").raw_text()) == {"action": "opened"}
    headers = {cell(r, "Header").text: cell(r, "Value").text for r in doc.by_id("headers").all("tr")}
    assert headers == {"x-github-event": "issues", "x-hub-signature-256": "[redacted]"}
    hex_view = page(board, f"/events/{ingested.event_id}?view=hex").by_id("body").text
    assert hex_view.startswith("00000000 7b 22 61 63")


async def test_the_dead_letters_page_arrives_with_its_groups(store, board):
    todo_id = await dead_letter(store)

    group = page(board, "/dead").one("section", data_queue="deploy")

    assert group.one("p", class_="error-line").text == "deploy refused: no credentials"
    assert "Ship it" in group.one("tr", data_todo=str(todo_id)).text


async def test_the_sources_page_arrives_with_sources_and_adapters(store, board):
    await add_source(store, "gh", "github", secret=secret_for("github"), queue="triage")

    doc = page(board, "/sources")

    row = doc.one("tr", data_source="gh")
    assert cell(row, "Kind").text == "github" and cell(row, "Health").text == "healthy"
    assert "stored 0" in cell(row, "Deliveries").text
    assert "No adapters" in doc.by_id("adapter-rows").text


async def test_the_sources_page_shows_each_schedule_s_last_and_next_tick(store, board, db_path):
    await schedules.add(store, "new-year", cron="0 0 1 1 *", tz="Asia/Tokyo")  # fired by nobody during the test
    run(db_path, f"UPDATE sources SET last_tick_at = {ms(db_path, 1_767_193_200_000)}")  # 2026-01-01 00:00 in Tokyo

    row = page(board, "/sources").one("tr", data_schedule="new-year")

    assert cell(row, "Cron").text == "0 0 1 1 * Asia/Tokyo"
    assert "2026-01-01T00:00:00+09:00" in cell(row, "Last tick").text
    assert "-01-01T00:00:00+09:00" in cell(row, "Next tick").text and "from now" in cell(row, "Next tick").text
    assert cell(row, "Health").text == "healthy"


async def test_a_zero_count_is_never_styled_as_an_alarm(store, board):
    await make(store, title="waiting")
    await dead_letter(store)
    await add_source(store, "gh", "github", secret=secret_for("github"), queue="triage")
    # One delivery refused (a wrong signature): that count is an alarm, the zeros beside it are not.
    body = b'{"action": "opened"}'
    headers = {"X-GitHub-Event": "issues", "X-GitHub-Delivery": "d-1", **github(body, "not-the-secret")}
    assert board.receiver.post("gh", body, headers).status == 401

    queues = page(board, "/")
    assert not cell(queues.one("tr", data_queue="triage"), "Dead").classes & ALARMS  # 0 dead
    assert "hot" in cell(queues.one("tr", data_queue="deploy"), "Dead").classes  # 1 dead
    badges = {
        b.text: b.classes for b in page(board, "/sources").one("tr", data_source="gh").all("span", class_="badge")
    }
    assert "bad" in badges["unverified 1"]
    for zero in ("stored 0", "duplicate 0", "too_large 0", "failed 0"):
        assert not badges[zero] & ALARMS, (zero, badges[zero])


async def test_a_value_from_the_database_is_shown_as_text_never_as_html(store, board):
    made = await make(
        store, title='<img src=x onerror="alert(1)"><b>bold</b>', payload={"html": "<script>x()</script>"}
    )

    for path in ("/todos", f"/todos/{made.id}"):
        main = page(board, path).one("main")
        assert main.all("img") == [] and main.all("b") == [] and main.all("script") == []
        assert '<img src=x onerror="alert(1)"><b>bold</b>' in main.text


@pytest.mark.both_backends
async def test_a_blocked_todo_shows_as_blocked_with_what_it_waits_for_and_its_queue_counts_it(store, board):
    build = await make(store, queue="builds", title="build")
    done = await make(store, queue="builds", title="lint")
    await todos.complete(store, Lease.of(await todos.claim(store, done.id, owner="w")), result={"ok": True})
    review = await make(store, queue="reviews", title="review", after=(build.id, done.id))

    doc = page(board, f"/todos/{review.id}")
    assert doc.one("span", title="waits for 1 todo not done").text == "blocked"
    rows = doc.by_id("dependencies").all("tr")[1:]
    assert [[c.text for c in r.all("td")] for r in rows] == [
        [str(build.id), "pending", "—"], [str(done.id), "done", '{"ok": true}']]  # fmt: skip

    queues = page(board, "/")
    assert cell(queues.one("tr", data_queue="reviews"), "Blocked").text == "1"
    assert cell(queues.one("tr", data_queue="reviews"), "Ready").text == "0"
