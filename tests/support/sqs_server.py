"""SQS for the tests: moto's server mode (`python -m moto.server`, by moto_server.py) on a free loopback port.

moto is the AWS emulator local setups use; in server mode it speaks SQS's own
HTTP API, so the adapter runs aiobotocore unchanged, pointed at it by its
endpoint URL. Its state lives in the server process: a consumer killed and
started again finds the queue as it left it. The credentials and region are
dummies set in the test's environment (``aws_environment``), with the AWS
config files and instance metadata shut out, so nothing of the machine's own
AWS setup is read and nothing leaves loopback.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import boto3
import botocore.config
import botocore.exceptions
import pytest

from switchboard_local.core import sources
from switchboard_local.core.sources import Source
from switchboard_local.core.store.interface import Store

from support.cli import invoke
from support.redis_server import free_port

# `python -m moto.server` with its clock read quicker; run with -P: support/ on the path would hide the stdlib `html`
MOTO_SERVER = Path(__file__).with_name("moto_server.py")
REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account


def aws_environment(workdir: Path) -> dict[str, str]:
    """Dummy credentials and a region; no profile, config file or instance role to fall back on."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing-secret-key",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": str(workdir / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(workdir / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }


# Read from the environment by botocore or by the adapter; a test's environment leaves them out.
CLEARED = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_ENDPOINT_URL",
           "AWS_ENDPOINT_URL_SQS", "AWS_CA_BUNDLE")  # fmt: skip


class SQSServer:
    """moto's server, one per test: ``endpoint`` for the adapter's --endpoint-url, ``client()`` for the test."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / "moto.log"

    def start(self) -> SQSServer:
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-P", str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **aws_environment(self.workdir)},
            )  # fmt: skip
        client = self.client()
        deadline = time.monotonic() + 30
        while True:
            try:
                client.list_queues()
                return self
            except botocore.exceptions.EndpointConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"moto's server did not start:\n{self.log.read_text(errors='replace')}"
                    ) from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def client(self) -> Any:
        """boto3's synchronous SQS client on this server (the test's producer and inspector)."""
        return boto3.client(
            "sqs", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id="testing",
            aws_secret_access_key="testing-secret-key",
            config=botocore.config.Config(retries={"total_max_attempts": 1}, read_timeout=30),
        )  # fmt: skip

    def create_queue(self, name: str, **attributes: str) -> str:
        """A new queue's URL; a name ending .fifo makes a FIFO queue."""
        if name.endswith(".fifo"):
            attributes.setdefault("FifoQueue", "true")
        return self.client().create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]

    def counts(self, queue_url: str) -> tuple[int, int]:
        """(visible, not visible) as the server counts them (moto's counts are exact)."""
        found = self.client().get_queue_attributes(
            QueueUrl=queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(found["ApproximateNumberOfMessages"]), int(found["ApproximateNumberOfMessagesNotVisible"])


def started_sqs_server(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> SQSServer:
    """moto's server started, and this process's environment (which `serve` inherits) set to it."""
    for name in CLEARED:
        monkeypatch.delenv(name, raising=False)
    for name, value in aws_environment(workdir).items():
        monkeypatch.setenv(name, value)
    return SQSServer(workdir).start()


def add_sqs_adapter(db: Path | str, server: SQSServer, queue_url: str, name: str = "orders", **options: Any) -> Any:
    """`adapter add NAME --broker sqs --queue-url URL --endpoint-url (the server's)` and ``options`` as flags
    (``visibility_timeout=2``: ``--visibility-timeout 2``), run as the command line runs it: its --json answer."""
    flags = [part for key, given in options.items() for part in (f"--{key.replace('_', '-')}", str(given))]
    result = invoke(db, "adapter", "add", name, "--broker", "sqs", "--queue-url", queue_url, "--endpoint-url",
                    server.endpoint, *flags, "--json")  # fmt: skip
    assert result.code == 0, result.err
    return json.loads(result.out)


async def added_sqs_adapter(store: Store, db: Path | str, server: SQSServer, queue_url: str, name: str = "orders",
                            **options: Any) -> Source:  # fmt: skip
    """The same, from a test's event loop (the command runs its own, in a thread): the adapter as stored."""
    await asyncio.to_thread(add_sqs_adapter, db, server, queue_url, name, **options)
    return await sources.get(store, name, family="queue")
