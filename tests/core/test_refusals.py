"""Refusals (DESIGN §2): transitions not in the diagram, unknown ids, invalid arguments.

A refused call raises and leaves the database as it was.
"""

from __future__ import annotations

import pytest

from switchboard_local.core import events, todos
from switchboard_local.core.errors import Conflict, Forbidden, InvalidArgument, NotFound
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease, NextClaim

pytestmark = pytest.mark.anyio

UNKNOWN_ID = 4242


async def new(store, title="t", **fields):
    todo, _ = await todos.create(store, NewTodo(queue="q", title=title, **fields))
    return todo


# ---------------------------------------------------------------- transitions not in the diagram
# Each case: a setup that brings a todo to a state and returns (id, token), then
# the refused call.


async def pending_with_stale_token(store):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    await todos.release(store, Lease(todo.id, claimed.lease_token))
    return todo.id, claimed.lease_token


async def done(store):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    await todos.complete(store, Lease(todo.id, claimed.lease_token))
    return todo.id, claimed.lease_token


async def claimed_live(store):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    return todo.id, claimed.lease_token


async def failed(store):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    await todos.fail(store, Lease(todo.id, claimed.lease_token), error="e")
    return todo.id, claimed.lease_token


async def dead_letter(store):
    todo = await new(store, max_attempts=1)
    claimed = await todos.claim(store, todo.id, owner="w")
    await todos.fail(store, Lease(todo.id, claimed.lease_token), error="e")
    return todo.id, claimed.lease_token


REFUSED = [
    (pending_with_stale_token, lambda s, i, t: todos.complete(s, Lease(i, t)), "complete-a-pending-todo",
     "todo 1 is pending, not claimed; the lease token is stale"),
    (done, lambda s, i, t: todos.complete(s, Lease(i, t)), "complete-a-done-todo",
     "todo 1 is done, not claimed; the lease token is stale"),
    (done, lambda s, i, t: todos.fail(s, Lease(i, t), error="x"), "fail-a-done-todo",
     "todo 1 is done, not claimed; the lease token is stale"),
    (done, lambda s, i, t: todos.heartbeat(s, Lease(i, t)), "heartbeat-a-done-todo",
     "todo 1 is done, not claimed; the lease token is stale"),
    (pending_with_stale_token, lambda s, i, t: todos.release(s, Lease(i, t)), "release-a-pending-todo",
     "todo 1 is pending, not claimed; the lease token is stale"),
    (done, lambda s, i, t: todos.claim(s, i, owner="w"), "claim-a-done-todo",
     "todo 1 is done"),
    (claimed_live, lambda s, i, t: todos.claim(s, i, owner="other"), "claim-a-claimed-todo",
     "todo 1 is claimed by w until 2026-01-01T00:05:00.000Z"),
    (claimed_live, lambda s, i, t: todos.claim(s, i, owner="w"), "reclaim-own-live-lease",
     "todo 1 is claimed by w until 2026-01-01T00:05:00.000Z"),
    (failed, lambda s, i, t: todos.heartbeat(s, Lease(i, t)), "heartbeat-a-failed-todo",
     "todo 1 is failed, not claimed; the lease token is stale"),
    (failed, lambda s, i, t: todos.complete(s, Lease(i, t)), "complete-a-failed-todo",
     "todo 1 is failed, not claimed; the lease token is stale"),
    (failed, lambda s, i, t: todos.release(s, Lease(i, t)), "release-a-failed-todo",
     "todo 1 is failed, not claimed; the lease token is stale"),
    (dead_letter, lambda s, i, t: todos.claim(s, i, owner="w"), "claim-a-dead-letter",
     "todo 1 is a dead letter after 1 attempt; redrive it first"),
    (dead_letter, lambda s, i, t: todos.fail(s, Lease(i, t)), "fail-a-dead-letter",
     "todo 1 is failed, not claimed; the lease token is stale"),
]


@pytest.mark.parametrize("setup, call, message", [(s, c, m) for s, c, _, m in REFUSED], ids=[i for _, _, i, _ in REFUSED])
async def test_transition_not_in_the_diagram_is_refused_saying_why_and_changes_nothing(store, setup, call, message):
    todo_id, token = await setup(store)
    before = await todos.get(store, todo_id)
    with pytest.raises(Conflict) as refused:
        await call(store, todo_id, token)
    assert refused.value.message == message
    after = await todos.get(store, todo_id)
    assert after == before
    assert after.attempts == before.attempts


# ---------------------------------------------------------------- unknown ids

VERBS_ON_AN_ID = [
    (lambda s, i: todos.get(s, i), "get",
     "todo 4242 does not exist"),
    (lambda s, i: todos.claim(s, i, owner="w"), "claim",
     "todo 4242 does not exist"),
    (lambda s, i: todos.heartbeat(s, Lease(i, "token")), "heartbeat",
     "todo 4242 does not exist"),
    (lambda s, i: todos.complete(s, Lease(i, "token")), "complete",
     "todo 4242 does not exist"),
    (lambda s, i: todos.fail(s, Lease(i, "token"), error="e"), "fail",
     "todo 4242 does not exist"),
    (lambda s, i: todos.release(s, Lease(i, "token")), "release",
     "todo 4242 does not exist"),
    (lambda s, i: todos.redrive(s, i), "redrive",
     "todo 4242 does not exist"),
]


@pytest.mark.parametrize("call", [c for c, _, _ in VERBS_ON_AN_ID], ids=[i for _, i, _ in VERBS_ON_AN_ID])
async def test_unknown_id_is_not_found_for_every_verb(store, row_count, call):
    await new(store)  # something else exists, untouched
    with pytest.raises(NotFound) as refused:
        await call(store, UNKNOWN_ID)
    assert refused.value.message == f"todo {UNKNOWN_ID} does not exist"
    assert (row_count("todos"), row_count("attempts")) == (1, 0)


# ---------------------------------------------------------------- invalid arguments
# Each call gets the store, a claimed todo's id and its token.

INVALID = [
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", delay=-1)), "negative-delay",
     "delay must be between 0 and 31536000 seconds, got -1"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", delay=float("nan"))), "nan-delay",
     "delay must be a finite number of seconds"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", delay=float("inf"))), "infinite-delay",
     "delay must be a finite number of seconds"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", delay=1e20)), "delay-beyond-int64-ms",
     "delay must be between 0 and 31536000 seconds, got 1e+20"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", max_attempts=0)), "max-attempts-0",
     "max_attempts must be between 1 and 1000, got 0"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", priority=2**63)), "priority-beyond-int64",
     "priority must be between -9223372036854775808 and 9223372036854775807, got 9223372036854775808"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", priority=1.5)), "float-priority",
     "priority must be an integer"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", priority="1")), "str-priority",
     "priority must be an integer"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", priority=True)), "bool-priority",
     "priority must be an integer"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", payload={1, 2})), "set-payload",
     "payload is not JSON-serialisable: Object of type set is not JSON serializable"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", payload=float("inf"))), "inf-payload",
     "payload is not JSON-serialisable: Out of range float values are not JSON compliant"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="", title="t")), "empty-queue",
     "queue must be a non-empty string"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="  ", title="t")), "blank-queue",
     "queue must be a non-empty string"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title=" \n ")), "blank-title",
     "title must not be empty"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="x" * 1001)), "title-too-long",
     "title is longer than 1000 characters"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", assignee="")), "empty-assignee",
     "assignee must be a non-empty string"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", idempotency_key="")), "empty-key",
     "idempotency_key must be a non-empty string"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q\x1b[2J", title="t")), "escape-in-queue",
     "queue holds a control character (\\x1b)"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t\x07")), "bell-in-title",
     "title holds a control character (\\x07)"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t\x00x")), "nul-in-title",
     "title holds a control character (\\x00)"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t\x9b31m")), "c1-csi-in-title",
     "title holds a control character (\\x9b)"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="\u202egnp.exe")), "bidi-override-in-title",
     "title holds a control character (\\u202e)"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", assignee="bob\n")), "newline-in-assignee",
     "assignee holds a control character (\\x0a)"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", kind="k\x1b")), "escape-in-kind",
     "kind holds a control character (\\x1b)"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", idempotency_key="k\r")), "cr-in-key",
     "idempotency_key holds a control character (\\x0d)"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", idempotency_key="event:gh:d-1:default")),
     "key-in-the-namespace-of-events",
     "idempotency keys starting with 'event:' are reserved for todos made from events"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", payload="x" * 1024 * 1024)), "payload-over-cap",
     "payload is 1048578 bytes, over the cap of 1 MiB (setting limits.max_payload)"),
    (lambda s, i, t: todos.complete(s, Lease(i, t), result=["y" * 1024 * 1024]), "result-over-cap",
     "result is 1048580 bytes, over the cap of 1 MiB (setting limits.max_payload)"),
    (lambda s, i, t: todos.fail(s, Lease(i, t), error="z" * (1024 * 1024 + 1)), "error-over-cap",
     "error is 1048577 bytes, over the cap of 1 MiB (setting limits.max_payload)"),
    (lambda s, i, t: todos.claim(s, i, owner="w\x1b]0;pwned\x07"), "escape-in-owner",
     "owner holds a control character (\\x1b)"),
    (lambda s, i, t: todos.claim(s, i, owner="w", lease=0), "claim-lease-0",
     "lease must be between 1 and 43200 seconds, got 0"),
    (lambda s, i, t: todos.claim(s, i, owner="w", lease=12 * 3600 + 1), "claim-lease-over-12h",
     "lease must be between 1 and 43200 seconds, got 43201"),
    (lambda s, i, t: todos.claim(s, i, owner=""), "claim-empty-owner",
     "owner must be a non-empty string"),
    (lambda s, i, t: todos.claim_next(s, owner=""), "claim-next-empty-owner",
     "owner must be a non-empty string"),
    (lambda s, i, t: todos.claim_next(s, owner="w", lease=0), "claim-next-lease-0",
     "lease must be between 1 and 43200 seconds, got 0"),
    (lambda s, i, t: todos.claim_next(s, owner="w", queues=[]), "claim-next-no-queues",
     "queues must name at least one queue (or be omitted for all)"),
    (lambda s, i, t: todos.claim_next(s, owner="w", queues=[""]), "claim-next-empty-queue",
     "queue must be a non-empty string"),
    (lambda s, i, t: todos.heartbeat(s, Lease(i, t), lease_seconds=0), "heartbeat-lease-0",
     "lease must be between 1 and 43200 seconds, got 0"),
    (lambda s, i, t: todos.heartbeat(s, Lease(i, t), lease_seconds=12 * 3600 + 1), "heartbeat-lease-over-12h",
     "lease must be between 1 and 43200 seconds, got 43201"),
    (lambda s, i, t: todos.complete(s, Lease(i, t), result={1}), "complete-set-result",
     "result is not JSON-serialisable: Object of type set is not JSON serializable"),
    (lambda s, i, t: todos.fail(s, Lease(i, t), error=42), "fail-non-string-error",
     "error must be a string"),
    (lambda s, i, t: todos.release(s, Lease(i, t), delay=-1), "release-negative-delay",
     "delay must be between 0 and 31536000 seconds, got -1"),
    (lambda s, i, t: todos.release(s, Lease(i, t), delay=float("inf")), "release-infinite-delay",
     "delay must be a finite number of seconds"),
    (lambda s, i, t: todos.list_todos(s, state="open"), "list-unknown-state",
     "state must be one of pending, claimed, done, failed, got 'open'"),
    (lambda s, i, t: todos.claim_next(s, owner="w", queues="q"), "claim-next-queues-a-string",
     "queues must be a list of queue names, not a string"),
    (lambda s, i, t: todos.release(s, Lease(i, t), delay=365 * 86400 + 1), "release-delay-over-a-year",
     "delay must be between 0 and 31536000 seconds, got 31536001"),
    (lambda s, i, t: todos.list_todos(s, limit=1001), "list-limit-over-1000",
     "limit must be between 1 and 1000, got 1001"),
    (lambda s, i, t: events.list_events(s, limit=0), "events-limit-0", "limit must be between 1 and 1000, got 0"),
    (lambda s, i, t: events.list_events(s, limit=1001), "events-limit-over-1000",
     "limit must be between 1 and 1000, got 1001"),
    (lambda s, i, t: events.list_events(s, limit=True), "events-bool-limit", "limit must be between 1 and 1000, got True"),
    (lambda s, i, t: events.list_events(s, limit="5"), "events-str-limit", "limit must be between 1 and 1000, got '5'"),
    (lambda s, i, t: events.list_events(s, after_id="3"), "events-str-cursor", "after_id must be an integer"),
    (lambda s, i, t: events.list_events(s, after_id=True), "events-bool-cursor", "after_id must be an integer"),
    (lambda s, i, t: events.recent_events(s, limit=0), "recent-events-limit-0",
     "limit must be between 1 and 1000, got 0"),
    (lambda s, i, t: events.recent_events(s, limit=1001), "recent-events-limit-over-1000",
     "limit must be between 1 and 1000, got 1001"),
    (lambda s, i, t: events.recent_events(s, limit=True), "recent-events-bool-limit",
     "limit must be between 1 and 1000, got True"),
    (lambda s, i, t: events.recent_events(s, limit="5"), "recent-events-str-limit",
     "limit must be between 1 and 1000, got '5'"),
    (lambda s, i, t: todos.list_todos(s, limit=0), "list-limit-0",
     "limit must be between 1 and 1000, got 0"),
]


@pytest.mark.parametrize("call, message", [(c, m) for c, _, m in INVALID], ids=[i for _, i, _ in INVALID])
async def test_invalid_argument_is_refused_naming_what_was_wrong_and_writes_nothing(store, row_count, call, message):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    await new(store, title="other pending")
    before = [await todos.get(store, t.id) for t in await todos.list_todos(store)]
    with pytest.raises(InvalidArgument) as refused:
        await call(store, todo.id, claimed.lease_token)
    assert refused.value.message == message
    after = [await todos.get(store, t.id) for t in await todos.list_todos(store)]
    assert after == before
    assert [a.attempts for a in after] == [b.attempts for b in before]
    assert (row_count("todos"), row_count("attempts")) == (2, 1)


async def test_claim_next_refuses_a_bare_string_for_queues(store) -> None:
    await todos.create(store, NewTodo(queue="b", title="would be claimed from queue 'b' of 'builds'"))
    with pytest.raises(InvalidArgument):
        await todos.claim_next(store, owner="o", queues="builds")
    assert (await todos.get(store, 1)).state == "pending"


async def test_a_title_keeps_ordinary_unicode_and_folds_its_whitespace(store) -> None:
    todo = await new(store, title="Réviser\tla PR\n42 — 🚀")
    assert todo.title == "Réviser la PR 42 — 🚀"


async def test_a_payload_at_the_cap_is_accepted_and_a_raised_cap_takes_more(store) -> None:
    from switchboard_local.core import settings

    at_cap = "x" * (1024 * 1024 - 2)  # its JSON: two quotes more
    assert (await new(store, payload=at_cap)).payload == at_cap
    with pytest.raises(InvalidArgument, match="limits.max_payload"):
        await new(store, payload=at_cap + "x")
    await settings.set_value(store, "limits.max_payload", "2MiB")
    assert (await new(store, payload=at_cap + "x")).payload == at_cap + "x"


@pytest.mark.parametrize("separator", ["\u2028", "\u2029"], ids=["line-separator", "paragraph-separator"])
async def test_a_queue_name_with_a_line_or_paragraph_separator_is_refused(store, row_count, separator) -> None:
    # Log viewers and str.splitlines() break lines there: a name could forge a line.
    with pytest.raises(InvalidArgument, match="control character"):
        await todos.create(store, NewTodo(queue=f"q{separator}forged", title="t"))
    assert row_count("todos") == 0


@pytest.mark.parametrize("limit", [1, 1000])
async def test_list_limits_from_one_to_a_thousand_are_accepted(store, limit) -> None:
    await new(store)
    assert len(await todos.list_todos(store, limit=limit)) == 1
    assert await events.list_events(store, limit=limit) == []
    assert await events.recent_events(store, limit=limit) == []


async def test_lists_give_fifty_by_default(store) -> None:
    for n in range(51):
        await new(store, title=f"t{n}")
        await events.ingest(store, events.NewEvent(source="s", family="webhook", type="t", external_id=f"e{n}",
                                                   trust_mode="open", verified=False, body=b"{}"), [])  # fmt: skip
    assert len(await todos.list_todos(store)) == 50
    assert len(await events.list_events(store)) == 50
    assert len(await events.recent_events(store)) == 50


# ---------------------------------------------------------------- refusals that say why


async def test_a_token_that_is_not_a_string_is_refused_as_missing(store) -> None:
    todo = await new(store)
    await todos.claim(store, todo.id, owner="w")
    with pytest.raises(Conflict) as refused:
        await todos.complete(store, Lease(todo.id, 12345))
    assert refused.value.message == f"a lease token is required to change todo {todo.id}"
    assert (await todos.get(store, todo.id)).state == "claimed"


async def test_the_token_of_a_lease_taken_over_is_refused_naming_the_new_holder(store, clock) -> None:
    todo = await new(store)
    first = await todos.claim(store, todo.id, owner="w1", lease=60)
    clock.advance(61)
    await todos.claim(store, todo.id, owner="w2")
    with pytest.raises(Conflict) as refused:
        await todos.complete(store, Lease(todo.id, first.lease_token))
    assert refused.value.message == f"the lease token does not match the current lease on todo {todo.id} (held by w2)"


async def test_the_token_of_a_lapsed_lease_is_refused_saying_when_it_expired(store, clock) -> None:
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w", lease=60)
    clock.advance(61)
    with pytest.raises(Conflict) as refused:
        await todos.heartbeat(store, Lease(todo.id, claimed.lease_token))
    assert refused.value.message == f"the lease on todo {todo.id} expired at 2026-01-01T00:01:00.000Z"


async def test_claiming_a_delayed_todo_early_says_when_it_becomes_visible(store) -> None:
    todo = await new(store, delay=90)
    with pytest.raises(Conflict) as refused:
        await todos.claim(store, todo.id, owner="w")
    assert refused.value.message == f"todo {todo.id} is not visible until 2026-01-01T00:01:30.000Z"


async def test_an_assigned_todo_is_claimed_by_id_under_the_assignees_agent_name(store) -> None:
    todo = await new(store, assignee="alice")
    claimed = await todos.claim(store, todo.id, owner="alice-session-2", agent="alice")
    assert (claimed.id, claimed.owner) == (todo.id, "alice-session-2")


async def test_the_assignees_other_session_is_told_the_todo_is_claimed_and_others_that_it_is_not_theirs(store) -> None:
    todo = await new(store, assignee="alice")
    await todos.claim(store, todo.id, owner="alice-1", agent="alice")
    with pytest.raises(Conflict) as busy:
        await todos.claim(store, todo.id, owner="alice-2", agent="alice")
    assert busy.value.message.startswith(f"todo {todo.id} is claimed by alice-1 until ")
    with pytest.raises(Forbidden) as not_theirs:
        await todos.claim(store, todo.id, owner="bob")
    assert not_theirs.value.message == f"todo {todo.id} is assigned to 'alice'"


@pytest.mark.parametrize("verb", [todos.complete, todos.fail], ids=["complete", "fail"])
async def test_finishing_a_todo_outside_the_callers_queues_is_not_found_and_changes_nothing(store, verb) -> None:
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    with pytest.raises(NotFound) as refused:
        await verb(store, Lease.of(claimed, queues=["other"]), then=NextClaim(owner="w"))
    assert refused.value.message == f"todo {todo.id} does not exist"
    assert (await todos.get(store, todo.id)).state == "claimed"


@pytest.mark.parametrize(
    ("into", "detail"), [("pending", "pending"), ("claimed", "claimed"), ("retrying", "awaiting a retry"),
                         ("done", "done")],
)  # fmt: skip
async def test_redriving_anything_but_a_dead_letter_says_what_the_todo_is(store, into, detail) -> None:
    todo = await new(store, max_attempts=3)
    if into != "pending":
        claimed = await todos.claim(store, todo.id, owner="w")
        if into == "retrying":
            await todos.fail(store, Lease(todo.id, claimed.lease_token), error="later")
        elif into == "done":
            await todos.complete(store, Lease(todo.id, claimed.lease_token))
    with pytest.raises(Conflict) as refused:
        await todos.redrive(store, todo.id)
    assert refused.value.message == f"todo {todo.id} is {detail}, not a dead letter; only dead letters can be redriven"


async def test_redrive_refused_by_a_newer_live_todo_says_it_holds_the_key(store) -> None:
    dead = await new(store, max_attempts=1, idempotency_key="k")
    claimed = await todos.claim(store, dead.id, owner="w")
    await todos.fail(store, Lease(dead.id, claimed.lease_token), error="e")
    await new(store, idempotency_key="k")
    with pytest.raises(Conflict) as refused:
        await todos.redrive(store, dead.id)
    assert refused.value.message == f"todo {dead.id} cannot be redriven: a newer live todo holds its idempotency key"


async def test_a_todo_whose_last_lease_lapsed_can_be_redriven_at_once(store, clock) -> None:
    todo = await new(store, max_attempts=1)
    await todos.claim(store, todo.id, owner="w", lease=60)
    clock.advance(60)  # nobody read or claimed since: the lapse is noticed by the redrive itself
    redriven = await todos.redrive(store, todo.id)
    assert (redriven.state, redriven.attempt) == ("pending", 0)


async def test_claiming_a_dead_letter_counts_its_attempts_in_the_refusal(store, clock) -> None:
    todo = await new(store, max_attempts=2)
    for _ in range(2):
        claimed = await todos.claim(store, todo.id, owner="w")
        await todos.fail(store, Lease(todo.id, claimed.lease_token), error="e")
        clock.advance(3600)  # past the backoff
    with pytest.raises(Conflict) as refused:
        await todos.claim(store, todo.id, owner="w")
    assert refused.value.message == f"todo {todo.id} is a dead letter after 2 attempts; redrive it first"
