"""What `adapter add --broker amqp` accepts, how it is stored, and how it is described
(no broker needed: configuring does no network I/O)."""

from __future__ import annotations

import pytest

from switchboard_local.brokers import amqp
from switchboard_local.brokers.registry import BROKERS
from switchboard_local.core.errors import InvalidArgument

URL = "amqp://switchboard:hunter2@rabbit.internal:5672/orders"


def test_the_options_are_stored_as_the_adapters_config_with_the_broker_named() -> None:
    config = BROKERS.get("amqp").configure({"url": URL, "amqp_queue": "orders", "batch": 10, "queue": "fulfilment",
                                            "amqp_dead_letter_exchange": "dead-letters"})  # fmt: skip
    assert config == {"broker": "amqp", "url": URL, "amqp_queue": "orders", "batch": 10, "queue": "fulfilment",
                      "amqp_dead_letter_exchange": "dead-letters", "ack": "on-store"}  # fmt: skip


def test_a_url_in_the_environment_is_stored_by_its_name_and_the_batch_defaults_to_64() -> None:
    config = BROKERS.get("amqp").configure({"url_env": "RABBITMQ_URL", "amqp_queue": "orders"})
    assert config == {"broker": "amqp", "url_env": "RABBITMQ_URL", "amqp_queue": "orders", "batch": 64, "ack": "on-store"}
    assert amqp.env(config) == ["RABBITMQ_URL"]
    assert amqp.env(amqp.configure({"url": URL, "amqp_queue": "orders"})) == []


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"amqp_queue": "orders"}, "give exactly one of --url and --url-env"),
        ({"url": URL, "url_env": "RABBITMQ_URL", "amqp_queue": "orders"}, "give exactly one of --url and --url-env"),
        ({"url_env": "RABBITMQ-URL", "amqp_queue": "orders"}, "--url-env must name an environment variable"),
        ({"url": "redis://h:hunter2@host/", "amqp_queue": "orders"}, "--url must start with amqp:// or amqps://"),
        ({"url": "amqp://u:hunter2@/", "amqp_queue": "orders"}, "--url: no host"),
        ({"url": "amqp://u:hunter2@host:99999/", "amqp_queue": "orders"}, "--url: the port must be a number"),
        ({"url": "amqp://u:hunter2@host:0/", "amqp_queue": "orders"}, "--url: the port must be a number"),
        ({"url": "amqp://u:hunter2@host/a/b", "amqp_queue": "orders"}, "--url: the path is the virtual host"),
        ({"url": "amqp://u:hunter 2@host/", "amqp_queue": "orders"}, "--url must not hold spaces"),
        ({"url": URL}, "--amqp-queue is required"),
        ({"url": URL, "amqp_queue": "ord\x1bers"}, "--amqp-queue holds a control character (\\x1b)"),
        ({"url": URL, "amqp_queue": "q" * 256}, "--amqp-queue must be at most 255 bytes"),
        ({"url": URL, "amqp_queue": "orders", "batch": 10_001}, "--batch must be a whole number from 1 to 10000"),
        (
            {"url": URL, "amqp_queue": "orders", "amqp_dead_letter_exchange": "dead\nletters"},
            "--amqp-dead-letter-exchange holds a control character",
        ),
        ({"url": URL, "amqp_queue": "orders", "queue": "work\x07"}, "--queue holds a control character"),
    ],
)
def test_options_that_cannot_work_are_refused_naming_the_option_and_never_quoting_the_url(options, refusal) -> None:
    with pytest.raises(InvalidArgument) as refused:
        amqp.configure(options)
    assert refused.value.message.startswith(refusal)
    assert "hunter" not in str(refused.value)


def test_the_guarantee_says_what_becomes_of_a_message_that_cannot_be_stored() -> None:
    plain = amqp.configure({"url": URL, "amqp_queue": "orders"})
    dead_lettered = {**plain, "amqp_dead_letter_exchange": "dead-letters"}
    assert amqp.guarantee(plain).startswith("durable: basic.ack only after the commit")
    assert amqp.guarantee(plain).endswith(
        "a message that cannot be stored is left unacked (no dead-letter exchange given)"
    )
    assert amqp.guarantee(dead_lettered).endswith("is nacked to dead-letter exchange 'dead-letters'")


def test_where_names_the_queue_and_the_dead_letter_exchange_and_never_the_url() -> None:
    config = amqp.configure({"url": URL, "amqp_queue": "orders", "amqp_dead_letter_exchange": "dead-letters"})
    assert amqp.where(config) == "queue 'orders' dead-letter exchange 'dead-letters'"


def test_the_options_are_named_apart_from_the_shared_queue_option() -> None:
    assert [option.name for option in amqp.OPTIONS] == ["amqp_queue", "amqp_dead_letter_exchange"]
    assert [option.required for option in amqp.OPTIONS] == [True, False]
