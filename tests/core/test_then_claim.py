"""Finishing a todo and claiming the next in one transaction: one commit per job."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from switchboard_local.core import todos
from switchboard_local.cli.main import main
from switchboard_local.core.errors import Conflict, InvalidArgument
from switchboard_local.core.store import Store
from switchboard_local.core.todo_model import NewTodo
from switchboard_local.core.todos import Lease, NextClaim

pytestmark = pytest.mark.anyio


async def commits(store: Store) -> int:
    return (await store.data_version())[1]


async def test_complete_then_claim_finishes_and_claims_the_next_in_one_commit(store) -> None:
    for title in ("first", "second"):
        await todos.create(store, NewTodo(queue="q", title=title))
    first = await todos.claim_next(store, owner="w", queues=["q"])
    before = await commits(store)
    finished = await todos.complete(store, Lease.of(first), result={"ok": True}, then=NextClaim("w", ["q"]))
    assert await commits(store) - before == 1
    assert (finished.todo.state, finished.todo.result) == ("done", {"ok": True})
    following = finished.next
    assert following.title == "second" and following.state == "claimed" and following.lease_token
    last = await todos.complete(store, Lease.of(following), then=NextClaim("w", ["q"]))
    assert last.todo.state == "done" and last.next is None


async def test_finishing_without_then_claims_nothing(store) -> None:
    for title in ("first", "second"):
        await todos.create(store, NewTodo(queue="q", title=title))
    first = await todos.claim_next(store, owner="w", queues=["q"])
    finished = await todos.complete(store, Lease.of(first))
    assert finished.todo.state == "done" and finished.next is None
    assert [t.state for t in await todos.list_todos(store)] == ["pending", "done"]


async def test_fail_then_claim_fails_and_claims_the_next(store) -> None:
    for title in ("flaky", "next"):
        await todos.create(store, NewTodo(queue="q", title=title))
    flaky = await todos.claim_next(store, owner="w")
    finished = await todos.fail(store, Lease.of(flaky), error="boom", then=NextClaim("w"))
    assert (finished.todo.state, finished.todo.last_error, finished.todo.dead_letter) == ("failed", "boom", False)
    assert finished.next.title == "next"  # the failed one waits out its backoff


async def test_a_stale_token_claims_nothing_either(store) -> None:
    for title in ("held", "waiting"):
        await todos.create(store, NewTodo(queue="q", title=title))
    held = await todos.claim_next(store, owner="w")
    with pytest.raises(Conflict):
        await todos.complete(store, Lease(held.id, "stale"), then=NextClaim("w"))
    assert [t.state for t in await todos.list_todos(store)] == ["pending", "claimed"]


def test_cli_complete_with_claim_next(db_path: Path) -> None:
    runner = CliRunner()

    def cli(*args: str):
        result = runner.invoke(main, [*args, "--db", str(db_path), "--json"])
        return result.exit_code, result.stdout, result.stderr

    for title in ("a", "b"):
        cli("todo", "create", "--queue", "q", "--title", title)
    claimed = json.loads(cli("todo", "claim", "--queue", "q", "--owner", "me")[1])
    code, out, err = cli("todo", "complete", str(claimed["id"]), "--token", claimed["lease_token"], "--claim-next",
                         "--queue", "q", "--owner", "me")  # fmt: skip
    assert code == 0, err
    answer = json.loads(out)
    assert answer["todo"]["state"] == "done" and answer["next"]["title"] == "b" and answer["next"]["lease_token"]
    code, _, err = cli("todo", "complete", str(answer["next"]["id"]), "--token", answer["next"]["lease_token"],
                       "--queue", "q")  # fmt: skip
    assert code == 2 and "--claim-next" in err


def test_claim_next_validation_happens_before_anything_is_written(db_path: Path) -> None:
    async def go() -> None:
        async with await Store.open(db_path) as store:
            await todos.create(store, NewTodo(queue="q", title="t"))
            held = await todos.claim_next(store, owner="w")
            with pytest.raises(InvalidArgument):
                await todos.complete(store, Lease.of(held), then=NextClaim("w", "q"))
            assert (await todos.get(store, held.id)).state == "claimed"

    asyncio.run(go())
