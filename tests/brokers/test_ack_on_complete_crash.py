"""A real `serve` acking on completion, killed with SIGKILL while it holds messages for their todos,
then a fresh one: nothing lost, no todo made twice, and every message acked once its todos finish,
as each broker itself counts (a real redis-server, a real nats-server, moto's SQS)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from switchboard_local.core.store.opener import open_store

from support.crashes import log, serve, watching
from support.holding import BROKER_NAMES, bodies, complete, rig_for, todo_ids
from support.sql import rows, value
from support.waits import until


def events(db: Path) -> int:
    return value(db, "SELECT count(*) FROM events WHERE family = 'queue'")


def finish(db: Path, ids: list[int]) -> None:
    """Complete these todos, as an agent in a process of its own would."""

    async def run() -> None:
        async with await open_store(db) as store:
            for todo_id in ids:
                await complete(store, todo_id)

    asyncio.run(run())


@pytest.mark.both_backends
@pytest.mark.parametrize("broker", BROKER_NAMES)
def test_kill_9_while_holding_then_a_fresh_serve_loses_nothing_makes_no_todo_twice_and_acks_as_todos_finish(
    request, broker, db_path: Path
) -> None:
    with rig_for(request, broker, short_lease=True) as rig:
        rig.add_by_cli(db_path)
        rig.publish(bodies(20))
        with serve(db_path) as crashed:
            until(lambda: events(db_path), 20, **watching(crashed))
            until(rig.counts, (0, 20), **watching(crashed))  # stored, and held for their todos
            first = todo_ids(db_path, "work")
            finish(db_path, first[:5])
            until(rig.counts, (0, 15), **watching(crashed))
            crashed.proc.kill()  # SIGKILL while fifteen messages are held
            crashed.proc.wait(timeout=10)

        # While nothing consumes: five more todos finish, five more messages arrive.
        finish(db_path, first[5:10])
        rig.publish(bodies(5, start=20))
        with serve(db_path) as restarted:
            until(lambda: events(db_path), 25, **watching(restarted))
            # The held fifteen came back (at once from the stream's pending list; after the lease elsewhere) and
            # collapsed into their events: the five whose todos finished meanwhile are acked, ten held again.
            until(rig.counts, (0, 15), **watching(restarted))
            finish(db_path, todo_ids(db_path, "work")[10:])
            until(rig.counts, (0, 0), **watching(restarted))
            assert restarted.stop() == 0, log(restarted)

    assert value(db_path, "SELECT count(*) FROM todos") == 25  # one todo a message: none made twice
    assert value(db_path, "SELECT count(*) FROM todos WHERE state = 'done'") == 25
    stored = sorted(bytes(b).decode() for (b,) in rows(db_path, "SELECT body FROM events WHERE family = 'queue'"))
    assert stored == sorted(bodies(25))  # every message once
