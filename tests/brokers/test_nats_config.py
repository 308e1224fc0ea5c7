"""A NATS adapter's options (what `adapter add --broker nats` takes), validated with no server: each
refusal names the option and never quotes the URL."""

from __future__ import annotations

import pytest

from switchboard_local.brokers import nats_jetstream
from switchboard_local.core.errors import InvalidArgument

URL = "nats://reader:s3cr3t@nats.example:4222"


def test_the_stored_config_takes_the_defaults_for_what_was_not_given() -> None:
    assert nats_jetstream.configure({"url": URL, "stream": "ORDERS"}) == {
        "url": URL, "stream": "ORDERS", "subject": None, "durable": "switchboard", "create_stream": False,
        "ack_wait": 30, "batch": 64,
    }  # fmt: skip
    given = {"url_env": "NATS_URL", "stream": "ORDERS", "subject": "orders.*.paid", "durable": "billing",
             "create_stream": True, "ack_wait": 120, "batch": 16, "queue": "billing"}  # fmt: skip
    assert nats_jetstream.configure(given) == {**given, "url_env": "NATS_URL"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"stream": "ORDERS"}, "give exactly one of --url and --url-env"),
        ({"url": URL, "url_env": "NATS_URL", "stream": "ORDERS"}, "give exactly one of --url and --url-env"),
        ({"url": "redis://s3cr3t@host", "stream": "ORDERS"}, "--url must start with nats:// or tls://"),
        ({"url": "nats://:s3cr3t@host:99999", "stream": "ORDERS"}, "--url: not a URL nats can read"),
        ({"url": "nats://user:s3cr3t@", "stream": "ORDERS"}, "--url: no host"),
        ({"url": "nats://user:s3cr3t@host/db", "stream": "ORDERS"}, "--url: nats takes no path or query"),
        ({"url": "nats://s3cr3t@host", "stream": "ORDERS"}, "--url: a token in the URL would be shown in lists"),
        ({"url": "nats://host s3cr3t", "stream": "ORDERS"}, "--url must not hold spaces or control characters"),
        ({"url_env": "NATS-URL", "stream": "ORDERS"}, "--url-env must name an environment variable"),
        ({"url": URL}, "--stream must name the JetStream stream"),
        ({"url": URL, "stream": "ORD.ERS"}, "--stream must be at most 255 characters, without spaces, '.'"),
        ({"url": URL, "stream": "ORDERS", "durable": "a b"}, "--durable must be at most 255 characters"),
        ({"url": URL, "stream": "ORDERS", "subject": "orders..new"}, "--subject has an empty token"),
        ({"url": URL, "stream": "ORDERS", "subject": "orders.>.new"}, "--subject: > may only be the last token"),
        ({"url": URL, "stream": "ORDERS", "subject": "orders.new*"}, "--subject: a wildcard (* or >) must be a whole"),
        ({"url": URL, "stream": "ORDERS", "subject": "orders new"}, "--subject must be dot-separated tokens"),
        ({"url": URL, "stream": "ORDERS", "create_stream": True}, "--create-stream needs --subject"),
        ({"url": URL, "stream": "ORDERS", "ack_wait": 0}, "--ack-wait must be a whole number of seconds from 1"),
        ({"url": URL, "stream": "ORDERS", "batch": 0}, "--batch must be a whole number from 1 to 10000"),
        ({"url": URL, "stream": "ORDERS", "queue": "bad\x1bqueue"}, "--queue"),
    ],
)
def test_a_bad_option_is_refused_naming_it_and_never_quoting_the_url(options, message) -> None:
    with pytest.raises(InvalidArgument) as refused:
        nats_jetstream.configure(options)
    assert message in str(refused.value)
    assert "s3cr3t" not in str(refused.value)


def test_the_guarantee_where_and_environment_say_what_the_adapter_does() -> None:
    config = nats_jetstream.configure(
        {"url_env": "NATS_URL", "stream": "ORDERS", "subject": "orders.>", "ack_wait": 45}
    )
    assert nats_jetstream.where(config) == "stream ORDERS subject orders.> durable switchboard"
    assert "redelivered after AckWait (45 s)" in nats_jetstream.guarantee(config)
    assert "redis" not in nats_jetstream.guarantee(config).lower()
    assert nats_jetstream.env(config) == ["NATS_URL"]
    assert nats_jetstream.env(nats_jetstream.configure({"url": URL, "stream": "ORDERS"})) == []


@pytest.mark.parametrize(
    ("url", "secrets"),
    [
        ("nats://reader:s3cr3t@host:4222", {"s3cr3t"}),
        ("nats://reader:p%40ss@host", {"p%40ss", "p@ss"}),  # as written and as sent
        ("nats://t0ken@host", {"t0ken"}),  # a token in the user part (from --url-env)
        ("nats://host:4222", set()),
    ],
)
def test_the_urls_password_or_token_is_what_the_loop_masks(url, secrets) -> None:
    assert set(nats_jetstream.url_secrets(url)) == secrets
