"""Routing rules: validated when added, applied in order, replayable, testable dry."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from switchboard_local import adapters, routing, rules, todos, webhooks
from switchboard_local.cli import main
from switchboard_local.errors import InvalidArgument, NotFound
from switchboard_local.events import NewEvent
from switchboard_local.rules import Condition

pytestmark = pytest.mark.anyio

PR = {"action": "opened", "number": 42, "pull_request": {"title": "Fix it", "base": {"ref": "main"}}, "labels": ["bug", "ui"]}


async def add_source(store, name: str = "gh", **options) -> None:
    await adapters.add(
        store, name, family="webhook", kind="github", trust_mode="github",
        config=webhooks.source_config("github", options), secrets=[adapters.secret_ref(value="s")],
    )  # fmt: skip


def event(payload, *, type: str = "pull_request", delivery: str = "d-1", source: str = "gh") -> NewEvent:
    return NewEvent(
        source=source, family="webhook", type=type, external_id=delivery, trust_mode="github", verified=True,
        body=json.dumps(payload).encode(), content_type="application/json",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("where", "payload", "holds"),
    [
        ("action=opened", PR, True),
        ("action=closed", PR, False),
        ("number=42", PR, True),
        ("action=closed|opened", PR, True),
        ("action=closed|merged", PR, False),
        ("pull_request.base.ref~ma*", PR, True),
        ("pull_request.base.ref~release/*", PR, False),
        ("pull_request.title?", PR, True),
        ("pull_request.body?", PR, False),
        ("labels.1=ui", PR, True),
        ("labels.5?", PR, False),
        ("action=opened", None, False),
    ],
)
def test_conditions_match_dotted_paths_of_the_payload(where: str, payload, holds: bool) -> None:
    assert Condition.parse(where).holds(payload) is holds


@pytest.mark.parametrize("bad", ["action", "=x", "a..b=1", "a b=1", "~glob"])
def test_malformed_where_is_refused(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        Condition.parse(bad)


async def test_malformed_rules_are_refused_when_added_and_nothing_is_stored(store, db_path: Path) -> None:
    await add_source(store)
    for kwargs in [
        {"source": "gh"},  # neither --queue nor --drop
        {"source": "gh", "queue": "q", "drop": True},
        {"source": "gh", "queue": "q", "title": "Review {unclosed"},
        {"source": "gh", "queue": "q", "title": "By {@nobody}"},
        {"source": "gh", "queue": "q", "where": ["not a condition"]},
        {"source": "gh", "queue": "q", "max_attempts": 0},
        {"source": "nope", "queue": "q"},
    ]:
        with pytest.raises(InvalidArgument):
            await rules.add(store, **kwargs)
    assert await rules.list_rules(store) == []


async def test_fan_out_stop_and_drop_in_rule_order(store) -> None:
    await add_source(store)
    await rules.add(store, source="gh", type="pull_request", where=["action=opened"], queue="review", title="Review #{number}")
    await rules.add(store, source="gh", type="pull_*", queue="triage", stop=True)
    await rules.add(store, source="gh", type="pull_request", queue="never")  # after a stop
    await rules.add(store, source="gh", type="push", drop=True)

    opened = await routing.deliver(store, event(PR))
    made = [await todos.get(store, i) for i in opened.todo_ids]
    assert [(t.queue, t.title) for t in made] == [("review", "Review #42"), ("triage", "gh: pull_request opened")]
    keys = {t.idempotency_key for t in made}
    assert len(keys) == 2 and all(k.startswith("event:gh:d-1:rule:") for k in keys)

    dropped = await routing.deliver(store, event({"ref": "main"}, type="push", delivery="d-2"))
    assert dropped.todo_ids == () and not dropped.duplicate  # the event is kept, no todo


async def test_no_matching_rule_sends_one_todo_to_the_default_queue(store) -> None:
    await add_source(store, "gh")
    await add_source(store, "stripe", queue="payments")
    await rules.add(store, source="gh", type="push", queue="builds")
    a = await routing.deliver(store, event({"x": 1}, type="issues"))
    b = await routing.deliver(store, event({"x": 1}, type="charge", source="stripe"))
    assert [(await todos.get(store, i)).queue for i in a.todo_ids] == ["gh"]
    assert [(await todos.get(store, i)).queue for i in b.todo_ids] == ["payments"]


async def test_title_template_renders_missing_fields_empty_and_never_fails(store) -> None:
    await add_source(store)
    await rules.add(store, source="gh", queue="q", title="{@source}/{@type}: {pull_request.title} by {sender.login}")
    await rules.add(store, source="gh", queue="q2", title="{missing.entirely}")
    result = await routing.deliver(store, event(PR))
    titles = [(await todos.get(store, i)).title for i in result.todo_ids]
    # An all-empty rendering falls back to the default title.
    assert titles == ["gh/pull_request: Fix it by", "gh: pull_request opened"]


async def test_routed_todo_carries_the_event_context_and_parsed_body(store) -> None:
    await add_source(store)
    result = await routing.deliver(store, event(PR))
    todo = await todos.get(store, result.todo_ids[0])
    assert todo.event_id == result.event_id
    assert todo.kind == "pull_request"
    assert todo.payload == {
        "source": "gh", "type": "pull_request", "delivery_id": "d-1", "event_id": result.event_id,
        "verified": True, "replay": False, "body": PR,
    }  # fmt: skip


async def test_form_encoded_github_payload_is_parsed_for_routing(store) -> None:
    await add_source(store)
    await rules.add(store, source="gh", where=["action=opened"], queue="review")
    from urllib.parse import urlencode

    body = urlencode({"payload": json.dumps(PR)}).encode()
    form = NewEvent(
        source="gh", family="webhook", type="pull_request", external_id="d-9", trust_mode="github", verified=True,
        body=body, content_type="application/x-www-form-urlencoded",
    )  # fmt: skip
    result = await routing.deliver(store, form)
    assert [(await todos.get(store, i)).queue for i in result.todo_ids] == ["review"]


async def test_replay_routes_the_stored_event_again_without_a_second_event(store, db_path: Path) -> None:
    await add_source(store)
    first = await routing.deliver(store, event(PR))
    original = await todos.claim_next(store, owner="a")
    await todos.complete(store, original.id, original.lease_token)

    replayed = await routing.replay(store, first.event_id)
    again = await routing.replay(store, first.event_id)
    assert replayed == again and replayed != list(first.todo_ids)  # live replay todos are found, not duplicated
    todo = await todos.get(store, replayed[0])
    assert todo.payload["replay"] is True and todo.event_id == first.event_id
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 1
    # A redelivery still answers with the first delivery's todos, not the replay's.
    assert (await routing.deliver(store, event(PR))).todo_ids == first.todo_ids
    with pytest.raises(NotFound):
        await routing.replay(store, 999)


async def test_rule_order_can_be_changed_and_rules_removed(store) -> None:
    await add_source(store)
    a = await rules.add(store, source="gh", queue="a", stop=True)
    b = await rules.add(store, source="gh", queue="b", stop=True)
    assert [t.queue for t in await routing.dry_run(store, source="gh", payload={})] == ["a"]
    moved = await rules.move(store, b.id, 1)
    assert [(r.id, r.position) for r in moved] == [(b.id, 1), (a.id, 2)]
    assert [t.queue for t in await routing.dry_run(store, source="gh", payload={})] == ["b"]
    await rules.remove(store, b.id)
    assert [(r.id, r.position) for r in await rules.list_rules(store)] == [(a.id, 1)]
    with pytest.raises(NotFound):
        await rules.remove(store, b.id)
    with pytest.raises(InvalidArgument):
        await rules.move(store, a.id, 5)


async def test_dry_run_writes_nothing(store, db_path: Path) -> None:
    await add_source(store)
    await rules.add(store, source="gh", type="pull_request", queue="review", title="PR {number}")
    planned = await routing.dry_run(store, source="gh", type="pull_request", payload=PR)
    assert [(t.queue, t.title) for t in planned] == [("review", "PR 42")]
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT (SELECT count(*) FROM todos) + (SELECT count(*) FROM events)").fetchone()[0] == 0


def test_rule_cli_add_list_test_and_refusal(db_path: Path, tmp_path: Path) -> None:
    runner = CliRunner()

    def cli(*args: str):
        return runner.invoke(main, [*args, "--db", str(db_path)])

    assert cli("source", "add", "gh", "--kind", "github", "--secret", "s").exit_code == 0
    added = cli("rule", "add", "--source", "gh", "--type", "pull_request", "--where", "action=opened|reopened",
                "--where", "pull_request.base.ref~ma*", "--queue", "review", "--title", "PR {number}", "--json")  # fmt: skip
    assert added.exit_code == 0, added.output
    assert json.loads(added.stdout)["where"] == ["action=opened|reopened", "pull_request.base.ref~ma*"]
    bad = cli("rule", "add", "--source", "gh", "--queue", "q", "--title", "{oops")
    assert bad.exit_code == 2 and "unbalanced brace" in bad.stderr
    payload = tmp_path / "pr.json"
    payload.write_text(json.dumps(PR))
    tested = cli("rule", "test", "--source", "gh", "--type", "pull_request", "--payload", f"@{payload}", "--json")
    assert tested.exit_code == 0, tested.output
    assert [(t["queue"], t["title"]) for t in json.loads(tested.stdout)] == [("review", "PR 42")]
    listed = cli("rule", "list", "--json")
    assert [r["queue"] for r in json.loads(listed.stdout)] == ["review"]


@pytest.mark.parametrize(
    "body",
    [b'{"a": NaN}', b'[1e999]', b'{"a": "\\ud800"}', b'{"a": "\xed\xa0\x80"}', b"[" * 65 + b"]" * 65],
    ids=["nan", "infinity", "escaped-surrogate", "raw-surrogate", "65-deep"],
)
def test_only_standard_json_becomes_a_payload(body: bytes) -> None:
    assert routing.parse_payload(body, "application/json") is None
    assert routing.parse_payload(b"[" * 64 + b"]" * 64, "application/json") is not None


async def test_a_delivery_with_a_payload_no_todo_can_hold_still_routes_with_an_empty_body(store) -> None:
    await add_source(store)
    result = await routing.deliver(store, NewEvent(
        source="gh", family="webhook", type="push", external_id="d-x", trust_mode="github", verified=True,
        body=b'{"a": "\\ud800", "b": NaN}', content_type="application/json",
    ))  # fmt: skip
    (todo_id,) = result.todo_ids
    assert (await todos.get(store, todo_id)).payload["body"] is None


async def test_an_over_long_delivery_id_is_hashed_into_the_key(store) -> None:
    await add_source(store)
    result = await routing.deliver(store, event(PR, delivery="x" * 5000))
    todo = await todos.get(store, result.todo_ids[0])
    assert todo.idempotency_key.startswith("event:gh:sha256:") and len(todo.idempotency_key) < 100


async def test_removing_a_source_removes_its_rules(store) -> None:
    await add_source(store)
    await add_source(store, "other")
    await rules.add(store, source="gh", queue="q")
    kept = await rules.add(store, source="other", queue="q")
    await adapters.remove(store, "gh")
    assert [r.id for r in await rules.list_rules(store)] == [kept.id]


@pytest.mark.parametrize(
    "body",
    [b'{"type": "\\ud800", "id": "evt_1"}', b'{"type": "charge", "id": "\\udc00"}', b'{"a":' + b"[" * 100_000],
    ids=["surrogate-type", "surrogate-id", "runaway-nesting"],
)
def test_a_signed_stripe_delivery_with_unstorable_fields_is_still_named(body: bytes) -> None:
    import hashlib
    import hmac
    import time

    source = adapters.Adapter(name="st", family="webhook", kind="stripe", trust_mode="stripe", enabled=True,
                              config=webhooks.source_config("stripe", {}), secrets=[], created_at=0, updated_at=0,
                              last_poll_at=None, last_error=None, consecutive_failures=0, messages_stored=0)  # fmt: skip
    ts = str(int(time.time()))
    signature = hmac.new(b"whsec_x", ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    verified = webhooks.verify(source, {"stripe-signature": f"t={ts},v1={signature}"}, body, time.time(), [b"whsec_x"])
    for text in (verified.type, verified.external_id):
        text.encode("utf-8")  # storable
    assert verified.external_id.startswith(("evt_", "sha256:"))


# ---------------------------------------------------------------- hostile text and sizes (hardening §3, §11, §12)


async def test_a_non_ascii_digit_in_a_where_path_is_a_key_and_every_delivery_keeps_its_todos(store) -> None:
    await add_source(store)
    await rules.add(store, source="gh", where=["labels.²=bug"], queue="odd")  # '²' passes str.isdigit()
    result = await routing.deliver(store, event(PR))
    assert [(await todos.get(store, i)).queue for i in result.todo_ids] == ["gh"]  # no match: the default queue
    matched = await routing.deliver(store, event({"labels": {"²": "bug"}}, delivery="d-2"))
    assert [(await todos.get(store, i)).queue for i in matched.todo_ids] == ["odd"]


async def test_a_path_segment_of_thousands_of_digits_never_breaks_routing(store) -> None:
    await add_source(store)
    await rules.add(store, source="gh", where=[f"labels.{'9' * 5000}?"], queue="never",
                    title="{labels." + "9" * 5000 + "}")  # fmt: skip
    result = await routing.deliver(store, event(PR))
    assert [(await todos.get(store, i)).queue for i in result.todo_ids] == ["gh"]


def test_a_list_index_and_an_object_key_of_digits_both_resolve() -> None:
    assert Condition.parse("labels.0=bug").holds(PR)
    assert Condition.parse("codes.007=x").holds({"codes": {"007": "x"}})


async def test_a_title_from_a_template_has_its_control_characters_replaced(store) -> None:
    await add_source(store)
    await rules.add(store, source="gh", queue="review", title="PR: {pull_request.title}")
    hostile = {"pull_request": {"title": "Fix\x1b[2J\x1b]0;pwned\x07 it\nnow\u202e"}}
    result = await routing.deliver(store, event(hostile, type="pull\x1brequest"))
    todo = await todos.get(store, result.todo_ids[0])
    assert todo.title == "PR: Fix\ufffd[2J\ufffd]0;pwned\ufffd it now\ufffd"
    assert todo.kind == "pull\ufffdrequest"
    assert todo.payload["body"] == hostile  # the data itself is kept as it came


async def test_a_delivery_too_big_for_a_todo_payload_makes_a_todo_that_points_to_its_event(store) -> None:
    await add_source(store)
    big = {"action": "opened", "blob": "x" * (1024 * 1024)}
    result = await routing.deliver(store, event(big))
    todo = await todos.get(store, result.todo_ids[0])
    assert todo.payload["body"] is None and todo.payload["body_omitted"] is True
    assert todo.payload["event_id"] == result.event_id and todo.title == "gh: pull_request opened"
    small = await routing.deliver(store, event(PR, delivery="d-2"))
    assert "body_omitted" not in (await todos.get(store, small.todo_ids[0])).payload


async def test_a_delivery_id_with_control_characters_is_hashed_into_the_key_and_still_makes_its_todo(store) -> None:
    await add_source(store)
    result = await routing.deliver(store, event(PR, delivery="d-\x9b1\x1b"))
    todo = await todos.get(store, result.todo_ids[0])
    assert todo.idempotency_key.startswith("event:gh:sha256:")
