"""An SQS adapter's options as `adapter add` validates them: what is stored, and each refusal naming its option.

No server here: configure does no network I/O. The refusals never quote the
URL (it is refused for holding credentials, among other things).
"""

from __future__ import annotations

import pytest

from switchboard_local.brokers import sqs
from switchboard_local.core.errors import InvalidArgument

URL = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"


def test_a_queue_url_alone_gets_the_defaults_and_nothing_else_is_stored() -> None:
    assert sqs.configure({"queue_url": URL}) == {"queue_url": URL, "batch": 10, "wait_seconds": 1,
                                                 "visibility_timeout": 60}  # fmt: skip


def test_every_option_is_stored_as_given() -> None:
    config = sqs.configure({"queue_url": URL, "batch": 4, "wait_seconds": 20, "visibility_timeout": 300,
                            "region": "eu-west-1", "endpoint_url": "http://localhost:9324", "queue": "billing"})  # fmt: skip
    assert config == {"queue_url": URL, "batch": 4, "wait_seconds": 20, "visibility_timeout": 300,
                      "region": "eu-west-1", "endpoint_url": "http://localhost:9324", "queue": "billing"}  # fmt: skip


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({}, "--queue-url is required"),
        ({"queue_url": "ftp://sqs.example/1/q"}, "--queue-url must start with https://"),
        ({"queue_url": "https://sqs.us-east-1.amazonaws.com/orders"}, "--queue-url must be a queue's URL"),
        ({"queue_url": "https://sqs.us-east-1.amazonaws.com/1/a/b"}, "--queue-url must be a queue's URL"),
        ({"queue_url": "https://sqs.us-east-1.amazonaws.com/1/q?x=1"}, "--queue-url must be a queue's URL"),
        ({"queue_url": "https://sqs.us-east-1.amazonaws.com/1/or ders"}, "--queue-url must not hold spaces"),
        ({"queue_url": "https://sqs.us-east-1.amazonaws.com/1/" + "q" * 81}, "--queue-url: a queue's name"),
        ({"queue_url": "https://sqs.us-east-1.amazonaws.com/1/q.x"}, "--queue-url: a queue's name"),
        ({"queue_url": "https://sqs.us-east-1.amazonaws.com:99999/1/q"}, "--queue-url: not a URL"),
        (
            {"queue_url": "https://AKIA:hunter2@sqs.us-east-1.amazonaws.com/1/q"},
            "--queue-url must not hold credentials",
        ),
        ({"queue_url": URL, "batch": 11}, "--batch must be a whole number from 1 to 10"),
        ({"queue_url": URL, "batch": 0}, "--batch must be a whole number from 1 to 10"),
        ({"queue_url": URL, "wait_seconds": 21}, "--wait-seconds must be a number from 0 to 20"),
        ({"queue_url": URL, "wait_seconds": 1.5}, "--wait-seconds must be a whole number"),
        ({"queue_url": URL, "visibility_timeout": 1}, "--visibility-timeout must be a number from 2 to 43200"),
        ({"queue_url": URL, "visibility_timeout": 43201}, "--visibility-timeout must be a number from 2"),
        ({"queue_url": URL, "region": "Europe"}, "--region must name an AWS region"),
        ({"queue_url": URL, "endpoint_url": "localhost:9324"}, "--endpoint-url must start with https://"),
        ({"queue_url": URL, "endpoint_url": "http://u:p@localhost:9324"}, "--endpoint-url must not hold credentials"),
        (
            {"queue_url": URL, "endpoint_url": "http://localhost:9324/1/q"},
            "--endpoint-url takes a scheme, host and port",
        ),
        ({"queue_url": URL, "url": "https://example.com"}, "--url and --url-env do not apply to SQS"),
        ({"queue_url": URL, "url_env": "SQS_URL"}, "--url and --url-env do not apply to SQS"),
        ({"queue_url": URL, "queue": " "}, "--queue must be a non-empty string"),
    ],
)
def test_a_bad_option_is_refused_naming_it_and_never_quoting_a_secret(options, named: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        sqs.configure(options)
    assert refused.value.message.startswith(named), refused.value.message
    assert "hunter2" not in str(refused.value)


def test_where_and_the_guarantee_say_which_queue_and_which_id_keys_it() -> None:
    standard = sqs.configure({"queue_url": URL, "region": "eu-west-1"})
    fifo = sqs.configure(
        {"queue_url": URL + ".fifo", "endpoint_url": "http://localhost:9324", "visibility_timeout": 30}
    )
    assert sqs.where(standard) == f"queue orders at {URL}, region eu-west-1"
    assert sqs.where(fifo) == f"queue orders.fifo (FIFO) at {URL}.fifo, endpoint http://localhost:9324"
    assert sqs.guarantee(standard) == ("durable: deleted (DeleteMessageBatch) only after the commit; what a crash "
                                       "leaves returns after the 60 s visibility timeout and is keyed by its MessageId")  # fmt: skip
    assert "30 s visibility timeout" in sqs.guarantee(fifo) and sqs.guarantee(fifo).endswith("MessageDeduplicationId")


def test_the_region_comes_from_the_option_else_the_queue_url_else_the_environment() -> None:
    environ = {"AWS_REGION": "ap-south-1", "AWS_DEFAULT_REGION": "us-west-2"}
    assert sqs.client_options({"queue_url": URL, "region": "us-east-2"}, environ)["region_name"] == "us-east-2"
    assert sqs.client_options({"queue_url": URL}, environ)["region_name"] == "eu-west-1"
    local = "http://localhost:9324/000000000000/orders"
    assert sqs.client_options({"queue_url": local}, environ)["region_name"] == "ap-south-1"
    assert sqs.client_options({"queue_url": local}, {"AWS_DEFAULT_REGION": "us-west-2"})["region_name"] == "us-west-2"
    assert "region_name" not in sqs.client_options({"queue_url": local}, {})  # botocore's own: the profile's


def test_the_endpoint_comes_from_the_option_else_the_standard_variables() -> None:
    config = {"queue_url": URL}
    assert "endpoint_url" not in sqs.client_options(config, {})
    assert sqs.client_options(config, {"AWS_ENDPOINT_URL": "http://a:1"})["endpoint_url"] == "http://a:1"
    both = {"AWS_ENDPOINT_URL": "http://a:1", "AWS_ENDPOINT_URL_SQS": "http://b:2"}
    assert sqs.client_options(config, both)["endpoint_url"] == "http://b:2"
    assert sqs.client_options({**config, "endpoint_url": "http://c:3"}, both)["endpoint_url"] == "http://c:3"


def test_the_variables_it_reads_are_named_for_the_service_and_none_is_stored() -> None:
    names = sqs.env(sqs.configure({"queue_url": URL}))
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION",
            "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_SQS"} <= set(names)  # fmt: skip
    environ = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "s3cret", "AWS_SESSION_TOKEN": "t0ken"}
    config = sqs.configure({"queue_url": URL})
    assert not {"s3cret", "t0ken", "AKIAEXAMPLE"} & {str(v) for v in config.values()}
    assert sqs.client_options(config, environ)["aws_secret_access_key"] == "s3cret"  # read where it is used, only
