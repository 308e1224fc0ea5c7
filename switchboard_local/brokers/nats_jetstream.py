"""NATS JetStream: a durable pull consumer on a stream, acked after the commit.

The reader fetches a batch from a durable pull consumer (created when missing,
with explicit acks, from the start of the stream), and acks each stored
message once its commit is done. While a batch is being stored the reader
sends in-progress acks (``+WPI``) every third of the consumer's AckWait, so a
slow commit is never redelivered under it; anything left unacked by a crash is
redelivered by the server once AckWait has passed, and its key collapses what
was stored already. The stream is never created unless --create-stream.

With --ack on-complete a stored message is held unacked until its todos
finish: it gets the same in-progress acks for as long as it is held, and the
consumer's num_ack_pending is then the work in progress. The consumer's
max_ack_pending (JetStream's default 1000) caps it: at the cap the server
delivers nothing more until a held message is acked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api

from ..core import adapters
from ..core.adapters import Backlog, Option
from ..core.errors import InvalidArgument
from ..core.sources import Source
from ..core.text import first_control
from . import options as shared_options
from .reader import Message

log = logging.getLogger("switchboard_local.brokers")

NAME = "nats"
DESCRIPTION = "NATS JetStream: a durable pull consumer on a stream"

DEFAULT_DURABLE = "switchboard"
DEFAULT_ACK_WAIT = 30  # seconds: the server's own default; a crash's redelivery waits this long
MAX_ACK_WAIT = 12 * 3600
FETCH_WAIT = 1.0  # how long one read may wait for messages: also how soon a stop is noticed
PING_EVERY = 10  # seconds: a connection that went silent is noticed within three of these, and made anew
API_TIMEOUT = 5.0  # seconds the server has to answer a JetStream API request, an ack's flush
SCHEMES = ("nats", "tls")
DEFAULT_PORT = 4222
MSG_ID = "Nats-Msg-Id"  # the publisher's id, the stream's own duplicate window keys on it
NO_JETSTREAM = "JetStream does not answer on this server (is it started with -js?)"
CONSUMER_NOT_FOUND = 10014  # JetStream's err_code: tells a missing consumer from a missing stream

OPTIONS: tuple[Option, ...] = (
    Option("stream", "the stream to consume.", required=True),
    Option("subject", "only the stream's messages on this subject (wildcards * and >; default: all of it)."),
    Option("durable", f"the durable pull consumer's name (default {DEFAULT_DURABLE}); created when missing.",
           default=DEFAULT_DURABLE),
    Option("create_stream", "create the stream on --subject when it is missing (else a missing stream is an error).",
           type=bool),
    Option("ack_wait", f"seconds before an unacked message is redelivered, for a consumer it creates (default "
           f"{DEFAULT_ACK_WAIT}).", type=int, min=1, max=MAX_ACK_WAIT),
)  # fmt: skip
_BY_NAME = {o.name: o for o in OPTIONS}


class CannotConsume(Exception):
    """The server's stream or consumer is not one this adapter can consume safely (or is missing)."""


# ------------------------------------------------------------------ configuration (adapter add)


def configure(options: Mapping[str, Any]) -> dict[str, Any]:
    """`adapter add`'s options validated into the stored config; no network I/O, no URL quoted."""
    config = shared_options.shared(options)
    if "url" in config:
        check_url(config["url"])
    stream = shared_options.text(_BY_NAME["stream"], options.get("stream"))
    _check_name("--stream", stream)
    durable = shared_options.text(_BY_NAME["durable"], options.get("durable")) or DEFAULT_DURABLE
    _check_name("--durable", durable)
    subject = shared_options.text(_BY_NAME["subject"], options.get("subject"))
    if subject is not None:
        check_subject(subject)
    create = shared_options.flag(_BY_NAME["create_stream"], options.get("create_stream"))
    if create and subject is None:
        raise InvalidArgument("--create-stream needs --subject: the subject the new stream takes")
    ack_wait = shared_options.number(_BY_NAME["ack_wait"], options.get("ack_wait"))
    config.update({"stream": stream, "subject": subject, "durable": durable, "create_stream": create,
                   "ack_wait": ack_wait or DEFAULT_ACK_WAIT})  # fmt: skip
    return config


def check_url(url: str) -> None:
    """Refuse a URL nats-py would refuse or read otherwise: scheme, host, port. No message quotes it.

    A token in the user part (``nats://TOKEN@host``) is taken: it is shown masked, as a password is.
    """
    parts = shared_options.url_parts(url, SCHEMES, "nats://[user:password@|token@]host[:port]")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise InvalidArgument("--url: nats takes no path or query (nats://[user:password@|token@]host[:port])")


def check_subject(subject: str) -> None:
    """A subject a consumer can filter on: dot-separated tokens, * for one token, > only last."""
    if not subject or first_control(subject) is not None or any(c.isspace() for c in subject):
        raise InvalidArgument("--subject must be dot-separated tokens without spaces or control characters")
    tokens = subject.split(".")
    if any(not t for t in tokens):
        raise InvalidArgument("--subject has an empty token (two dots, or a dot at an end)")
    for i, token in enumerate(tokens):
        if ("*" in token or ">" in token) and token not in ("*", ">"):
            raise InvalidArgument("--subject: a wildcard (* or >) must be a whole token")
        if token == ">" and i != len(tokens) - 1:
            raise InvalidArgument("--subject: > may only be the last token")


def _check_name(option: str, value: str | None) -> None:
    # JetStream's own rule for stream and consumer names (they become subject tokens).
    if value is None or len(value) > 255 or any(c in value for c in " .*>/\\"):
        raise InvalidArgument(f"{option} must be at most 255 characters, without spaces, '.', '*', '>', '/' or '\\'")


def guarantee(config: Mapping[str, Any]) -> str:
    wait = config.get("ack_wait") or DEFAULT_ACK_WAIT
    return (f"durable: each message acked only after its commit (in-progress acks while committing); "
            f"what a crash left unacked is redelivered after AckWait ({wait} s)")  # fmt: skip


def cannot_hold(config: Mapping[str, Any]) -> None:
    """A pull consumer holds a message for as long as in-progress acks renew its AckWait (--ack on-complete)."""
    return None


def where(config: Mapping[str, Any]) -> str:
    subject = config.get("subject") or "(all)"
    return f"stream {config.get('stream')} subject {subject} durable {config.get('durable')}"


def env(config: Mapping[str, Any]) -> list[str]:
    name = adapters.url_env(config)
    return [name] if name else []


# ------------------------------------------------------------------ the connection


Connect = Callable[[str], Awaitable[Client]]


async def new_client(url: str, timeout: float = 5.0) -> Client:
    """The client the reader uses unless one is handed in: no reconnects of its own (the loop backs off).

    nats-py tries a server at least twice, and then says only "no servers available": the reason it
    was given (refused, a timeout, authorization) is kept to say instead. Its asynchronous errors are
    kept, not logged (its default logs them with a traceback).
    """
    last: list[Exception] = []

    async def keep(exc: Exception) -> None:
        last[:] = [exc]

    try:
        return await nats.connect(url, connect_timeout=timeout, allow_reconnect=False, max_reconnect_attempts=1,
                                  reconnect_time_wait=0, error_cb=keep, name="switchboard-local",
                                  ping_interval=PING_EVERY, max_outstanding_pings=3)  # fmt: skip
    except nats.errors.NoServersError:
        if last:
            raise last[0] from None
        raise


def url_of(config: Mapping[str, Any], environ: Mapping[str, str]) -> str:
    """The adapter's URL (kept, or from its variable), else CannotConsume saying which is missing."""
    url = adapters.url(config, environ)
    if url is None:
        name = adapters.url_env(config)
        raise CannotConsume(f"${name} is not set here" if name else "no URL in its config")
    return url


def url_secrets(url: str) -> tuple[str, ...]:
    """What a URL holds that must never be shown: its password, or a token in its user part (raw and decoded)."""
    try:
        parts = urlsplit(url)
        secret = parts.password if parts.password is not None else parts.username
    except ValueError:
        return ()
    return tuple(s for s in {secret, unquote(secret or "")} if s)


# ------------------------------------------------------------------ the reader


class JetStreamReader:
    """One adapter's durable pull consumer: fetch a batch, ack each stored message after the commit."""

    faults: tuple[type[Exception], ...] = (nats.errors.Error, OSError, CannotConsume)

    def __init__(self, source: Source, connect: Connect | None = None) -> None:
        config = source.config
        url = url_of(config, os.environ)
        self.name = source.name
        self.secrets = url_secrets(url)
        self.stream: str = config["stream"]
        self.subject: str | None = config.get("subject")
        self.durable: str = config["durable"]
        self.batch: int = config["batch"]
        self.ack_wait: float = config.get("ack_wait") or DEFAULT_ACK_WAIT
        self.create_stream: bool = bool(config.get("create_stream"))
        self.origin = f"nats stream {self.stream!r}"
        self._url = url
        self._connect = connect or new_client
        self._client: Client | None = None
        self._sub: Any = None  # the pull subscription, once the consumer is bound
        self._renew_every = self.ack_wait / 3
        self._batch: list[Msg] = []  # read and neither acked nor left to redelivery: nak'd on close
        self._renewing: asyncio.Task[None] | None = None
        self._holding: dict[str, Msg] = {}  # held until their todos finish (--ack on-complete), by Message.held_as
        self._keeping: asyncio.Task[None] | None = None
        self._max_ack_pending = 0  # the consumer's (0: no limit): what it delivers unacked at most
        self._at_limit = False

    async def read(self) -> list[Message]:
        if self._sub is None:
            await self._start()
        try:
            msgs = await self._sub.fetch(self.batch, timeout=FETCH_WAIT)
        except TimeoutError:  # nothing came within FETCH_WAIT (nats-py raises its own, or asyncio's, subclass)
            return []
        if not msgs:
            return []
        self._batch = msgs
        self._renewing = asyncio.create_task(self._renew(msgs), name=f"adapter:{self.name}:in-progress")
        return [self._message(m) for m in msgs]

    async def ack(self, messages: list[Message], stored: list[bool]) -> None:
        await self._stop_renewing()
        acked = [m for m, done in zip(messages, stored) if done]
        for message in acked:
            await message.receipt.ack()
            self._holding.pop(message.held_as, None)
        # The others stay unacked: the server redelivers them after AckWait (or they are held).
        self._batch = []
        if acked:
            await self.client.flush(timeout=API_TIMEOUT)  # the acks are with the server when this returns

    async def hold(self, messages: list[Message]) -> None:
        """Held until their todos finish: an in-progress ack for each every third of AckWait, as for a batch."""
        for message in messages:
            self._holding[message.held_as] = message.receipt
        if self._keeping is None:
            self._keeping = asyncio.create_task(self._keep(), name=f"adapter:{self.name}:holding")
        at_limit = 0 < self._max_ack_pending <= len(self._holding)
        if at_limit and not self._at_limit:  # said once each time it is reached: the server delivers no more
            log.warning("adapter %s: %d messages held for their todos reach the consumer's max_ack_pending: "
                        "JetStream delivers no more to it until some of those todos finish", self.name,
                        len(self._holding))  # fmt: skip
        self._at_limit = at_limit

    async def close(self) -> None:
        await self._stop_renewing()
        keeping, self._keeping = self._keeping, None
        if keeping is not None:
            keeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeping
        if self._client is None:
            return
        # Never stored (the commit failed), or held: redelivered now rather than after AckWait (a held one
        # to the next reader, which finds its todos and holds it again, or acks it if they are finished).
        for msg in [*self._batch, *self._holding.values()]:
            with contextlib.suppress(nats.errors.Error, OSError):
                await msg.nak()
        self._batch, self._holding = [], {}
        with contextlib.suppress(nats.errors.Error, OSError):
            await self._client.close()  # flushes what is buffered (the naks) first

    @property
    def client(self) -> Client:
        assert self._client is not None, "read() connects first"
        return self._client

    async def _start(self) -> None:
        self._client = await self._connect(self._url)
        js = self._client.jetstream(timeout=API_TIMEOUT)
        try:
            await self._ensure_stream(js)
        except (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError):
            raise CannotConsume(NO_JETSTREAM) from None
        info = await self._ensure_consumer(js)
        # Renew within the consumer's own AckWait, which may differ from ours when it was made elsewhere.
        self._renew_every = max((info.config.ack_wait or DEFAULT_ACK_WAIT) / 3, 0.1)
        self._max_ack_pending = max(info.config.max_ack_pending or 0, 0)
        self._sub = await js.pull_subscribe_bind(consumer=self.durable, stream=self.stream)

    async def _ensure_stream(self, js: Any) -> None:
        try:
            await js.stream_info(self.stream)
            return
        except nats.js.errors.NotFoundError:
            if not self.create_stream:
                raise CannotConsume(f"no stream {self.stream!r} on the server (create it, or re-add the adapter with "
                             "--create-stream)") from None  # fmt: skip
        try:
            await js.add_stream(name=self.stream, subjects=[self.subject])
        except nats.js.errors.BadRequestError as refused:  # made meanwhile by another process, or refused
            try:
                await js.stream_info(self.stream)
            except nats.js.errors.NotFoundError:
                raise refused from None

    async def _ensure_consumer(self, js: Any) -> api.ConsumerInfo:
        try:
            info = await js.consumer_info(self.stream, self.durable)
        except nats.js.errors.NotFoundError:
            config = api.ConsumerConfig(
                name=self.durable, durable_name=self.durable, ack_policy=api.AckPolicy.EXPLICIT,
                deliver_policy=api.DeliverPolicy.ALL,  # from the stream's start: what was there before counts
                ack_wait=float(self.ack_wait), filter_subject=self.subject, max_deliver=-1,
            )  # fmt: skip
            return await js.add_consumer(self.stream, config=config)
        self._check_consumer(info.config)
        return info

    def _check_consumer(self, config: api.ConsumerConfig) -> None:
        """A consumer made elsewhere: take it only if it is pulled, acked one by one, on our subject."""
        name = f"consumer {self.durable!r} of stream {self.stream!r}"
        if config.deliver_subject:
            raise CannotConsume(f"{name} is a push consumer; this adapter needs a pull consumer (another --durable)")
        if config.ack_policy != api.AckPolicy.EXPLICIT:
            raise CannotConsume(
                f"{name} acks {config.ack_policy}, not explicitly: messages could be lost (another --durable)"
            )
        filters = set(config.filter_subjects or ([config.filter_subject] if config.filter_subject else []))
        if filters != ({self.subject} if self.subject else set()):
            raise CannotConsume(f"{name} filters {sorted(filters) or 'nothing'}, not {self.subject or 'nothing'} "
                         "(another --durable, or the same --subject)")  # fmt: skip

    def _message(self, msg: Msg) -> Message:
        sequence = msg.metadata.sequence.stream
        msg_id = (msg.headers or {}).get(MSG_ID)
        headers = {"nats-stream": self.stream, "nats-subject": msg.subject, "nats-sequence": str(sequence)}
        if msg_id:
            headers["nats-msg-id"] = msg_id
        return Message(external_id=msg_id or str(sequence), body=msg.data, type=msg.subject, headers=headers,
                       receipt=msg, broker_id=str(sequence))  # fmt: skip

    async def _renew(self, msgs: list[Msg]) -> None:
        """Until the batch is acked: tell the server it is still being worked on, well within AckWait."""
        while True:
            await asyncio.sleep(self._renew_every)
            for msg in msgs:
                await msg.in_progress()
            await self.client.flush(timeout=API_TIMEOUT)

    async def _keep(self) -> None:
        """Until the reader closes: an in-progress ack for each held message, well within AckWait."""
        while True:
            await asyncio.sleep(self._renew_every)
            if not self._holding:
                continue
            try:
                for msg in list(self._holding.values()):
                    await msg.in_progress()
                await self.client.flush(timeout=API_TIMEOUT)
            except (nats.errors.Error, OSError) as exc:  # the next read or ack meets the fault too; until then, again
                log.warning("adapter %s: cannot renew the held messages: %s", self.name, _said(exc, self._url))

    async def _stop_renewing(self) -> None:
        task, self._renewing = self._renewing, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, nats.errors.Error, OSError):
                await task  # a renewal that failed (the connection went) shows again at the ack


Reader = JetStreamReader


# ------------------------------------------------------------------ the backlog probe (status, doctor)


async def probe(config: Mapping[str, Any], environ: Mapping[str, str], timeout: float) -> Backlog:
    """Waiting (not yet delivered) and unacked messages, from the consumer's info; never raises.

    Only asks: never creates the stream or the consumer, never moves a message.
    """
    try:
        url = url_of(config, environ)
    except CannotConsume as exc:
        return Backlog(reachable=False, error=str(exc))
    client: Client | None = None
    try:
        async with asyncio.timeout(timeout * 3):  # connect, then at most two questions
            try:
                client = await new_client(url, timeout)
            except (nats.errors.Error, OSError, TimeoutError, ValueError) as exc:
                return Backlog(reachable=False, error=_said(exc, url), fix=_start(url))
            try:
                return await _backlog(client.jetstream(timeout=timeout), config)
            except (nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError):
                return Backlog(reachable=True, error=NO_JETSTREAM)
            except nats.errors.Error as exc:
                return Backlog(reachable=True, error=_said(exc, url))
    except TimeoutError:
        fix = None if client is not None else _start(url)
        return Backlog(reachable=client is not None, error=f"no answer within {timeout * 3:g} s", fix=fix)
    finally:
        if client is not None:
            with contextlib.suppress(nats.errors.Error, OSError):
                await client.close()


async def _backlog(js: Any, config: Mapping[str, Any]) -> Backlog:
    stream, durable, subject = config.get("stream"), config.get("durable"), config.get("subject")
    try:
        info = await js.consumer_info(stream, durable)
        return Backlog(reachable=True, waiting=info.num_pending, unacked=info.num_ack_pending)
    except nats.js.errors.NotFoundError as exc:
        if exc.err_code != CONSUMER_NOT_FOUND:  # the stream itself is missing
            if config.get("create_stream"):
                return Backlog(reachable=True, waiting=0, unacked=0, note="no stream yet; serve creates it")
            return Backlog(reachable=True, error=f"no stream {stream!r} (create it, or re-add with --create-stream)")
    # serve creates the consumer at the stream's start: every message on the subject waits
    stream_info = await js.stream_info(stream, subjects_filter=subject)
    waiting = sum((stream_info.state.subjects or {}).values()) if subject else stream_info.state.messages
    return Backlog(reachable=True, waiting=waiting, unacked=0, note=f"no consumer {durable!r} yet; serve creates it")


def _start(url: str) -> str:
    """What would make an unreachable server answer."""
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORT
    except ValueError:  # a URL from the environment, never validated
        return "correct the NATS URL"
    return f"start nats-server with JetStream on {parts.hostname}:{port} (nats-server -js -p {port})"


def _said(exc: BaseException, url: str) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    for secret in url_secrets(url):
        text = text.replace(secret, "****")
    return text
