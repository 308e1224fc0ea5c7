"""A running process: what `serve` and `mcp` are, wired from the core and the edges.

The one place that starts things: it opens the store, runs the pruner and the
broker consumers beside the HTTP receiver (``Service``), or serves an agent
over MCP stdio (``run_mcp``), and stops them in order. Wherever the receiver
runs, the dashboard is served beside it (``receiver_app`` composes the two
edges' routes into one app). The edges never start
one another; the CLI calls this module, and this module imports each edge
only when the command needs it (the MCP SDK is not loaded for `serve`).

Stop signals: uvicorn catches SIGINT and SIGTERM while the receiver serves;
the HTTP edge makes either a graceful stop. In-flight requests finish first,
then the consumers finish their batch (commit, then ack) and leave the rest
un-acked, then the pruner stops and the store closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import __version__, workers
from .core import agents, leadership, retention, schedules
from .core.adapters import Brokers
from .core.errors import NotFound, StoreFault
from .core.store.interface import Store, Transaction
from .core.store.opener import open_store
from .core.text import SafeFormatter

log = logging.getLogger("switchboard_local.serve")

PRUNE_EVERY_SECONDS = 3600
# A test hook, read once at start: "pause-after-commit" holds a consumer's
# un-acked window open (commit done, ack not sent) so a test can kill -9 there;
# "stop-in-write-transaction": the process stops itself (SIGSTOP) inside a write
# transaction when it first leads, as one stopped by Ctrl-Z or a debugger would.
FAULT_ENV = "SWITCHBOARD_FAULT"
STOP_IN_WRITE = "stop-in-write-transaction"
# The level of switchboard-local's own log (DEBUG shows each batch a consumer
# stores and the fence it stored it under); INFO by default.
LOG_LEVEL_ENV = "SWITCHBOARD_LOG_LEVEL"


def _apply_log_level() -> None:
    level = os.environ.get(LOG_LEVEL_ENV, "").upper()
    if level in ("DEBUG", "INFO", "WARNING", "ERROR"):
        logging.getLogger("switchboard_local").setLevel(level)


@dataclass(frozen=True)
class Upkeep:
    """What the pruner keeps (see `switchboard-local prune`)."""

    older_than_days: float = retention.DEFAULT_OLDER_THAN_DAYS
    max_events: int = retention.DEFAULT_MAX_EVENTS
    dedup_horizon_days: float = retention.DEFAULT_DEDUP_HORIZON_DAYS


@contextlib.asynccontextmanager
async def producers(
    store: Store, upkeep: Upkeep = Upkeep(), lease: leadership.Lease | None = None
) -> AsyncIterator[None]:
    """The pruner, the schedules' ticks and the broker consumers, running while the block
    runs (each batch fenced by ``lease``, the ingest leadership they run under)."""
    from .brokers.loop import Faults, Supervisor

    pruner = asyncio.create_task(_prune_forever(store, upkeep))
    ticks = asyncio.create_task(_fire_schedules_forever(store, lease), name="schedules")
    stop_consumers = asyncio.Event()
    faults = Faults(pause_after_commit=os.environ.get(FAULT_ENV) == "pause-after-commit")
    supervisor = asyncio.create_task(Supervisor(store, faults=faults, lease=lease).run(stop_consumers))
    try:
        yield
    finally:
        # Consumers finish their batch (commit, then ack) and leave everything else un-acked.
        stop_consumers.set()
        await supervisor
        for task in (ticks, pruner):  # a pass cancelled mid-way stored its ticks whole or not at all
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _prune_forever(store: Store, upkeep: Upkeep) -> None:
    while True:
        try:
            pruned = await retention.prune(
                store,
                older_than_days=upkeep.older_than_days,
                max_events=upkeep.max_events,
                dedup_horizon_days=upkeep.dedup_horizon_days,
            )
            if pruned.events or pruned.todos:
                log.info("prune events=%d todos=%d", pruned.events, pruned.todos)
        except StoreFault as exc:
            log.error("prune failed: %s", exc)
        await asyncio.sleep(PRUNE_EVERY_SECONDS)


async def _fire_schedules_forever(store: Store, lease: leadership.Lease | None) -> None:
    """Fire the schedules' due ticks (core/schedules.py), waking at the next one due (or within
    ``schedules.POLL_SECONDS``, to see schedules added meanwhile). A fault backs off a poll and retries:
    a tick that could not be stored is due still, and fires at the next pass."""
    while True:
        wait = schedules.POLL_SECONDS
        try:
            done = await schedules.fire_due(store, lease=lease)
            for fired in done.fired:
                if fired.new:
                    log.debug("schedule %s: fired %d tick(s)", fired.schedule, fired.new)
            if done.next_due is not None:
                # Just past the instant: the pass then finds it due (the store's clock may lag the loop's by a little).
                wait = min(wait, max(0.0, (done.next_due - store.clock.now_ms()) / 1000) + 0.005)
        except StoreFault as exc:
            log.warning("schedules: cannot fire ticks now: %s", exc)
        except Exception:  # never stop the other producers: say what it was, and try again
            log.exception("schedules: unexpected error")
        await asyncio.sleep(wait)


class Ingest:
    """The ingest side under leadership: this process leads when it can, else stands by.

    While leading (``leadership``), the pruner and the broker consumers run,
    each batch fenced by the lease; the lease is renewed every
    ``leadership.RENEW_SECONDS``. Losing it (a take-over asked for, or a
    stall long enough for a standby to take over) stops them: the batch in
    flight is refused by its fence and stays un-acked with the broker. A
    standby looks every RENEW_SECONDS and takes over when the leader's lease
    is gone or its process is dead. ``take_over`` asks a leader to hand over.
    """

    def __init__(
        self,
        store: Store,
        kind: str,
        *,
        upkeep: Upkeep = Upkeep(),
        take_over: bool = False,
        http: str | None = None,
        receiver: Callable[[], contextlib.AbstractAsyncContextManager[str | None]] | None = None,
    ) -> None:
        self.store = store
        self.http = http  # this process's receiver, shown by `status` while it leads
        self.receiver = receiver  # one to run only while leading (an `mcp`'s, where http.listen is set)
        self.me = leadership.Candidate.this_process(kind)
        self.upkeep = upkeep
        self.take_over = take_over
        self._stop_in_write = os.environ.get(FAULT_ENV) == STOP_IN_WRITE

    async def run(self, stop: asyncio.Event) -> None:
        said_standby = False
        seen_at = 0.0
        try:
            while not stop.is_set():
                try:
                    lease = await leadership.try_lead(self.store, self.me, take_over=self.take_over, http=self.http)
                    if lease is None and time.monotonic() - seen_at >= leadership.MEMBER_SECONDS:
                        await leadership.seen(self.store, self.me)
                        seen_at = time.monotonic()
                except StoreFault as exc:
                    log.warning("ingest: cannot look at the leadership: %s", exc)
                    lease = None
                if lease is None:
                    if not said_standby:
                        log.info("ingest: standing by (another process leads)")
                        said_standby = True
                    await _wait(stop, leadership.RENEW_SECONDS)
                    continue
                said_standby = False
                await self._lead(lease, stop)
        finally:
            with contextlib.suppress(StoreFault):
                await leadership.leave(self.store, self.me)

    async def _lead(self, lease: leadership.Lease, stop: asyncio.Event) -> None:
        log.info("ingest: leading (pid %d, fence %d)", self.me.pid, lease.fence)
        if self._stop_in_write:
            self._stop_in_write = False
            await self.store.write(_stop_here)
        renewed = time.monotonic()
        try:
            async with contextlib.AsyncExitStack() as running:
                if self.receiver is not None:
                    http = await running.enter_async_context(self.receiver())
                    if http is not None:
                        await leadership.set_http(self.store, lease, http)
                await running.enter_async_context(producers(self.store, self.upkeep, lease))
                while not stop.is_set():
                    await _wait(stop, leadership.RENEW_SECONDS)
                    try:
                        if not await leadership.renew(self.store, lease):
                            log.info("ingest: no longer leading (fence %d): handed over or taken over", lease.fence)
                            return
                        renewed = time.monotonic()
                    except StoreFault as exc:
                        log.warning("ingest: cannot renew the leadership: %s", exc)
                        if time.monotonic() - renewed >= leadership.LEASE_SECONDS:
                            return  # a standby may lead by now: stop, and look again
        finally:
            with contextlib.suppress(StoreFault):
                await leadership.release(self.store, lease)


@contextlib.asynccontextmanager
async def ingesting(
    store: Store,
    kind: str,
    *,
    upkeep: Upkeep = Upkeep(),
    take_over: bool = False,
    http: str | None = None,
    receiver: Callable[[], contextlib.AbstractAsyncContextManager[str | None]] | None = None,
) -> AsyncIterator[Ingest]:
    """``Ingest`` running while the block runs; on leaving, it stops (and steps down)."""
    ingest = Ingest(store, kind, upkeep=upkeep, take_over=take_over, http=http, receiver=receiver)
    stop = asyncio.Event()
    task = asyncio.create_task(ingest.run(stop), name=f"ingest:{kind}")
    try:
        yield ingest
    finally:
        stop.set()
        await task


def _stop_here(tx: Transaction) -> None:
    """The STOP_IN_WRITE fault: stop this process holding the write lock (a SIGCONT lets it go on)."""
    log.warning("fault %s: stopping pid %d inside a write transaction", STOP_IN_WRITE, os.getpid())
    # To this thread: a stop sent to the process may reach another thread first, and this one
    # would commit (and let go of the lock) before the whole process stops.
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


class Service:
    """`serve`: the webhook receiver, the broker consumers and the pruner, on one store.

    ``run(sock)`` blocks until a stop signal (or ``stop()`` from another
    thread) and answers whether the receiver started.
    """

    def __init__(
        self,
        db: Path | None,
        *,
        upkeep: Upkeep = Upkeep(),
        limits: Any = None,
        store_options: dict[str, Any] | None = None,
        take_over: bool = False,
        workers: int = 1,
    ) -> None:
        """``workers``: processes answering deliveries, this one included (workers.py)."""
        self.db = db
        self.take_over = take_over
        self.workers = workers
        self.upkeep = upkeep
        self.limits = limits
        self.store_options = store_options or {}
        self._server: Any = None
        self._stopping = False

    @property
    def started(self) -> bool:
        return self._server is not None and bool(self._server.started)

    def run(self, sock: socket.socket) -> bool:
        _apply_log_level()
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            return runner.run(self.serve(sock))

    async def serve(self, sock: socket.socket) -> bool:
        async with await open_store(self.db, **self.store_options) as store:
            host, port = sock.getsockname()[:2]
            address = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
            async with ingesting(store, "serve", upkeep=self.upkeep, take_over=self.take_over, http=address):
                receiver, limits = self._receiver(store, sock)
                pool = workers.Workers(self.workers, sock, self.db, limits, stopping=self._server_exiting)
                async with workers.running(pool):
                    await receiver.serve(sockets=[sock])  # until a stop signal: requests finish first
                return bool(receiver.started)

    def _receiver(self, store: Store, sock: socket.socket) -> tuple[Any, Any]:
        """The receiver's server (with the dashboard) on ``sock``, stopping when this service
        stops, and the limits it holds to."""
        from .http.limits import Limits, server

        limits = self.limits or Limits()
        self._server = server(receiver_app(store, sock, limits, stopping=self._server_exiting), limits)
        self._server.should_exit = self._stopping
        return self._server, limits

    def _server_exiting(self) -> bool:
        return self._server is not None and bool(self._server.should_exit)

    def stop(self) -> None:
        self._stopping = True
        if self._server is not None:
            self._server.should_exit = True


class Worker(Service):
    """`serve --listen-fd FD`: one of a `serve`'s workers (workers.py). It answers deliveries
    and serves the dashboard on the socket it was given, and leads nothing; it stops at a
    stop signal, and when the `serve` that started it is gone."""

    async def serve(self, sock: socket.socket) -> bool:
        parent_gone = workers.end_with_parent()
        theirs = os.environ.get(workers.VERSION_ENV)
        if theirs is not None and theirs != __version__:  # upgraded since its serve started: never mix the two
            log.error("this worker is version %s, its serve %s: restart serve to run the new version",
                      __version__, theirs)  # fmt: skip
            return False
        async with await open_store(self.db, **self.store_options) as store:
            receiver, _ = self._receiver(store, sock)
            orphaned = asyncio.create_task(self._stop_when(parent_gone))
            try:
                await receiver.serve(sockets=[sock])
            finally:
                orphaned.cancel()
            return bool(receiver.started)

    async def _stop_when(self, gone: Callable[[], bool]) -> None:
        while not gone():
            await asyncio.sleep(workers.PARENT_LOOK_SECONDS)
        log.warning("the serve that started this worker is gone: stopping")
        self.stop()


@contextlib.asynccontextmanager
async def leader_receiver(store: Store) -> AsyncIterator[str | None]:
    """The webhook receiver of an `mcp` that leads ingest, on ``http.listen`` when
    that is set (an MCP process opens no port unasked); its address, or None.

    The setting is read as the lead is taken. An address that cannot be bound
    is logged, and the process leads without a receiver.
    """
    from .core import settings
    from .http.limits import Limits, server

    address = (await settings.get(store, settings.HTTP_LISTEN.name)).value
    if address is None:
        yield None
        return
    host, port = settings.split_address(address)
    try:
        sock = listen(host, port)
    except OSError as exc:
        log.error("ingest: cannot listen on %s (http.listen): %s; no webhook receiver", address, exc.strerror or exc)
        yield None
        return
    servers: list[Any] = []
    limits = Limits()
    app = receiver_app(store, sock, limits, stopping=lambda: servers[0].should_exit)
    receiver = server(app, limits, signals=False)
    servers.append(receiver)
    task = asyncio.create_task(receiver.serve(sockets=[sock]), name="receiver")
    try:
        while not receiver.started and not task.done():
            await asyncio.sleep(0.01)
        bound_host, bound_port = sock.getsockname()[:2]
        yield f"http://[{bound_host}]:{bound_port}" if ":" in bound_host else f"http://{bound_host}:{bound_port}"
    finally:
        receiver.should_exit = True  # requests in flight finish first
        await task
        sock.close()


def receiver_app(store: Store, sock: socket.socket, limits: Any, *, stopping: Callable[[], bool]) -> Any:
    """The receiver's app with the dashboard beside it, at ``/`` on the address ``sock`` is bound to.

    ``limits``: the server's (http/limits.py's ``Limits``); the dashboard's live
    streams get ``limits.max_streams`` of its connections, the rest stay the
    receiver's. ``stopping`` says the server is shutting down (the streams end
    then). The dashboard's token is read, or made at this first start
    (core/access_token.py).
    """
    from .core import access_token
    from .dashboard.app import Dashboard
    from .http import app as web

    host, port = sock.getsockname()[:2]
    board = Dashboard(
        store,
        host=host,
        port=port,
        token=access_token.read_or_create(store.path),
        exempt=web.RECEIVER_PATHS,
        brokers=brokers(),
        stopping=stopping,
        max_streams=limits.max_streams,
    )
    return web.create_app(store, routes=board.routes(), middleware=board.middleware())


def listen(host: str, port: int) -> socket.socket:
    """Bind the listen address (the first the host resolves to); raise OSError if it cannot be.

    Bound before the server starts, so that a taken port is reported as such,
    and ``port`` 0 yields the port the system picked.
    """
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: restart over TIME_WAIT
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
    except BaseException:
        sock.close()
        raise
    return sock


def http_limits(**limits: float) -> Any:
    """The receiver's limits (``head_timeout``, ``body_timeout``, ``max_connections``)."""
    from .http.limits import Limits

    return Limits(**limits)


def brokers() -> Brokers:
    """The broker registry (brokers/registry.py): what the CLI, `doctor`, `status` and the
    dashboard ask of an adapter's broker (its options, guarantee, backlog, environment)."""
    from .brokers.registry import BROKERS

    return BROKERS


def doctor_probes() -> Any:
    """`doctor`'s checks that need an edge's library: the adapters' brokers (the registry)."""
    from .core.health import Probes

    return Probes(brokers=brokers())


def mcp_sdk_version() -> str:
    """Import the MCP edge as `mcp` does (the SDK with it) and answer the SDK's version; raise what the import raises."""
    from importlib import metadata

    from .mcp import server  # noqa: F401  (imported to prove that it imports)

    try:
        return metadata.version("mcp")
    except metadata.PackageNotFoundError:  # a frozen binary may carry no package metadata
        return "unknown"


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop where it is installed (as uvicorn would pick it), else asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run_mcp(db: Path | None, agent_name: str | None, ingest: str = "auto") -> int:
    """`mcp`: serve an agent on stdio until the client closes stdin; the exit status.

    Nothing but protocol may reach stdout: logs go to stderr. A core error
    before serving (an unknown agent, a database that cannot be used) is
    raised for the command to report.
    """
    import anyio

    from .mcp.channel import serve_stdio
    from .mcp.server import build_server, client_gone

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SafeFormatter("switchboard-local mcp: %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    logging.getLogger("switchboard_local").setLevel(logging.INFO)
    _apply_log_level()

    async def main() -> None:
        async with await open_store(db) as store:
            agent = None
            if agent_name:
                try:
                    agent = await agents.get(store, agent_name)
                except NotFound:
                    raise NotFound(
                        f"agent {agent_name!r} does not exist in {store.where}; "
                        f"create it with: switchboard-local agent add {agent_name} --queue QUEUE"
                    ) from None
            if ingest == "off":
                await serve_stdio(build_server(store, agent))
                return
            async with ingesting(store, "mcp", take_over=ingest == "on", receiver=lambda: leader_receiver(store)):
                await serve_stdio(build_server(store, agent))

    try:
        anyio.run(main)
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:
        if not client_gone(exc):
            raise
        print("switchboard-local: the client closed the connection", file=sys.stderr)
    return 0
