"""Pub/sub mode: fire-and-forget, documented as lossy.

Redis keeps nothing for a subscriber that is away, so there is nothing to ack:
what is published while the adapter is down (or backing off) is gone. One
subscription for the reader's life: re-subscribing after every quiet second
would lose what is published in between.
"""

from __future__ import annotations

from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from ..core.events import body_hash
from .reader import Message
from .redis_client import BLOCK_MS, RedisReader


class PubSubReader(RedisReader):
    mode = "pubsub"
    _pubsub: PubSub | None = None

    async def read(self) -> list[Message]:
        if self._pubsub is None:
            self._pubsub = self.client.pubsub()
            await self._pubsub.subscribe(self.key)
        message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=BLOCK_MS / 1000)
        if message is None:
            return []
        bodies = [message["data"]]
        while len(bodies) < self.batch:  # what queued up meanwhile, in one transaction
            more = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=0)
            if more is None:
                break
            bodies.append(more["data"])
        return [self.message(body_hash(b), b, None) for b in bodies]

    async def ack(self, messages: list[Message], stored: list[bool]) -> None:
        """Nothing to ack: pub/sub keeps no message for later."""

    async def close(self) -> None:
        if self._pubsub is not None:
            try:
                await self._pubsub.aclose()
            except (RedisError, OSError):
                pass
        await super().close()
