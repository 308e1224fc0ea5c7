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
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

log = logging.getLogger("switchboard_local.serve")

# A worker that dies this soon after it started is started again only after a pause
# (doubling, up to the cap): one that cannot start must not spin.
QUICK_DEATH_SECONDS = 5.0
FIRST_PAUSE_SECONDS = 0.5
MAX_PAUSE_SECONDS = 30.0
STOP_SECONDS = 30.0  # a stopping worker's in-flight requests finish first; past this it is killed
PARENT_LOOK_SECONDS = 1.0  # how often a worker looks whether its `serve` is gone (where the kernel cannot tell it)
PARENT_ENV = "SWITCHBOARD_WORKER_OF"  # the pid of the `serve` that started a worker


def default_count() -> int:
    """One process per two cores, at least one, at most four: the rest of the cores are left to
    the write connection's commits, the ingest leader's consumers and the agents."""
    return max(1, min(4, (os.cpu_count() or 1) // 2))


def command() -> list[str]:
    """What runs `switchboard-local` again: the single-file binary, or this Python with the package."""
    if getattr(sys, "frozen", False):
        return [sys.executable]
    return [sys.executable, "-m", "switchboard_local"]


class Workers:
    """The worker processes of one `serve`: started on entering ``running``, kept at ``count - 1``
    while it runs, stopped (SIGTERM, requests in flight finish) on leaving."""

    def __init__(
        self,
        count: int,
        sock: socket.socket,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stopping: Callable[[], bool],
    ) -> None:
        self.count = count
        self.sock = sock
        self.args = list(args)  # the `serve` options a worker repeats (its limits)
        # Its environment: the database comes this way, never on a command line `ps` shows.
        self.env = {**(os.environ if env is None else env), PARENT_ENV: str(os.getpid())}
        self.stopping = stopping
        self.started = 0  # workers started so far, the replacements included
        self._procs: set[subprocess.Popen[bytes]] = set()

    @property
    def pids(self) -> list[int]:
        return sorted(p.pid for p in self._procs if p.poll() is None)

    def _start(self) -> subprocess.Popen[bytes]:
        fd = self.sock.fileno()
        proc = subprocess.Popen(
            [*command(), "serve", *self.args, "--listen-fd", str(fd)],
            pass_fds=[fd],
            env=self.env,
            stdin=subprocess.DEVNULL,
        )
        self._procs.add(proc)
        self.started += 1
        log.info("worker %d started", proc.pid)
        return proc

    async def _keep(self) -> None:
        """One worker slot: a worker in it, started again whenever it dies, until the server stops."""
        pause = FIRST_PAUSE_SECONDS
        while not self.stopping():
            try:
                proc = self._start()
            except OSError as exc:  # no process could be made (a limit, memory): said, and tried again
                log.error("cannot start a worker: %s; trying again in %.1f s", exc, pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, MAX_PAUSE_SECONDS)
                continue
            began = time.monotonic()
            status = await asyncio.to_thread(proc.wait)
            self._procs.discard(proc)
            if self.stopping():
                return
            log.warning("worker %d exited (%s); starting another", proc.pid, _status(status))
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
        for proc in procs:
            try:
                await asyncio.to_thread(proc.wait, STOP_SECONDS)
            except subprocess.TimeoutExpired:
                log.warning("worker %d did not stop within %.0f s; killed", proc.pid, STOP_SECONDS)
                proc.kill()
                await asyncio.to_thread(proc.wait)
        self._procs.clear()


@contextlib.asynccontextmanager
async def running(workers: Workers) -> AsyncIterator[Workers]:
    """``workers`` kept running while the block runs, stopped when it leaves."""
    slots = [asyncio.create_task(workers._keep(), name=f"worker-slot-{n}") for n in range(workers.count - 1)]
    try:
        yield workers
    finally:
        for slot in slots:
            slot.cancel()
        await asyncio.gather(*slots, return_exceptions=True)
        await workers.stop()


def _status(status: int) -> str:
    return f"killed by {signal.Signals(-status).name}" if status < 0 else f"exit status {status}"


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
