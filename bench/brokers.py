"""Broker drains: each broker's adapter beside its own raw consume+ack loop and the SQLite floor.

    .venv/bin/python bench/brokers.py [--brokers redis,nats,amqp,sqs] [--entries N] [--sqs-entries N]
                                      [--runs R] [--batches 64]

Starts its own servers with the test support (tests/support/): redis-server
(persistence off), `nats-server -js`, a RabbitMQ node, and moto's SQS server,
each on a free loopback port. Each round, for each broker, it publishes
--entries messages (SQS: --sqs-entries, since moto slows as its queue grows)
to a fresh stream or queue and times, on the same server:

  raw    the broker's consume+ack loop with its own client library and no store:
         Redis XREADGROUP COUNT b + XACK (redis-py); a JetStream durable pull
         consumer, fetch b + an ack each (nats-py); a RabbitMQ queue with
         prefetch b, one multiple basic.ack per b (aio-pika); SQS ReceiveMessage
         b + DeleteMessageBatch (aiobotocore)
  drain  the broker's registry reader under brokers/loop.py's Consumer, into a
         real SQLite file at full durability; every message must end as exactly
         one event and one todo, with the broker reporting nothing waiting or
         unacked afterwards

with b the drain's batch: --batches (64 by default), capped at the broker's
maximum (SQS: 10). Beside them, in the same rounds: the same-rows SQLite floor
(bench/run.py's raw_ingest_rows: the event, todo and link rows of b messages
per transaction with executemany, and nothing else), at each batch measured.
Prints medians over R rounds, drain/raw and drain/floor (each the median of the
rounds' own ratios), and writes bench/results-brokers.json. bench/run.py's
section e runs the Redis figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from switchboard_local.brokers.loop import Consumer  # noqa: E402
from switchboard_local.brokers.registry import BROKERS  # noqa: E402
from switchboard_local.core import sources  # noqa: E402
from switchboard_local.core.store.opener import open_store  # noqa: E402

STALL = 60.0  # seconds without a message stored: the drain has stopped, say so rather than hang


def body(i: int) -> bytes:
    return json.dumps({"order": i, "sku": f"sku-{i % 97}"}).encode()


# ---------------------------------------------------------------- the brokers


class Redis:
    """A stream per measure; raw: XREADGROUP + XACK in a group of its own."""

    name, label, max_batch = "redis", "Redis stream", None
    raw_loop = "XREADGROUP COUNT {b} + XACK (redis-py)"

    def __init__(self, tmp: Path) -> None:
        from support.redis_server import RedisServer

        self.server = RedisServer(tmp).start()

    def stop(self) -> None:
        self.server.stop()

    def fill(self, key: str, n: int) -> str:
        r = self.server.client()
        r.delete(key)
        with r.pipeline(transaction=False) as pipe:
            for i in range(n):
                pipe.xadd(key, {"payload": body(i)})
                if i % 5000 == 4999:
                    pipe.execute()
            pipe.execute()
        return key

    def raw(self, key: str, n: int, batch: int) -> float:
        r = self.server.client()
        r.xgroup_create(key, "raw", id="0")
        start = time.perf_counter()
        done = 0
        while done < n:
            reply = r.xreadgroup("raw", "c", {key: ">"}, count=batch)
            ids = [entry_id for entry_id, _ in reply[0][1]]
            r.xack(key, "raw", *ids)
            done += len(ids)
        elapsed = time.perf_counter() - start
        assert r.xpending(key, "raw")["pending"] == 0
        r.delete(key)
        return n / elapsed

    def config(self, key: str, batch: int) -> dict[str, Any]:
        return {"url": self.server.url, "mode": "stream", "key": key, "batch": batch}

    def left(self, key: str) -> tuple[int, int]:
        r = self.server.client()
        group = next(g for g in r.xinfo_groups(key) if g["name"] == b"switchboard")
        r.delete(key)
        return group["lag"], group["pending"]


class Nats:
    """A stream per measure; raw: a durable pull consumer of its own, fetch + an ack each, one flush a batch."""

    name, label, max_batch = "nats", "NATS JetStream", None
    raw_loop = "pull fetch {b} + an ack each (nats-py)"

    def __init__(self, tmp: Path) -> None:
        from support.nats_server import NatsServer

        self.server = NatsServer(tmp).start()

    def stop(self) -> None:
        self.server.stop()

    async def _client(self) -> Any:
        import nats

        return await nats.connect(self.server.url, allow_reconnect=False, max_reconnect_attempts=0)

    def fill(self, key: str, n: int) -> str:
        async def fill() -> None:
            client = await self._client()
            try:
                js = client.jetstream()
                await js.add_stream(name=key, subjects=[f"{key}.orders"])
                for first in range(0, n, 500):  # each publish is acked once stored; 500 in flight at a time
                    await asyncio.gather(*(js.publish(f"{key}.orders", body(i)) for i in range(first, min(n, first + 500))))
                assert (await js.stream_info(key)).state.messages == n
            finally:
                await client.close()

        asyncio.run(fill())
        return key

    def raw(self, key: str, n: int, batch: int) -> float:
        from nats.js import api

        async def raw() -> float:
            client = await self._client()
            try:
                js = client.jetstream()
                config = api.ConsumerConfig(durable_name="raw", ack_policy=api.AckPolicy.EXPLICIT,
                                            deliver_policy=api.DeliverPolicy.ALL)  # fmt: skip
                await js.add_consumer(key, config=config)
                sub = await js.pull_subscribe_bind(consumer="raw", stream=key)
                start = time.perf_counter()
                done = 0
                while done < n:
                    msgs = await sub.fetch(batch, timeout=1.0)
                    for msg in msgs:
                        await msg.ack()
                    await client.flush()
                    done += len(msgs)
                elapsed = time.perf_counter() - start
                await self._settled(js, key, "raw")
                await js.delete_stream(key)
                return n / elapsed
            finally:
                await client.close()

        return asyncio.run(raw())

    async def _settled(self, js: Any, stream: str, durable: str) -> tuple[int, int]:
        """(pending, ack pending), once the server has taken in the last acks (they are sent without a reply)."""
        deadline = time.monotonic() + 10
        while True:
            info = await js.consumer_info(stream, durable)
            counts = (info.num_pending or 0, info.num_ack_pending or 0)
            if counts == (0, 0) or time.monotonic() > deadline:
                return counts
            await asyncio.sleep(0.01)

    def config(self, key: str, batch: int) -> dict[str, Any]:
        return {"url": self.server.url, "stream": key, "batch": batch}

    def left(self, key: str) -> tuple[int, int]:
        async def left() -> tuple[int, int]:
            client = await self._client()
            try:
                js = client.jetstream()
                counts = await self._settled(js, key, "switchboard")
                await js.delete_stream(key)
                return counts
            finally:
                await client.close()

        return asyncio.run(left())


class Amqp:
    """A durable queue per measure, persistent messages; raw: prefetch b, one multiple basic.ack per b."""

    name, label, max_batch = "amqp", "RabbitMQ", None
    raw_loop = "consume, prefetch {b}, one basic.ack multiple per {b} (aio-pika)"

    def __init__(self, tmp: Path) -> None:
        from support.rabbitmq_server import RabbitMQServer

        self.server = RabbitMQServer(tmp / "rabbitmq").start()

    def stop(self) -> None:
        self.server.close()

    def fill(self, key: str, n: int) -> str:
        import aio_pika

        self.server.admin.declare(key)

        async def fill() -> None:
            connection = await aio_pika.connect(self.server.url)
            try:
                channel = await connection.channel(publisher_confirms=True)  # a publish returns once persisted
                exchange = channel.default_exchange
                for first in range(0, n, 500):  # 500 awaiting their confirms at a time
                    await asyncio.gather(*(exchange.publish(aio_pika.Message(body(i), delivery_mode=2), key)
                                           for i in range(first, min(n, first + 500))))  # fmt: skip
            finally:
                await connection.close()

        asyncio.run(fill())
        assert self.server.admin.ready(key) == n
        return key

    def raw(self, key: str, n: int, batch: int) -> float:
        import aio_pika

        async def raw() -> float:
            connection = await aio_pika.connect(self.server.url)
            try:
                channel = await connection.channel(publisher_confirms=False)
                await channel.set_qos(prefetch_count=batch)
                queue = await channel.declare_queue(key, passive=True)
                start = time.perf_counter()
                done = 0
                async with queue.iterator() as deliveries:
                    async for delivery in deliveries:
                        done += 1
                        if done % batch == 0 or done == n:
                            await delivery.ack(multiple=True)
                        if done == n:
                            break
                return n / (time.perf_counter() - start)
            finally:
                await connection.close()

        per_s = asyncio.run(raw())
        assert self.server.list_queues()[key] == (0, 0)
        self.server.admin.delete(key)
        return per_s

    def config(self, key: str, batch: int) -> dict[str, Any]:
        return {"url": self.server.url, "amqp_queue": key, "batch": batch}

    def left(self, key: str) -> tuple[int, int]:
        counts = self.server.list_queues()[key]  # rabbitmqctl: ready, unacknowledged
        self.server.admin.delete(key)
        return counts


class Sqs:
    """A standard queue per measure on moto's server; raw: ReceiveMessage + DeleteMessageBatch."""

    name, label, max_batch = "sqs", "SQS (moto)", 10
    raw_loop = "ReceiveMessage {b} + DeleteMessageBatch (aiobotocore)"

    def __init__(self, tmp: Path) -> None:
        from support.sqs_server import CLEARED, SQSServer, aws_environment

        for name in CLEARED:  # dummy credentials, nothing of this machine's AWS setup: what the tests do
            os.environ.pop(name, None)
        os.environ.update(aws_environment(tmp))
        self.server = SQSServer(tmp).start()
        self.urls: dict[str, str] = {}

    def stop(self) -> None:
        self.server.stop()

    def fill(self, key: str, n: int) -> str:
        url = self.urls[key] = self.server.create_queue(key)
        client = self.server.client()
        for first in range(0, n, 10):
            entries = [{"Id": str(i), "MessageBody": body(i).decode()} for i in range(first, min(n, first + 10))]
            assert not client.send_message_batch(QueueUrl=url, Entries=entries).get("Failed")
        assert self.server.counts(url) == (n, 0)
        return key

    def raw(self, key: str, n: int, batch: int) -> float:
        from aiobotocore.session import get_session

        from support.sqs_server import REGION

        url = self.urls[key]

        async def raw() -> float:
            options = {"endpoint_url": self.server.endpoint, "region_name": REGION}
            async with get_session().create_client("sqs", **options) as client:
                start = time.perf_counter()
                done = 0
                while done < n:
                    reply = await client.receive_message(QueueUrl=url, MaxNumberOfMessages=batch, WaitTimeSeconds=1,
                                                         VisibilityTimeout=60)  # fmt: skip
                    received = reply.get("Messages", [])
                    if received:
                        entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(received)]
                        deleted = await client.delete_message_batch(QueueUrl=url, Entries=entries)
                        assert not deleted.get("Failed")
                    done += len(received)
                return n / (time.perf_counter() - start)

        per_s = asyncio.run(raw())
        assert self.server.counts(url) == (0, 0)
        self.server.client().delete_queue(QueueUrl=url)
        return per_s

    def config(self, key: str, batch: int) -> dict[str, Any]:
        return {"queue_url": self.urls[key], "endpoint_url": self.server.endpoint, "batch": batch}

    def left(self, key: str) -> tuple[int, int]:
        url = self.urls.pop(key)
        counts = self.server.counts(url)  # visible, in flight
        self.server.client().delete_queue(QueueUrl=url)
        return counts


BENCHES = {b.name: b for b in (Redis, Nats, Amqp, Sqs)}


# ---------------------------------------------------------------- the drain


async def drain(broker: str, config: dict[str, Any], n: int, db: Path) -> float:
    """msgs/s of the broker's registry reader under the Consumer, into ``db``, until n todos are committed."""
    async with await open_store(db) as store:
        stored = BROKERS.get(broker).configure(config)
        adapter = await sources.add(store, "bench", family="queue", kind=broker, trust_mode="queue", config=stored)
        stop = asyncio.Event()
        start = time.perf_counter()
        task = asyncio.create_task(Consumer(store, adapter, stop).run())
        with sqlite3.connect(db) as conn:
            seen, moved = 0, time.monotonic()
            while seen < n:
                await asyncio.sleep(0.01)
                count = conn.execute("SELECT count(*) FROM todos").fetchone()[0]
                if count != seen:
                    seen, moved = count, time.monotonic()
                if task.done() or time.monotonic() - moved > STALL:
                    stop.set()
                    health = conn.execute("SELECT last_error FROM sources WHERE name = 'bench'").fetchone()
                    raise RuntimeError(f"{broker}: the drain stopped at {seen} of {n} todos; last error: {health}")
        elapsed = time.perf_counter() - start
        stop.set()
        await task  # the batch in flight is acked before it returns
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM events WHERE family <> 'operator'").fetchone()[0] == n
        assert conn.execute("SELECT count(*) FROM todos").fetchone()[0] == n
    return n / elapsed


# ---------------------------------------------------------------- the run


def _run_module() -> Any:
    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--brokers", default=",".join(BENCHES))
    parser.add_argument("--entries", type=int, default=5000, help="messages per measure (default 5000)")
    parser.add_argument("--sqs-entries", type=int, default=1000,
                        help="messages per SQS measure (default 1000): moto's ReceiveMessage looks at every message "
                        "in the queue, so its speed falls as the backlog grows")  # fmt: skip
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batches", default="64", help="the drain's batch sizes (each capped at the broker's maximum)")
    args = parser.parse_args()
    names = args.brokers.split(",")
    if set(names) - set(BENCHES):
        parser.error(f"--brokers: unknown {', '.join(sorted(set(names) - set(BENCHES)))}; they are {','.join(BENCHES)}")
    wanted = [int(b) for b in args.batches.split(",")]
    run = _run_module()
    load = [os.getloadavg()[0]]  # what else this machine was doing: beside the figures
    with tempfile.TemporaryDirectory(dir=ROOT / "bench") as tmp_name, contextlib.ExitStack() as stack:
        tmp = Path(tmp_name)
        benches = []
        for name in names:  # all started first: every round then measures them side by side
            (tmp / name).mkdir()
            bench = BENCHES[name](tmp / name)
            stack.callback(bench.stop)
            bench.n = args.sqs_entries if name == "sqs" else args.entries
            benches.append(bench)
        measures: list[Any] = []
        counter = iter(range(10**9))

        def fresh(what: str) -> Path:
            folder = tmp / f"{what}-{next(counter)}"
            folder.mkdir()
            return folder

        for bench in benches:
            for b in batches(bench, wanted):

                def raw(i: int, bench: Any = bench, b: int = b) -> tuple[float]:
                    return (bench.raw(bench.fill(f"raw{b}x{i}", bench.n), bench.n, b),)

                def drained(i: int, bench: Any = bench, b: int = b) -> tuple[float]:
                    key = bench.fill(f"drain{b}x{i}", bench.n)
                    db = fresh(f"{bench.name}{b}") / "db"
                    per_s = asyncio.run(drain(bench.name, bench.config(key, b), bench.n, db))
                    waiting, unacked = bench.left(key)
                    assert (waiting, unacked) == (0, 0), f"{bench.name}: {waiting} waiting, {unacked} unacked after"
                    return (per_s,)

                measures += [((f"{bench.name}_raw_{b}",), raw), ((f"{bench.name}_drain_{b}",), drained)]
        for b in sorted({b for bench in benches for b in batches(bench, wanted)}):
            measures.append(((f"floor_{b}",), lambda i, b=b: (run.raw_ingest_rows(fresh(f"floor{b}"), b),)))
        measures.append((("fdatasync_ms",), lambda i: (run.fdatasync_ms(fresh("fs")),)))
        seen: dict[str, list[float]] = {}
        medians = run.interleaved(measures, args.runs, seen)
    load.append(os.getloadavg()[0])
    machine = f"{run.machine(medians)}; load average (1 min) {load[0]:.1f} at the start, {load[1]:.1f} at the end"
    report(benches, wanted, medians, seen, machine, args.runs)


def batches(bench: Any, wanted: list[int]) -> list[int]:
    """The batch sizes measured for a broker: those asked for, capped at its maximum."""
    return sorted({min(b, bench.max_batch) if bench.max_batch else b for b in wanted})


def ratio(mine: list[float], theirs: list[float]) -> float:
    return statistics.median(a / b for a, b in zip(mine, theirs, strict=True))


def report(benches: list[Any], wanted: list[int], medians: dict[str, float], seen: dict[str, list[float]],
           machine: str, runs: int) -> None:  # fmt: skip
    print(machine)
    print(f"\nmedians of {runs} interleaved rounds, msgs/s (ratios: the median of the rounds' ratios); floor: the same rows"
          " in bare sqlite3, a batch a transaction")  # fmt: skip
    print(f"{'broker':<16}{'msgs':>6}{'batch':>6}{'raw':>9}{'drain':>8}{'drain/raw':>11}{'floor':>8}{'drain/floor':>13}"
          "   raw loop")  # fmt: skip
    rows = []
    for bench in benches:
        for b in batches(bench, wanted):
            names = (f"{bench.name}_raw_{b}", f"{bench.name}_drain_{b}", f"floor_{b}")
            raw, drained, floor = (medians[name] for name in names)
            # Each ratio is the median of the rounds' own ratios: both sides of one were measured side by side.
            vs_raw, vs_floor = (ratio(seen[names[1]], seen[other]) for other in names[0::2])
            loop = bench.raw_loop.format(b=b)
            print(f"{bench.label:<16}{bench.n:>6}{b:>6}{raw:>9.0f}{drained:>8.0f}{vs_raw:>11.2f}{floor:>8.0f}"
                  f"{vs_floor:>13.2f}   {loop}")  # fmt: skip
            rows.append({"broker": bench.name, "messages": bench.n, "batch": b, "raw_per_s": raw, "drain_per_s": drained,
                         "floor_per_s": floor, "drain_vs_raw": vs_raw, "drain_vs_floor": vs_floor,
                         "raw_loop": loop})  # fmt: skip
    print("\nrounds:")
    for name, values in seen.items():
        print(f"  {name:<22}{', '.join(f'{v:.0f}' if v > 10 else f'{v:.3f}' for v in values)}")
    results = {"machine": machine, "runs": runs, "table": rows, "rounds": seen}
    (ROOT / "bench" / "results-brokers.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
