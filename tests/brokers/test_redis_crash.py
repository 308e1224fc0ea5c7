"""Crashes and stops of a real `serve` process consuming a real redis-server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cli import run_cli
from support.crash import PAUSED, lines_with, log, serve, watching
from support.sql import rows, value
from support.waits import until


@pytest.mark.both_backends
@pytest.mark.parametrize("mode", ["stream", "list"])
def test_kill_9_after_commit_before_ack_then_restart_stores_everything_once(mode, redis_server, db_path: Path) -> None:
    r = redis_server.client()
    added = run_cli("adapter", "add", "work", "--redis-url", redis_server.url, "--mode", mode, "--key", "work", "--batch", "16",
                    db=db_path)  # fmt: skip
    assert added.returncode == 0, added.stderr
    messages = [json.dumps({"n": i}) for i in range(100)]
    if mode == "stream":
        for m in messages:
            r.xadd("work", {"payload": m})
    else:
        r.lpush("work", *messages)

    with serve(db_path, fault="pause-after-commit") as crashed:
        # The first batch is committed and not acknowledged.
        until(lines_with(crashed, PAUSED), lambda n: n > 0, **watching(crashed))
        crashed.proc.kill()  # SIGKILL in the window between COMMIT and ack
        crashed.proc.wait(timeout=10)
    committed = value(db_path, "SELECT count(*) FROM events WHERE family = 'queue'")
    assert committed == 16
    if mode == "stream":
        assert r.xpending("work", "switchboard")["pending"] == 16  # stored, never acked
    else:
        assert r.llen("work:processing") == 16

    with serve(db_path) as restarted:
        until(lambda: value(db_path, "SELECT count(*) FROM events WHERE family = 'queue'"), 100, **watching(restarted))
        if mode == "stream":
            until(lambda: r.xpending("work", "switchboard")["pending"], 0, **watching(restarted))
        else:
            until(lambda: (r.llen("work:processing"), r.llen("work")), (0, 0), **watching(restarted))
        assert restarted.stop() == 0, log(restarted)
    assert value(db_path, "SELECT count(*) FROM todos") == 100  # no duplicates, nothing lost
    bodies = {bytes(body).decode() for (body,) in rows(db_path, "SELECT body FROM events WHERE family = 'queue'")}
    assert bodies == set(messages)


def test_sigterm_acks_what_committed_and_leaves_the_rest_pending(redis_server, db_path: Path) -> None:
    r = redis_server.client()
    added = run_cli("adapter", "add", "work", "--redis-url", redis_server.url, "--mode", "stream", "--key", "work", "--batch", "8",
                    db=db_path)  # fmt: skip
    assert added.returncode == 0, added.stderr
    ids = [r.xadd("work", {"payload": json.dumps({"n": i})}).decode() for i in range(3000)]
    with serve(db_path) as proc:
        until(lambda: value(db_path, "SELECT count(*) FROM events WHERE family = 'queue'"), lambda n: n >= 100, **watching(proc))
        assert proc.stop() == 0, log(proc)

    stored = {row[0] for row in rows(db_path, "SELECT external_id FROM events WHERE family = 'queue'")}
    pending = {entry["message_id"].decode() for entry in r.xpending_range("work", "switchboard", "-", "+", 10_000)}
    assert stored and not (stored & pending)  # everything that committed was acked
    assert stored | pending <= set(ids)
    # Nothing is lost: a new run takes the rest.
    with serve(db_path) as proc:
        until(lambda: value(db_path, "SELECT count(*) FROM events WHERE family = 'queue'"), 3000, **watching(proc))
        assert proc.stop() == 0, log(proc)
    assert r.xpending("work", "switchboard")["pending"] == 0
