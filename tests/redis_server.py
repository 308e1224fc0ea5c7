"""A real redis-server on a free loopback port, started and stopped by the tests."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """redis-server with persistence off, or with an fsync-always AOF when ``durable``."""

    def __init__(self, workdir: Path, *, durable: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:  # a failure, not a skip: scripts/test.sh installs it
            raise RuntimeError("redis-server is not installed (apt-get install redis-server, or run scripts/test.sh)")
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
