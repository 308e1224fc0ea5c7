"""An AMQP adapter as an operator meets it: added by `adapter add --broker amqp`, shown with
its guarantee, and its backlog in `status` asked of a real RabbitMQ node (no Redis wording)."""

from __future__ import annotations

import json

from switchboard_local.brokers import amqp

from support.amqp import new_queue
from support.cli import as_json


def test_adapter_add_stores_the_options_and_show_says_what_it_reads_and_its_guarantee(cli, rabbitmq) -> None:
    queue = new_queue(rabbitmq)
    url = rabbitmq.url.replace("guest:guest", "guest:hunter2")
    added = as_json(cli, "adapter", "add", "orders", "--broker", "amqp", "--url", url, "--amqp-queue", queue,
                    "--amqp-dead-letter-exchange", "dead-letters", "--batch", "32", "--queue", "fulfilment")  # fmt: skip
    reads = f"queue '{queue}' dead-letter exchange 'dead-letters'"
    assert (added["broker"], added["kind"], added["reads"]) == ("amqp", "amqp", reads)
    assert added["config"]["amqp_queue"] == queue and added["config"]["batch"] == 32
    assert added["guarantee"] == amqp.guarantee(added["config"])
    assert "hunter2" not in json.dumps(added)
    shown = cli("adapter", "show", "orders").out
    assert shown.startswith(f"adapter orders: amqp queue '{queue}'") and "nacked to dead-letter exchange" in shown
    assert "redis" not in shown.lower() and "hunter2" not in shown


def test_adapter_add_without_the_queue_is_refused_naming_the_option(cli, rabbitmq) -> None:
    refused = cli("adapter", "add", "orders", "--broker", "amqp", "--url", rabbitmq.url)
    assert refused.code == 2 and "--amqp-queue" in refused.err
    assert json.loads(cli("adapter", "list", "--json").out) == []


def test_status_shows_the_messages_ready_at_the_broker_and_says_unacked_is_unknown(cli, rabbitmq) -> None:
    queue = new_queue(rabbitmq)
    rabbitmq.admin.publish(queue, [b"{}"] * 7)
    assert cli("adapter", "add", "orders", "--broker", "amqp", "--url", rabbitmq.url, "--amqp-queue", queue).code == 0
    (consumer,) = as_json(cli, "status")["consumers"]
    found = (consumer["broker"], consumer["waiting"], consumer["unacked"], consumer["lag_error"])
    assert found == ("amqp", 7, None, None)
    assert consumer["guarantee"] == amqp.guarantee({"amqp_queue": queue})


def test_doctor_says_the_messages_ready_and_that_the_unacked_are_unknown_never_zero(cli, rabbitmq) -> None:
    queue = new_queue(rabbitmq)
    rabbitmq.admin.publish(queue, [b"{}"] * 3)
    assert cli("adapter", "add", "orders", "--broker", "amqp", "--url", rabbitmq.url, "--amqp-queue", queue).code == 0
    checks = {c["name"]: c for c in json.loads(cli("doctor", "--json").out)["checks"]}  # exits 1: nobody leads ingest
    orders = checks["adapter orders"]
    assert orders["status"] == "ok"
    assert f"amqp queue '{queue}': reachable; 3 waiting, unknown read but not acked" in orders["detail"]
