"""The `queue` commands: pause, resume, list (issue 12 §2), and what a pause
does to `todo claim`, `--claim-next` and `stats`.

The lifecycle under a pause, verb by verb, is tested in tests/core/test_queues.py;
here: each command's text and JSON, and that every claiming command respects it.
"""

from __future__ import annotations

import json

import pytest

from support.cli import as_json

PAUSE_FIELDS = {"queue", "paused", "paused_at", "paused_by", "changed", "has_todos"}


def create(cli, queue: str, title: str = "t") -> dict:
    return as_json(cli, "todo", "create", "--queue", queue, "--title", title)


@pytest.mark.both_backends
def test_pause_says_todos_still_arrive_and_resume_says_they_can_be_claimed(cli) -> None:
    create(cli, "review")
    paused = cli("queue", "pause", "review", "--by", "alice")
    assert paused.code == 0
    assert paused.out == "paused queue review: todos still arrive, none is claimed until 'queue resume review'\n"
    again = cli("queue", "pause", "review")
    assert (
        again.code == 0 and again.out.startswith("queue review was paused already, since ") and "by alice" in again.out
    )
    resumed = cli("queue", "resume", "review")
    assert (resumed.code, resumed.out) == (0, "resumed queue review: its todos can be claimed again\n")
    assert cli("queue", "resume", "review").out == "queue review was not paused\n"


def test_pausing_a_queue_with_no_todos_is_allowed_and_says_so(cli) -> None:
    result = cli("queue", "pause", "later", "--by", "op")
    assert result.code == 0 and result.out.endswith("\nlater has no todos yet\n")
    answer = as_json(cli, "queue", "pause", "later")
    assert set(answer) == PAUSE_FIELDS
    assert (answer["paused"], answer["changed"], answer["has_todos"], answer["paused_by"]) == (True, False, False, "op")


def test_pause_and_resume_answer_json(cli) -> None:
    create(cli, "q")
    paused = as_json(cli, "queue", "pause", "q", "--by", "op")
    assert set(paused) == PAUSE_FIELDS
    assert (paused["queue"], paused["paused"], paused["changed"], paused["has_todos"]) == ("q", True, True, True)
    assert paused["paused_at"].endswith("Z")
    resumed = as_json(cli, "queue", "resume", "q")
    assert resumed == {"queue": "q", "paused": False, "paused_at": None, "paused_by": None, "changed": True,
                       "has_todos": True}  # fmt: skip


# Each command that claims, asked to claim from the paused queue "held".
CLAIMS = {
    "todo claim": ("todo", "claim"),
    "todo claim --queue": ("todo", "claim", "--queue", "held"),
    "todo claim --queue --queue": ("todo", "claim", "--queue", "held", "--queue", "other"),
}


@pytest.mark.both_backends
@pytest.mark.parametrize("args", CLAIMS.values(), ids=CLAIMS.keys())
def test_todo_claim_takes_nothing_from_a_paused_queue(cli, args) -> None:
    create(cli, "held")
    cli("queue", "pause", "held")
    result = cli(*args, "--json")
    assert (result.code, json.loads(result.out)) == (0, None)
    cli("queue", "resume", "held")
    assert as_json(cli, *args)["queue"] == "held"


def test_todo_claim_by_id_on_a_paused_queue_is_refused_saying_so(cli) -> None:
    todo = create(cli, "held")
    cli("queue", "pause", "held")
    result = cli("todo", "claim", str(todo["id"]))
    assert result.code == 1
    assert result.err == (
        f"switchboard-local: conflict: todo {todo['id']} is on queue 'held', which is paused: "
        "nothing is claimed from it until it is resumed\n"
    )


@pytest.mark.parametrize("verb", ["complete", "fail"])
@pytest.mark.parametrize("queues", [(), ("--queue", "held")], ids=["any queue", "its queue"])
def test_claim_next_after_finishing_takes_nothing_from_a_paused_queue(cli, verb, queues) -> None:
    work = create(cli, "work")
    claimed = as_json(cli, "todo", "claim", str(work["id"]))
    create(cli, "held")
    cli("queue", "pause", "held")
    finished = as_json(cli, "todo", verb, str(work["id"]), "--token", claimed["lease_token"], "--claim-next", *queues)
    assert finished["todo"]["id"] == work["id"] and finished["next"] is None


def test_a_lease_held_on_a_paused_queue_can_still_be_completed(cli) -> None:
    todo = create(cli, "held")
    claimed = as_json(cli, "todo", "claim", str(todo["id"]))
    cli("queue", "pause", "held")
    heartbeat = as_json(cli, "todo", "heartbeat", str(todo["id"]), "--token", claimed["lease_token"])
    assert heartbeat["state"] == "claimed"
    assert as_json(cli, "todo", "complete", str(todo["id"]), "--token", claimed["lease_token"])["state"] == "done"


def test_stats_show_paused_per_queue(cli) -> None:
    create(cli, "a")
    create(cli, "b")
    cli("queue", "pause", "b")
    stats = as_json(cli, "stats")["queues"]
    assert [(s["queue"], s["pending"], s["paused"]) for s in stats] == [("a", 1, False), ("b", 1, True)]
    lines = cli("stats").out.splitlines()
    assert lines[0].split()[-2:] == ["PAUSED", "LIMIT"]
    assert lines[1].split()[-1] != "paused" and lines[2].split()[-1] == "paused"


def test_queue_list_shows_each_queue_with_todos_or_paused_with_counts(cli) -> None:
    create(cli, "a")
    create(cli, "b")
    cli("queue", "pause", "b", "--by", "op")
    cli("queue", "pause", "empty", "--by", "op")
    listed = as_json(cli, "queue", "list")["queues"]
    assert [(q["queue"], q["paused"], q["paused_by"], q["pending"]) for q in listed] == [
        ("a", False, None, 1),
        ("b", True, "op", 1),
        ("empty", True, "op", 0),
    ]
    assert listed[0]["paused_at"] is None and listed[1]["paused_at"].endswith("Z")
    text = cli("queue", "list").out.splitlines()
    assert text[0].split() == ["QUEUE", "PAUSED", "READY", "DELAYED", "BLOCKED", "CLAIMED", "DONE", "DEAD", "CANCELLED",
                               "LIMIT"]  # fmt: skip
    assert text[1].split()[:3] == ["a", "no", "1"]
    assert text[2].split()[:2] == ["b", "since"] and " by op " in text[2]


def test_queue_list_with_no_queues(cli) -> None:
    assert cli("queue", "list").out == "no queues\n"
    assert as_json(cli, "queue", "list") == {"queues": []}


@pytest.mark.parametrize("command", ["pause", "resume"])
def test_a_queue_name_that_is_not_one_line_is_refused_with_exit_2(cli, command) -> None:
    result = cli("queue", command, "a\nb", "--json")
    assert result.code == 2 and json.loads(result.out)["error"]["code"] == "invalid_argument"
