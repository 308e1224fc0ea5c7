"""Crashes of a real `serve` process consuming a real RabbitMQ node.

SIGKILL leaves the broker to settle what the process had: its connection
drops, and every delivery it had not acked goes back to the queue, to be
delivered again to the next process, whose idempotency keys collapse what was
stored already. Afterwards the broker itself (`rabbitmqctl list_queues`) must
hold nothing, ready or unacknowledged, and every message must be stored once.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from pathlib import Path

import pytest

from switchboard_local.core.store.shared import is_url

from support.amqp import new_queue
from support.cli import run_cli
from support.crashes import PAUSED, lines_with, log, serve, watching
from support.rabbitmq_server import RabbitMQServer
from support.receiver import ServeProcess
from support.sql import rows, value
from support.waits import until

ROUNDS = 5
MESSAGES = 3000  # at least: the producer keeps going until the last round is over


def add_adapter(db_path: Path | str, server: RabbitMQServer, queue: str, batch: int) -> None:
    added = run_cli("adapter", "add", "work", "--broker", "amqp", "--url", server.url, "--amqp-queue", queue,
                    "--batch", str(batch), db=db_path)  # fmt: skip
    assert added.returncode == 0, added.stderr


def stored(db_path: Path | str) -> int:
    return value(db_path, "SELECT count(*) FROM events WHERE family = 'queue'")


def bodies(db_path: Path | str) -> list[str]:
    text = "convert_from(body, 'UTF8')" if is_url(db_path) else "CAST(body AS TEXT)"  # bytea on PostgreSQL
    return [body for (body,) in rows(db_path, f"SELECT {text} FROM events WHERE family = 'queue'")]


@pytest.mark.both_backends
def test_kill_9_after_commit_before_ack_then_restart_stores_everything_once(rabbitmq, db_path) -> None:
    queue = new_queue(rabbitmq)
    add_adapter(db_path, rabbitmq, queue, batch=16)
    sent = [json.dumps({"n": i}) for i in range(100)]
    rabbitmq.admin.publish(queue, [m.encode() for m in sent])

    with serve(db_path, fault="pause-after-commit") as crashed:
        # A batch is committed and not acknowledged.
        until(lines_with(crashed, PAUSED), lambda n: n > 0, **watching(crashed))
        until(lambda: rabbitmq.list_queues()[queue], (84, 16))  # the prefetch: a batch delivered, the rest ready
        crashed.proc.kill()  # SIGKILL in the window between COMMIT and ack
        crashed.proc.wait(timeout=10)
    committed = stored(db_path)
    assert 1 <= committed <= 16
    until(lambda: rabbitmq.list_queues()[queue], (100, 0))  # the broker took them all back: stored, never acked

    with serve(db_path) as restarted:
        until(lambda: stored(db_path), 100, **watching(restarted))
        until(lambda: rabbitmq.list_queues()[queue], (0, 0), **watching(restarted))
        assert restarted.stop() == 0, log(restarted)
    assert value(db_path, "SELECT count(*) FROM todos") == 100  # no duplicates, nothing lost
    assert sorted(bodies(db_path)) == sorted(sent)


def test_killing_serve_at_random_points_while_messages_arrive_stores_each_once_and_leaves_nothing_at_the_broker(
    rabbitmq, db_path
) -> None:
    queue = new_queue(rabbitmq)
    add_adapter(db_path, rabbitmq, queue, batch=16)
    sent: list[str] = []
    rounds_done = threading.Event()

    def produce() -> None:
        """Messages keep arriving through every kill (at least MESSAGES in all); half bring a message-id."""
        while not rounds_done.is_set() or len(sent) < MESSAGES:
            chunk = [json.dumps({"n": len(sent) + i}) for i in range(10)]
            rabbitmq.admin.publish(queue, [m.encode() for m in chunk[:5]])
            for m in chunk[5:]:
                rabbitmq.admin.publish(queue, [m.encode()], message_id=f"id-{m}")
            sent.extend(chunk)
            time.sleep(0.02)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    rng = random.Random(int(os.environ.get("SWITCHBOARD_FUZZ_SEED", "13")))
    for _ in range(ROUNDS):
        before = stored(db_path)
        victim = ServeProcess(db_path)
        try:
            until(lambda: stored(db_path), lambda n, before=before: n > before, **watching(victim))  # it consumes
            time.sleep(rng.uniform(0.0, 1.5))  # a random point of its work: reading, committing or acking
            victim.proc.kill()
            victim.proc.wait(timeout=30)
        finally:
            if victim.proc.poll() is None:
                victim.proc.kill()
                victim.proc.wait()
    rounds_done.set()
    producer.join(timeout=120)
    assert not producer.is_alive() and len(sent) >= MESSAGES

    with serve(db_path) as fresh:
        until(lambda: stored(db_path), len(sent), **watching(fresh))
        until(lambda: rabbitmq.list_queues()[queue], (0, 0), **watching(fresh))
        assert fresh.stop() == 0, log(fresh)
    assert sorted(bodies(db_path)) == sorted(sent), "every message stored, and once"
    assert value(db_path, "SELECT count(*) FROM todos") == len(sent)
    assert rabbitmq.list_queues()[queue] == (0, 0)
