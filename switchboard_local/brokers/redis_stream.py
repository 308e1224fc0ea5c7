"""Stream mode: a consumer group, XACK after the commit.

A new reader first re-reads this consumer's own pending entries (read before
a crash, maybe stored, never acked), then takes over entries of other
consumers idle past --claim-idle (a dead consumer's), then reads new entries,
taking over again once per --claim-idle.
"""

from __future__ import annotations

import json
import logging
import time

from redis.exceptions import ResponseError

from ..core.sources import Source
from .reader import Message
from .redis_client import BLOCK_MS, Connect, RedisReader

log = logging.getLogger("switchboard_local.brokers")

Entry = tuple[bytes, dict[bytes, bytes] | None]


class StreamReader(RedisReader):
    mode = "stream"

    def __init__(self, source: Source, connect: Connect | None = None) -> None:
        super().__init__(source, connect)
        self.group, self.consumer = self.config["group"], self.config["consumer"]
        self.claim_idle: float = self.config["claim_idle"]
        self._started = False
        self._own_pending = True
        self._claim_from: bytes | str | None = None  # the XAUTOCLAIM cursor while a take-over runs
        # Never claimed: the first read takes over at once. (Not 0.0: time.monotonic() starts
        # near 0 at boot on Linux, which would hold the take-over back for claim_idle of uptime.)
        self._claimed_at = float("-inf")

    async def read(self) -> list[Message]:
        if not self._started:
            await self._create_group()
            self._started = True
        if self._own_pending:  # read before a crash, maybe stored, never acked: these first
            reply = await self.client.xreadgroup(self.group, self.consumer, {self.key: "0"}, count=self.batch)
            if reply and reply[0][1]:
                return await self._messages(reply[0][1])
            self._own_pending = False
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
            return await self._messages(reply[1])
        reply = await self.client.xreadgroup(self.group, self.consumer, {self.key: ">"}, count=self.batch, block=BLOCK_MS)
        return await self._messages(reply[0][1] if reply else [])

    async def ack(self, messages: list[Message], stored: list[bool]) -> None:
        acked = [m.receipt for m, done in zip(messages, stored) if done]
        if acked:
            await self.client.xack(self.key, self.group, *acked)

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
