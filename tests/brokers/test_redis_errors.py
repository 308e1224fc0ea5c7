"""A bug in an adapter (an unexpected exception) is logged for the operator and retried, never crashing serve.

The log names the exception's type and where it was raised (file:line of the
innermost frame), and nothing that might quote the URL and its password.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from switchboard_local.brokers import redis_stream
from switchboard_local.core import sources

from support.brokers import Running
from support.redis_server import free_port

pytestmark = pytest.mark.anyio


def lines_holding(text: str, path: str) -> set[int]:
    """The numbers of the lines of ``path`` that hold ``text`` (mutation testing keeps copies of a function)."""
    lines = Path(path).read_text().splitlines()
    return {number for number, line in enumerate(lines, start=1) if text in line}


async def test_an_unexpected_error_is_logged_with_its_type_and_place_and_retried(real_store, caplog) -> None:
    caplog.set_level(logging.ERROR, logger="switchboard_local.brokers")
    url = f"redis://:hunter2-secret@127.0.0.1:{free_port()}/0"  # never reached: the bug comes first
    # A row edited by hand: stream mode without its consumer group, which the adapter reads first.
    config = {"url": url, "mode": "stream", "key": "orders", "batch": 8, "consumer": "me", "claim_idle": 60}
    adapter = await sources.add(real_store, "orders", family="queue", kind="redis", trust_mode="queue", config=config)
    running = Running(real_store, adapter)
    await running.until(lambda: len(caplog.records), lambda n: n >= 2)  # it keeps retrying
    await running.finish()

    source = redis_stream.__file__
    reading_the_group = lines_holding('self.group, self.consumer = self.config["group"]', source)  # the stream reader's
    for message in caplog.messages:
        found = re.fullmatch(r"adapter orders: unexpected KeyError at (.+):(\d+); retrying", message)
        assert found and found[1] == source and int(found[2]) in reading_the_group, message
    assert "hunter2" not in caplog.text
