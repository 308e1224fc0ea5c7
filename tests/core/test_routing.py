"""Routing rules: validated when added, applied in order, replayable, testable dry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from switchboard_local.core import (
    events,
    routing,
    rules,
    settings,
    sources,
    todos,
    webhook_config,
)
from switchboard_local.core.errors import InvalidArgument, NotFound
from switchboard_local.core.events import NewEvent
from switchboard_local.core.rules import Condition
from switchboard_local.core.todos import Lease
from switchboard_local.http import verifiers as webhooks

from support.cli import as_json
from support.sql import count, counts, rows

pytestmark = pytest.mark.anyio

PR = {"action": "opened", "number": 42, "pull_request": {"title": "Fix it", "base": {"ref": "main"}}, "labels": ["bug", "ui"]}


async def add_source(store, name: str = "gh", **options) -> None:
    await sources.add(
        store, name, family="webhook", kind="github", trust_mode="github",
        config=webhook_config.source_config("github", options), secrets=[sources.secret_ref(value="s")],
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
    await todos.complete(store, Lease.of(original))

    replayed = await routing.replay(store, first.event_id)
    again = await routing.replay(store, first.event_id)
    assert replayed == again and replayed != list(first.todo_ids)  # live replay todos are found, not duplicated
    todo = await todos.get(store, replayed[0])
    assert todo.payload["replay"] is True and todo.event_id == first.event_id
    assert count(db_path, "events") == 1
    # A redelivery still answers with the first delivery's todos, not the replay's.
    assert (await routing.deliver(store, event(PR))).todo_ids == first.todo_ids
    with pytest.raises(NotFound):
        await routing.replay(store, 999)


async def test_an_events_todos_are_its_first_deliverys_and_its_replays_as_they_are_now(store) -> None:
    await add_source(store)
    await rules.add(store, source="gh", type="pull_request", queue="review", title="Review #{number}")
    await rules.add(store, source="gh", type="pull_request", queue="triage")
    await rules.add(store, source="gh", type="push", drop=True)
    first = await routing.deliver(store, event(PR))
    original = await todos.claim_next(store, owner="a", queues=["review"])
    await todos.complete(store, Lease.of(original))
    replayed = await routing.replay(store, first.event_id)
    made = await events.todos_of_event(store, first.event_id)
    assert [t.id for t in made] == sorted([*first.todo_ids, *replayed])
    assert [(t.queue, t.state, t.title) for t in made] == [
        ("review", "done", "Review #42"), ("triage", "pending", "gh: pull_request opened"),
        ("review", "pending", "Review #42"), ("triage", "pending", "gh: pull_request opened"),
    ]  # fmt: skip
    dropped = await routing.deliver(store, event({}, type="push", delivery="d-2"))
    assert await events.todos_of_event(store, dropped.event_id) == []
    assert await events.todos_of_event(store, 999) == []


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
    assert counts(db_path) == (0, 0)


def test_rule_cli_add_list_test_and_refusal(cli, tmp_path: Path) -> None:
    assert cli("source", "add", "gh", "--kind", "github", "--secret", "s").code == 0
    added = cli("rule", "add", "--source", "gh", "--type", "pull_request", "--where", "action=opened|reopened",
                "--where", "pull_request.base.ref~ma*", "--queue", "review", "--title", "PR {number}", "--json")  # fmt: skip
    assert added.code == 0, added.err
    assert json.loads(added.out)["where"] == ["action=opened|reopened", "pull_request.base.ref~ma*"]
    bad = cli("rule", "add", "--source", "gh", "--queue", "q", "--title", "{oops")
    assert bad.code == 2 and "unbalanced brace" in bad.err
    payload = tmp_path / "pr.json"
    payload.write_text(json.dumps(PR))
    tested = cli("rule", "test", "--source", "gh", "--type", "pull_request", "--payload", f"@{payload}", "--json")
    assert tested.code == 0, tested.err
    assert [(t["queue"], t["title"]) for t in json.loads(tested.out)] == [("review", "PR 42")]
    listed = cli("rule", "list", "--json")
    assert [r["queue"] for r in json.loads(listed.out)] == ["review"]


def test_rule_test_shows_the_todos_a_payload_would_make_and_writes_nothing(cli, db_path):
    flaky = {"action": "opened", "pull_request": {"title": "Fix the flaky test", "number": 42, "base": {"ref": "main"}}}
    as_json(cli, "source", "add", "gh", "--kind", "github", "--secret", "s")
    as_json(cli, "rule", "add", "--source", "gh", "--type", "pull_request", "--queue", "review", "--title", "{pull_request.title}")

    planned = as_json(cli, "rule", "test", "--source", "gh", "--type", "pull_request", "--payload", json.dumps(flaky))

    assert [(t["queue"], t["title"]) for t in planned] == [("review", "Fix the flaky test")]
    assert counts(db_path) == (0, 0)


@pytest.mark.parametrize(
    "body",
    [b'{"a": NaN}', b'[1e999]', b'{"a": "\\ud800"}', b'{"a": "\xed\xa0\x80"}', b"[" * 65 + b"]" * 65],
    ids=["nan", "infinity", "escaped-surrogate", "raw-surrogate", "65-deep"],
)
def test_only_standard_json_becomes_a_payload(body: bytes) -> None:
    assert routing.parse_payload(body, "application/json") is None
    assert routing.parse_payload(b"[" * 64 + b"]" * 64, "application/json") is not None


@pytest.mark.parametrize(
    "body",
    [b'{"a": 1}', '{"é": "ü\u2028</script>", "n": [1.0, 1e5, -0, 123456789012345678901234567890]}'.encode(),
     b'"just a string"', b"null", b"[]", b'{"a": "\\u00e9 \\" \\n"}', b"[" * 63 + b"]" * 63],
    ids=["object", "unicode-and-numbers", "string", "null", "empty-list", "escapes", "63-deep"],
)
def test_a_todo_payload_made_from_the_checked_body_text_is_the_text_made_whole(body: bytes) -> None:
    payload, text = routing.parse_payload_json(body, "application/json")
    assert text is not None
    delivery = routing.Delivery("gh", "push", "d-1", True, payload, 7, "webhook", text)
    (spliced,) = routing.plan([], delivery, "q")
    (whole,) = routing.plan([], routing.Delivery("gh", "push", "d-1", True, payload, 7, "webhook"), "q")
    assert spliced.payload_json == whole.payload_json
    assert json.loads(spliced.payload_json) == spliced.payload == whole.payload


def test_a_body_too_deep_to_nest_in_a_payload_brings_no_text_to_splice() -> None:
    payload, text = routing.parse_payload_json(b"[" * 64 + b"]" * 64, "application/json")
    assert payload is not None and text is None  # the whole payload is made, and refused, as before


@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
async def test_a_delivery_whose_body_is_a_memoryview_routes_as_its_bytes(store, content_type: str) -> None:
    await add_source(store)
    body = b'{"a": 1}' if content_type == "application/json" else b'payload=%7B%22a%22%3A+1%7D'
    result = await routing.deliver(store, NewEvent(
        source="gh", family="webhook", type="push", external_id="d-mv", trust_mode="github", verified=True,
        body=memoryview(body), content_type=content_type,
    ))  # fmt: skip
    (todo_id,) = result.todo_ids
    assert (await todos.get(store, todo_id)).payload["body"] == {"a": 1}


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
    await sources.remove(store, "gh")
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

    source = sources.Source(name="st", family="webhook", kind="stripe", trust_mode="stripe", enabled=True,
                              config=webhook_config.source_config("stripe", {}), secrets=[], created_at=0, updated_at=0,
                              last_poll_at=None, last_error=None, consecutive_failures=0, messages_stored=0)  # fmt: skip
    ts = str(int(time.time()))
    signature = hmac.new(b"whsec_x", ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    verified = webhooks.verify(source, {"stripe-signature": f"t={ts},v1={signature}"}, body, time.time(), [b"whsec_x"])
    for text in (verified.type, verified.external_id):
        text.encode("utf-8")  # storable
    assert verified.external_id.startswith(("evt_", "sha256:"))


# ---------------------------------------------------------------- hostile text and sizes (hardening §3, §11, §12)


@pytest.mark.parametrize("digit", ["²", "١", "１"])  # '²' passes str.isdigit(); int() reads the others as 1
async def test_a_path_segment_in_other_digits_than_ascii_is_refused_when_a_rule_is_added(store, digit) -> None:
    await add_source(store)
    for where, title in ([f"labels.{digit}=bug"], None), ([], f"{{labels.{digit}}}"):
        with pytest.raises(InvalidArgument, match="ASCII digits"):
            await rules.add(store, source="gh", where=where, title=title, queue="odd")
    assert await rules.list_rules(store) == []


async def test_a_rule_stored_with_such_a_path_reads_it_as_a_key_and_every_delivery_keeps_its_todos(store) -> None:
    # A rule added before such paths were refused still routes: the segment is a key, never an index.
    stored = Condition(path="labels.²", op="eq", value="bug")
    assert not stored.holds(PR) and not stored.holds({"labels": ["bug", "bug", "bug"]})
    assert stored.holds({"labels": {"²": "bug"}})


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


# ---------------------------------------------------------------- what a routed todo holds


def queue_message(source: str, external_id: str, body: bytes = b'{"n": 1}') -> NewEvent:
    return NewEvent(source=source, family="queue", type="orders", external_id=external_id, trust_mode="queue",
                    verified=True, body=body, content_type=None)  # fmt: skip


@pytest.mark.parametrize(
    ("payload", "title"),
    [(PR, "gh: pull_request opened"), ({"number": 1}, "gh: pull_request"), ({"action": 7}, "gh: pull_request")],
    ids=["with-an-action", "without-an-action", "action-not-a-string"],
)
async def test_a_webhook_todo_without_a_title_rule_is_named_for_its_source_type_and_action(store, payload, title):
    await add_source(store)
    result = await routing.deliver(store, event(payload))
    assert (await todos.get(store, result.todo_ids[0])).title == title


async def test_a_queue_message_without_a_title_rule_is_named_for_its_message_not_its_stream(store) -> None:
    entry = "1767225600000-12345678"  # a stream id longer than the 19 characters a title keeps
    result = await routing.deliver(store, queue_message("orders", entry))
    assert (await todos.get(store, result.todo_ids[0])).title == f"orders: message {entry[:19]}"
    replayed = await routing.replay(store, result.event_id)
    assert (await todos.get(store, replayed[0])).title == f"orders: message {entry[:19]}"


async def test_a_rule_gives_its_todo_the_rules_assignee_priority_and_attempts(store) -> None:
    await add_source(store)
    await rules.add(store, source="gh", queue="review", assignee="alice", priority=7, max_attempts=9,
                    title="{@source} {@type} {@id}")  # fmt: skip
    todo = await todos.get(store, (await routing.deliver(store, event(PR, delivery="d-77"))).todo_ids[0])
    assert (todo.queue, todo.assignee, todo.priority, todo.max_attempts) == ("review", "alice", 7, 9)
    assert todo.title == "gh pull_request d-77"


async def test_a_todo_without_a_rule_gets_the_defaults(store) -> None:
    await add_source(store)
    todo = await todos.get(store, (await routing.deliver(store, event(PR))).todo_ids[0])
    assert (todo.queue, todo.assignee, todo.priority, todo.max_attempts) == ("gh", None, 0, 5)


async def test_a_todos_kind_is_the_delivery_type_cut_to_512_characters(store) -> None:
    await add_source(store)
    long_type = "t" * 600
    todo = await todos.get(store, (await routing.deliver(store, event(PR, type=long_type))).todo_ids[0])
    assert todo.kind == long_type[:512]


@pytest.mark.parametrize("with_rule", [False, True], ids=["default-route", "rule-route"])
async def test_a_replays_todos_are_marked_as_a_replay_in_their_payload_and_key(store, with_rule) -> None:
    await add_source(store)
    if with_rule:
        await rules.add(store, source="gh", queue="review")
    first = await routing.deliver(store, event(PR))
    original = await todos.get(store, first.todo_ids[0])
    (replayed_id,) = await routing.replay(store, first.event_id)
    replayed = await todos.get(store, replayed_id)
    assert (original.payload["replay"], replayed.payload["replay"]) == (False, True)
    assert replayed.idempotency_key == original.idempotency_key + ":replay"


async def test_a_replay_parses_a_stored_form_body_again(store) -> None:
    await add_source(store)
    form = NewEvent(source="gh", family="webhook", type="pull_request", external_id="d-9", trust_mode="github",
                    verified=True, body=b"number=42&draft=", content_type="application/x-www-form-urlencoded")  # fmt: skip
    first = await routing.deliver(store, form)
    (replayed_id,) = await routing.replay(store, first.event_id)
    replayed = await todos.get(store, replayed_id)
    assert replayed.payload["body"] == {"number": "42", "draft": ""}  # a blank field is kept
    assert (replayed.payload["event_id"], replayed.payload["verified"]) == (first.event_id, True)


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded; charset=utf-8",
                                          "Application/X-WWW-Form-Urlencoded"])  # fmt: skip
def test_a_form_is_recognised_whatever_its_parameters_and_case(content_type) -> None:
    assert routing.parse_payload(b"a=1&b=", content_type) == {"a": "1", "b": ""}


async def test_a_batch_routes_each_delivery_by_its_own_sources_rules(store) -> None:
    await add_source(store, "gh")
    await add_source(store, "other", queue="elsewhere")
    await rules.add(store, source="gh", queue="review")
    results = await routing.deliver_many(store, [event(PR, source="gh", delivery="a"),
                                                 event(PR, source="other", delivery="b")])  # fmt: skip
    assert [(await todos.get(store, r.todo_ids[0])).queue for r in results] == ["review", "elsewhere"]


async def test_a_batch_of_queue_messages_names_each_todo_for_its_message(store) -> None:
    results = await routing.deliver_many(store, [queue_message("orders", "1-1"), queue_message("orders", "1-2")])
    assert [(await todos.get(store, r.todo_ids[0])).title for r in results] == ["orders: message 1-1",
                                                                               "orders: message 1-2"]  # fmt: skip


async def test_the_payload_cap_setting_decides_when_a_routed_todo_omits_its_body(store) -> None:
    await add_source(store)
    await settings.set_value(store, "limits.max_payload", "64KiB")
    big = {"text": "x" * 70_000}
    first = await routing.deliver(store, event(big))
    assert (await todos.get(store, first.todo_ids[0])).payload["body_omitted"] is True
    (replayed_id,) = await routing.replay(store, first.event_id)
    assert (await todos.get(store, replayed_id)).payload["body_omitted"] is True
    (planned,) = await routing.dry_run(store, source="gh", payload=big)
    assert planned.payload["body_omitted"] is True


async def test_a_payload_exactly_at_the_cap_keeps_its_body(store) -> None:
    await add_source(store)
    await settings.set_value(store, "limits.max_payload", "64KiB")
    (probe,) = await routing.dry_run(store, source="gh", payload={"text": ""})
    fits = {"text": "x" * (64 * 1024 - len(probe.payload_json.encode()))}  # the todo's JSON is exactly 64 KiB
    (planned,) = await routing.dry_run(store, source="gh", payload=fits)
    assert len(planned.payload_json.encode()) == 64 * 1024 and planned.payload["body"] == fits
    (over,) = await routing.dry_run(store, source="gh", payload={"text": fits["text"] + "x"})
    assert over.payload["body_omitted"] is True


async def test_a_dry_run_of_a_payload_shows_a_verified_first_delivery(store) -> None:
    await add_source(store)
    (planned,) = await routing.dry_run(store, source="gh", payload=PR)
    assert planned.kind == "webhook" and planned.title == "gh: webhook opened"
    assert {k: planned.payload[k] for k in ("delivery_id", "verified", "replay")} == {
        "delivery_id": "dry-run", "verified": True, "replay": False}  # fmt: skip
    assert not planned.idempotency_key.endswith(":replay")


async def test_a_dry_run_of_a_stored_event_shows_the_todos_it_would_make(store) -> None:
    await add_source(store)
    await rules.add(store, source="gh", where=["action=opened"], queue="review", title="PR {number}")
    first = await routing.deliver(store, event(PR, delivery="d-5"))
    (planned,) = await routing.dry_run(store, event_id=first.event_id)
    assert (planned.queue, planned.title, planned.payload["delivery_id"]) == ("review", "PR 42", "d-5")
    assert planned.payload["event_id"] == first.event_id


async def test_a_dry_run_of_a_stored_event_uses_its_sources_default_queue_or_the_sources_name_once_it_is_gone(store):
    await add_source(store, queue="inbox")
    first = await routing.deliver(store, event(PR))
    assert [(await todos.get(store, i)).queue for i in first.todo_ids] == ["inbox"]
    assert [t.queue for t in await routing.dry_run(store, event_id=first.event_id)] == ["inbox"]
    await sources.remove(store, "gh")
    assert [t.queue for t in await routing.dry_run(store, event_id=first.event_id)] == ["gh"]


async def test_a_replay_by_someone_is_recorded_with_the_todos_it_answered(store, db_path: Path) -> None:
    await add_source(store)
    first = await routing.deliver(store, event(PR))
    await todos.complete(store, Lease.of(await todos.claim(store, first.todo_ids[0], owner="w")))
    assert await routing.replay(store, first.event_id) != []  # nobody named: nothing recorded
    replayed = await routing.replay(store, first.event_id, by="alice")
    recorded = rows(db_path, "SELECT type, body FROM events WHERE source = 'operator'")
    assert [(kind, json.loads(bytes(body))) for kind, body in recorded] == [
        ("event.replay", {"by": "alice", "action": "event.replay", "subject": first.event_id, "todos": replayed})
    ]


async def test_a_dry_run_names_what_is_missing(store) -> None:
    with pytest.raises(InvalidArgument) as refused:
        await routing.dry_run(store)
    assert refused.value.message == "give an event id, or a source and a payload"
    with pytest.raises(NotFound) as unknown:
        await routing.dry_run(store, source="nobody", payload={})
    assert unknown.value.message == "no source named 'nobody'"
    with pytest.raises(NotFound):
        await routing.dry_run(store, event_id=999)


@pytest.mark.parametrize("holder", ["claimed", "retrying"])
async def test_a_replay_finds_its_earlier_replays_todo_while_that_one_is_claimed_or_awaiting_a_retry(store, holder):
    await add_source(store)
    first = await routing.deliver(store, event(PR))
    done = await todos.claim(store, first.todo_ids[0], owner="w")
    await todos.complete(store, Lease.of(done))
    (replayed_id,) = await routing.replay(store, first.event_id)
    claimed = await todos.claim(store, replayed_id, owner="w")
    if holder == "retrying":
        await todos.fail(store, Lease(replayed_id, claimed.lease_token), error="later")
    assert await routing.replay(store, first.event_id) == [replayed_id]


@pytest.mark.parametrize("path", ["merged\n", "pull_request.merged\n", "a.b\n"])
def test_a_path_ending_in_a_newline_is_no_dotted_path(path: str) -> None:
    with pytest.raises(InvalidArgument, match="is not a dotted path"):
        rules.parse_path(path)
