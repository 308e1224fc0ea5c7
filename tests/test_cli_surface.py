"""The CLI around sources, events, pruning and adapters: what people and scripts see."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from switchboard_local import routing
from switchboard_local.cli import main
from switchboard_local.events import NewEvent
from switchboard_local.store import Store

BODY = b'{"action": "opened",\n  "number": 42, "note": "\xc3\xa9t\xc3\xa9"}  '  # exact bytes, odd spacing


@pytest.fixture
def cli(db_path: Path):
    runner = CliRunner()

    def invoke(*args: str) -> tuple[int, str, str, bytes]:
        result = runner.invoke(main, [*args, "--db", str(db_path)])
        return result.exit_code, result.stdout, result.stderr, result.stdout_bytes

    return invoke


def deliver(db_path: Path, delivery: str = "d-1") -> int:
    return asyncio.run(_deliver(db_path, delivery))


async def _deliver(db_path: Path, delivery: str) -> int:
    async with await Store.open(db_path) as store:
        result = await routing.deliver(store, NewEvent(
            source="gh", family="webhook", type="pull_request", external_id=delivery, trust_mode="github",
            verified=True, body=BODY, content_type="application/json",
            headers={"x-github-delivery": delivery, "x-hub-signature-256": "[redacted]"},
        ))  # fmt: skip
    return result.event_id


def test_source_show_and_list_never_print_a_secret_value(cli) -> None:
    assert cli("source", "add", "gh", "--kind", "github", "--secret", "hunter2-topsecret")[0] == 0
    assert cli("source", "rotate", "gh", "--secret-env", "GH_NEW")[0] == 0
    outputs = [cli("source", "show", "gh"), cli("source", "show", "gh", "--json"), cli("source", "list", "--json")]
    for code, out, err, _ in outputs:
        assert code == 0 and "hunter2" not in out + err
    shown = json.loads(outputs[1][1])
    assert shown["secrets"] == ["value:********", "env:GH_NEW"]
    assert cli("source", "retire-secret", "gh")[0] == 0
    assert json.loads(cli("source", "show", "gh", "--json")[1])["secrets"] == ["env:GH_NEW"]


def test_events_show_raw_writes_the_body_byte_for_byte(cli, db_path: Path) -> None:
    cli("source", "add", "gh", "--kind", "github", "--secret", "s")
    event_id = deliver(db_path)
    code, _, _, raw = cli("events", "show", str(event_id), "--raw")
    assert code == 0 and raw == BODY
    shown = json.loads(cli("events", "show", str(event_id), "--json")[1])
    assert shown["body"] == BODY.decode() and shown["headers"]["x-hub-signature-256"] == "[redacted]"


def test_events_list_pages_after_an_id_and_replay_adds_no_event(cli, db_path: Path) -> None:
    cli("source", "add", "gh", "--kind", "github", "--secret", "s")
    first, second = deliver(db_path, "d-1"), deliver(db_path, "d-2")
    assert [e["id"] for e in json.loads(cli("events", "list", "--json")[1])] == [first, second]
    assert [e["id"] for e in json.loads(cli("events", "list", "--since", str(first), "--json")[1])] == [second]
    assert json.loads(cli("events", "list", "--since", "2000-01-01T00:00:00Z", "--json")[1])[0]["id"] == first
    code, _, err, _ = cli("events", "list", "--since", "yesterday")
    assert code == 2 and "--since" in err
    replayed = json.loads(cli("events", "replay", str(first), "--json")[1])
    assert replayed["event_id"] == first and len(replayed["todos"]) == 1
    assert len(json.loads(cli("events", "list", "--json")[1])) == 2
    assert cli("events", "replay", "999")[0] == 1


def test_prune_command_reports_what_it_removed(cli, db_path: Path) -> None:
    cli("source", "add", "gh", "--kind", "github", "--secret", "s")
    deliver(db_path, "d-1")
    deliver(db_path, "d-2")
    pruned = json.loads(cli("prune", "--max-events", "1", "--older-than", "30", "--json")[1])
    assert pruned == {"events": 0, "todos": 0, "delivery_keys": 0}  # both events have live todos
    code, out, _, _ = cli("prune")
    assert code == 0 and out.startswith("pruned 0 events")


def test_adapter_show_status_and_list_never_print_the_redis_password(cli) -> None:
    code, out, err, _ = cli("adapter", "add", "orders", "--redis-url", "redis://:hunter2@127.0.0.1:6399/0",
                            "--mode", "stream", "--key", "orders")  # fmt: skip
    assert code == 0 and "hunter2" not in out + err
    for args in (("adapter", "show", "orders"), ("adapter", "show", "orders", "--json"), ("adapter", "status"),
                 ("adapter", "list", "--json")):  # fmt: skip
        code, out, err, _ = cli(*args)
        assert code == 0 and "hunter2" not in out + err
    shown = json.loads(cli("adapter", "show", "orders", "--json")[1])
    assert shown["config"]["redis_url"] == "redis://:****@127.0.0.1:6399/0"
    assert shown["guarantee"].startswith("durable")
    code, _, err, _ = cli("adapter", "add", "bad", "--redis-url", "redis://x", "--mode", "list", "--key", "k",
                          "--group", "g")  # fmt: skip
    assert code == 2 and "--group" in err


def test_a_source_and_an_adapter_are_not_each_other(cli) -> None:
    cli("source", "add", "gh", "--kind", "github", "--secret", "s")
    cli("adapter", "add", "orders", "--redis-url", "redis://127.0.0.1:6399/0", "--mode", "list", "--key", "k")
    assert cli("adapter", "show", "gh")[0] == 1
    assert cli("source", "disable", "orders")[0] == 1
    assert cli("adapter", "disable", "orders")[0] == 0
