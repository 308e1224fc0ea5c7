"""Routing chains (issue 31 §1): a ``chain`` rule's todo waits for the todos its event's earlier
rules made, on the single and the batch ingest path, in a replay, and through the CLI. Every
test runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from switchboard_local.core import routing, rules, sources, todos, webhook_config
from switchboard_local.core.errors import InvalidArgument
from switchboard_local.core.events import NewEvent
from switchboard_local.core.store.opener import open_store
from switchboard_local.core.todos import Lease

from support.sql import count, pg_connection

pytestmark = pytest.mark.anyio

DATA = Path(__file__).parent.parent / "data"
PR = {"action": "opened", "number": 42}


async def add_source(store, name: str = "gh") -> None:
    await sources.add(
        store, name, family="webhook", kind="github", trust_mode="github",
        config=webhook_config.source_config("github", {}), secrets=[sources.secret_ref(value="s")],
    )  # fmt: skip


def event(payload, *, delivery: str = "d-1", source: str = "gh") -> NewEvent:
    return NewEvent(
        source=source, family="webhook", type="pull_request", external_id=delivery, trust_mode="github",
        verified=True, body=json.dumps(payload).encode(), content_type="application/json",
    )  # fmt: skip


async def pipeline(store, *, chain_test: bool = False) -> None:
    """gh's pull requests: a build, a test (chained when asked) and a deploy chained after them."""
    await add_source(store)
    await rules.add(store, source="gh", queue="builds", title="build #{number}")
    await rules.add(store, source="gh", queue="tests", title="test #{number}", chain=chain_test)
    await rules.add(store, source="gh", queue="deploys", title="deploy #{number}", chain=True)


async def finish(store, todo_id: int, result=None) -> None:
    claimed = await todos.claim(store, todo_id, owner="w")
    await todos.complete(store, Lease.of(claimed), result=result)


async def waits(store, todo_id: int) -> list[int]:
    return [d.id for d in (await todos.get(store, todo_id)).dependencies or ()]


async def test_a_chain_rules_todo_waits_for_the_todos_its_events_earlier_rules_made(store) -> None:
    await pipeline(store)
    build, test, deploy = (await routing.deliver(store, event(PR))).todo_ids
    got = await todos.get(store, deploy)
    assert (got.queue, got.blocked, got.blocked_by, got.waits_for) == ("deploys", True, 2, 2)
    assert await waits(store, deploy) == [build, test]
    assert not (await todos.get(store, test)).blocked  # not a chain rule's: it waits for nothing
    assert await todos.claim_next(store, owner="w", queues=["deploys"]) is None


async def test_the_chains_todo_is_claimable_with_their_results_once_they_are_done(store) -> None:
    await pipeline(store)
    build, test, deploy = (await routing.deliver(store, event(PR))).todo_ids
    await finish(store, build, {"artifact": "app.tar"})
    assert (await todos.get(store, deploy)).blocked_by == 1
    await finish(store, test, {"passed": 12})
    claimed = await todos.claim_next(store, owner="w", queues=["deploys"])
    assert claimed is not None and claimed.id == deploy
    assert [(d.id, d.state, d.result) for d in claimed.dependencies] == [
        (build, "done", {"artifact": "app.tar"}), (test, "done", {"passed": 12})]  # fmt: skip


async def test_rules_that_each_chain_make_each_todo_wait_for_every_one_before_it(store) -> None:
    await pipeline(store, chain_test=True)
    build, test, deploy = (await routing.deliver(store, event(PR))).todo_ids
    assert (await waits(store, build), await waits(store, test), await waits(store, deploy)) == (
        [], [build], [build, test])  # fmt: skip


async def test_a_chain_rule_whose_event_made_no_todo_before_it_makes_a_ready_todo(store) -> None:
    await add_source(store)
    await rules.add(store, source="gh", where=["action=closed"], queue="cleanups")
    await rules.add(store, source="gh", queue="deploys", chain=True)
    (deploy,) = (await routing.deliver(store, event(PR))).todo_ids  # opened: the first rule does not match
    got = await todos.get(store, deploy)
    assert (got.blocked, got.waits_for) == (False, 0)
    assert (await todos.claim_next(store, owner="w", queues=["deploys"])).id == deploy


async def test_cancelling_an_earlier_todo_cancels_the_chains_todo_naming_why(store) -> None:
    await pipeline(store)
    build, _, deploy = (await routing.deliver(store, event(PR))).todo_ids
    await todos.cancel(store, build, by="ana", reason="bad commit")
    got = await todos.get(store, deploy)
    assert (got.state, got.cancel_reason) == ("cancelled", f"dependency {build} was cancelled")


async def test_a_batch_chains_each_events_todos_to_its_own_earlier_ones(store, db_path) -> None:
    await pipeline(store)
    await add_source(store, "plain")
    batch = [event(PR, delivery="a"), event(PR, delivery="plain-1", source="plain"), event(PR, delivery="b"),
             event(PR, delivery="a")]  # fmt: skip
    a, plain, b, again = await routing.deliver_many(store, batch)
    assert again == type(a)(a.event_id, True, a.todo_ids)  # a repeat within the batch answers as its first
    for made in (a, b):
        build, test, deploy = made.todo_ids
        assert await waits(store, deploy) == [build, test]
        assert (await todos.get(store, deploy)).blocked_by == 2
    assert not (await todos.get(store, plain.todo_ids[0])).blocked
    assert count(db_path, "todo_deps") == 4


async def test_a_redelivery_adds_no_todo_and_no_link(store, db_path) -> None:
    await pipeline(store)
    first = await routing.deliver(store, event(PR))
    again = await routing.deliver(store, event(PR))
    (in_batch, _) = await routing.deliver_many(store, [event(PR), event(PR, delivery="other")])
    assert again.todo_ids == in_batch.todo_ids == first.todo_ids and again.duplicate and in_batch.duplicate
    assert count(db_path, "todo_deps") == 2 + 2  # the first delivery's and the other one's


async def test_a_replays_chain_waits_for_the_replays_own_todos(store) -> None:
    await pipeline(store)
    first = await routing.deliver(store, event(PR))
    for todo_id in first.todo_ids[:2]:
        await finish(store, todo_id)
    build, test, deploy = await routing.replay(store, first.event_id)
    assert await waits(store, deploy) == [build, test]  # not the first delivery's, done already
    assert (await todos.get(store, deploy)).blocked_by == 2
    assert await routing.replay(store, first.event_id) == [build, test, deploy]  # found live, not made again


async def test_a_replay_kept_to_some_queues_chains_only_to_the_todos_it_made(store) -> None:
    await pipeline(store)
    first = await routing.deliver(store, event(PR))
    (build,) = await routing.replay(store, first.event_id, queues=["builds"])
    test, deploy = await routing.replay(store, first.event_id, queues=["tests", "deploys"])
    assert await waits(store, deploy) == [test]  # the replay's build is out of its queues
    assert await waits(store, build) == []


async def test_a_dry_run_names_the_earlier_todos_a_chains_todo_would_wait_for(store) -> None:
    await pipeline(store)
    build, test, deploy = await routing.dry_run(store, source="gh", type="pull_request", payload=PR)
    assert (build.after_keys, test.after_keys) == ((), ())
    assert deploy.after_keys == (build.idempotency_key, test.idempotency_key)


async def test_a_drop_rule_cannot_chain_and_nothing_is_stored(store) -> None:
    await add_source(store)
    with pytest.raises(InvalidArgument, match="--chain does not apply"):
        await rules.add(store, source="gh", drop=True, chain=True)
    assert await rules.list_rules(store) == []


async def test_a_rule_says_whether_it_chains(store) -> None:
    await add_source(store)
    await rules.add(store, source="gh", queue="a")
    await rules.add(store, source="gh", queue="b", chain=True)
    assert [(r.queue, r.chain, r.to_dict()["chain"]) for r in await rules.list_rules(store)] == [
        ("a", False, False), ("b", True, True)]  # fmt: skip


def test_the_cli_adds_lists_and_tests_a_chain_rule(cli) -> None:
    assert cli("source", "add", "gh", "--kind", "github", "--secret", "s").code == 0
    for queue in ("builds", "tests"):
        assert cli("rule", "add", "--source", "gh", "--queue", queue).code == 0
    added = cli("rule", "add", "--source", "gh", "--queue", "deploys", "--chain", "--stop", "--json")
    assert added.code == 0, added.err
    assert json.loads(added.out)["chain"] is True
    listed = cli("rule", "list")
    assert "-> deploys (after earlier, stop)" in listed.out and "-> builds\n" in listed.out + "\n"
    tested = cli("rule", "test", "--source", "gh", "--type", "pull_request", "--payload", json.dumps(PR))
    (deploy_row,) = [line for line in tested.out.splitlines() if "deploys" in line]
    assert deploy_row.split()[:5] == ["3", "deploys", "0", "-", "#1,#2"]
    as_json = json.loads(cli("rule", "test", "--source", "gh", "--payload", json.dumps(PR), "--json").out)
    assert [len(t["after_keys"]) for t in as_json] == [0, 0, 2]
    refused = cli("rule", "add", "--source", "gh", "--drop", "--chain")
    assert refused.code == 2 and "--chain does not apply" in refused.err


# ---------------------------------------------------------------- the migration


@pytest.fixture
def v13_database(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Path | str:
    """A database as version 13, the one before rule chains, left it (tests/data/schema-v13*.sql): a source
    and one rule of it."""
    source = ("INSERT INTO sources (name, family, kind, trust_mode, config, created_at, updated_at)"
              " VALUES ('gh', 'webhook', 'github', 'github', '{{}}', {now}, {now})")  # fmt: skip
    rule = ("INSERT INTO rules (position, source, action, queue, created_at)"
            " VALUES (1, 'gh', 'todo', 'builds', {now})")  # fmt: skip
    if backend == "sqlite":
        path = tmp_path / "switchboard.db"
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.executescript((DATA / "schema-v13.sql").read_text("utf-8"))
            conn.executescript(f"PRAGMA user_version = 13;\n{source.format(now=0)};\n{rule.format(now=0)};")
        finally:
            conn.close()
        return path
    server = request.getfixturevalue("postgres_server")
    request.getfixturevalue("monkeypatch").setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    url = server.empty_database()
    request.addfinalizer(lambda: server.drop(url))
    with pg_connection(url) as conn:
        conn.execute((DATA / "schema-v13.postgres.sql").read_text("utf-8"))
        conn.execute("INSERT INTO schema_migrations (version) VALUES (13)")
        for row in (source, rule):
            conn.execute(row.format(now="to_timestamp(0)"))
    return url


async def test_the_chain_migration_keeps_every_rule_unchained_and_lets_a_rule_chain(v13_database, clock) -> None:
    async with await open_store(v13_database, clock=clock) as upgraded:
        (kept,) = await rules.list_rules(upgraded)
        assert (kept.queue, kept.chain) == ("builds", False)
        await rules.add(upgraded, source="gh", queue="deploys", chain=True)
        build, deploy = (await routing.deliver(upgraded, event(PR))).todo_ids
        assert await waits(upgraded, deploy) == [build]
