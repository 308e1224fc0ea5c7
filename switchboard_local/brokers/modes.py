"""Which reader serves which mode: the one table a new broker adds a line to."""

from __future__ import annotations

from . import amqp
from .reader import ReaderFactory
from .redis_list import ListReader
from .redis_pubsub import PubSubReader
from .redis_stream import StreamReader

READERS: dict[str, ReaderFactory] = {
    "stream": StreamReader,
    "list": ListReader,
    "pubsub": PubSubReader,
    "amqp": amqp.Reader,
}
