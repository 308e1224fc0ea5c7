"""Finishing a todo and claiming the next in one transaction: one commit per job."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from switchboard_local.core import todos
from switchboard_local.cli.main import main
from switchboard_local.core.errors import Conflict
from switchboard_local.core.store import Store
from switchboard_local.core.todos import NewTodo, NextClaim

pytestmark = pytest.mark.anyio


async def commits(store: Store) -> int:
    return (await store.data_version())[1]


async def test_complete_then_claim_finishes_and_claims_the_next_in_one_commit(store) -> None:
    for title in ("first", "second"):
        await todos.create(store, NewTodo(queue="q", title=title))
    first = await todos.claim_next(store, owner="w", queues=["q"])
    before = await commits(store)
    done, following = await todos.complete_then_claim(store, first.id, first.lease_token, NextClaim("w", ["q"]),
                                                      result={"ok": True})  # fmt: skip
    assert await commits(store) - before == 1
    assert (done.state, done.result) == ("done", {"ok": True})
    assert following.title == "second" and following.state == "claimed" and following.lease_token
    last, nothing = await todos.complete_then_claim(store, following.id, following.lease_token, NextClaim("w", ["q"]))
    assert last.state == "done" and nothing is None


async def test_fail_then_claim_fails_and_claims_the_next(store) -> None:
    for title in ("flaky", "next"):
        await todos.create(store, NewTodo(queue="q", title=title))
    flaky = await todos.claim_next(store, owner="w")
    failed, following = await todos.fail_then_claim(store, flaky.id, flaky.lease_token, NextClaim("w"), error="boom")
    assert (failed.state, failed.last_error, failed.dead_letter) == ("failed", "boom", False)
    assert following.title == "next"  # the failed one waits out its backoff


async def test_a_stale_token_claims_nothing_either(store) -> None:
    for title in ("held", "waiting"):
        await todos.create(store, NewTodo(queue="q", title=title))
    held = await todos.claim_next(store, owner="w")
    with pytest.raises(Conflict):
        await todos.complete_then_claim(store, held.id, "stale", NextClaim("w"))
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
            with pytest.raises(todos.InvalidArgument):
                await todos.complete_then_claim(store, held.id, held.lease_token, NextClaim("w", "q"))
            assert (await todos.get(store, held.id)).state == "claimed"

    asyncio.run(go())
