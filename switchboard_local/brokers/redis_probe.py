"""The Redis entry's backlog probe (`doctor`, `status`, the dashboard): does its Redis
answer, and how much waits there.

Only asks (PING, XINFO GROUPS, XLEN, LLEN); never creates a group or moves a
message. Every answer is a ``Backlog``, an unreachable server included: a
probe never raises, and never puts the URL's password in its error.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError

from ..core import adapters
from ..core.adapters import Backlog
from .redis_client import url_password
from .redis_list import processing_key


async def probe(config: Mapping[str, Any], env: Mapping[str, str], timeout: float) -> Backlog:
    """PING, then the backlog of the adapter's mode; each connect and reply within ``timeout`` s, no retries."""
    url, name = adapters.url(config, env), adapters.url_env(config)
    if url is None:
        return Backlog(reachable=False, error=f"${name} is not set here" if name else "no URL in its config")
    try:
        client = aioredis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0)
        )
    except (ValueError, RedisError) as exc:  # a URL from the environment, never validated
        return Backlog(reachable=False, error=_said(exc, url), fix=_start(url))
    try:
        async with asyncio.timeout(timeout * 3):  # connect, PING, one question: a hard cap over all three
            await client.ping()
            try:
                return await _backlog(client, config)
            except ResponseError as exc:  # e.g. the key holds another type
                return Backlog(reachable=True, error=_said(exc, url))
    except (RedisError, OSError, TimeoutError) as exc:
        return Backlog(reachable=False, error=_said(exc, url), fix=_start(url))
    finally:
        try:
            await client.aclose()
        except (RedisError, OSError):
            pass


async def _backlog(client: aioredis.Redis, config: Mapping[str, Any]) -> Backlog:
    key, mode = config.get("key"), config.get("mode")
    if mode == "list":
        async with client.pipeline(transaction=False) as pipe:
            waiting, unacked = await pipe.llen(key).llen(processing_key(str(key))).execute()
        return Backlog(reachable=True, waiting=waiting, unacked=unacked)
    if mode != "stream":
        return Backlog(reachable=True, note="pub/sub keeps no backlog")
    group = config.get("group")
    try:
        groups = await client.xinfo_groups(key)
    except ResponseError as exc:
        if "no such key" not in str(exc).lower():
            raise
        return Backlog(reachable=True, waiting=0, unacked=0, note="no stream yet; serve creates it")
    found = next((g for g in groups if _text(g.get("name")) == group), None)
    if found is None:  # serve creates the group at the stream's start: every entry waits
        length = await client.xlen(key)
        return Backlog(reachable=True, waiting=length, unacked=0, note=f"no group {group!r} yet; serve creates it")
    lag = found.get("lag")  # None when Redis cannot tell (entries deleted or trimmed past the group)
    note = None if lag is not None else "Redis cannot tell the lag"
    return Backlog(reachable=True, waiting=lag, unacked=int(found.get("pending") or 0), note=note)


def _start(url: str) -> str:
    """What would make an unreachable Redis answer."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"start Redis on the socket {parts.path} (redis-server --unixsocket {shlex.quote(parts.path)})"
    try:
        port = parts.port or 6379
    except ValueError:  # a URL from the environment, never validated
        return "correct the Redis URL"
    return f"start Redis on {parts.hostname}:{port} (redis-server --port {port})"


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _said(exc: BaseException, url: str) -> str:
    """The error in a line, without the password."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    password = url_password(url)
    return text.replace(password, "****") if password else text
