"""Which reader serves which mode: the one table a new broker adds a line to."""

from __future__ import annotations

from .nats_jetstream import JetStreamReader
from .reader import ReaderFactory
from .redis_list import ListReader
from .redis_pubsub import PubSubReader
from .redis_stream import StreamReader

READERS: dict[str, ReaderFactory] = {
    "stream": StreamReader,
    "list": ListReader,
    "pubsub": PubSubReader,
    "nats": JetStreamReader,  # by the config's "broker" until the registry replaces this table
}
