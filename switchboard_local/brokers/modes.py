"""Which reader serves which mode: the one table a new broker adds a line to."""

from __future__ import annotations

from .reader import ReaderFactory
from .redis_list import ListReader
from .redis_pubsub import PubSubReader
from .redis_stream import StreamReader
from .sqs import Reader as SQSReader

READERS: dict[str, ReaderFactory] = {
    "stream": StreamReader,
    "list": ListReader,
    "pubsub": PubSubReader,
    "sqs": SQSReader,  # keyed by broker until the registry (brokers/registry.py) replaces this table
}


def reader_key(config: dict) -> str:
    """A Redis source's mode, else its broker's name."""
    return config["mode"] if config.get("broker", "redis") == "redis" else config["broker"]
