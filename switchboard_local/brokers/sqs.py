"""SQS: long-poll ReceiveMessage, hold the batch invisible while it commits, DeleteMessageBatch after.

SQS has no ack: a received message is hidden for its visibility timeout and
comes back unless it is deleted. So the reader asks for a timeout longer than
a commit, renews it (ChangeMessageVisibilityBatch) while the loop commits,
and deletes exactly the stored messages once their commit is done. A crash
anywhere before the delete only lets the timeout run out: SQS delivers those
messages again and their keys collapse them into the todos already made.

The client is aiobotocore (botocore on asyncio): the region, the endpoint and
the credentials come from the standard AWS environment and config files, as
for the AWS CLI; none is ever stored with the source.

With --ack on-complete a stored message is held until its todos finish: its
visibility is renewed the same way for as long as it is held, and the queue's
ApproximateNumberOfMessagesNotVisible is then the work in progress. SQS caps
both: a message stays hidden at most 12 hours from its receive (then it is
received again, collapses, and is held anew), and a queue has at most about
120,000 messages in flight (20,000 for FIFO, whose held message also holds
back the rest of its message group). A stop hands the held messages back (a
timeout of 0), so that the next start holds them again at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import weakref
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import BotoCoreError, ClientError

from ..core.adapters import Backlog, Option
from ..core.errors import InvalidArgument
from ..core.sources import Source
from ..core.text import first_control
from . import options as shared_options
from .reader import Message

log = logging.getLogger("switchboard_local.brokers")


NAME = "sqs"
DESCRIPTION = "Amazon SQS: long-polled, deleted after the commit (a standard or FIFO queue)"

MAX_BATCH = 10  # ReceiveMessage's and the batch calls' maximum
DEFAULT_WAIT = 1  # seconds; also how soon a stop is noticed (the Reader protocol's "about a second")
MAX_WAIT = 20  # SQS's longest poll
DEFAULT_VISIBILITY = 60
MIN_VISIBILITY = 2  # renewed every third of it: shorter leaves no time for a renewal's round trip
MAX_VISIBILITY = 43_200  # SQS's 12 hours
IDLE_POLL = 1.0  # with --wait-seconds 0, one empty receive a second at most (each request is billed)
HOLDING_WAIT = 5  # the longest poll while messages are held: holding.RECHECK, the most between two releases
HAND_BACK_WAIT = 5.0  # seconds a stop waits for SQS to take the held messages back (else: after their timeout)

QUEUE_URL = Option("queue_url", "the queue's URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME); --queue is "
                   "the switchboard queue its todos go to.", required=True)  # fmt: skip
WAIT = Option("wait_seconds", f"long poll: how long one ReceiveMessage waits for messages (default {DEFAULT_WAIT}; "
              "a stop waits for the poll in flight).", type=int, min=0, max=MAX_WAIT)  # fmt: skip
VISIBILITY = Option("visibility_timeout", f"seconds a received message stays hidden, renewed while its batch "
                    f"commits (default {DEFAULT_VISIBILITY}); a crash's batch returns after it.", type=int,
                    min=MIN_VISIBILITY, max=MAX_VISIBILITY)  # fmt: skip
REGION_OPTION = Option("region", "the AWS region (default: the queue URL's, else $AWS_REGION, $AWS_DEFAULT_REGION, "
                       "the profile's).")  # fmt: skip
ENDPOINT = Option("endpoint_url", "another endpoint, e.g. a local emulator's (default: $AWS_ENDPOINT_URL_SQS, "
                  "$AWS_ENDPOINT_URL, else AWS's own).")  # fmt: skip
OPTIONS: tuple[Option, ...] = (QUEUE_URL, WAIT, VISIBILITY, REGION_OPTION, ENDPOINT)
URL = False  # no --url: the queue URL is its own option; the endpoint, region and credentials come from AWS's setup
DEFAULTS = {WAIT.name: DEFAULT_WAIT, VISIBILITY.name: DEFAULT_VISIBILITY}

# What botocore reads from the environment for SQS. AWS_REGION is read here; botocore reads the rest itself.
ENV = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
    "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_REGION", "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL", "AWS_CA_BUNDLE",
)  # fmt: skip
# Each is one way among several (a profile, the shared files under ~/.aws, SSO, an instance role), so none
# is needed: `service install` names only those its shell sets, which the service would not have.
OPTIONAL_ENV = ENV
SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")

QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")  # SQS's rule; a FIFO queue's name ends .fifo within the 80
REGION = re.compile(r"^[a-z]{2,}(-[a-z0-9]+)+$")
AWS_HOST = re.compile(r"^sqs\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


def configure(options: dict[str, Any]) -> dict[str, Any]:
    """`adapter add`'s options for SQS, validated into the stored config (no network I/O, no secret)."""
    if options.get("url") is not None or options.get("url_env") is not None:  # said here: shared() cannot say why
        raise InvalidArgument("--url and --url-env do not apply to SQS: give --queue-url; the region, endpoint "
                              "and credentials come from the AWS environment and config files")  # fmt: skip
    config = shared_options.shared(options, takes_url=False, default_batch=MAX_BATCH, max_batch=MAX_BATCH)
    queue_url = shared_options.text(QUEUE_URL, options.get("queue_url"))
    assert queue_url is not None  # text() refuses a required option's absence
    queue_name(queue_url)  # refuses what is no queue URL
    config[QUEUE_URL.name] = queue_url
    for option in (WAIT, VISIBILITY):
        given = shared_options.number(option, options.get(option.name))
        config[option.name] = DEFAULTS[option.name] if given is None else given
    region = shared_options.text(REGION_OPTION, options.get("region"))
    if region is not None:
        if not REGION.fullmatch(region):
            raise InvalidArgument("--region must name an AWS region, such as us-east-1")
        config["region"] = region
    endpoint = shared_options.text(ENDPOINT, options.get("endpoint_url"))
    if endpoint is not None:
        _check_url("--endpoint-url", endpoint)
        if urlsplit(endpoint).path.strip("/") or urlsplit(endpoint).query:
            raise InvalidArgument("--endpoint-url takes a scheme, host and port only (http://localhost:9324)")
        config["endpoint_url"] = endpoint
    return config


def queue_name(queue_url: str) -> str:
    """The queue's name, the URL's last part; raises InvalidArgument when the URL is no queue's."""
    _check_url("--queue-url", queue_url)
    parts = urlsplit(queue_url)
    path = parts.path.strip("/").split("/")
    if parts.query or parts.fragment or len(path) != 2 or not path[0]:
        raise InvalidArgument("--queue-url must be a queue's URL: SCHEME://HOST/ACCOUNT/NAME")
    name = path[1]
    if not QUEUE_NAME.fullmatch(name.removesuffix(".fifo")) or len(name) > 80:
        raise InvalidArgument(
            "--queue-url: a queue's name is 1 to 80 letters, digits, '-' and '_' (a FIFO queue's ends .fifo)"
        )
    return name


def _check_url(option: str, url: str) -> None:
    if first_control(url) is not None or " " in url:
        raise InvalidArgument(f"{option} must not hold spaces or control characters")
    try:
        parts = urlsplit(url)
        host, _ = parts.hostname, parts.port
    except ValueError:  # a port that is no number, a broken [IPv6] literal
        raise InvalidArgument(f"{option}: not a URL (a bad port or address)") from None
    if parts.scheme not in ("https", "http") or not host:
        raise InvalidArgument(f"{option} must start with https:// (or http:// for a local emulator) and name a host")
    if "@" in parts.netloc:  # never stored: credentials come from the AWS environment
        raise InvalidArgument(
            f"{option} must not hold credentials: they come from the AWS environment and config files"
        )


def is_fifo(config: Mapping[str, Any]) -> bool:
    return str(config.get("queue_url", "")).endswith(".fifo")


def guarantee(config: Mapping[str, Any]) -> str:
    seconds = config.get("visibility_timeout", DEFAULT_VISIBILITY)
    keyed = "MessageDeduplicationId" if is_fifo(config) else "MessageId"
    return (f"durable: deleted (DeleteMessageBatch) only after the commit; what a crash leaves returns after the "
            f"{seconds} s visibility timeout and is keyed by its {keyed}")  # fmt: skip


def cannot_hold(config: Mapping[str, Any]) -> None:
    """A received message stays hidden for as long as its visibility is renewed (--ack on-complete; up to 12 hours
    a receive)."""
    return None


def where(config: Mapping[str, Any]) -> str:
    """The queue, and the region and endpoint when the config names them (never a credential)."""
    url = str(config.get("queue_url", ""))
    try:
        text = f"queue {queue_name(url)}{' (FIFO)' if is_fifo(config) else ''} at {url}"
    except InvalidArgument:  # a row changed by hand: say what it holds, without failing the listing
        text = f"queue URL {url!r}"
    if config.get("region"):
        text += f", region {config['region']}"
    if config.get("endpoint_url"):
        text += f", endpoint {config['endpoint_url']}"
    return text


def env(config: Mapping[str, Any]) -> list[str]:
    """The environment variables the SQS client reads: credentials, profile, region, endpoint (all optional)."""
    return list(ENV)


def client_options(config: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """create_client's region, endpoint and (from ``environ``) credentials; what is not given here botocore
    looks up itself (the profile's region, the shared credentials file, SSO, an instance role)."""
    options: dict[str, Any] = {}
    host = AWS_HOST.fullmatch(urlsplit(str(config.get("queue_url", ""))).hostname or "")
    region = (
        config.get("region")
        or (host and host.group(1))
        or environ.get("AWS_REGION")
        or environ.get("AWS_DEFAULT_REGION")
    )
    if region:
        options["region_name"] = region
    endpoint = config.get("endpoint_url") or environ.get("AWS_ENDPOINT_URL_SQS") or environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["endpoint_url"] = endpoint
    if environ.get("AWS_ACCESS_KEY_ID") and environ.get("AWS_SECRET_ACCESS_KEY"):
        options["aws_access_key_id"] = environ["AWS_ACCESS_KEY_ID"]
        options["aws_secret_access_key"] = environ["AWS_SECRET_ACCESS_KEY"]
        if environ.get("AWS_SESSION_TOKEN"):
            options["aws_session_token"] = environ["AWS_SESSION_TOKEN"]
    return options


Connect = Callable[[dict[str, Any]], AbstractAsyncContextManager[Any]]


# One botocore session per event loop: a new one loads the service's model again (60-130 ms a client,
# against 2 ms), and a session's credential refreshes hold asyncio locks of the loop they ran on.
_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


def new_client(options: dict[str, Any]) -> AbstractAsyncContextManager[Any]:
    """aiobotocore's SQS client (entered by the caller, on the running loop), unless a test hands in another factory.

    Imported here, not at the top: aiohttp and botocore's client take about half a second to import,
    which only a process running an SQS adapter (or probing one) should pay.
    """
    from aiobotocore.session import get_session

    loop = asyncio.get_running_loop()
    if loop not in _sessions:
        _sessions[loop] = get_session()
    return _sessions[loop].create_client("sqs", **options)


def client_config(**settings: Any) -> Any:
    """aiobotocore's client settings (timeouts, retries); imported when a client is made, as above."""
    from aiobotocore.config import AioConfig

    return AioConfig(**settings)


def _said(exc: BaseException, secrets: tuple[str, ...]) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    for secret in secrets:
        text = text.replace(secret, "****")
    return text


def _secrets(environ: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(value for name in SECRET_ENV if (value := environ.get(name)))


async def probe(config: Mapping[str, Any], env: Mapping[str, str], timeout: float) -> Backlog:
    """GetQueueAttributes: visible messages wait, in-flight ones are unacked. Never raises, moves nothing."""
    secrets = _secrets(env)
    try:
        options = client_options(config, env)
        aio = client_config(connect_timeout=timeout, read_timeout=timeout, retries={"total_max_attempts": 1})
        async with asyncio.timeout(timeout * 3):  # connect, sign, one question: a hard cap over all
            async with new_client({**options, "config": aio}) as client:
                reply = await client.get_queue_attributes(
                    QueueUrl=config["queue_url"],
                    AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
                                    "ApproximateNumberOfMessagesDelayed"],
                )  # fmt: skip
    except ClientError as exc:  # SQS answered: no such queue, access denied, a bad signature
        return Backlog(reachable=True, error=_said(exc, secrets))
    except (BotoCoreError, OSError, TimeoutError, ValueError) as exc:  # no region or credentials, no answer
        return Backlog(reachable=False, error=_said(exc, secrets))
    found = reply.get("Attributes", {})
    note = "approximate: SQS's counts are eventually consistent"
    delayed = int(found.get("ApproximateNumberOfMessagesDelayed", 0))
    if delayed:
        note += f"; {delayed} more delayed"
    return Backlog(
        reachable=True,
        waiting=int(found.get("ApproximateNumberOfMessages", 0)),
        unacked=int(found.get("ApproximateNumberOfMessagesNotVisible", 0)),
        note=note,
    )


class NotDeleted(BotoCoreError):
    """Stored messages SQS would not delete: they come back after the visibility timeout and collapse."""

    fmt = "{count} stored messages were not deleted ({codes}); SQS delivers them again and their keys collapse them"


class Reader:
    """One SQS queue's messages for the consumer loop (brokers/reader.py's Reader; the class is its factory)."""

    faults: tuple[type[Exception], ...] = (BotoCoreError, ClientError)

    def __init__(self, source: Source, connect: Connect | None = None) -> None:
        config = source.config
        self.name = source.name
        self.queue_url: str = config["queue_url"]
        self.queue = queue_name(self.queue_url)
        self.fifo = is_fifo(config)
        self.batch: int = min(int(config.get("batch") or MAX_BATCH), MAX_BATCH)
        self.wait: int = config.get("wait_seconds", DEFAULT_WAIT)
        self.visibility: int = config.get("visibility_timeout", DEFAULT_VISIBILITY)
        self.origin = f"sqs queue {self.queue!r}"
        self.secrets = _secrets(os.environ)
        self._options = client_options(config, os.environ)
        self._connect = connect or new_client
        self._stack = AsyncExitStack()
        self._client: Any = None
        self._renewing: asyncio.Task[None] | None = None
        self._holding: dict[str, str] = {}  # held until their todos finish (--ack on-complete): Message.held_as -> handle
        self._keeping: asyncio.Task[None] | None = None

    async def _sqs(self) -> Any:
        if self._client is None:
            aio = client_config(connect_timeout=5, read_timeout=self.wait + 10, retries={"mode": "standard"})
            self._client = await self._stack.enter_async_context(self._connect({**self._options, "config": aio}))
        return self._client

    async def read(self) -> list[Message]:
        await self._stop_renewing()  # a batch is acked before the next read; never two renewals at once
        client = await self._sqs()
        reply = await client.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=self.batch,
            # While it holds messages the loop must get back to its release (holding.RECHECK) between reads.
            WaitTimeSeconds=min(self.wait, HOLDING_WAIT) if self._holding else self.wait,
            VisibilityTimeout=self.visibility,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        received = reply.get("Messages", [])
        if not received:
            if self.wait == 0:
                await asyncio.sleep(IDLE_POLL)
            return []
        handles = [m["ReceiptHandle"] for m in received]
        self._renewing = asyncio.create_task(self._renew(handles), name=f"sqs-visibility:{self.name}")
        return [self._message(m) for m in received]

    async def ack(self, messages: list[Message], stored: list[bool]) -> None:
        await self._stop_renewing()
        # The unstored stay hidden until their timeout runs out: a message that cannot be stored is not
        # re-read at once, again and again (the queue's redrive policy, if any, moves it on after maxReceiveCount).
        acked = [m for m, done in zip(messages, stored) if done]
        if not acked:
            return
        client = await self._sqs()
        failed = []
        for start in range(0, len(acked), MAX_BATCH):  # held messages finish many at a time; a call takes ten
            chunk = acked[start : start + MAX_BATCH]
            entries = [{"Id": str(i), "ReceiptHandle": m.receipt} for i, m in enumerate(chunk)]
            reply = await client.delete_message_batch(QueueUrl=self.queue_url, Entries=entries)
            failed += reply.get("Failed", [])
        for message in acked:
            self._holding.pop(message.held_as, None)
        if failed:
            codes = ", ".join(sorted({str(f.get("Code")) for f in failed}))
            raise NotDeleted(count=len(failed), codes=codes)

    async def hold(self, messages: list[Message]) -> None:
        """Held until their todos finish: a new visibility timeout every third of one, as for a batch."""
        for message in messages:
            self._holding[message.held_as] = message.receipt
        if self._keeping is None:
            self._keeping = asyncio.create_task(self._keep(), name=f"sqs-holding:{self.name}")

    async def close(self) -> None:
        await self._stop_renewing()
        keeping, self._keeping = self._keeping, None
        if keeping is not None:
            keeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeping
        if self._holding and self._client is not None:
            # Handed back at once (a timeout of 0): the next reader finds their todos and holds them again, or
            # deletes them if those are finished. Should SQS not answer, they come back after their timeout.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(HAND_BACK_WAIT):
                    await self._hide(list(self._holding.values()), "hand back the held messages", seconds=0)
        self._holding = {}
        try:
            await self._stack.aclose()
        except (BotoCoreError, ClientError, OSError):
            pass
        self._client = None

    async def _renew(self, handles: list[str]) -> None:
        """Keep a batch hidden while the loop commits it: a new timeout every third of one, until its ack."""
        while True:
            await asyncio.sleep(self.visibility / 3)
            await self._hide(handles, "keep a batch hidden while it commits")

    async def _keep(self) -> None:
        """Until the reader closes: keep the held messages hidden, a new timeout every third of one."""
        while True:
            await asyncio.sleep(self.visibility / 3)
            await self._hide(list(self._holding.values()), "keep the held messages hidden")

    async def _hide(self, handles: list[str], what: str, seconds: int | None = None) -> None:
        """A new visibility timeout (``seconds``, else --visibility-timeout) for each message, ten a call; a
        failure is logged (the next ack or read meets a fault of the connection too; a message that came back
        is delivered again, and its key collapses it)."""
        timeout = self.visibility if seconds is None else seconds
        failed = []
        for start in range(0, len(handles), MAX_BATCH):
            entries = [{"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": timeout}
                       for i, h in enumerate(handles[start : start + MAX_BATCH])]  # fmt: skip
            try:
                reply = await self._client.change_message_visibility_batch(QueueUrl=self.queue_url, Entries=entries)
            except (BotoCoreError, ClientError, OSError) as exc:
                log.warning("adapter %s: cannot %s: %s", self.name, what, _said(exc, self.secrets))
                return
            failed += reply.get("Failed", [])
        if failed:
            codes = ", ".join(sorted({str(f.get("Code")) for f in failed}))
            log.warning("adapter %s: cannot %s: %d messages refused (%s)", self.name, what, len(failed), codes)

    async def _stop_renewing(self) -> None:
        if self._renewing is not None:
            self._renewing.cancel()
            try:
                await self._renewing
            except asyncio.CancelledError:
                pass
            self._renewing = None

    def _message(self, received: dict[str, Any]) -> Message:
        system = received.get("Attributes", {})
        headers = {"sqs-queue": self.queue, "sqs-message-id": received["MessageId"]}
        for name, header in (("MessageGroupId", "sqs-group-id"), ("SequenceNumber", "sqs-sequence-number"),
                             ("MessageDeduplicationId", "sqs-deduplication-id"), ("SentTimestamp", "sqs-sent-timestamp")):  # fmt: skip
            if name in system:
                headers[header] = str(system[name])
        for name, attribute in received.get("MessageAttributes", {}).items():
            if "StringValue" in attribute:  # String and Number attributes; Binary ones are left out
                headers[f"sqs-attribute-{name}"] = attribute["StringValue"]
        # A FIFO queue's deduplication id is the producer's own id for the message (or the body's hash,
        # with content-based deduplication): a resend keeps it, where SQS gives the resend a new MessageId.
        external_id = system.get("MessageDeduplicationId") if self.fifo else None
        return Message(
            external_id=external_id or received["MessageId"],
            body=received.get("Body", "").encode(),
            type=self.queue,
            headers=headers,
            receipt=received["ReceiptHandle"],
            broker_id=received["MessageId"],
        )
