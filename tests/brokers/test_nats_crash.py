"""Crashes of a real `serve` process consuming a real nats-server's JetStream: killed with SIGKILL
between commit and ack, and at random points while messages keep arriving. Afterwards every message
is stored exactly once, and the server itself (the consumer's info) has nothing waiting or unacked."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from switchboard_local.core.store.shared import is_url

from support.crashes import PAUSED, lines_with, log, serve, watching
from support.nats_server import Nats, add_nats_adapter_by_cli, add_stream, consumer_counts, consumer_info, publish
from support.receiver import ServeProcess
from support.sql import rows, value
from support.waits import until

ROUNDS = 5
MESSAGES = 3000
PER_ROUND = MESSAGES // ROUNDS
ACK_WAIT = 2  # seconds: what a killed process left unacked comes back this soon (well within a wait's stall)


def add_adapter(db: Path, url: str, **options: Any) -> None:
    add_nats_adapter_by_cli(db, url, "WORK", name="work", subject="work.>", ack_wait=ACK_WAIT, **options)


def stored_bodies(db: Path) -> list[str]:
    text = "convert_from(body, 'UTF8')" if is_url(db) else "CAST(body AS TEXT)"  # bytea on PostgreSQL
    return [b for (b,) in rows(db, f"SELECT {text} FROM events WHERE family = 'queue'")]


def events(db: Path) -> int:
    return value(db, "SELECT count(*) FROM events WHERE family = 'queue'")


@pytest.fixture
def nats(nats_server):
    client = Nats(nats_server.url)
    client.run(add_stream(client.client, "WORK", ["work.>"]))
    yield client
    client.close()


@pytest.mark.both_backends
def test_kill_9_after_commit_before_ack_then_restart_stores_everything_once(nats_server, nats, db_path: Path) -> None:
    add_adapter(db_path, nats_server.url, batch=16)
    messages = [json.dumps({"n": i}) for i in range(100)]
    nats.run(publish(nats.client, "work.job", [m.encode() for m in messages]))

    with serve(db_path, fault="pause-after-commit") as crashed:
        # The first batch is committed and not acknowledged.
        until(lines_with(crashed, PAUSED), lambda n: n > 0, **watching(crashed))
        crashed.proc.kill()  # SIGKILL in the window between COMMIT and ack
        crashed.proc.wait(timeout=10)
    assert events(db_path) == 16
    assert nats.run(consumer_counts(nats.client, "WORK")) == (84, 16)  # stored, never acked

    with serve(db_path) as restarted:
        until(lambda: events(db_path), 100, **watching(restarted))
        until(lambda: nats.run(consumer_counts(nats.client, "WORK")), (0, 0), **watching(restarted))
        assert restarted.stop() == 0, log(restarted)
    assert value(db_path, "SELECT count(*) FROM todos") == 100  # no duplicates, nothing lost
    assert sorted(stored_bodies(db_path)) == sorted(messages)


def test_killing_serve_at_random_points_while_messages_arrive_stores_each_once(nats_server, nats,
                                                                               db_path: Path) -> None:  # fmt: skip
    add_adapter(db_path, nats_server.url)
    sent: list[str] = []

    def produce(first: int, count: int) -> None:  # every third message carries a Nats-Msg-Id
        for i in range(first, first + count):
            body = json.dumps({"n": i})
            nats.run(publish(nats.client, "work.job", [body.encode()], msg_ids=[f"job-{i}"] if i % 3 == 0 else None))
            sent.append(body)

    rng = random.Random(int(os.environ.get("SWITCHBOARD_FUZZ_SEED", "13")))
    procs: list[ServeProcess] = []
    try:
        for round in range(ROUNDS):  # each round's messages are published while its process consumes
            proc = ServeProcess(db_path)
            procs.append(proc)
            until(lines_with(proc, "adapter work: started"), lambda n: n > 0, **watching(proc))
            producer = threading.Thread(target=produce, args=(round * PER_ROUND, PER_ROUND), daemon=True)
            producer.start()
            time.sleep(rng.uniform(0.1, 1.0))  # a random point of its work: reading, storing or acking
            proc.proc.kill()
            proc.proc.wait(timeout=30)
            producer.join(timeout=60)
            assert not producer.is_alive(), "the producer did not finish"
        left = MESSAGES - events(db_path)
        proc = ServeProcess(db_path)  # a fresh one: what the kills left unacked is redelivered after AckWait
        procs.append(proc)
        # Started before it is asked to stop: the kills may have left it nothing to do.
        until(lines_with(proc, "adapter work: started"), lambda n: n > 0, **watching(proc))
        until(lambda: events(db_path), MESSAGES, **watching(proc))
        until(lambda: nats.run(consumer_counts(nats.client, "WORK")), (0, 0), **watching(proc))
        assert proc.stop() == 0, log(proc)
    finally:
        for p in procs:
            if p.proc.poll() is None:
                p.proc.kill()
                p.proc.wait()

    assert sorted(stored_bodies(db_path)) == sorted(sent)  # every message stored, and once
    assert value(db_path, "SELECT count(*) FROM todos") == MESSAGES
    delivered = nats.run(consumer_info(nats.client, "WORK")).delivered.consumer_seq
    print(f"{left} of {MESSAGES} messages left to the fresh process; {delivered - MESSAGES} redeliveries in all")
