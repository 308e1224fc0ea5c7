"""The brokers the Redis tests run against: a real redis-server on a free
loopback port, started and stopped by the tests, and fakeredis in-process.

The Redis semantics tests run on both (the ``broker`` fixture in
test_redis.py): fakeredis lets a contributor without redis-server (macOS)
run them; the real server is the reference, and the only one for what kills,
restarts or inspects a server (INFO).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import fakeredis
import pytest
import redis
import redis.asyncio

MISSING = "redis-server is not installed (apt-get install redis-server, brew install redis, or run scripts/test.sh)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """redis-server with persistence off, or with an fsync-always AOF when ``durable``."""

    connect = None  # the consumers use redis-py's own client, on ``url``

    def __init__(self, workdir: Path, *, durable: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(MISSING)
        self.binary = binary
        self.workdir = workdir
        self.durable = durable
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self.durable else ["--appendonly", "no"]
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--dir", str(self.workdir),
             *persistence],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        client = self.client()
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()  # SIGTERM: redis-server writes its AOF and exits
            self.proc.wait(timeout=10)
            self.proc = None

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def started_redis_server(workdir: Path, *, durable: bool = False) -> RedisServer:
    """A started redis-server for a test. Without the binary the test fails when CI
    is set (CI must run every real-server test), and is skipped, saying why, when not."""
    if shutil.which("redis-server") is None:
        if in_ci():
            pytest.fail(f"{MISSING}; CI is set, so the real-server tests must run", pytrace=False)
        pytest.skip(f"{MISSING}; real-server test skipped because CI is not set (the fakeredis runs still cover "
                    "the Redis semantics)")  # fmt: skip
    return RedisServer(workdir, durable=durable).start()


class FakeBroker:
    """fakeredis, in this process, standing where a redis-server would.

    ``url`` goes in the adapter's row as it would for a real server; the
    consumers get their clients from ``connect`` (their injectable client
    factory), which refuses any other URL as a real connect would fail;
    ``client()`` is the test's own synchronous client. All share one server.
    """

    url = "redis://fakeredis.invalid:6379/0"

    def __init__(self) -> None:
        self.server = fakeredis.FakeServer()

    def connect(self, url: str) -> redis.asyncio.Redis:
        if url != self.url:
            raise redis.ConnectionError(f"fakeredis serves {self.url} only")
        return fakeredis.FakeAsyncRedis(server=self.server)

    def client(self) -> redis.Redis:
        return fakeredis.FakeRedis(server=self.server)

    def stop(self) -> None:
        pass
