"""The audit trail (issue 12 §4): every operator action is an `operator` event, never holding a secret."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from switchboard_local.cli.common import operator

from support.cli import as_json
from support.sql import rows

SECRET = "s3cr3t-never-shown"
REDIS_PASSWORD = "hunter2-never-shown"


def audit(db_path: Path) -> list[dict]:
    """The operator events' bodies, oldest first, read from the file."""
    found = rows(db_path, "SELECT family, trust_mode, body FROM events WHERE source = 'operator' ORDER BY id")
    assert all(family == "operator" and trust == "operator" for family, trust, _ in found)
    return [json.loads(bytes(body)) for _, _, body in found]


def dead_letter(cli) -> int:
    todo = as_json(cli, "todo", "create", "--queue", "q", "--title", "t", "--max-attempts", "1")
    claimed = as_json(cli, "todo", "claim", "--queue", "q")
    as_json(cli, "todo", "fail", str(claimed["id"]), "--token", claimed["lease_token"], "--error", "boom")
    return todo["id"]


def test_every_operator_action_is_recorded_with_who_what_and_on_what(cli, db_path: Path) -> None:
    steps = [
        (("source", "add", "gh", "--kind", "github", "--secret", SECRET), "source.add", "gh"),
        (("source", "disable", "gh"), "source.disable", "gh"),
        (("source", "enable", "gh"), "source.enable", "gh"),
        (("source", "rotate", "gh", "--secret", SECRET + "-new"), "source.rotate_secret", "gh"),
        (("source", "retire-secret", "gh"), "source.retire_secret", "gh"),
        (("rule", "add", "--source", "gh", "--queue", "review"), "rule.add", 1),
        (("rule", "add", "--source", "gh", "--drop"), "rule.add", 2),
        (("rule", "move", "2", "--to", "1"), "rule.move", 2),
        (("rule", "remove", "1"), "rule.remove", 1),
        (("adapter", "add", "orders", "--redis-url", f"redis://:{REDIS_PASSWORD}@127.0.0.1:6399/0", "--mode", "stream",
          "--key", "orders"), "source.add", "orders"),  # fmt: skip
        (("adapter", "remove", "orders"), "source.remove", "orders"),
        (("agent", "add", "reviewer", "--queue", "review", "--owner", "alice"), "agent.add", "reviewer"),
        (("agent", "remove", "reviewer"), "agent.remove", "reviewer"),
        (("config", "set", "limits.max_payload", "2MiB"), "setting.set", "limits.max_payload"),
        (("config", "unset", "limits.max_payload"), "setting.unset", "limits.max_payload"),
        (("queue", "pause", "review"), "queue.pause", "review"),
        (("queue", "resume", "review"), "queue.resume", "review"),
        (("source", "remove", "gh"), "source.remove", "gh"),
    ]
    for args, _, _ in steps:
        code, _, err, _ = cli(*args)
        assert code == 0, (args, err)
    todo_id = dead_letter(cli)
    as_json(cli, "todo", "redrive", str(todo_id))
    as_json(cli, "todo", "claim", "--queue", "q")
    as_json(cli, "todo", "release", str(todo_id), "--force")
    as_json(cli, "todo", "cancel", str(todo_id), "--reason", "not needed")
    as_json(cli, "todo", "purge", "--queue", "q", "--state", "cancelled", "--yes")
    recorded = audit(db_path)
    expected = [(action, subject) for _, action, subject in steps] + [
        ("todo.create", todo_id), ("todo.redrive", todo_id), ("todo.release", todo_id), ("todo.cancel", todo_id),
        ("todo.purge", "q"),
    ]  # fmt: skip
    assert [(e["action"], e["subject"]) for e in recorded] == expected
    assert {e["by"] for e in recorded} == {operator()}


def test_the_audit_trail_never_holds_a_secret(cli, db_path: Path) -> None:
    as_json(cli, "source", "add", "gh", "--kind", "github", "--secret", SECRET)
    as_json(cli, "source", "rotate", "gh", "--secret", SECRET)
    as_json(cli, "adapter", "add", "orders", "--redis-url", f"redis://:{REDIS_PASSWORD}@127.0.0.1:6399/0", "--mode",
            "stream", "--key", "orders")  # fmt: skip
    stored = rows(db_path, "SELECT headers, CAST(body AS TEXT) FROM events WHERE source = 'operator'")
    assert len(stored) == 3
    for headers, body in stored:
        assert SECRET not in headers + body and REDIS_PASSWORD not in headers + body
    assert audit(db_path)[1]["reference"] == ["value"]  # what kind of secret was added, and no more


def test_an_action_refused_leaves_no_audit_event(cli, db_path: Path) -> None:
    todo = as_json(cli, "todo", "create", "--queue", "q", "--title", "not dead")
    code, _, err, _ = cli("todo", "redrive", str(todo["id"]))
    assert code == 1 and "not a dead letter" in err
    assert cli("rule", "remove", "7").code == 1
    assert cli("todo", "release", str(todo["id"]), "--force").code == 1
    assert [e["action"] for e in audit(db_path)] == ["todo.create"]  # the create alone


def test_the_audit_trail_is_listed_as_the_operator_source(cli) -> None:
    as_json(cli, "agent", "add", "reviewer", "--queue", "review")
    listed = as_json(cli, "events", "list", "--source", "operator")
    assert [(e["source"], e["family"], e["type"]) for e in listed] == [("operator", "operator", "agent.add")]


@pytest.mark.parametrize("family", ["source", "adapter"])
def test_no_source_may_be_named_operator(cli, family: str) -> None:
    args = ("--kind", "open") if family == "source" else ("--redis-url", "redis://127.0.0.1:6399/0", "--mode", "list",
                                                           "--key", "k")  # fmt: skip
    code, _, err, _ = cli(family, "add", "operator", *args)
    assert code == 2 and "reserved" in err and "audit" in err
