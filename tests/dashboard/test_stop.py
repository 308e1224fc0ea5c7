"""A live stream never holds the server's stop: it ends, and the browser reconnects by itself."""

from __future__ import annotations

import threading

import pytest

from support.dashboard import serving_dashboard

pytestmark = pytest.mark.anyio


async def test_an_open_stream_ends_when_the_server_stops(store, db_path):
    ended = threading.Event()
    with serving_dashboard(db_path) as board:
        stream = board.stream()
        events = stream.__enter__()
        events.next(event="ready")

        def read_to_the_end() -> None:
            try:
                while True:
                    events.next(timeout=60)
            except EOFError:
                ended.set()
            except Exception:
                pass

        reader = threading.Thread(target=read_to_the_end, daemon=True)
        reader.start()
    # serving_dashboard's exit stopped the server (and asserted that it stopped)
    reader.join(timeout=30)
    stream.__exit__(None, None, None)
    assert ended.is_set()
