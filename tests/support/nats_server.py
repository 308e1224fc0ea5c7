"""A real `nats-server -js` for the NATS tests: a free loopback port, its own store folder.

Debian's `nats-server` package (scripts/test.sh installs it when missing). The
tests publish and inspect with nats-py, the library the reader uses: async in
the async tests (``connected``), and through ``Nats``, one connection on a loop
of its own thread, in the tests that drive real processes from plain threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import nats
import pytest
from nats.aio.client import Client
from nats.js import api

from switchboard_local.brokers.registry import BROKERS
from switchboard_local.core import sources
from switchboard_local.core.store.interface import Store

from support.brokers import Running, ended, health
from support.cli import run_cli
from support.redis_server import free_port, in_ci
from support.waits import POLL, Wait

MISSING = "nats-server is not installed (apt-get install nats-server, brew install nats-server, or run scripts/test.sh)"
T = TypeVar("T")


class NatsServer:
    """nats-server with JetStream on, storing in ``workdir``/jetstream (kept across a stop and start);
    with ``jetstream=False``, core NATS only; with ``token``, clients must give it (``nats://TOKEN@host``)."""

    def __init__(self, workdir: Path, *, jetstream: bool = True, token: str | None = None) -> None:
        binary = shutil.which("nats-server")
        if binary is None:
            raise RuntimeError(MISSING)
        self.binary = binary
        self.store_dir = workdir / "jetstream"
        self.jetstream = jetstream
        self.token = token
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> NatsServer:
        jetstream = ["-js", "-sd", str(self.store_dir)] if self.jetstream else []
        auth = ["--auth", self.token] if self.token else []
        self.proc = subprocess.Popen([self.binary, "-a", "127.0.0.1", "-p", str(self.port), *jetstream, *auth],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        deadline = time.monotonic() + 10
        while not self._serves():
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server exited with status {self.proc.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError("nats-server did not start within 10 s")
            time.sleep(0.02)
        return self

    def _serves(self) -> bool:
        """The server's INFO line (the first thing it sends a client) came, saying JetStream is on when it should be."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                line = s.makefile("rb").readline()
        except OSError:
            return False
        return line.startswith(b"INFO ") and bool(json.loads(line[5:]).get("jetstream")) == self.jetstream

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


def started_nats_server(workdir: Path, *, jetstream: bool = True, token: str | None = None) -> NatsServer:
    """A started nats-server for a test. Without the binary the test fails when CI is set (CI must run
    every real-server test), and is skipped, saying why, when not."""
    if shutil.which("nats-server") is None:
        if in_ci():
            pytest.fail(f"{MISSING}; CI is set, so the NATS tests must run", pytrace=False)
        pytest.skip(f"{MISSING}; NATS test skipped because CI is not set")
    return NatsServer(workdir, jetstream=jetstream, token=token).start()


@contextlib.asynccontextmanager
async def connected(url: str) -> AsyncIterator[Client]:
    client = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        yield client
    finally:
        await client.close()


async def add_stream(client: Client, name: str, subjects: Sequence[str]) -> None:
    await client.jetstream().add_stream(name=name, subjects=list(subjects))


async def publish(client: Client, subject: str, bodies: Sequence[bytes], msg_ids: Sequence[str] | None = None) -> None:
    """Each body stored by the stream (a publish is acked by JetStream once stored)."""
    js = client.jetstream()
    for i, body in enumerate(bodies):
        headers = {"Nats-Msg-Id": msg_ids[i]} if msg_ids is not None else None
        await js.publish(subject, body, headers=headers)


async def consumer_counts(client: Client, stream: str, durable: str = "switchboard") -> tuple[int, int]:
    """(num_pending, num_ack_pending): not yet delivered, and delivered but not acked, as the server says."""
    info = await client.jetstream().consumer_info(stream, durable)
    return info.num_pending or 0, info.num_ack_pending or 0


async def consumer_info(client: Client, stream: str, durable: str = "switchboard") -> api.ConsumerInfo:
    return await client.jetstream().consumer_info(stream, durable)


async def until_server(look: Callable[[], Awaitable[Any]], want: Any, running: Running | None = None) -> None:
    """``until_async`` for what only an async call shows (the server's consumer info); with ``running``,
    a failure at once if the adapter has ended, with the adapters' health."""
    options: dict[str, Any] = {}
    if running is not None:
        options = {"dead": ended(running.task, running.what), "context": lambda: health(running.path)}
    seen = [await look()]
    wait = Wait(lambda: seen[0], want, **options)
    while not wait.done():
        await asyncio.sleep(POLL)
        seen[0] = await look()


def nats_config(url: str, stream: str, **options: Any) -> dict[str, Any]:
    """A NATS adapter's config as its registry entry makes it (for the reader's and the probe's own tests)."""
    return BROKERS.get("nats").configure({"url": url, "stream": stream, **options})


def nats_adapter_args(name: str, url: str, stream: str, **options: Any) -> list[str]:
    """`adapter add NAME --broker nats --url URL --stream STREAM …`: an option True is a flag (--create-stream)."""
    args = ["adapter", "add", name, "--broker", "nats", "--url", url, "--stream", stream]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        args += [flag] if value is True else [flag, str(value)]
    return args


def add_nats_adapter_by_cli(db: Path | str, url: str, stream: str, name: str = "orders", **options: Any) -> None:
    """A NATS adapter added by the real command line, in a process of its own."""
    added = run_cli(*nats_adapter_args(name, url, stream, **options), db=db)
    assert added.returncode == 0, added.stderr


async def add_nats_adapter(store: Store, db: Path | str, url: str, stream: str, name: str = "orders",
                           **options: Any) -> sources.Source:  # fmt: skip
    """``add_nats_adapter_by_cli`` on ``db`` (``store``'s database) from a test's loop (in a thread: the loop
    keeps running), then the row it added."""
    await asyncio.to_thread(add_nats_adapter_by_cli, db, url, stream, name, **options)
    return await sources.get(store, name, family="queue")


class Nats:
    """One nats-py connection on an event loop of its own thread: for tests that run in plain threads."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="nats-client", daemon=True)
        self.thread.start()
        self.client: Client = self.run(nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0))

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.run(self.client.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()
