"""Reliable list mode: BLMOVE onto KEY:processing, LREM after the commit.

Tail to tail: KEY:processing keeps the producer's order (an LPUSH producer's
oldest first), so a batch re-read from it after a failed commit or a crash is
stored in that order. A new reader first stores what a crash left there.
"""

from __future__ import annotations

from ..core.events import body_hash
from ..core.sources import Source
from .reader import Message
from .redis_client import BLOCK_MS, Connect, RedisReader


def processing_key(key: str) -> str:
    """The list a reader moves its messages to until they are stored."""
    return f"{key}:processing"


class ListReader(RedisReader):
    mode = "list"

    def __init__(self, source: Source, connect: Connect | None = None) -> None:
        super().__init__(source, connect)
        self.processing = processing_key(self.key)
        self._recovering = True

    async def read(self) -> list[Message]:
        if self._recovering:
            items = await self.client.lrange(self.processing, 0, self.batch - 1)
            if items:
                return self._messages(items)
            self._recovering = False
        first = await self.client.blmove(self.key, self.processing, BLOCK_MS / 1000, "RIGHT", "RIGHT")
        if first is None:
            return []
        items = [first]
        while len(items) < self.batch:
            more = await self.client.lmove(self.key, self.processing, "RIGHT", "RIGHT")
            if more is None:
                break
            items.append(more)
        return self._messages(items)

    async def ack(self, messages: list[Message], stored: list[bool]) -> None:
        async with self.client.pipeline(transaction=False) as pipe:
            for message, done in zip(messages, stored):
                if done:
                    pipe.lrem(self.processing, 1, message.receipt)
            await pipe.execute()

    def _messages(self, items: list[bytes]) -> list[Message]:
        return [self.message(body_hash(item), item, item) for item in items]
