"""`todo create --after/--after-key`: a todo that waits for others is blocked (shown so in
`todo list`, `todo show`, `stats` and `queue list`) until they are done."""

from __future__ import annotations

import pytest

from support.cli import as_json


def created(cli, title: str, *options: str, queue: str = "q") -> dict:
    return as_json(cli, "todo", "create", "--queue", queue, "--title", title, *options)


def complete(cli, todo_id: int, result: str = "null") -> None:
    token = as_json(cli, "todo", "claim", str(todo_id))["lease_token"]
    assert cli("todo", "complete", str(todo_id), "--token", token, "--result", result).code == 0


@pytest.mark.both_backends
def test_create_after_makes_a_blocked_todo_that_says_what_it_waits_for(cli) -> None:
    build = created(cli, "build", "--key", "build-7")["id"]
    lint = created(cli, "lint")["id"]
    made = cli("todo", "create", "--queue", "reviews", "--title", "review", "--after", str(lint), "--after-key", "build-7")
    assert made.code == 0 and made.out.strip().endswith("review (blocked: waits for 2 todos)")
    review = as_json(cli, "todo", "list", "--blocked")[0]
    assert (review["state"], review["blocked"], review["blocked_by"], review["waits_for"]) == ("pending", True, 2, 2)
    listed = cli("todo", "list", "--queue", "reviews").out.splitlines()[1].split()
    assert listed[1] == "blocked" and listed[5:8] == ["for", "2", "todos"]
    shown = cli("todo", "show", str(review["id"])).out
    assert "  state        blocked" in shown
    assert f"  waits for    todo {build} (pending)" in shown and f"  waits for    todo {lint} (pending)" in shown


@pytest.mark.both_backends
def test_stats_and_queue_list_count_blocked_todos_apart_from_ready_and_delayed(cli) -> None:
    first = created(cli, "first")["id"]
    created(cli, "second", "--after", str(first), queue="later")
    stats = {q["queue"]: q for q in as_json(cli, "stats")["queues"]}
    assert (stats["later"]["ready"], stats["later"]["delayed"], stats["later"]["blocked"], stats["later"]["pending"]) == (0, 0, 1, 1)
    header, row = [line.split() for line in cli("stats").out.splitlines()[:3] if "later" in line or "QUEUE" in line]
    assert header[:5] == ["QUEUE", "READY", "DELAYED", "BLOCKED", "CLAIMED"] and row[:5] == ["later", "0", "0", "1", "0"]
    header, *rows = [line.split() for line in cli("queue", "list").out.splitlines()]
    assert header[:6] == ["QUEUE", "PAUSED", "READY", "DELAYED", "BLOCKED", "CLAIMED"]
    assert ["later", "no", "0", "0", "1", "0"] in [r[:6] for r in rows]


@pytest.mark.both_backends
def test_the_last_dependency_done_readies_the_todo_and_show_gives_the_results(cli) -> None:
    first = created(cli, "first")["id"]
    waiting = created(cli, "waiting", "--after", str(first))["id"]
    complete(cli, first, '{"sha": "abc"}')
    claimed = as_json(cli, "todo", "claim", str(waiting))
    assert claimed["dependencies"] == [{"id": first, "state": "done", "result": {"sha": "abc"}}]
    assert f'  waits for    todo {first} (done)  result {{"sha": "abc"}}' in cli("todo", "show", str(waiting)).out


@pytest.mark.both_backends
def test_create_after_an_unknown_todo_fails_naming_it_and_writes_nothing(cli) -> None:
    refused = cli("todo", "create", "--queue", "q", "--title", "x", "--after", "404")
    assert refused.code != 0 and "todo 404 does not exist" in refused.err
    assert as_json(cli, "todo", "list") == []


@pytest.mark.both_backends
def test_create_after_with_a_delay_is_refused(cli) -> None:
    first = created(cli, "first")["id"]
    refused = cli("todo", "create", "--queue", "q", "--title", "x", "--after", str(first), "--delay", "5")
    assert refused.code != 0 and "a todo that waits for others cannot also be delayed" in refused.err
