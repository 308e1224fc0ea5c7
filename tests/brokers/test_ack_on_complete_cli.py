"""`adapter add --ack on-store|on-complete` through the command line: kept in the adapter's config,
shown by `adapter list`, `show` and `status` and the dashboard's sources page; refused, saying why,
for a broker that cannot hold a message until its todos finish. Adding does no network I/O: no
broker runs here."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from switchboard_local.core import sources
from switchboard_local.core.store.opener import open_store

from support import fake_broker
from support.cli import as_json
from support.redis_server import free_port

PORT = free_port()  # nothing listens there: no command here connects anyway
REDIS = ["--url", f"redis://127.0.0.1:{PORT}/0", "--key", "work"]
NATS = ["--broker", "nats", "--url", f"nats://127.0.0.1:{PORT}", "--stream", "WORK"]
SQS = ["--broker", "sqs", "--queue-url", f"http://127.0.0.1:{PORT}/000000000000/work"]
AMQP = ["--broker", "amqp", "--url", f"amqp://guest:guest@127.0.0.1:{PORT}/", "--amqp-queue", "work"]


def column(text: str, name: str, rows: int = 2) -> dict[str, str]:
    """A column of the table the command printed first (its header, then ``rows`` rows), by each row's first cell."""
    header, *lines = text.splitlines()[: rows + 1]
    at = header.index(name)  # the columns are aligned: a cell starts where its header does
    return {line.split()[0]: line[at:].split()[0] for line in lines}


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ([*REDIS, "--mode", "list"], "a Redis list keeps no delivery state per message"),
        ([*REDIS, "--mode", "pubsub"], "Redis pub/sub keeps nothing to hold"),
        (AMQP, "RabbitMQ delivers a consumer at most its prefetch window (--batch) unacked"),
    ],
    ids=["redis-list", "redis-pubsub", "amqp"],
)
def test_ack_on_complete_is_refused_saying_why_where_the_broker_cannot_hold_a_message(cli, db_path: Path, args,
                                                                                    why) -> None:  # fmt: skip
    refused = cli("adapter", "add", "work", *args, "--ack", "on-complete")
    assert refused.code == 2
    assert f"--ack on-complete cannot work here: {why}" in refused.err
    assert as_json(cli, "adapter", "list") == []  # nothing half-added
    assert cli("adapter", "add", "work", *args).code == 0  # on store, as before


def test_an_ack_that_is_no_mode_is_refused_naming_the_modes(cli, db_path: Path) -> None:
    refused = cli("adapter", "add", "work", *REDIS, "--mode", "stream", "--ack", "on-read")
    assert refused.code == 2 and "'on-store', 'on-complete'" in refused.err


@pytest.mark.parametrize("args", [[*REDIS, "--mode", "stream"], NATS, SQS], ids=["redis-stream", "nats", "sqs"])
def test_ack_on_complete_is_kept_in_the_config_and_shown_by_list_show_and_status(cli, db_path: Path, args) -> None:
    added = as_json(cli, "adapter", "add", "work", *args, "--ack", "on-complete")
    assert (added["config"]["ack"], added["ack"]) == ("on-complete", "on-complete")
    assert "held unacked until every todo made from it is finished" in added["guarantee"]
    assert as_json(cli, "adapter", "add", "other", *args)["ack"] == "on-store"  # the default

    listed = {v["name"]: v["ack"] for v in as_json(cli, "adapter", "list")}
    assert listed == {"work": "on-complete", "other": "on-store"}
    assert column(cli("adapter", "list").out, "ACK") == listed
    assert {v["name"]: v["ack"] for v in as_json(cli, "adapter", "status")} == listed
    assert column(cli("adapter", "status").out, "ACK") == listed
    shown = [line.split(None, 1) for line in cli("adapter", "show", "work").out.splitlines()[1:]]
    assert ["ack", "on-complete (each message held unacked until its todos finish)"] in shown


def test_an_adapter_stored_before_there_was_ack_is_shown_acking_on_store(cli, db_path: Path) -> None:
    config = {"url": f"redis://127.0.0.1:{PORT}/0", "mode": "stream", "key": "work", "group": "switchboard",
              "consumer": "host", "claim_idle": 60, "batch": 64}  # as `adapter add` stored it before --ack

    async def add() -> None:
        async with await open_store(db_path) as store:
            await sources.add(store, "old", family="queue", kind="redis", trust_mode="queue", config=config)

    asyncio.run(add())
    (shown,) = as_json(cli, "adapter", "list")
    assert shown["ack"] == "on-store" and "on-complete" not in shown["guarantee"]


def test_a_broker_that_declares_nothing_of_holding_is_refused_ack_on_complete(monkeypatch, cli) -> None:
    fake_broker.register(monkeypatch)  # written to the contract of before: it has no cannot_hold
    refused = cli("adapter", "add", "work", "--broker", "fake", "--topic", "t", "--url", "fake://here", "--ack",
                  "on-complete")  # fmt: skip
    assert refused.code == 2
    assert "--ack on-complete cannot work here: fake adapters cannot hold a message unacked until its todos" in (
        refused.err)  # fmt: skip
    fake_broker.reset()
