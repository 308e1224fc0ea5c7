"""A real `serve` process consuming moto's SQS server, killed with SIGKILL at random points, round after round.

Messages keep arriving while it runs. Each kill lands wherever the process
is: in a long poll, between a receive and its commit, between the commit and
the delete, in a renewal. What it held comes back when the (short) visibility
timeout runs out, and a fresh process stores it, or finds it stored: at the
end every message is stored exactly once, and SQS itself counts nothing
visible and nothing in flight.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from support.receiver import ServeProcess
from support.sql import rows, value
from support.sqs_server import add_sqs_adapter
from support.waits import until

ROUNDS = 5
MESSAGES = 3000
VISIBILITY = 2  # seconds: what a killed process held returns this soon
# Between two sends of ten: the producer outpaces the consumer only while it is down. (moto counts a
# queue's messages on every call: a backlog of thousands would slow each call to a quarter second.)
PACE = 0.08


def stored(db_path: Path) -> int:
    return value(db_path, "SELECT count(*) FROM events WHERE family = 'queue'")


def consuming(before: int, behind: int, sent: list[str]) -> Callable[[int], bool]:
    """More stored than ``before`` (or everything), and at most ``behind`` short of what was sent so far."""
    return lambda n: (n > before or n == MESSAGES) and n >= len(sent) - behind


def watching(proc: ServeProcess) -> dict:
    """A wait on what ``proc`` does fails at once if it exits, with its log."""

    def exited() -> str | None:
        status = proc.proc.poll()
        return None if status is None else f"serve exited with status {status}"

    return {"dead": exited, "context": lambda: "serve's stderr, the last 20 lines:\n" + "".join(proc.lines[-20:])}


@pytest.mark.both_backends
def test_killing_serve_again_and_again_while_messages_arrive_stores_each_once_and_leaves_nothing_in_flight(
    sqs_server, db_path: Path
) -> None:
    url = sqs_server.create_queue("work")
    add_sqs_adapter(db_path, sqs_server, url, name="work", visibility_timeout=VISIBILITY)
    client = sqs_server.client()
    sent: list[str] = []

    def produce() -> None:  # in batches of ten, through every kill
        for start in range(0, MESSAGES, 10):
            entries = [{"Id": str(i), "MessageBody": json.dumps({"n": start + i})} for i in range(10)]
            reply = client.send_message_batch(QueueUrl=url, Entries=entries)
            sent.extend(entry["MessageId"] for entry in reply["Successful"])
            time.sleep(PACE)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    rng = random.Random(int(os.environ.get("SWITCHBOARD_FUZZ_SEED", "13")))
    for _ in range(ROUNDS):
        before = stored(db_path)
        proc = ServeProcess(db_path)
        try:
            # Consuming (or all is stored), and within a random distance of what was sent: the backlog of its
            # start worked off, so that moto's calls stay quick.
            until(lambda: stored(db_path), consuming(before, rng.randint(0, 100), sent), **watching(proc))
            time.sleep(rng.uniform(0, 0.5))  # a random point of its work (not a wait for anything)
        finally:
            proc.proc.kill()
            proc.proc.wait(timeout=30)

    proc = ServeProcess(db_path)  # a fresh one: takes what is left, what is still sent, and what comes back
    try:
        proc.wait_serving()  # its stop below is a clean one: SIGTERM's handler is in place
        producer.join(timeout=120)
        assert not producer.is_alive() and len(sent) == MESSAGES
        until(lambda: stored(db_path), MESSAGES, **watching(proc))
        until(lambda: sqs_server.counts(url), (0, 0), **watching(proc))
        assert proc.stop() == 0, proc.stderr
    finally:
        proc.proc.kill()
    assert sorted(r[0] for r in rows(db_path, "SELECT external_id FROM events WHERE family = 'queue'")) == sorted(sent)
    assert value(db_path, "SELECT count(*) FROM todos") == MESSAGES  # none lost, none twice
    assert sqs_server.counts(url) == (0, 0)
