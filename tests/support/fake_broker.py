"""A broker that lives in this test process's memory, written to the registry's contract
(brokers/registry.py's docstring) and nothing else: the proof that a broker is one module
and one line in ``registry.MODULES`` (tests/brokers/test_registry.py adds the line).

A topic keeps what waits (published, not delivered) and what is unacked (delivered, not
acked); a new reader first re-delivers what a previous one left unacked, as a broker does
after a consumer's crash. The serving thread reads while the test's thread publishes:
one lock over every topic.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from switchboard_local.brokers import options as shared_options
from switchboard_local.brokers.reader import Message
from switchboard_local.core import adapters
from switchboard_local.core.adapters import Backlog, Option
from switchboard_local.core.errors import InvalidArgument
from switchboard_local.core.sources import Source

NAME = "fake"
DESCRIPTION = "Fake: a topic in the test process's memory"
GUARANTEE = "durable: acked only after the commit; unacked messages are delivered again to the next reader"
OPTIONS = (
    Option("topic", "the topic to read.", required=True),
    Option("window", "messages a reader may hold unacked (default 10).", type=int, min=1, max=100, default=10),
)
REGION_ENV = "FAKE_REGION"  # read by every consumer of it (`service install` names it)
_LOCK = threading.Lock()


@dataclass
class Topic:
    waiting: deque[tuple[str, bytes]] = field(default_factory=deque)
    unacked: OrderedDict[str, bytes] = field(default_factory=OrderedDict)
    acked: list[str] = field(default_factory=list)


TOPICS: dict[str, Topic] = {}


def reset() -> None:
    with _LOCK:
        TOPICS.clear()


def register(monkeypatch: Any) -> None:
    """Add the broker's one line to the registry (undone with ``monkeypatch``), its topics empty."""
    from switchboard_local.brokers import registry

    monkeypatch.setitem(registry.MODULES, NAME, __name__)
    reset()


def publish(topic: str, message_id: str, body: bytes) -> None:
    with _LOCK:
        TOPICS.setdefault(topic, Topic()).waiting.append((message_id, body))


def counts(topic: str) -> tuple[int, int, int]:
    """(waiting, unacked, acked) of a topic."""
    with _LOCK:
        found = TOPICS.get(topic, Topic())
        return len(found.waiting), len(found.unacked), len(found.acked)


def configure(options: Mapping[str, Any]) -> dict[str, Any]:
    config = shared_options.shared(options, default_batch=8, max_batch=100)
    if "url" in config and not config["url"].startswith("fake://"):
        raise InvalidArgument("--url must start with fake://")
    topic = shared_options.text(OPTIONS[0], options.get("topic"))
    window = shared_options.number(OPTIONS[1], options.get("window"))
    return {**config, "topic": topic, "window": window}


def guarantee(config: Mapping[str, Any]) -> str:
    return GUARANTEE


def where(config: Mapping[str, Any]) -> str:
    return f"topic {config.get('topic')!r}"


def env(config: Mapping[str, Any]) -> list[str]:
    return [REGION_ENV]


async def probe(config: Mapping[str, Any], env: Mapping[str, str], timeout: float) -> Backlog:
    url = adapters.url(config, env) or ""
    if url.startswith("fake://down"):
        return Backlog(reachable=False, error="connection refused", fix="start the fake broker")
    waiting, unacked, _ = counts(str(config.get("topic")))
    return Backlog(reachable=True, waiting=waiting, unacked=unacked)


class Reader:
    """The reader factory is the class itself, as the contract allows."""

    faults: tuple[type[Exception], ...] = (ConnectionError,)

    def __init__(self, source: Source, connect: Any = None) -> None:
        self.topic = source.config["topic"]
        self.batch = source.config["batch"]
        self.origin = f"fake topic {self.topic!r}"
        self.secrets: tuple[str, ...] = ()
        self._redelivered = False

    async def read(self) -> list[Message]:
        with _LOCK:
            topic = TOPICS.setdefault(self.topic, Topic())
            if not self._redelivered:  # what a previous reader left unacked comes first
                self._redelivered = True
                taken = list(topic.unacked.items())[: self.batch]
            else:
                taken = []
                while topic.waiting and len(taken) < self.batch:
                    message_id, body = topic.waiting.popleft()
                    topic.unacked[message_id] = body
                    taken.append((message_id, body))
        if not taken:
            await asyncio.sleep(0.02)  # an idle read blocks a moment, as a broker's long poll does
        return [Message(external_id=i, body=b, type=self.topic, headers={"fake-topic": self.topic}, receipt=i)
                for i, b in taken]  # fmt: skip

    async def ack(self, messages: list[Message], stored: list[bool]) -> None:
        with _LOCK:
            topic = TOPICS[self.topic]
            for message, done in zip(messages, stored):
                if done and topic.unacked.pop(message.receipt, None) is not None:
                    topic.acked.append(message.receipt)

    async def close(self) -> None:
        """Unacked messages stay with the topic."""
