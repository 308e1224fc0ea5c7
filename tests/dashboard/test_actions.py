"""The dashboard's actions (issue 14 §1 "Dead letters", "Events"): each one core verb, each in the audit trail."""

from __future__ import annotations

import json

import pytest

from switchboard_local.core import events, todos
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease

from support.receiver import add_source
from support.signing import github, secret_for
from support.sql import rows

pytestmark = pytest.mark.anyio


async def make(store, queue="triage", title="a todo", **fields):
    todo, _ = await todos.create(store, NewTodo(queue=queue, title=title, **fields))
    return todo


async def dead_letter(store, queue="triage", error="boom"):
    made = await make(store, queue=queue, max_attempts=1)
    claimed = await todos.claim(store, made.id, owner="w")
    await todos.fail(store, Lease.of(claimed), error=error)
    return made.id


def audit(db_path, action: str) -> list[dict]:
    """The audit trail's records of ``action``, oldest first."""
    found = rows(db_path, "SELECT body FROM events WHERE source = 'operator' AND type = ? ORDER BY id", (action,))
    return [json.loads(body) for (body,) in found]


def state(db_path, todo_id: int) -> str:
    ((found,),) = rows(db_path, "SELECT state FROM todos WHERE id = ?", (todo_id,))
    return found


@pytest.mark.both_backends
async def test_redrive_sends_a_dead_letter_back_to_pending_and_is_audited(store, board, db_path):
    todo_id = await dead_letter(store)
    answer = board.act(f"/api/todos/{todo_id}/redrive")
    assert answer.status == 200 and answer.json()["state"] == "pending"
    assert state(db_path, todo_id) == "pending"
    (record,) = audit(db_path, "todo.redrive")
    assert record["subject"] == todo_id and record["by"].startswith("dashboard")


async def test_redriving_a_todo_that_is_no_dead_letter_is_a_conflict(store, board):
    todo = await make(store)
    answer = board.act(f"/api/todos/{todo.id}/redrive")
    assert answer.status == 409 and answer.json()["error"]["code"] == "conflict"


async def test_a_dead_letter_group_is_redriven_whole_and_only_it(store, board, db_path):
    boom = [await dead_letter(store, error="boom") for _ in range(3)]
    bang = await dead_letter(store, error="bang")
    answer = board.act("/api/dead/redrive", {"queue": "triage", "last_error": "boom"})
    assert answer.status == 200 and answer.json() == {"matched": 3, "redriven": 3, "skipped": 0}
    assert [state(db_path, i) for i in boom] == ["pending"] * 3
    assert state(db_path, bang) == "failed"
    (record,) = audit(db_path, "todo.redrive")
    assert record["ids"] == boom and record["last_error"] == "boom"


async def test_cancel_cancels_a_pending_todo_with_its_reason_and_is_audited(store, board, db_path):
    todo = await make(store)
    answer = board.act(f"/api/todos/{todo.id}/cancel", {"reason": "not needed"})
    assert answer.status == 200 and answer.json()["cancel_reason"] == "not needed"
    assert state(db_path, todo.id) == "cancelled"
    (record,) = audit(db_path, "todo.cancel")
    assert record["subject"] == todo.id and record["reason"] == "not needed"


async def test_release_takes_a_claimed_todo_back_without_its_token_and_is_audited(store, board, db_path):
    todo = await make(store)
    await todos.claim(store, todo.id, owner="stuck-worker")
    answer = board.act(f"/api/todos/{todo.id}/release")
    assert answer.status == 200 and answer.json()["state"] == "pending"
    (record,) = audit(db_path, "todo.release")
    assert record["holder"] == "stuck-worker"


async def test_replay_routes_a_stored_event_again_and_is_audited(store, board, db_path):
    await add_source(store, "gh", "github", secret=secret_for("github"), queue="triage")
    body = json.dumps({"action": "opened"}).encode()
    headers = {"X-GitHub-Event": "issues", "X-GitHub-Delivery": "d-1",
               "Content-Type": "application/json"} | github(body, secret_for("github"))  # fmt: skip
    event_id = board.receiver.post("gh", body, headers).json()["event_id"]
    answer = board.act(f"/api/events/{event_id}/replay")
    assert answer.status == 200
    replayed = answer.json()["todos"]
    assert len(replayed) == 1
    assert replayed[0] in [t.id for t in await events.todos_of_event(store, event_id)]
    (record,) = audit(db_path, "event.replay")
    assert record["subject"] == event_id and record["todos"] == replayed


async def test_purge_deletes_a_queue_s_finished_todos_of_one_state_and_is_audited(store, board, db_path):
    dead = await dead_letter(store)
    live = await make(store)
    answer = board.act("/api/queues/triage/purge", {"state": "failed"})
    assert answer.status == 200 and answer.json()["purged"] == 1
    assert rows(db_path, "SELECT id FROM todos ORDER BY id") == [(live.id,)]
    (record,) = audit(db_path, "todo.purge")
    assert record["first_id"] == dead


async def test_pause_and_resume_a_queue_are_audited(store, board, db_path):
    await make(store)
    assert board.act("/api/queues/triage/pause").json()["paused"] is True
    assert board.get_json("/api/queues")["items"][0]["paused"] is True
    assert board.act("/api/queues/triage/resume").json()["paused"] is False
    assert len(audit(db_path, "queue.pause")) == 1 and len(audit(db_path, "queue.resume")) == 1


@pytest.mark.parametrize(
    ("path", "body", "named"),
    [
        ("/api/dead/redrive", {"last_error": "boom"}, "queue"),
        ("/api/queues/triage/purge", {}, "state"),
        ("/api/queues/triage/purge", {"state": "pending"}, "state"),
        ("/api/todos/1/cancel", {"why": "x"}, "why"),
        ("/api/todos/1/cancel", [1, 2], "JSON object"),
    ],
)
async def test_an_action_with_bad_arguments_is_refused_naming_what_is_wrong(store, board, path, body, named):
    await make(store)
    answer = board.act(path, body)
    assert answer.status == 400
    assert named in answer.json()["error"]["message"]


async def test_actions_are_posts_only(store, board):
    todo_id = await dead_letter(store)
    assert board.get(f"/api/todos/{todo_id}/redrive").status == 405
