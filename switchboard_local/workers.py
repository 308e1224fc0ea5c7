"""`serve --workers N`: more processes answering webhooks on the one listening socket.

The process `serve` starts binds the address, leads ingest when it can (the
consumers, the pruner, the schedules) and answers deliveries itself. With N
workers it also starts N - 1 worker processes that inherit its listening socket
(the kernel gives each new connection to one of them) and run the receiver and
the dashboard only. Each opens the store on its own and stores what it receives
with its own group commit, so the receive path's Python runs on N cores. A
worker answers a delivery only after the commit that holds it, as the leader
does: store-then-ack holds whichever process a sender reached.

A worker that dies (killed, crashed) is started again. What it had received
was either committed (the sender, unanswered, retries, and the retry is answered
as the duplicate it is) or not (the retry stores it): nothing is lost or stored
twice. A worker ends with the process that started it: the kernel sends it
SIGTERM when that one dies (``PR_SET_PDEATHSIG``, Linux), and elsewhere it looks
at its parent every second.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import __version__
from .core.store.shared import DB_ENV, Location

log = logging.getLogger("switchboard_local.serve")

# A worker that dies this soon after it started is started again only after a pause
# (doubling, up to the cap): one that cannot start must not spin.
QUICK_DEATH_SECONDS = 5.0
FIRST_PAUSE_SECONDS = 0.5
MAX_PAUSE_SECONDS = 30.0
STOP_MARGIN_SECONDS = 15.0  # past a worker's own graceful stop, before it is killed
STOPPING_LOOK_SECONDS = 0.1  # how often the serve looks whether it is stopping, to stop its workers with it
PARENT_LOOK_SECONDS = 1.0  # how often a worker looks whether its `serve` is gone (where the kernel cannot tell it)
PARENT_ENV = "SWITCHBOARD_WORKER_OF"  # the pid of the `serve` that started a worker
VERSION_ENV = "SWITCHBOARD_WORKER_VERSION"  # its version: a worker of another (an upgrade since) refuses to run


def default_count() -> int:
    """One process per two cores this process may run on (its affinity: a container's), at least
    one, at most four: the rest are left to the commits, the ingest leader's consumers and the agents."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores // 2))


def stop_seconds() -> float:
    """How long a stopping worker is given: its own graceful stop (http/limits.py: longer than a
    delivery may wait for another process's write lock) and a margin; then it is killed."""
    from .core.store.shared import busy_timeout_ms

    return busy_timeout_ms() / 1000 + 15 + STOP_MARGIN_SECONDS


def command() -> list[str]:
    """What runs `switchboard-local` again: the single-file binary, or this Python with the package."""
    if getattr(sys, "frozen", False):
        return [sys.executable]
    return [sys.executable, "-m", "switchboard_local"]


class Workers:
    """The worker processes of one `serve`: started on entering ``running``, kept at ``count - 1``
    while it runs, stopped (SIGTERM, requests in flight finish) on leaving."""

    def __init__(
        self, count: int, sock: socket.socket, db: Location | None, limits: Any, *, stopping: Callable[[], bool]
    ) -> None:
        """``db``: the serve's database (None: the default, found alike); ``limits``: its
        http/limits.py ``Limits``, which each worker takes as its own."""
        self.count = count
        self.sock = sock
        self.args = ["--head-timeout", str(limits.head_timeout), "--body-timeout", str(limits.body_timeout),
                     "--max-connections", str(limits.max_connections)]  # fmt: skip
        # Its environment: the database comes this way, never on a command line `ps` shows.
        self.env = {**os.environ, PARENT_ENV: str(os.getpid()), VERSION_ENV: __version__}
        if db is not None:
            self.env[DB_ENV] = str(db)
        self.stopping = stopping
        self._procs: set[subprocess.Popen[bytes]] = set()
        # A thread per slot waits for its worker's end: the loop's default pool is left to the store.
        self._waiters = ThreadPoolExecutor(max_workers=max(1, count - 1) + 1, thread_name_prefix="worker-wait")

    def _start(self) -> subprocess.Popen[bytes]:
        fd = self.sock.fileno()
        proc = subprocess.Popen(
            [*command(), "serve", *self.args, "--listen-fd", str(fd)],
            pass_fds=[fd],
            env=self.env,
            stdin=subprocess.DEVNULL,
        )
        self._procs.add(proc)
        log.info("worker %d started", proc.pid)
        return proc

    async def _wait(self, proc: subprocess.Popen[bytes], timeout: float | None = None) -> int:
        return await asyncio.get_running_loop().run_in_executor(self._waiters, proc.wait, timeout)

    async def _keep(self) -> None:
        """One worker slot: a worker in it, started again whenever it dies, until the server stops."""
        pause = FIRST_PAUSE_SECONDS
        while not self.stopping():
            began = time.monotonic()
            try:
                proc = self._start()
                status = await self._wait(proc)
                self._procs.discard(proc)
                if self.stopping():
                    return
                log.warning("worker %d exited (%s); starting another", proc.pid, _status(status))
            except asyncio.CancelledError:
                raise
            except Exception:  # no process could be made (a limit, memory), or anything else: said, and tried again
                log.exception("worker slot: cannot keep a worker running; trying again in %.1f s", pause)
            if time.monotonic() - began < QUICK_DEATH_SECONDS:
                await asyncio.sleep(pause)
                pause = min(pause * 2, MAX_PAUSE_SECONDS)
            else:
                pause = FIRST_PAUSE_SECONDS

    async def stop(self) -> None:
        """SIGTERM to every worker; each ends when its requests in flight are answered (else killed)."""
        procs = list(self._procs)
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        grace = stop_seconds()
        for proc in procs:
            try:
                await self._wait(proc, grace)
            except subprocess.TimeoutExpired:
                log.warning("worker %d did not stop within %.0f s; killed", proc.pid, grace)
                proc.kill()
                await self._wait(proc)
        self._procs.clear()

    async def _stop_with_serve(self) -> None:
        """Stop the workers as soon as the serve is stopping: they drain beside it, not after it."""
        while not self.stopping():
            await asyncio.sleep(STOPPING_LOOK_SECONDS)
        await self.stop()


@contextlib.asynccontextmanager
async def running(workers: Workers) -> AsyncIterator[Workers]:
    """``workers`` kept running while the block runs, stopped when it leaves (or, sooner, when
    the serve begins to stop)."""
    if workers.count <= 1:
        yield workers
        return
    tasks = [asyncio.create_task(workers._keep(), name=f"worker-slot-{n}") for n in range(workers.count - 1)]
    tasks.append(asyncio.create_task(workers._stop_with_serve(), name="workers-stop"))
    try:
        yield workers
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await workers.stop()
        workers._waiters.shutdown(wait=False)


def _status(status: int) -> str:
    if status >= 0:
        return f"exit status {status}"
    try:
        return f"killed by {signal.Signals(-status).name}"
    except ValueError:  # a real-time signal has no name
        return f"killed by signal {-status}"


# ---------------------------------------------------------------- in the worker


def end_with_parent() -> Callable[[], bool]:
    """Ask the kernel to send this worker SIGTERM when the `serve` that started it dies; answer a
    function that says whether it has died (where the kernel cannot be asked, looked at every second;
    and a `serve` gone before the request was made is seen at the first look)."""
    parent = int(os.environ.get(PARENT_ENV) or os.getppid())
    with contextlib.suppress(OSError, AttributeError):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    return lambda: os.getppid() != parent


def inherited_socket(fd: int) -> socket.socket:
    """The listening socket a worker was given (``--listen-fd``)."""
    sock = socket.socket(fileno=fd)
    if sock.type != socket.SOCK_STREAM:
        raise OSError(f"--listen-fd {fd} is not a stream socket")
    return sock
