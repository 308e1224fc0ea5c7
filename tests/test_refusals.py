"""Refusals (DESIGN §2): transitions not in the diagram, unknown ids, invalid arguments.

A refused call raises and leaves the database as it was.
"""

from __future__ import annotations

import pytest

from switchboard_local import todos
from switchboard_local.errors import Conflict, InvalidArgument, NotFound
from switchboard_local.todos import NewTodo

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
    await todos.release(store, todo.id, claimed.lease_token)
    return todo.id, claimed.lease_token


async def done(store):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    await todos.complete(store, todo.id, claimed.lease_token)
    return todo.id, claimed.lease_token


async def claimed_live(store):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    return todo.id, claimed.lease_token


async def failed(store):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    await todos.fail(store, todo.id, claimed.lease_token, error="e")
    return todo.id, claimed.lease_token


async def dead_letter(store):
    todo = await new(store, max_attempts=1)
    claimed = await todos.claim(store, todo.id, owner="w")
    await todos.fail(store, todo.id, claimed.lease_token, error="e")
    return todo.id, claimed.lease_token


REFUSED = [
    (pending_with_stale_token, lambda s, i, t: todos.complete(s, i, t), "complete-a-pending-todo"),
    (done, lambda s, i, t: todos.complete(s, i, t), "complete-a-done-todo"),
    (done, lambda s, i, t: todos.fail(s, i, t, error="x"), "fail-a-done-todo"),
    (done, lambda s, i, t: todos.heartbeat(s, i, t), "heartbeat-a-done-todo"),
    (pending_with_stale_token, lambda s, i, t: todos.release(s, i, t), "release-a-pending-todo"),
    (done, lambda s, i, t: todos.claim(s, i, owner="w"), "claim-a-done-todo"),
    (claimed_live, lambda s, i, t: todos.claim(s, i, owner="other"), "claim-a-claimed-todo"),
    (claimed_live, lambda s, i, t: todos.claim(s, i, owner="w"), "reclaim-own-live-lease"),
    (failed, lambda s, i, t: todos.heartbeat(s, i, t), "heartbeat-a-failed-todo"),
    (failed, lambda s, i, t: todos.complete(s, i, t), "complete-a-failed-todo"),
    (failed, lambda s, i, t: todos.release(s, i, t), "release-a-failed-todo"),
    (dead_letter, lambda s, i, t: todos.claim(s, i, owner="w"), "claim-a-dead-letter"),
    (dead_letter, lambda s, i, t: todos.fail(s, i, t), "fail-a-dead-letter"),
]


@pytest.mark.parametrize("setup, call", [(s, c) for s, c, _ in REFUSED], ids=[i for _, _, i in REFUSED])
async def test_transition_not_in_the_diagram_is_refused_and_changes_nothing(store, setup, call):
    todo_id, token = await setup(store)
    before = await todos.get(store, todo_id)
    with pytest.raises(Conflict):
        await call(store, todo_id, token)
    after = await todos.get(store, todo_id)
    assert after == before
    assert after.attempts == before.attempts


# ---------------------------------------------------------------- unknown ids

VERBS_ON_AN_ID = [
    (lambda s, i: todos.get(s, i), "get"),
    (lambda s, i: todos.claim(s, i, owner="w"), "claim"),
    (lambda s, i: todos.heartbeat(s, i, "token"), "heartbeat"),
    (lambda s, i: todos.complete(s, i, "token"), "complete"),
    (lambda s, i: todos.fail(s, i, "token", error="e"), "fail"),
    (lambda s, i: todos.release(s, i, "token"), "release"),
    (lambda s, i: todos.redrive(s, i), "redrive"),
]


@pytest.mark.parametrize("call", [c for c, _ in VERBS_ON_AN_ID], ids=[i for _, i in VERBS_ON_AN_ID])
async def test_unknown_id_is_not_found_for_every_verb(store, row_count, call):
    await new(store)  # something else exists, untouched
    with pytest.raises(NotFound):
        await call(store, UNKNOWN_ID)
    assert (row_count("todos"), row_count("attempts")) == (1, 0)


# ---------------------------------------------------------------- invalid arguments
# Each call gets the store, a claimed todo's id and its token.

INVALID = [
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", delay=-1)), "negative-delay"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", delay=float("nan"))), "nan-delay"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", delay=float("inf"))), "infinite-delay"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", delay=1e20)), "delay-beyond-int64-ms"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", max_attempts=0)), "max-attempts-0"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", priority=2**63)), "priority-beyond-int64"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", priority=1.5)), "float-priority"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", priority="1")), "str-priority"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", priority=True)), "bool-priority"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", payload={1, 2})), "set-payload"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", payload=float("inf"))), "inf-payload"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="", title="t")), "empty-queue"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="  ", title="t")), "blank-queue"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title=" \n ")), "blank-title"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="x" * 1001)), "title-too-long"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", assignee="")), "empty-assignee"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", idempotency_key="")), "empty-key"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q\x1b[2J", title="t")), "escape-in-queue"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t\x07")), "bell-in-title"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t\x00x")), "nul-in-title"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t\x9b31m")), "c1-csi-in-title"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="\u202egnp.exe")), "bidi-override-in-title"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", assignee="bob\n")), "newline-in-assignee"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", kind="k\x1b")), "escape-in-kind"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", idempotency_key="k\r")), "cr-in-key"),
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", idempotency_key="event:gh:d-1:default")),
     "key-in-the-namespace-of-events"),  # fmt: skip
    (lambda s, i, t: todos.create(s, NewTodo(queue="q", title="t", payload="x" * 1024 * 1024)), "payload-over-cap"),
    (lambda s, i, t: todos.complete(s, i, t, result=["y" * 1024 * 1024]), "result-over-cap"),
    (lambda s, i, t: todos.fail(s, i, t, error="z" * (1024 * 1024 + 1)), "error-over-cap"),
    (lambda s, i, t: todos.claim(s, i, owner="w\x1b]0;pwned\x07"), "escape-in-owner"),
    (lambda s, i, t: todos.claim(s, i, owner="w", lease=0), "claim-lease-0"),
    (lambda s, i, t: todos.claim(s, i, owner="w", lease=12 * 3600 + 1), "claim-lease-over-12h"),
    (lambda s, i, t: todos.claim(s, i, owner=""), "claim-empty-owner"),
    (lambda s, i, t: todos.claim_next(s, owner=""), "claim-next-empty-owner"),
    (lambda s, i, t: todos.claim_next(s, owner="w", lease=0), "claim-next-lease-0"),
    (lambda s, i, t: todos.claim_next(s, owner="w", queues=[]), "claim-next-no-queues"),
    (lambda s, i, t: todos.claim_next(s, owner="w", queues=[""]), "claim-next-empty-queue"),
    (lambda s, i, t: todos.heartbeat(s, i, t, lease=0), "heartbeat-lease-0"),
    (lambda s, i, t: todos.heartbeat(s, i, t, lease=12 * 3600 + 1), "heartbeat-lease-over-12h"),
    (lambda s, i, t: todos.complete(s, i, t, result={1}), "complete-set-result"),
    (lambda s, i, t: todos.fail(s, i, t, error=42), "fail-non-string-error"),
    (lambda s, i, t: todos.release(s, i, t, delay=-1), "release-negative-delay"),
    (lambda s, i, t: todos.release(s, i, t, delay=float("inf")), "release-infinite-delay"),
    (lambda s, i, t: todos.list_todos(s, state="open"), "list-unknown-state"),
    (lambda s, i, t: todos.list_todos(s, limit=0), "list-limit-0"),
]


@pytest.mark.parametrize("call", [c for c, _ in INVALID], ids=[i for _, i in INVALID])
async def test_invalid_argument_is_refused_and_writes_nothing(store, row_count, call):
    todo = await new(store)
    claimed = await todos.claim(store, todo.id, owner="w")
    await new(store, title="other pending")
    before = [await todos.get(store, t.id) for t in await todos.list_todos(store)]
    with pytest.raises(InvalidArgument):
        await call(store, todo.id, claimed.lease_token)
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
    from switchboard_local import settings

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
