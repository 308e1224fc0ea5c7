"""Crashes and stops of a real `serve` process consuming a real redis-server."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from redis_server import RedisServer, free_port

FAULT_ENV = "SWITCHBOARD_FAULT"
PAUSED = "fault hook: committed"


@pytest.fixture
def redis_server(tmp_path: Path):
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


def cli(db: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "switchboard_local", *args, "--db", str(db)], check=True, capture_output=True)


def serve(db: Path, *, fault: str | None = None) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    if fault:
        env[FAULT_ENV] = fault
    return subprocess.Popen(
        [sys.executable, "-m", "switchboard_local", "serve", "--port", str(free_port()), "--db", str(db)],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def wait_for_line(proc: subprocess.Popen[str], marker: str, timeout: float = 60) -> str:
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if marker in line:
            return line
        assert line or proc.poll() is None, "serve exited before the line appeared"
    raise AssertionError(f"no line with {marker!r}")


def count(db: Path, sql: str) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchone()[0]


def until(condition, timeout: float = 60) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    return proc.returncode


@pytest.mark.parametrize("mode", ["stream", "list"])
def test_kill_9_after_commit_before_ack_then_restart_stores_everything_once(mode, redis_server, db_path: Path) -> None:
    r = redis_server.client()
    cli(db_path, "adapter", "add", "work", "--redis-url", redis_server.url, "--mode", mode, "--key", "work", "--batch", "16")
    messages = [json.dumps({"n": i}) for i in range(100)]
    if mode == "stream":
        for m in messages:
            r.xadd("work", {"payload": m})
    else:
        r.lpush("work", *messages)

    crashed = serve(db_path, fault="pause-after-commit")
    wait_for_line(crashed, PAUSED)  # the first batch is committed and not acknowledged
    crashed.kill()  # SIGKILL in the window between COMMIT and ack
    crashed.wait(timeout=10)
    committed = count(db_path, "SELECT count(*) FROM events")
    assert committed == 16
    if mode == "stream":
        assert r.xpending("work", "switchboard")["pending"] == 16  # stored, never acked
    else:
        assert r.llen("work:processing") == 16

    restarted = serve(db_path)
    until(lambda: count(db_path, "SELECT count(*) FROM events") == 100)
    if mode == "stream":
        until(lambda: r.xpending("work", "switchboard")["pending"] == 0)
    else:
        until(lambda: r.llen("work:processing") == 0 and r.llen("work") == 0)
    assert stop(restarted) == 0
    assert count(db_path, "SELECT count(*) FROM todos") == 100  # no duplicates, nothing lost
    bodies = {row for row in sqlite3.connect(db_path).execute("SELECT CAST(body AS TEXT) FROM events")}
    assert bodies == {(m,) for m in messages}


def test_sigterm_acks_what_committed_and_leaves_the_rest_pending(redis_server, db_path: Path) -> None:
    r = redis_server.client()
    cli(db_path, "adapter", "add", "work", "--redis-url", redis_server.url, "--mode", "stream", "--key", "work", "--batch", "8")
    ids = [r.xadd("work", {"payload": json.dumps({"n": i})}).decode() for i in range(3000)]
    proc = serve(db_path)
    until(lambda: count(db_path, "SELECT count(*) FROM events") >= 100)
    assert stop(proc) == 0

    with sqlite3.connect(db_path) as conn:
        stored = {row[0] for row in conn.execute("SELECT external_id FROM events")}
    pending = {entry["message_id"].decode() for entry in r.xpending_range("work", "switchboard", "-", "+", 10_000)}
    assert stored and not (stored & pending)  # everything that committed was acked
    assert stored | pending <= set(ids)
    # Nothing is lost: a new run takes the rest.
    proc = serve(db_path)
    until(lambda: count(db_path, "SELECT count(*) FROM events") == 3000)
    assert stop(proc) == 0
    assert r.xpending("work", "switchboard")["pending"] == 0
