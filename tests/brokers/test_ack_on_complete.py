"""`--ack on-complete` against each broker that can hold a message (a real redis-server's stream,
a real nats-server's JetStream, moto's SQS): a stored message stays unacked at the broker until
every todo made from it is finished, and the broker's own count of unacked messages (XPENDING,
num_ack_pending, ApproximateNumberOfMessagesNotVisible) falls only as those todos finish."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from nats.js import api

from switchboard_local.brokers import sqs
from switchboard_local.core import rules, sources

from support.brokers import Running, add_adapter, calls
from support.holding import BROKER_NAMES, bodies, cancel, complete, dead_letter, rig_for, todo_ids
from support.nats_server import consumer_info
from support.sql import run, value

pytestmark = pytest.mark.anyio


def events(db) -> int:
    return value(db, "SELECT count(*) FROM events WHERE family = 'queue'")


def todos(db) -> int:
    return value(db, "SELECT count(*) FROM todos")


def stored(db) -> int:
    """What the adapter's health says it stored (a message received again counts again), as last recorded."""
    return value(db, "SELECT messages_stored FROM sources WHERE name = 'work'")


@pytest.mark.both_backends
@pytest.mark.parametrize("broker", BROKER_NAMES)
async def test_the_brokers_unacked_count_falls_only_as_the_todos_made_from_its_messages_finish(
    request, broker, real_store, db_path
) -> None:
    with rig_for(request, broker) as rig:
        adapter = await rig.add(real_store)
        await rules.add(real_store, source="work", where=["kind=pair"], queue="pair-a")  # a pair makes two todos
        await rules.add(real_store, source="work", where=["kind=pair"], queue="pair-b")
        await rules.add(real_store, source="work", where=["kind=skip"], drop=True)  # a skip makes none
        await rules.add(real_store, source="work", where=["kind=once"], queue="once", max_attempts=1)
        rig.publish([json.dumps(b) for b in ({"kind": "pair"}, {"kind": "skip"}, {"n": 1}, {"n": 2}, {"kind": "once"})])
        running = Running(real_store, adapter)
        await running.until(lambda: (events(db_path), todos(db_path)), (5, 5))

        # The skip made no todo: acked once stored. The four others wait on their five todos.
        await running.until(rig.counts, (0, 4))
        (pair_a,), (pair_b,), (once,), (n1, n2) = (todo_ids(db_path, q) for q in ("pair-a", "pair-b", "once", "work"))
        await complete(real_store, pair_a)  # one of the pair's two: the pair stays held
        await complete(real_store, n1)
        await running.until(lambda: rig.counts()[1] <= 3, True)
        assert rig.counts() == (0, 3)
        await cancel(real_store, n2)  # cancelled is finished
        await running.until(lambda: rig.counts()[1] <= 2, True)
        assert rig.counts() == (0, 2)
        await dead_letter(real_store, once)  # so is a dead letter
        await running.until(lambda: rig.counts()[1] <= 1, True)
        assert rig.counts() == (0, 1)
        await complete(real_store, pair_b)  # the pair's last
        await running.until(rig.counts, (0, 0))
        await running.finish()
    assert (events(db_path), todos(db_path)) == (5, 5)


# A held message outlives the broker's lease on a delivery (AckWait, the visibility timeout, --claim-idle)
# without being delivered again: each test waits until the lease has been renewed several times over
# (what the broker saw of the renewals), then asks the broker how often it delivered the message.


async def held_once(rig, real_store, db_path, connect=None) -> Running:
    """One message stored and held; the adapter running, acking on completion, with a short lease."""
    rig.publish([json.dumps({"n": 1})])
    running = Running(real_store, await rig.add(real_store), connect=connect)
    await running.until(lambda: events(db_path), 1)
    await running.until(rig.counts, (0, 1))
    return running


async def test_a_held_stream_entry_is_claimed_again_so_no_take_over_delivers_it_twice(request, real_store,
                                                                                      db_path) -> None:  # fmt: skip
    with rig_for(request, "redis", short_lease=True) as rig:
        running = await held_once(rig, real_store, db_path)
        take_overs = calls(rig.client, "xautoclaim")
        # Three take-overs of entries idle past --claim-idle since it was held, and its idle time renewed throughout.
        await running.until(lambda: calls(rig.client, "xautoclaim") >= take_overs + 3, True)
        (entry,) = rig.client.xpending_range("work", "switchboard", "-", "+", 10)
        assert (entry["times_delivered"], rig.counts()) == (1, (0, 1))  # never delivered again, still held
        assert calls(rig.client, "xclaim") >= 3  # ...because it was claimed again (JUSTID: no delivery)
        await complete(real_store, todo_ids(db_path, "work")[0])
        await running.until(rig.counts, (0, 0))
        await running.finish()
    assert stored(db_path) == 1


async def test_a_held_jetstream_message_gets_in_progress_acks_so_it_is_never_redelivered(request, real_store,
                                                                                         db_path) -> None:  # fmt: skip
    with rig_for(request, "nats", short_lease=True) as rig:
        renewals: list[bytes] = []

        async def seen(msg) -> None:  # noqa: ANN001  (a core subscriber sees what the adapter sends the server)
            if msg.data == b"+WPI":
                renewals.append(msg.subject.encode())

        subscription = rig.nats.run(rig.nats.client.subscribe("$JS.ACK.WORK.>", cb=seen))
        running = await held_once(rig, real_store, db_path)
        info = lambda: rig.nats.run(consumer_info(rig.nats.client, "WORK"))  # noqa: E731
        # Four in-progress acks, past two AckWaits (or, were they missing, the redelivery that follows one).
        await running.until(lambda: len(renewals) >= 4 or info().num_redelivered > 0, True)
        assert (info().num_redelivered, info().num_ack_pending) == (0, 1)
        await complete(real_store, todo_ids(db_path, "work")[0])
        await running.until(rig.counts, (0, 0))
        await running.finish()
        rig.nats.run(subscription.unsubscribe())
    assert stored(db_path) == 1


async def test_two_jetstream_messages_sharing_a_msg_id_are_both_held_and_both_acked_when_its_todo_finishes(
    request, real_store, db_path
) -> None:
    # A producer's Nats-Msg-Id reused past the stream's duplicate window: two messages, one event and one todo.
    # Held by the message id, the second took the first's place: the first went unrenewed and came back.
    with rig_for(request, "nats", short_lease=True) as rig:
        renewals: list[str] = []

        async def seen(msg) -> None:  # noqa: ANN001
            if msg.data == b"+WPI":
                renewals.append(msg.subject)

        async def send_twice() -> None:
            js = rig.nats.client.jetstream()
            await js.update_stream(api.StreamConfig(name="WORK", subjects=["work.>"], duplicate_window=0.1))
            await js.publish("work.job", b'{"n": 1}', headers={"Nats-Msg-Id": "order-7"})
            while (await js.publish("work.job", b'{"n": 1}', headers={"Nats-Msg-Id": "order-7"})).duplicate:
                await asyncio.sleep(0.05)  # until the window has passed: the broker says when

        rig.nats.run(send_twice())
        subscription = rig.nats.run(rig.nats.client.subscribe("$JS.ACK.WORK.>", cb=seen))
        running = Running(real_store, await rig.add(real_store))
        await running.until(lambda: events(db_path), 1)  # the consumer exists once something is stored
        await running.until(rig.counts, (0, 2))  # both delivered, both held
        assert (events(db_path), todos(db_path)) == (1, 1)
        info = lambda: rig.nats.run(consumer_info(rig.nats.client, "WORK"))  # noqa: E731
        # Each renewed past two AckWaits (or, were one left unrenewed, its redelivery).
        await running.until(lambda: len(renewals) >= 8 or info().num_redelivered > 0, True)
        assert (info().num_redelivered, info().num_ack_pending) == (0, 2)
        await complete(real_store, todo_ids(db_path, "work")[0])
        await running.until(rig.counts, (0, 0))
        await running.finish()
        rig.nats.run(subscription.unsubscribe())


class Counting:
    """aiobotocore's SQS client as the reader makes it, with the calls made through it noted (name by name)."""

    def __init__(self, options: dict, calls: list[str]) -> None:
        self.made, self.calls = sqs.new_client(options), calls

    async def __aenter__(self) -> Counting:
        self.client = await self.made.__aenter__()
        return self

    async def __aexit__(self, *exc) -> None:  # noqa: ANN002
        await self.made.__aexit__(*exc)

    def __getattr__(self, name: str):  # noqa: ANN204
        self.calls.append(name)
        return getattr(self.client, name)


async def test_a_held_sqs_message_is_kept_hidden_so_it_is_never_received_again(request, real_store, db_path) -> None:
    with rig_for(request, "sqs", short_lease=True) as rig:
        calls_made: list[str] = []
        running = await held_once(rig, real_store, db_path, connect=lambda options: Counting(options, calls_made))
        renewed = lambda: calls_made.count("change_message_visibility_batch")  # noqa: E731
        # Four new timeouts, past two visibility timeouts (or, were they missing, the message received again).
        await running.until(lambda: renewed() >= 4 or stored(db_path) > 1, True)
        assert (rig.counts(), stored(db_path)) == ((0, 1), 1)
        await complete(real_store, todo_ids(db_path, "work")[0])
        await running.until(rig.counts, (0, 0))
        await running.finish()
    assert stored(db_path) == 1  # received once: never visible again


class NotingWaits(Counting):
    """The SQS client, with each ReceiveMessage's long poll (WaitTimeSeconds) noted."""

    def __init__(self, options: dict, waits: list[int]) -> None:
        super().__init__(options, [])
        self.waits = waits

    async def receive_message(self, **kwargs):  # noqa: ANN003, ANN201
        self.waits.append(kwargs["WaitTimeSeconds"])
        return await self.client.receive_message(**kwargs)


async def test_while_it_holds_messages_an_sqs_long_poll_is_cut_to_a_release_interval(request, real_store,
                                                                                     db_path) -> None:  # fmt: skip
    # A release runs between reads: a 20 s poll on a quiet queue would delete a finished message 20 s late.
    with rig_for(request, "sqs") as rig:
        waits: list[int] = []
        rig.publish([json.dumps({"n": 1})])
        running = Running(real_store, await rig.add(real_store, wait_seconds=8),
                          connect=lambda options: NotingWaits(options, waits))  # fmt: skip
        await running.until(rig.counts, (0, 1))  # held
        await running.until(lambda: waits.count(sqs.HOLDING_WAIT) >= 2, True)
        await complete(real_store, todo_ids(db_path, "work")[0])
        await running.until(rig.counts, (0, 0))
        polls_when_deleted = len(waits)
        await running.until(lambda: len(waits) > polls_when_deleted, True)  # the next poll: nothing held
        await running.finish()
    assert (waits[0], waits.count(sqs.HOLDING_WAIT) >= 2, waits[-1]) == (8, True, 8)  # cut only while holding


async def test_at_the_consumers_max_ack_pending_jetstream_delivers_no_more_until_a_todo_finishes(
    request, real_store, db_path, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="switchboard_local.brokers")
    with rig_for(request, "nats") as rig:
        made = api.ConsumerConfig(durable_name="switchboard", ack_policy=api.AckPolicy.EXPLICIT,
                                  filter_subject="work.>", max_ack_pending=2)  # made by its owner, with a cap of two
        rig.nats.run(rig.nats.client.jetstream().add_consumer("WORK", config=made))
        rig.publish(bodies(3))
        running = Running(real_store, await rig.add(real_store))
        await running.until(lambda: any("max_ack_pending" in m for m in caplog.messages), True)
        assert (events(db_path), rig.counts()) == (2, (1, 2))  # two held; the third not delivered
        await complete(real_store, todo_ids(db_path, "work")[0])
        await running.until(lambda: (events(db_path), rig.counts()), (3, (0, 2)))
        await running.finish()
    assert caplog.messages[0] == ("adapter work: 2 messages held for their todos reach the consumer's max_ack_pending: "
                                  "JetStream delivers no more to it until some of those todos finish")  # fmt: skip


@pytest.mark.parametrize("broker", BROKER_NAMES)
async def test_after_a_stop_the_next_start_holds_the_same_messages_again_at_once(request, broker, real_store,
                                                                                 db_path) -> None:  # fmt: skip
    # The brokers' own leases are their defaults (AckWait 30 s, a 60 s visibility timeout): longer than a wait
    # stalls. A stop must hand its held messages back for the next start to hold them without that wait.
    with rig_for(request, broker) as rig:
        rig.publish(bodies(3))
        adapter = await rig.add(real_store)
        first = Running(real_store, adapter)
        await first.until(lambda: events(db_path), 3)
        await first.until(rig.counts, (0, 3))
        await first.finish()

        second = Running(real_store, adapter)
        await second.until(lambda: stored(db_path), 6)  # each read again (and collapsed): held by this start
        assert rig.counts() == (0, 3)
        for todo_id in todo_ids(db_path, "work"):
            await complete(real_store, todo_id)
        await second.until(rig.counts, (0, 0))
        await second.finish()
    assert (events(db_path), todos(db_path)) == (3, 3)


async def test_a_list_adapter_set_to_ack_on_complete_by_hand_reads_nothing_and_says_why(real_store, broker,
                                                                                        db_path) -> None:  # fmt: skip
    adapter = await add_adapter(real_store, broker.url, "list", "jobs", name="jobs")
    edited = json.dumps({**adapter.config, "ack": "on-complete"})  # what `adapter add` refuses for a list
    run(db_path, "UPDATE sources SET config = ? WHERE name = 'jobs'", (edited,))
    broker.client().lpush("jobs", '{"n": 1}')
    running = Running(real_store, await sources.get(real_store, "jobs"), connect=broker.connect)
    error = "SELECT last_error FROM sources WHERE name = 'jobs'"
    await running.until(lambda: value(db_path, error) is not None, True)
    await running.finish()
    assert value(db_path, error) == ("CannotHold: --ack on-complete: a Redis list keeps no delivery state per message: "
                                     "held messages would sit in KEY:processing, which every start re-reads from its "
                                     "head (--mode stream can: its consumer group's pending entries); re-add it with "
                                     "--ack on-store")  # fmt: skip
    assert broker.client().llen("jobs") == 1 and events(db_path) == 0  # nothing read, nothing stored
