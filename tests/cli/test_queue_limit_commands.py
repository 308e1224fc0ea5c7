"""`queue limit` (issue 31 §4): its text and JSON, its refusals, and the limit in
`queue list`, `stats` and a refused `todo claim`. The rules themselves, claim by
claim, are tested in tests/core/test_queue_limits.py."""

from __future__ import annotations

import json

import pytest

from support.cli import as_json

LIMIT_FIELDS = {"queue", "max_claimed", "max_per_minute", "claimed", "claims_last_minute"}


def create(cli, queue: str, title: str = "t") -> dict:
    return as_json(cli, "todo", "create", "--queue", queue, "--title", title)


@pytest.mark.both_backends
def test_queue_limit_sets_both_limits_and_says_how_close_the_queue_is(cli) -> None:
    create(cli, "deploy")
    as_json(cli, "todo", "claim", "--queue", "deploy")
    result = cli("queue", "limit", "deploy", "--max-claimed", "1", "--max-per-minute", "30")
    assert (result.code, result.out) == (
        0,
        "queue deploy: at most 1 claimed at once (1 now); at most 30 claims a minute (0 in the last minute)\n",
    )
    answer = as_json(cli, "queue", "limit", "deploy")
    assert answer == {"queue": "deploy", "max_claimed": 1, "max_per_minute": 30, "claimed": 1,
                      "claims_last_minute": 0}  # fmt: skip


def test_queue_limit_clear_removes_both(cli) -> None:
    cli("queue", "limit", "q", "--max-claimed", "2", "--max-per-minute", "5")
    result = cli("queue", "limit", "q", "--clear")
    assert (result.code, result.out) == (0, "queue q has no limit\n")
    assert set(as_json(cli, "queue", "limit", "q", "--clear")) == LIMIT_FIELDS


@pytest.mark.parametrize(
    "args, message",
    [
        (["--max-claimed", "0"], "--max-claimed must be between 1 and 1000000, got 0"),
        (["--max-per-minute", "2000000"], "--max-per-minute must be between 1 and 1000000, got 2000000"),
        (["--clear", "--max-claimed", "3"], "--clear removes both limits"),
    ],
)
def test_a_bad_limit_is_refused_with_exit_2_naming_it(cli, args, message) -> None:
    result = cli("queue", "limit", "q", *args, "--json")
    assert result.code == 2
    assert message in json.loads(result.out)["error"]["message"]
    assert as_json(cli, "queue", "limit", "q")["max_claimed"] is None


def test_queue_list_and_stats_show_the_limit_and_how_close_the_queue_is(cli) -> None:
    create(cli, "deploy")
    create(cli, "deploy")
    cli("queue", "limit", "deploy", "--max-claimed", "1", "--max-per-minute", "10")
    as_json(cli, "todo", "claim", "--queue", "deploy")
    listed = as_json(cli, "queue", "list")["queues"]
    assert [(q["queue"], q["claimed"], q["max_claimed"], q["claims_last_minute"], q["max_per_minute"], q["ready"])
            for q in listed] == [("deploy", 1, 1, 1, 10, 1)]  # fmt: skip
    text = cli("queue", "list").out.splitlines()
    assert text[1].endswith("1/1 claimed, 1/10 a minute")
    stats = cli("stats").out.splitlines()
    assert stats[0].split()[-1] == "LIMIT" and stats[1].endswith("1/1 claimed, 1/10 a minute")
    assert as_json(cli, "stats")["queues"][0]["max_per_minute"] == 10


def test_todo_claim_by_id_at_the_limit_is_refused_naming_the_limit(cli) -> None:
    create(cli, "deploy")
    waiting = create(cli, "deploy")
    cli("queue", "limit", "deploy", "--max-claimed", "1")
    as_json(cli, "todo", "claim", "--queue", "deploy")
    result = cli("todo", "claim", str(waiting["id"]))
    assert result.code == 1
    assert result.err == (
        f"switchboard-local: conflict: todo {waiting['id']} is on queue 'deploy', which is at its limit: "
        "1 claimed of --max-claimed 1; it waits, ready, until the queue has room\n"
    )
    assert json.loads(cli("todo", "claim", "--queue", "deploy", "--json").out) is None
