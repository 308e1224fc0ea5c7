"""What the Redis readers share: the URL (in the row or an environment
variable), its password to mask, and the client made from it."""

from __future__ import annotations

import os
from collections.abc import Callable
from urllib.parse import unquote, urlsplit

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from ..core import adapters
from ..core.sources import Source
from .reader import Message

BLOCK_MS = 1000  # how long one read may block: also how soon a stop is noticed

Connect = Callable[[str], aioredis.Redis]


def new_client(url: str) -> aioredis.Redis:
    """The client the readers use unless one is handed in (redis-py connects on the first command)."""
    return aioredis.Redis.from_url(
        url, socket_timeout=BLOCK_MS / 1000 + 10, socket_connect_timeout=5, health_check_interval=30
    )


class RedisReader:
    """The part of a Redis reader every mode shares: made without I/O, one client made on first use."""

    faults: tuple[type[Exception], ...] = (RedisError, OSError)
    mode = ""

    def __init__(self, source: Source, connect: Connect | None = None) -> None:
        url = source_url(source)
        password = url_password(url)
        self.name = source.name
        self.secrets = (password,) if password else ()
        self.config = source.config
        self.key: str = source.config["key"]
        self.batch: int = source.config["batch"]
        self.origin = f"redis {self.mode} {self.key!r}"
        self._url = url
        self._connect = connect or new_client
        self._client: aioredis.Redis | None = None

    @property
    def client(self) -> aioredis.Redis:
        if self._client is None:
            self._client = self._connect(self._url)
        return self._client

    def message(self, external_id: str, body: bytes, receipt: object) -> Message:
        headers = {"redis-mode": self.mode, "redis-key": self.key}
        return Message(external_id=external_id, body=body, type=self.key, headers=headers, receipt=receipt)

    async def close(self) -> None:
        if self._client is not None:
            try:
                await self._client.aclose()
            except (RedisError, OSError):
                pass


def source_url(source: Source) -> str:
    """The URL kept in the adapter's config, else read from the variable it names."""
    value = adapters.url(source.config, os.environ)
    if not value:
        raise RedisError(f"environment variable {adapters.url_env(source.config)} is not set")
    return value


def url_password(url: str) -> str | None:
    """The password as redis-py will send it (percent-decoded), to mask it in messages."""
    return unquote(urlsplit(url).password or "") or None

