"""What the ack-on-completion tests share: each broker that can hold a message (a Redis stream,
NATS JetStream, SQS) behind one face, and the ways a todo finishes.

A ``Rig`` publishes messages to its real server and asks the broker itself what it has:
``counts()`` is (waiting, unacked), the broker's own numbers (the group's lag and XPENDING; the
consumer's num_pending and num_ack_pending; the queue's visible and not-visible messages), so
that a test reads the work in progress where an operator would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from switchboard_local.brokers.registry import BROKERS
from switchboard_local.core import sources, todos
from switchboard_local.core.sources import Source
from switchboard_local.core.store.interface import Store
from switchboard_local.core.todos import Lease

from support.cli import run_cli
from support.nats_server import Nats, add_stream, consumer_counts
from support.sql import rows, value

BROKER_NAMES = ("redis", "nats", "sqs")
SHORT_LEASE = 2  # seconds: NATS AckWait, the SQS visibility timeout, Redis --claim-idle, where a lapse should show soon


class Rig:
    """One broker's server, the adapter's options for it (``options``: configure's names), and its counts."""

    broker = ""

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options

    def publish(self, bodies: list[str]) -> None:
        raise NotImplementedError

    def counts(self) -> tuple[int, int]:
        """(waiting: not delivered to the adapter yet, unacked: delivered and not acked), as the broker says."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def config(self, **options: Any) -> dict[str, Any]:
        """The adapter's config as `adapter add` makes it, acking on completion."""
        return BROKERS.get(self.broker).configure({**self.options, "ack": "on-complete", **options})

    async def add(self, store: Store, name: str = "work", **options: Any) -> Source:
        return await sources.add(store, name, family="queue", kind=self.broker, trust_mode="queue",
                                 config=self.config(**options))  # fmt: skip

    def add_by_cli(self, db: Path | str, name: str = "work", **options: Any) -> None:
        """`adapter add NAME --broker B … --ack on-complete`, by the real command line."""
        flags = [part for key, given in {**self.options, **options}.items()
                 for part in (f"--{key.replace('_', '-')}", str(given))]  # fmt: skip
        added = run_cli("adapter", "add", name, "--broker", self.broker, *flags, "--ack", "on-complete", db=db)
        assert added.returncode == 0, added.stderr


class RedisRig(Rig):
    broker = "redis"

    def __init__(self, server: Any, **options: Any) -> None:
        super().__init__({"url": server.url, "mode": "stream", "key": "work", **options})
        self.client = server.client()

    def publish(self, bodies: list[str]) -> None:
        for body in bodies:
            self.client.xadd("work", {"payload": body})

    def counts(self) -> tuple[int, int]:
        groups = self.client.xinfo_groups("work") if self.client.exists("work") else []
        group = next((g for g in groups if g["name"] == b"switchboard"), None)
        if group is None:
            return self.client.xlen("work") if self.client.exists("work") else 0, 0
        return int(group["lag"]), int(group["pending"])


class NatsRig(Rig):
    broker = "nats"

    def __init__(self, server: Any, **options: Any) -> None:
        super().__init__({"url": server.url, "stream": "WORK", "subject": "work.>", **options})
        self.nats = Nats(server.url)
        self.nats.run(add_stream(self.nats.client, "WORK", ["work.>"]))

    def publish(self, bodies: list[str]) -> None:
        async def send() -> None:
            js = self.nats.client.jetstream()
            for body in bodies:
                await js.publish("work.job", body.encode())

        self.nats.run(send())

    def counts(self) -> tuple[int, int]:
        return self.nats.run(consumer_counts(self.nats.client, "WORK"))

    def close(self) -> None:
        self.nats.close()


class SqsRig(Rig):
    broker = "sqs"

    def __init__(self, server: Any, **options: Any) -> None:
        self.server = server
        self.url = server.create_queue("work")
        super().__init__({"queue_url": self.url, "endpoint_url": server.endpoint, **options})

    def publish(self, bodies: list[str]) -> None:
        client = self.server.client()
        for start in range(0, len(bodies), 10):
            entries = [{"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies[start : start + 10])]
            assert not client.send_message_batch(QueueUrl=self.url, Entries=entries).get("Failed")

    def counts(self) -> tuple[int, int]:
        return self.server.counts(self.url)


@contextmanager
def rig_for(request: pytest.FixtureRequest, broker: str, *, short_lease: bool = False) -> Iterator[Rig]:
    """A rig on the broker's real server (the fixtures of tests/brokers/conftest.py); with ``short_lease``,
    leases of SHORT_LEASE seconds (a held message must be renewed that often; what a killed process held
    comes back that soon)."""
    if broker == "redis":
        made: Rig = RedisRig(request.getfixturevalue("redis_server"),
                             **({"claim_idle": SHORT_LEASE} if short_lease else {}))  # fmt: skip
    elif broker == "nats":
        made = NatsRig(request.getfixturevalue("nats_server"), **({"ack_wait": SHORT_LEASE} if short_lease else {}))
    else:
        made = SqsRig(request.getfixturevalue("sqs_server"),
                      **({"visibility_timeout": SHORT_LEASE} if short_lease else {}))  # fmt: skip
    try:
        yield made
    finally:
        made.close()


def bodies(count: int, start: int = 0) -> list[str]:
    return [json.dumps({"n": n}) for n in range(start, start + count)]


def todo_ids(db: Path | str, queue: str) -> list[int]:
    """The todos of a queue, oldest first."""
    return [r[0] for r in rows(db, "SELECT id FROM todos WHERE queue = ? ORDER BY id", (queue,))]


def in_flight(db: Path | str) -> int:
    """The todos not finished yet (pending or claimed)."""
    return value(db, "SELECT count(*) FROM todos WHERE state IN ('pending', 'claimed')")


async def complete(store: Store, todo_id: int) -> None:
    """Done: claimed by id and completed, as an agent does."""
    await todos.complete(store, Lease.of(await todos.claim(store, todo_id, owner="agent")))


async def dead_letter(store: Store, todo_id: int) -> None:
    """A dead letter: claimed and failed on its last attempt (the todo allows one)."""
    claimed = await todos.claim(store, todo_id, owner="agent")
    assert claimed.max_attempts == 1
    await todos.fail(store, Lease.of(claimed), error="no good")


async def cancel(store: Store, todo_id: int) -> None:
    await todos.cancel(store, todo_id, by="operator")
