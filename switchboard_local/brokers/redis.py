"""Redis, the reference broker: a stream's consumer group (XACK after the commit), a
reliable list (BLMOVE onto KEY:processing, LREM after the commit) or a pub/sub
channel (nothing to ack: loss-tolerant only). Its entry in registry.py.

The readers are redis_stream.py, redis_list.py and redis_pubsub.py (one per
mode, sharing redis_client.py); the options' validation is redis_config.py;
the backlog probe redis_probe.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from redis.exceptions import RedisError

from ..core import adapters
from ..core.sources import Source
from .redis_client import Connect, RedisReader
from .redis_config import GUARANTEES, OPTIONS, configure
from .redis_list import ListReader
from .redis_probe import probe
from .redis_pubsub import PubSubReader
from .redis_stream import StreamReader

NAME = "redis"
DESCRIPTION = "Redis: a stream's consumer group, a reliable list, or a pub/sub channel"
READERS: dict[str, type[RedisReader]] = {"stream": StreamReader, "list": ListReader, "pubsub": PubSubReader}

__all__ = ["DESCRIPTION", "NAME", "OPTIONS", "Reader", "cannot_hold", "configure", "env", "guarantee", "probe", "where"]


def guarantee(config: Mapping[str, Any]) -> str:
    return GUARANTEES.get(config.get("mode"), "unknown: this adapter's mode is not one serve runs")  # type: ignore[arg-type]


# Why a mode cannot hold a stored message unacked until its todos finish (--ack on-complete).
CANNOT_HOLD = {
    "list": "a Redis list keeps no delivery state per message: held messages would sit in KEY:processing, which "
            "every start re-reads from its head (--mode stream can: its consumer group's pending entries)",
    "pubsub": "Redis pub/sub keeps nothing to hold: a message is gone once it is delivered",
}  # fmt: skip


def cannot_hold(config: Mapping[str, Any]) -> str | None:
    """Stream mode holds (its pending entries, claimed again while held); the others cannot."""
    mode = config.get("mode")
    if mode == "stream":
        return None
    return CANNOT_HOLD.get(mode, f"mode {mode!r} is not one serve runs")  # type: ignore[arg-type]


def where(config: Mapping[str, Any]) -> str:
    text = f"{config.get('mode')} {config.get('key')!r}"
    return text + f" group {config.get('group')}" if config.get("mode") == "stream" else text


def env(config: Mapping[str, Any]) -> list[str]:
    name = adapters.url_env(config)
    return [name] if name else []


class _ByMode:
    """The reader factory: the reader of the adapter's mode."""

    faults: tuple[type[Exception], ...] = RedisReader.faults

    def __call__(self, source: Source, connect: Connect | None = None) -> RedisReader:
        mode = source.config.get("mode")
        if mode not in READERS:
            raise RedisError(f"mode {mode!r} is not one serve runs (stream, list or pubsub)")
        return READERS[mode](source, connect)


Reader = _ByMode()
