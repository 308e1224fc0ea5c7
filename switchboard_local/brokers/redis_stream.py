"""Stream mode: a consumer group, XACK after the commit.

A new reader first re-reads this consumer's own pending entries (read before
a crash, maybe stored, never acked), then takes over entries of other
consumers idle past --claim-idle (a dead consumer's), then reads new entries,
taking over again once per --claim-idle.

Held entries (``--ack on-complete``) stay in the group's pending list, this
consumer's, until their todos finish: the pending list is then the work in
progress. Every third of --claim-idle they are claimed again by this consumer
(XCLAIM ... JUSTID: their idle time starts over, their delivery count does
not move), so that no take-over, this reader's own or another host's, takes
them while this reader lives; once it is gone, they are taken over as any
dead consumer's entries are.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time

from redis.exceptions import RedisError, ResponseError

from ..core.sources import Source
from .reader import Message
from .redis_client import BLOCK_MS, Connect, RedisReader

log = logging.getLogger("switchboard_local.brokers")

Entry = tuple[bytes, dict[bytes, bytes] | None]
KEEP_CHUNK = 1000  # held entries claimed again per XCLAIM


class StreamReader(RedisReader):
    mode = "stream"

    def __init__(self, source: Source, connect: Connect | None = None) -> None:
        super().__init__(source, connect)
        self.group, self.consumer = self.config["group"], self.config["consumer"]
        self.claim_idle: float = self.config["claim_idle"]
        self._started = False
        self._own_pending: bytes | str | None = "0"  # where the re-read of our own pending entries has got to
        self._holding: dict[str, bytes] = {}  # held entries: Message.held_as -> entry id
        self._keeping: asyncio.Task[None] | None = None
        self._claim_from: bytes | str | None = None  # the XAUTOCLAIM cursor while a take-over runs
        # Never claimed: the first read takes over at once. (Not 0.0: time.monotonic() starts
        # near 0 at boot on Linux, which would hold the take-over back for claim_idle of uptime.)
        self._claimed_at = float("-inf")

    async def read(self) -> list[Message]:
        if not self._started:
            await self._create_group()
            self._started = True
        if self._own_pending is not None:  # read before a crash, maybe stored, never acked: these first
            # From a cursor, not from 0 each time: what this reader leaves pending (held, or not stored) is not re-read.
            reply = await self.client.xreadgroup(self.group, self.consumer, {self.key: self._own_pending},
                                                 count=self.batch)  # fmt: skip
            if reply and reply[0][1]:
                self._own_pending = reply[0][1][-1][0]
                return await self._messages(reply[0][1])
            self._own_pending = None
        if self._claim_from is None and time.monotonic() - self._claimed_at >= self.claim_idle:
            self._claim_from = "0-0"
        if self._claim_from is not None:  # one page of the group's pending list per read: a stop is seen between
            reply = await self.client.xautoclaim(
                self.key, self.group, self.consumer,
                min_idle_time=self.claim_idle * 1000, start_id=self._claim_from, count=self.batch,
            )  # fmt: skip
            self._claim_from = reply[0]
            if self._claim_from in (b"0-0", "0-0"):  # the whole pending list seen
                self._claim_from, self._claimed_at = None, time.monotonic()
            held = set(self._holding.values())  # claimed back after a late renewal: held already, not work
            return await self._messages([entry for entry in reply[1] if entry[0] not in held])
        reply = await self.client.xreadgroup(self.group, self.consumer, {self.key: ">"}, count=self.batch, block=BLOCK_MS)
        return await self._messages(reply[0][1] if reply else [])

    async def ack(self, messages: list[Message], stored: list[bool]) -> None:
        acked = [m for m, done in zip(messages, stored) if done]
        if acked:
            await self.client.xack(self.key, self.group, *[m.receipt for m in acked])
        for message in acked:
            self._holding.pop(message.held_as, None)

    async def hold(self, messages: list[Message]) -> None:
        for message in messages:
            self._holding[message.held_as] = message.receipt
        if self._keeping is None:
            self._keeping = asyncio.create_task(self._keep(), name=f"adapter:{self.name}:holding")

    async def close(self) -> None:
        if self._keeping is not None:
            self._keeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeping
            self._keeping = None
        await super().close()

    async def _keep(self) -> None:
        """Until the reader closes: claim the held entries again, well within --claim-idle."""
        while True:
            await asyncio.sleep(self.claim_idle / 3)
            entries = list(self._holding.values())
            try:
                for start in range(0, len(entries), KEEP_CHUNK):
                    chunk = entries[start : start + KEEP_CHUNK]
                    await self.client.xclaim(self.key, self.group, self.consumer, 0, chunk, justid=True)
            except (RedisError, OSError) as exc:  # the next read or ack meets the fault too; until then, try again
                said = f"{type(exc).__name__}: {exc}"
                for secret in self.secrets:
                    said = said.replace(secret, "****")
                log.warning("adapter %s: cannot renew the held entries: %s", self.name, said)

    async def _create_group(self) -> None:
        try:
            # From the start of the stream: entries added before the adapter count.
            await self.client.xgroup_create(self.key, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _messages(self, entries: list[Entry]) -> list[Message]:
        present = [(entry_id, fields) for entry_id, fields in entries if fields]
        if len(present) < len(entries):
            # Pending, but deleted from the stream (XDEL, a trim): nothing left to store, nothing
            # lost by acking it now; left pending it would be re-read on every start.
            log.warning("adapter %s: %d pending entries were deleted from the stream", self.name, len(entries) - len(present))
            gone = [entry_id for entry_id, fields in entries if not fields]
            await self.client.xack(self.key, self.group, *gone)
        return [self.message(entry_id.decode(), body(fields), entry_id) for entry_id, fields in present]


def body(fields: dict[bytes, bytes]) -> bytes:
    """A ``payload`` field as it is; else the fields as compact JSON (undecodable bytes replaced)."""
    if b"payload" in fields:
        return fields[b"payload"]
    decoded = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in fields.items()}
    return json.dumps(decoded, ensure_ascii=False, separators=(",", ":")).encode()
