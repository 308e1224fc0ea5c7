"""The real receiver for the webhook tests: uvicorn on a loopback port, in a
thread (`serving`), or `serve` as a process (`serve_process`).

Requests go over real HTTP with the standard library; what was stored is read
with support.sql, i.e. what is committed on disk.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from switchboard_local import process
from switchboard_local.core import sources, webhook_config
from switchboard_local.core.sources import Source
from switchboard_local.core.store.interface import Store
from switchboard_local.http.limits import Limits


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)  # names lowercased

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Receiver:
    host: str
    port: int

    def request(
        self, method: str, path: str, body: bytes | Iterable[bytes] | None = None, headers: Mapping[str, str] = {}
    ) -> Answer:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            conn.request(method, path, body=body, headers=dict(headers))
            response = conn.getresponse()
            return Answer(response.status, response.read(), {k.lower(): v for k, v in response.getheaders()})
        finally:
            conn.close()

    def post(self, name: str, body: bytes | Iterable[bytes], headers: Mapping[str, str] = {}) -> Answer:
        return self.request("POST", f"/hooks/{name}", body, headers)


@contextlib.contextmanager
def serving(db_path: Path, limits: Limits = Limits(), *, host: str = "127.0.0.1") -> Iterator[Receiver]:
    """What `serve` runs (process.Service) on a free loopback port (the OS picks it), stopped on exit.

    ``host``: the address to bind instead (``0.0.0.0``: every interface); the test still connects over loopback.
    """
    service = process.Service(db_path, limits=limits)
    sock = process.listen(host, 0)
    thread = threading.Thread(target=service.run, args=(sock,), name="serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not service.started:
        if not thread.is_alive():
            raise RuntimeError("the receiver did not start")
        if time.monotonic() > deadline:
            raise TimeoutError("the receiver did not start within 10 s")
        time.sleep(0.005)
    port = sock.getsockname()[1]
    try:
        yield Receiver("127.0.0.1", port)
    finally:
        service.stop()
        thread.join(timeout=15)
        assert not thread.is_alive(), "the receiver did not stop"


class ServeProcess:
    """`switchboard-local serve --port 0` as a real process; its stderr is collected as it comes."""

    def __init__(
        self,
        db_path: Path,
        *args: str,
        env: Mapping[str, str] | None = None,
        program: Sequence[str] = (sys.executable, "-m", "switchboard_local"),
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """``env``: added to ``environ``, the whole environment (default: this process's);
        ``program``: what runs `switchboard-local` (the single-file binary, say)."""
        self.proc = subprocess.Popen(
            [*program, "serve", "--port", "0", "--db", str(db_path), *args],
            env={**(os.environ if environ is None else environ), **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="backslashreplace",
        )
        self.lines: list[str] = []
        self.port: int | None = None
        self._serving = threading.Event()
        self._reader = threading.Thread(target=self._read, name="serve-stderr", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            found = re.search(r"serving on http://127\.0\.0\.1:(\d+)", line)
            if found:
                self.port = int(found.group(1))
                self._serving.set()
        self._serving.set()  # the process ended: whoever waits need not wait longer

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def wait_serving(self, timeout: float = 20) -> Receiver:
        if not self._serving.wait(timeout) or self.port is None:
            raise RuntimeError(f"serve did not start: exit {self.proc.poll()}\n{self.stderr}")
        return Receiver("127.0.0.1", self.port)

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM, then the exit status (after the whole of stderr is read)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            status = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        self._reader.join(timeout)
        return status


@contextlib.contextmanager
def serve_process(
    db_path: Path, *args: str, env: Mapping[str, str] | None = None, **options: Any
) -> Iterator[ServeProcess]:
    """A `ServeProcess` (``options``: its ``program`` and ``environ``), killed on exit if still running."""
    running = ServeProcess(db_path, *args, env=env, **options)
    try:
        yield running
    finally:
        if running.proc.poll() is None:
            running.proc.kill()
            running.proc.wait()


async def add_source(store: Store, name: str, kind: str, secret: str | None = None, **options: Any) -> Source:
    """A webhook source as `source add` makes it (a secret value, unless the kind is open)."""
    secrets = [sources.secret_ref(value=secret)] if secret is not None else []
    return await sources.add(
        store, name, family="webhook", kind=kind, trust_mode=kind,
        config=webhook_config.source_config(kind, options), secrets=secrets,
    )  # fmt: skip
