"""A NATS adapter's options (what `adapter add --broker nats` takes), validated with no server: each
refusal names the option and never quotes the URL; --create-stream is a flag; a token URL is taken and
shown masked."""

from __future__ import annotations

import pytest

from switchboard_local.brokers import nats_jetstream
from switchboard_local.core.errors import InvalidArgument

from support.cli import as_json

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
        ({"url": "nats://:s3cr3t@host:99999", "stream": "ORDERS"}, "--url: the port must be a number from 1 to 65535"),
        ({"url": "nats://user:s3cr3t@", "stream": "ORDERS"}, "--url: no host"),
        ({"url": "nats://user:s3cr3t@host/db", "stream": "ORDERS"}, "--url: nats takes no path or query"),
        ({"url": "nats://host s3cr3t", "stream": "ORDERS"}, "--url must not hold spaces or control characters"),
        ({"url_env": "NATS-URL", "stream": "ORDERS"}, "--url-env must name an environment variable"),
        ({"url": URL}, "--stream is required"),
        ({"url": URL, "stream": "ORD.ERS"}, "--stream must be at most 255 characters, without spaces, '.'"),
        ({"url": URL, "stream": "ORDERS", "durable": "a b"}, "--durable must be at most 255 characters"),
        ({"url": URL, "stream": "ORDERS", "subject": "orders..new"}, "--subject has an empty token"),
        ({"url": URL, "stream": "ORDERS", "subject": "orders.>.new"}, "--subject: > may only be the last token"),
        ({"url": URL, "stream": "ORDERS", "subject": "orders.new*"}, "--subject: a wildcard (* or >) must be a whole"),
        ({"url": URL, "stream": "ORDERS", "subject": "orders new"}, "--subject must be dot-separated tokens"),
        ({"url": URL, "stream": "ORDERS", "create_stream": True}, "--create-stream needs --subject"),
        ({"url": URL, "stream": "ORDERS", "ack_wait": 0}, "--ack-wait must be a number from 1 to 43200"),
        ({"url": URL, "stream": "ORDERS", "batch": 0}, "--batch must be a whole number from 1 to 10000"),
        ({"url": URL, "stream": "ORDERS", "ack_wait": 2.5}, "--ack-wait must be a whole number"),
        ({"url": URL, "stream": "ORDERS", "subject": "o.>", "create_stream": "yes"}, "--create-stream is a flag"),
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


def test_a_token_in_the_url_is_taken() -> None:
    config = nats_jetstream.configure({"url": "nats://s3cr3t-t0ken@nats.example:4222", "stream": "ORDERS"})
    assert config["url"] == "nats://s3cr3t-t0ken@nats.example:4222"  # nats-py sends a lone user part as the token


def test_create_stream_is_a_flag_of_adapter_add(cli) -> None:
    add = ("adapter", "add", "--broker", "nats", "--url", "nats://127.0.0.1:4222", "--stream", "ORDERS",
           "--subject", "orders.>")  # fmt: skip
    made = as_json(cli, add[0], add[1], "made", *add[2:], "--create-stream")
    kept = as_json(cli, add[0], add[1], "kept", *add[2:])
    assert (made["config"]["create_stream"], kept["config"]["create_stream"]) == (True, False)
    assert "create stream True" in cli("adapter", "show", "made").out

    valued = cli(add[0], add[1], "valued", *add[2:], "--create-stream", "yes")
    assert valued.code == 2 and "unexpected extra argument (yes)" in valued.err
    elsewhere = cli("adapter", "add", "jobs", "--url", "redis://127.0.0.1:6399/0", "--mode", "list", "--key", "k",
                    "--create-stream")  # fmt: skip
    assert elsewhere.code == 2 and "--create-stream is an option of --broker nats, not of redis" in elsewhere.err
    shown = " ".join(cli("adapter", "add", "--help").out.split())
    assert "--create-stream nats: create the stream on --subject" in shown  # a flag: no value after it
    assert [a["name"] for a in as_json(cli, "adapter", "list")] == ["kept", "made"]
