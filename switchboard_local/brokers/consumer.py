"""Redis pull adapters: store-then-ack from streams, reliable lists and pub/sub.

Each enabled adapter is one asyncio task. A batch read from Redis is stored
(events and their routed todos) in one transaction, and only after COMMIT is
it acknowledged: ``XACK`` for a stream, ``LREM`` from the processing list for
a list. A crash anywhere before the ack leaves the messages pending; the next
start re-reads them and the idempotency keys collapse what was already stored.
Pub/sub has nothing to ack: it is loss-tolerant only.

Broker and database faults back off (1 s doubling to 30 s, with jitter) and
resume; they never crash ``serve`` and never ack what did not commit.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
import json
import logging
import os
import random
import time
from urllib.parse import unquote, urlsplit

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from ..core import sources, routing
from ..core.sources import Source
from ..core.errors import StoreFault
from ..core.events import NewEvent, body_hash
from ..core.store import Store

log = logging.getLogger("switchboard_local.brokers")

BLOCK_MS = 1000  # how long one read may block: also how soon a stop is noticed
BACKOFF_FIRST, BACKOFF_MAX = 1.0, 30.0
HEALTH_EVERY = 1.0


@dataclass(frozen=True)
class Faults:
    """Test hooks, passed in by whoever starts the consumers (never read from the environment here)."""

    pause_after_commit: bool = False  # hold the un-acked window open: a test kills the process there


def _url(adapter: Source) -> str:
    if "redis_url" in adapter.config:
        return adapter.config["redis_url"]
    value = os.environ.get(adapter.config["redis_url_env"])
    if not value:
        raise RedisError(f"environment variable {adapter.config['redis_url_env']} is not set")
    return value


class RedisAdapter:
    """One adapter's consuming loop; ``run`` returns once ``stop`` is set."""

    def __init__(self, store: Store, adapter: Source, stop: asyncio.Event, faults: Faults = Faults()) -> None:
        self.store = store
        self.faults = faults
        self.adapter = adapter
        self.config = adapter.config
        self.key: str = adapter.config["key"]
        self.stop = stop
        self.rng = random.Random()
        self._stored_since_health = 0
        self._health_at = 0.0
        self._delay = BACKOFF_FIRST
        self._password: str | None = None

    async def run(self) -> None:
        self._delay = BACKOFF_FIRST
        while not self.stop.is_set():
            client = None
            try:
                url = _url(self.adapter)
                self._password = url_password(url)
                client = aioredis.Redis.from_url(
                    url, socket_timeout=BLOCK_MS / 1000 + 10, socket_connect_timeout=5, health_check_interval=30
                )
                await {"stream": self._stream, "list": self._list, "pubsub": self._pubsub}[self.config["mode"]](client)
            except Exception as exc:  # broker, database, or a bug: back off, never crash serve
                message = self._describe(exc)
                expected = isinstance(exc, (RedisError, OSError, StoreFault))
                if expected:
                    log.warning("adapter %s: %s; retrying in up to %.0f s", self.adapter.name, message, self._delay)
                else:  # a bug: its type and place, never a message that might quote the URL
                    log.error("adapter %s: unexpected %s at %s; retrying", self.adapter.name, type(exc).__name__,
                              _where(exc))  # fmt: skip
                await self._health(error=message)
                await self._sleep(self.rng.uniform(self._delay / 2, self._delay))
                self._delay = min(self._delay * 2, BACKOFF_MAX)
            finally:
                if client is not None:
                    try:
                        await client.aclose()
                    except (RedisError, OSError):
                        pass
        if self._stored_since_health:
            await self._health(force=True)  # what was stored since the last record counts too

    # -------------------------------------------------------------- modes

    async def _stream(self, r: aioredis.Redis) -> None:
        group, consumer, batch = self.config["group"], self.config["consumer"], self.config["batch"]
        try:
            # From the start of the stream: entries added before the adapter count.
            await r.xgroup_create(self.key, group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        # This consumer's own pending entries first: read before a crash, maybe stored, never acked.
        while not self.stop.is_set():
            reply = await r.xreadgroup(group, consumer, {self.key: "0"}, count=batch)
            entries = reply[0][1] if reply else []
            if not entries:
                break
            await self._store_stream(r, entries)
        claimed_at = 0.0
        while not self.stop.is_set():
            if time.monotonic() - claimed_at >= self.config["claim_idle"]:
                await self._take_over_idle(r)
                claimed_at = time.monotonic()
            reply = await r.xreadgroup(group, consumer, {self.key: ">"}, count=batch, block=BLOCK_MS)
            entries = reply[0][1] if reply else []
            if entries:
                await self._store_stream(r, entries)
            else:
                await self._ok()

    async def _take_over_idle(self, r: aioredis.Redis) -> None:
        """Entries of other consumers idle past --claim-idle (a dead consumer's)."""
        start = "0-0"
        while not self.stop.is_set():
            reply = await r.xautoclaim(
                self.key, self.config["group"], self.config["consumer"],
                min_idle_time=self.config["claim_idle"] * 1000, start_id=start, count=self.config["batch"],
            )  # fmt: skip
            start, entries = reply[0], reply[1]
            if entries:
                await self._store_stream(r, entries)
            if start in (b"0-0", "0-0"):
                return

    async def _store_stream(self, r: aioredis.Redis, entries: list[tuple[bytes, dict[bytes, bytes] | None]]) -> None:
        ids = [entry_id for entry_id, _ in entries]
        present = [(entry_id, fields) for entry_id, fields in entries if fields]
        events = [self._event(entry_id.decode(), self._stream_body(fields)) for entry_id, fields in present]
        if len(present) < len(entries):
            log.warning("adapter %s: %d pending entries were deleted from the stream", self.adapter.name, len(entries) - len(present))
        stored = dict(zip((entry_id for entry_id, _ in present), await self._commit(events)))
        # Deleted entries cannot be stored: ack them with the rest. Never ack what did not commit.
        acked = [entry_id for entry_id in ids if stored.get(entry_id, True)]
        if acked:
            await r.xack(self.key, self.config["group"], *acked)
        await self._ok()

    @staticmethod
    def _stream_body(fields: dict[bytes, bytes]) -> bytes:
        if b"payload" in fields:
            return fields[b"payload"]
        decoded = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in fields.items()}
        return json.dumps(decoded, ensure_ascii=False, separators=(",", ":")).encode()

    async def _list(self, r: aioredis.Redis) -> None:
        processing, batch = f"{self.key}:processing", self.config["batch"]
        # Whatever a crash left in the processing list first.
        while not self.stop.is_set():
            items = await r.lrange(processing, 0, batch - 1)
            if not items:
                break
            await self._store_list(r, processing, items)
        # Tail to tail: KEY:processing keeps the producer's order (oldest first), so a
        # batch re-read from it after a failed commit or a crash is stored in that order.
        while not self.stop.is_set():
            first = await r.blmove(self.key, processing, BLOCK_MS / 1000, "RIGHT", "RIGHT")
            if first is None:
                await self._ok()
                continue
            items = [first]
            while len(items) < batch and (more := await r.lmove(self.key, processing, "RIGHT", "RIGHT")) is not None:
                items.append(more)
            await self._store_list(r, processing, items)

    async def _store_list(self, r: aioredis.Redis, processing: str, items: list[bytes]) -> None:
        stored = await self._commit([self._event(body_hash(item), item) for item in items])
        async with r.pipeline(transaction=False) as pipe:
            for item, done in zip(items, stored):
                if done:
                    pipe.lrem(processing, 1, item)
            await pipe.execute()
        await self._ok()

    async def _pubsub(self, r: aioredis.Redis) -> None:
        async with r.pubsub() as ps:
            await ps.subscribe(self.key)
            while not self.stop.is_set():
                message = await ps.get_message(ignore_subscribe_messages=True, timeout=BLOCK_MS / 1000)
                if message is None:
                    await self._ok()
                    continue
                bodies = [message["data"]]
                while len(bodies) < self.config["batch"]:
                    more = await ps.get_message(ignore_subscribe_messages=True, timeout=0)
                    if more is None:
                        break
                    bodies.append(more["data"])
                await self._commit([self._event(body_hash(b), b) for b in bodies])
                await self._ok()

    # -------------------------------------------------------------- storing

    def _event(self, external_id: str, body: bytes) -> NewEvent:
        mode = self.config["mode"]
        return NewEvent(
            source=self.adapter.name,
            family="queue",
            type=self.key,
            external_id=external_id,
            trust_mode="queue",
            verified=True,
            verify_detail=f"read from redis {mode} {self.key!r} (trusted by the connection)",
            content_type=None,
            headers={"redis-mode": mode, "redis-key": self.key},
            body=body,
        )

    async def _commit(self, events: list[NewEvent]) -> list[bool]:
        """Store a batch in one transaction; answer which messages are stored (may be acked).

        A message that cannot be routed is kept as a bare event (the back half
        does that), so it cannot block the ones behind it; one that cannot even
        be kept stays un-acked, and if nothing could be stored the batch backs
        off. A fault of the database raises: back off, retry it all.
        """
        stored = [True] * len(events)
        if events:
            answers = await routing.accept(self.store, self.adapter, events)
            stored = [not isinstance(a, Exception) for a in answers]
            for event, answer in zip(events, answers):
                if not isinstance(answer, Exception) and answer.unroutable is not None:
                    log.error("adapter %s: message %s kept without todos: %s", self.adapter.name, event.external_id,
                              answer.unroutable)  # fmt: skip
            if not any(stored):
                raise next(a for a in answers if isinstance(a, Exception))
        if self.faults.pause_after_commit:
            log.warning("fault hook: committed %d messages, pausing before the ack", len(events))
            await asyncio.Event().wait()  # the test kills the process here
        self._stored_since_health += sum(stored)
        return stored

    async def _ok(self) -> None:
        """A poll or a batch went through: the next fault starts its backoff afresh."""
        self._delay = BACKOFF_FIRST
        await self._health()

    async def _health(self, error: str | None = None, *, force: bool = False) -> None:
        """Record polls at most once a second (each record is a commit), errors at once."""
        now = time.monotonic()
        if error is None and not force and now - self._health_at < HEALTH_EVERY:
            return
        self._health_at = now
        stored, self._stored_since_health = self._stored_since_health, 0
        try:
            await sources.record_health(self.store, self.adapter.name, error=error, stored=stored)
        except StoreFault as exc:
            self._stored_since_health += stored
            log.warning("adapter %s: cannot record health: %s", self.adapter.name, exc)

    def _describe(self, exc: BaseException) -> str:
        text = f"{type(exc).__name__}: {exc}"
        return text.replace(self._password, "****") if self._password else text

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.stop.wait(), timeout=seconds)
        except TimeoutError:
            pass


def url_password(url: str) -> str | None:
    """The password as redis-py will send it (percent-decoded), to mask it in messages."""
    return unquote(urlsplit(url).password or "") or None


def _where(exc: BaseException) -> str:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else "?"


class Supervisor:
    """Runs every enabled queue adapter; follows enable/disable within a second or two."""

    def __init__(self, store: Store, poll: float = 1.0, faults: Faults = Faults()) -> None:
        self.store = store
        self.poll = poll
        self.faults = faults
        self.running: dict[str, tuple[asyncio.Task[None], asyncio.Event, int]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                try:
                    wanted = {a.name: a for a in await sources.list_sources(self.store, family="queue") if a.enabled}
                    await self._reconcile(wanted)
                except Exception:  # keep supervising whatever happened; say what it was
                    log.exception("adapter supervisor: cannot follow the registry this time")
                try:
                    await asyncio.wait_for(stop.wait(), timeout=self.poll)
                except TimeoutError:
                    pass
        finally:
            await self._stop_all()

    async def _reconcile(self, wanted: dict[str, Source]) -> None:
        for name, (task, _, version) in list(self.running.items()):
            if name not in wanted or wanted[name].updated_at != version or task.done():
                await self._stop(name)
        for name, adapter in wanted.items():
            if name not in self.running:
                stop = asyncio.Event()
                task = asyncio.create_task(RedisAdapter(self.store, adapter, stop, self.faults).run(), name=f"adapter:{name}")
                self.running[name] = (task, stop, adapter.updated_at)
                log.info("adapter %s: started (%s %s)", name, adapter.config["mode"], adapter.config["key"])

    async def _stop(self, name: str) -> None:
        task, stop, _ = self.running[name]
        stop.set()  # finishes the read and the batch in flight (commit, then ack) and returns
        try:
            await task
        except Exception:
            log.exception("adapter %s: ended with an error", name)
        del self.running[name]  # only now: nothing more can be read for it
        log.info("adapter %s: stopped", name)

    async def _stop_all(self) -> None:
        for name in list(self.running):
            await self._stop(name)
