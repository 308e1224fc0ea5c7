"""The webhook receiver on Starlette and uvicorn (the process module serves it).

    POST /hooks/{name}   verify on the raw bytes, store the event and its todos,
                         and only then answer (202); 401 bad signature, 404
                         unknown or disabled source, 413 too large, 503 store
                         failure, a store busy past STORE_WAIT_SECONDS, or no
                         readable secret (the provider retries)
    GET  /healthz        200 when a delivery could be stored, else 503 and why

Before the app sees a request, the connection is held to `Limits`: a request
head over 64 KiB gets 431, a head or body that stops arriving gets 408, a
connection beyond the connection limit gets 503; each closes the connection.
Every 503, of every route, carries Retry-After; a fault of the store that a
route does not answer itself is a 503, never a 500.

A stop signal stops accepting, lets requests in flight finish their
transaction (a body still arriving gets STOP_GRACE_SECONDS, then 503), and
exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import signal
import socket
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from types import FrameType
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ..core import routing, sources, webhook_config
from ..core.errors import (
    Conflict,
    Forbidden,
    InvalidArgument,
    NotFound,
    StoreFault,
    SwitchboardError,
)
from ..core.events import NewEvent
from ..core.store.interface import Store
from ..core.store.shared import busy_timeout_ms
from ..core.text import digits
from . import verifiers as webhooks

log = logging.getLogger("switchboard_local.serve")

LINGER_SECONDS = 2.0  # after a refusal, how long a client still sending is read (and ignored)
STOP_GRACE_SECONDS = 5.0  # at a stop signal, how much longer a body still arriving may take
# How long a delivery waits for the store (its source's lookup and its commit, together) before
# it is answered 503: well inside a sender's own timeout (GitHub's is 10 s), whatever holds the
# store up (another process's write lock, a database server that does not answer).
STORE_WAIT_SECONDS = 4.0
RETRY_AFTER_SECONDS = 5  # sent with every 503: the store, or the server, may take this long to recover


# The receiver's own paths: whatever another edge adds beside them (the
# dashboard's routes and its guard) leaves these as they are.
RECEIVER_PATHS = ("/hooks/", "/healthz")


def create_app(
    store: Store, *, routes: Sequence[BaseRoute] = (), middleware: Sequence[Middleware] = ()
) -> Starlette:
    """The receiver's routes, on a store the process opened (and will close).

    ``routes`` are served beside the receiver's (after them: a receiver path
    is always the receiver's) and ``middleware`` wraps the whole app; the
    process module composes them from another edge (the dashboard).
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        for source in await sources_without_secret(store):
            # Said now, not at the first delivery's 503 (which may be days away).
            refs = ", ".join(sources.mask_secret(ref) for ref in source.secrets) or "none configured"
            log.warning("source %s: no secret can be read (%s); its deliveries will be answered 503",
                        shown(source.name), refs)  # fmt: skip
        yield

    # Concurrent deliveries are stored in batches (one transaction, executemany).
    intake = routing.Intake(store)

    async def hook(request: Request) -> Response:
        return await receive(store, request, intake)

    async def healthz(request: Request) -> Response:
        return await health(store)

    return Starlette(
        routes=[Route("/hooks/{name}", hook, methods=["POST"]), Route("/healthz", healthz, methods=["GET"]), *routes],
        # Outermost: every 503 of every route (the dashboard's and its guard's too) says when to retry.
        middleware=[Middleware(RetryAfter), *middleware],
        exception_handlers={SwitchboardError: _core_error},
        lifespan=lifespan,
    )


async def _core_error(request: Request, exc: Exception) -> Response:
    """A core error that a route left unanswered, by ``STATUS``: a fault of the store is a 503
    (never a 500 and a traceback), its words kept for the log."""
    status = status_of(exc)
    if status != 503:
        return _problem(status, str(exc))
    log.error("request path=%s outcome=store-failed error=%s", shown(request.url.path), shown(str(exc)))
    return _problem(status, "the store cannot be used right now; retry later")


class RetryAfter:
    """ASGI middleware: a 503 without a Retry-After header gets one (RETRY_AFTER_SECONDS)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 503:
                headers = MutableHeaders(scope=message)
                headers.setdefault("retry-after", str(RETRY_AFTER_SECONDS))
            await send(message)

        await self.app(scope, receive, sending)


async def health(store: Store) -> JSONResponse:
    """200 when a delivery could be stored now; else 503, each failed check saying why.

    {"ok", "checks": {"database": "ok" | why, "secrets": "ok" | why},
     "sources_without_secret": [names], "error": the failed checks (only when not ok)}
    """
    checks: dict[str, str] = {}
    try:
        await store.probe_writable()
        checks["database"] = "ok"
    except StoreFault as exc:
        checks["database"] = str(exc)
    missing: list[str] = []
    try:
        missing = [source.name for source in await sources_without_secret(store)]
        checks["secrets"] = f"no secret can be read for {', '.join(missing)}" if missing else "ok"
    except StoreFault as exc:
        checks["secrets"] = f"not checked: {exc}"
    failed = [f"{check}: {why}" for check, why in checks.items() if why != "ok"]
    body: dict[str, Any] = {"ok": not failed, "checks": checks, "sources_without_secret": missing}
    if failed:
        body["error"] = "; ".join(failed)
    return JSONResponse(body, status_code=503 if failed else 200)


async def sources_without_secret(store: Store) -> list[sources.Source]:
    """Enabled webhook sources none of whose secrets can be read: each delivery to them gets 503."""
    found = await sources.list_sources(store, family="webhook")
    return [source for source in found if source.enabled and not _secret_readable(source)]


def _secret_readable(source: sources.Source) -> bool:
    try:
        webhooks.resolve_secrets(source)
    except webhooks.SecretUnavailable:
        return False
    return True


# A value from a request goes into a log line bare only when it is a plain word;
# otherwise JSON-quoted (escapes for controls, quotes for spaces and "=") and cut.
_PLAIN = re.compile(r"[A-Za-z0-9._:/@+-]{1,200}")
_SHOWN_MAX = 200


def shown(value: str) -> str:
    if _PLAIN.fullmatch(value):
        return value
    cut = value[:_SHOWN_MAX]
    return json.dumps(cut) + ("..." if len(value) > _SHOWN_MAX else "")


# The one table from the core's errors to HTTP statuses: a fault of the store
# is the server's (503: the sender retries), the others are the request's.
STATUS: tuple[tuple[type[SwitchboardError], int], ...] = (
    (NotFound, 404),
    (Forbidden, 403),
    (Conflict, 409),
    (InvalidArgument, 400),
    (StoreFault, 503),
)


def status_of(exc: Exception) -> int:
    """The status answering ``exc``; 500 for anything the core did not raise on purpose."""
    return next((status for kind, status in STATUS if isinstance(exc, kind)), 500)


def _problem(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def receive(store: Store, request: Request, intake: routing.Intake) -> Response:
    name = request.path_params["name"]
    who = shown(name)
    # One budget for the store's two calls (the body's arrival has its own deadline in Limits).
    started = time.monotonic()
    try:
        async with asyncio.timeout(STORE_WAIT_SECONDS):
            source = await sources.for_delivery(store, name, family="webhook")
    except NotFound:
        source = None
    except (StoreFault, TimeoutError) as exc:
        why = f"no answer within {STORE_WAIT_SECONDS:g} s" if isinstance(exc, TimeoutError) else str(exc)
        log.error("delivery source=%s outcome=store-failed error=%s", who, shown(why))
        return _problem(503, "the store cannot be read; retry later")
    waited = time.monotonic() - started
    if source is None or not source.enabled:
        log.info("delivery source=%s outcome=unknown-source", who)
        return _problem(404, f"no enabled webhook source named {name!r}")

    cap = source.config.get("max_body", webhook_config.DEFAULT_MAX_BODY)
    declared = request.headers.get("content-length")
    if declared is not None and (digits(declared) or 0) > cap:
        log.info("delivery source=%s outcome=too-large bytes=%s", who, shown(declared))
        store.tally.delivery(name, "too_large")
        return _problem(413, f"body larger than {cap} bytes")
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > cap:  # stop reading: never buffer past the cap
                log.info("delivery source=%s outcome=too-large", who)
                store.tally.delivery(name, "too_large")
                return _problem(413, f"body larger than {cap} bytes")
    except ClientDisconnect:  # the client went away, or its body stopped arriving (answered 408)
        log.info("delivery source=%s outcome=body-incomplete bytes=%d", who, len(body))
        return _problem(400, "the body did not arrive")  # nobody reads it: the connection is gone
    raw = bytes(body)

    headers = {k.lower(): v for k, v in request.headers.items()}
    try:
        secrets = webhooks.resolve_secrets(source)
        verified = webhooks.verify(source, headers, raw, store.clock.now_ms() / 1000, secrets)
    except webhooks.SecretUnavailable as exc:
        log.error("delivery source=%s outcome=no-secret detail=%s", who, shown(str(exc)))
        return _problem(503, "the source's secret is not available on this server")
    except webhooks.Unverified as exc:
        # Nothing is stored for an unverified delivery, not even its key.
        log.warning("delivery source=%s outcome=rejected reason=%s", who, shown(str(exc)))
        store.tally.delivery(name, "unverified")
        return _problem(401, f"signature verification failed: {exc}")

    kind = shown(verified.type)
    if verified.challenge is not None:
        log.info("delivery source=%s type=%s outcome=challenge-answered", who, kind)
        return PlainTextResponse(verified.challenge)

    event = NewEvent(
        source=name,
        family="webhook",
        type=verified.type,
        external_id=verified.external_id,
        trust_mode=source.kind,
        verified=webhook_config.needs_secret(source.kind),
        verify_detail=verified.detail,
        content_type=headers.get("content-type"),
        headers=webhooks.redact(headers, source),
        body=raw,
        replay_window=webhook_config.replay_window(source),
    )
    try:
        # The delivery stays in its batch past the deadline (Intake shields it): a store that frees
        # up may still commit it, and the sender's retry is then answered as a duplicate.
        result = await asyncio.wait_for(intake.accept(source, event), max(0.0, STORE_WAIT_SECONDS - waited))
    except StoreFault as exc:
        result = exc
    except TimeoutError:
        log.error("delivery source=%s type=%s outcome=store-busy error=not committed within %g s", who, kind,
                  STORE_WAIT_SECONDS)  # fmt: skip
        store.tally.delivery(name, "failed")
        return _problem(503, f"the store is busy: the event was not committed within {STORE_WAIT_SECONDS:g} s; "
                        "retry later")  # fmt: skip
    if isinstance(result, Exception):  # nothing was stored: the provider should retry
        log.error("delivery source=%s type=%s outcome=store-failed error=%s: %s", who, kind,
                  type(result).__name__, shown(str(result)))  # fmt: skip
        store.tally.delivery(name, "failed")
        return _problem(503, "the event could not be stored; retry later")
    if result.unroutable is not None:
        log.error("delivery source=%s type=%s event=%d kept without todos: %s", who, kind,
                  result.event_id, shown(result.unroutable))  # fmt: skip
    log.info(
        "delivery source=%s type=%s event=%d outcome=%s todos=%s",
        who,
        kind,
        result.event_id,
        "duplicate" if result.duplicate else "stored",
        list(result.todo_ids),
    )
    store.tally.delivery(name, "duplicate" if result.duplicate else "stored")
    return JSONResponse(
        {"event_id": result.event_id, "duplicate": result.duplicate, "todos": list(result.todo_ids)},
        status_code=202,
    )


@dataclass(frozen=True)
class Limits:
    """What one client may hold of the server before the app has its request."""

    max_head_bytes: int = 64 * 1024  # request line and headers; beyond: 431
    head_timeout: float = 10.0  # from the connection (or the request's first byte) to the end of its head; 408
    body_timeout: float = 30.0  # from the end of the head to the end of the body; 408
    max_connections: int = 256  # open at once; a request on one more: 503

    @property
    def max_streams(self) -> int:
        """How many of the connections the dashboard's live streams may hold (an eighth):
        a stream keeps its connection open, so the rest are kept for webhook deliveries."""
        return self.max_connections // 8


def _answer(status: int, message: str) -> bytes:
    body = json.dumps({"error": message}).encode()
    retry = f"retry-after: {RETRY_AFTER_SECONDS}\r\n" if status == 503 else ""
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n{retry}connection: close\r\n\r\n"
    )
    return head.encode() + body


class _GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol held to `limits`.

    httptools buffers a header of any size (a 300 MB one cost 670 MB and two
    minutes of CPU), and uvicorn waits forever for a head or a body that stops
    arriving; so the head is counted as its bytes arrive, and one deadline
    covers the head, then another the body.
    """

    limits = Limits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0  # received since the current request head began
        self._reading_head = True
        self._deadline: asyncio.TimerHandle | None = None
        self._refused = False  # answered (or cut off) by us: parse nothing more

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            # Refused before reading its head: a connection beyond the limit
            # holds no buffer, so the limit bounds memory, not only requests.
            self._refuse(503, f"more than {self.limits.max_connections} connections open; retry later")
            return
        self._arm(self.limits.head_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._reading_head:
            self._head_bytes += len(data)
            if self._deadline is None:
                # The head's clock starts at its first byte, even one httptools
                # skips (an empty line between requests) and that starts no
                # message: else a client could hold a kept-alive connection
                # forever, one CRLF at a time.
                self._arm(self.limits.head_timeout)
        super().data_received(data)  # a request it cannot parse is answered 400 and closed there
        # A head still unfinished after this chunk is buffered by httptools: stop
        # it here. (One that ended within the chunk is measured when complete.)
        if self._reading_head and self._head_bytes > self.limits.max_head_bytes and not self._refused:
            self._refuse(431, f"request head larger than {self.limits.max_head_bytes} bytes")

    def on_message_begin(self) -> None:
        if self._refused:
            return
        super().on_message_begin()
        if self._deadline is None:  # a head that began within the chunk that ended the last body
            self._arm(self.limits.head_timeout)

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self.limits.max_head_bytes:
            self._refuse(431, f"request head larger than {self.limits.max_head_bytes} bytes")
            return
        self._reading_head = False
        self._arm(self.limits.body_timeout)
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._disarm()
        self._reading_head, self._head_bytes = True, 0
        super().on_message_complete()

    def shutdown(self) -> None:
        """At a stop signal: a body still arriving gets `STOP_GRACE_SECONDS` more at most, then 503.

        Without this a slow client held the stop for its whole body timeout,
        and past uvicorn's graceful 30 s its request was cancelled (a traceback
        and a 500).
        """
        super().shutdown()  # idle: closed; a request in flight: closed once answered
        if self._refused or self._reading_head or self.pipeline or self.transport.is_closing():
            return
        if self._deadline is not None and self._deadline.when() - self.loop.time() > STOP_GRACE_SECONDS:
            self._disarm()
            self._deadline = self.loop.call_later(STOP_GRACE_SECONDS, self._stopped)

    def _stopped(self) -> None:
        self._deadline = None
        if not self._refused and not self.transport.is_closing():
            self._refuse(503, "the server is stopping and the request body did not arrive; retry later")

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self._refused or self.transport.is_closing():
            return
        if not self._reading_head:
            self._refuse(408, f"the request body did not arrive within {self.limits.body_timeout:g} s")
        elif self._head_bytes:
            self._refuse(408, f"the request head did not arrive within {self.limits.head_timeout:g} s")
        else:  # a connection that never sent a byte: close it, as an idle kept-alive one is
            self._refused = True
            self.transport.close()

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` and close, without disturbing an answer owed to an earlier request."""
        self._refused = True
        self._disarm()
        if self.transport.is_closing():  # answered already (a 400 for a request that cannot be parsed)
            return
        client = "%s:%d" % self.client if self.client else "-"
        log.info("request client=%s outcome=refused status=%d: %s", client, status, message)
        cycle = self.cycle
        owed = cycle is not None and not cycle.response_complete
        if self.pipeline:  # a pipelining client stalled behind answers not yet sent: cut it off
            self.transport.close()
        elif owed and (self._reading_head or cycle.response_started):
            # The answer to the earlier request (or to this one) is on its way:
            # let it go out, then close; read nothing more meanwhile.
            cycle.keep_alive = False
            self.flow.pause_reading()
        elif cycle is not None and not owed and not self._reading_head:
            self.transport.close()  # this request was answered already; the rest of its body is not awaited
        else:
            if owed:  # the app waits for this body: it sees a disconnect, the client our answer
                cycle.disconnected = True
                cycle.message_event.set()
            self.transport.write(_answer(status, message))
            if self.transport.can_write_eof():
                # Closing with unread bytes (a client still sending) would reset
                # the connection, and the client could lose the answer: end our
                # side, drop what still comes for a moment, then close.
                self.transport.write_eof()
                self._deadline = self.loop.call_later(LINGER_SECONDS, self.transport.close)
            else:
                self.transport.close()


def guarded_protocol(limits: Limits) -> type[asyncio.Protocol]:
    return type("GuardedProtocol", (_GuardedProtocol,), {"limits": limits})


class _Server(uvicorn.Server):
    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:  # bound and the app started: now it is true
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            log.info("serving on http://%s:%d", f"[{host}]" if ":" in host else host, port)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # A stop signal asks for a graceful stop, not a death by signal: do not
        # re-raise it after shutdown (uvicorn's default), so the exit code is 0.
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True


class _QuietServer(_Server):
    """A receiver inside another server's process (`mcp`): its stop signals stay the process's own."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def server(app: Starlette, limits: Limits = Limits(), *, signals: bool = True) -> uvicorn.Server:
    """The receiver's uvicorn server: serve it with ``await server.serve(sockets=[sock])``.

    ``signals``: SIGINT and SIGTERM stop it gracefully (`serve`); without, it
    leaves them to the process and stops when ``should_exit`` is set.
    """
    config = uvicorn.Config(
        app,
        http=guarded_protocol(limits),
        ws="none",
        limit_concurrency=limits.max_connections + 1,  # uvicorn counts the new connection itself
        log_config=None,  # our handler (escaping controls) gets uvicorn's records too
        log_level="warning",
        access_log=False,  # our own line per delivery says more and never a secret
        lifespan="on",
        # Longer than a delivery may wait for another process's write lock, so
        # that a stop never cancels one mid-wait (a traceback and a 500).
        timeout_graceful_shutdown=busy_timeout_ms() / 1000 + 15,
    )
    return _Server(config) if signals else _QuietServer(config)
