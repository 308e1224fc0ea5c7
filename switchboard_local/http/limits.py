"""The receiver's server: uvicorn on httptools, held to `Limits` before the app sees a request.

A request head over 64 KiB gets 431, a head or body that stops arriving gets
408, a connection beyond the connection limit gets 503 (with Retry-After, as
every 503 of the app); each closes the connection. The dashboard's live
streams may hold an eighth of the connections (`Limits.max_streams`).

A stop signal stops accepting, lets requests in flight finish their
transaction (a body still arriving gets STOP_GRACE_SECONDS, then 503), and
exits 0.

This is the one module that knows uvicorn, and it leans on its internals:
`_GuardedProtocol` subclasses the private `httptools_impl.HttpToolsProtocol`
(its parser callbacks, `cycle`, `pipeline`, `flow`, `connections`), and
`_Server` overrides `uvicorn.Server.handle_exit` and `capture_signals`.
pyproject.toml pins uvicorn to the minor version this was checked against, and
tests/http/test_uvicorn_internals.py names what moved when another one differs.

httptools is required, not a speedup: uvicorn is handed this protocol class,
so its fallback to h11 (when httptools is missing) never applies, and without
httptools this module cannot be imported (`serve` does not start).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from http import HTTPStatus
from types import FrameType
from typing import Any

import uvicorn
from starlette.applications import Starlette
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ..core.store.shared import busy_timeout_ms
from .app import RETRY_AFTER_SECONDS

log = logging.getLogger("switchboard_local.serve")

LINGER_SECONDS = 2.0  # after a refusal, how long a client still sending is read (and ignored)
STOP_GRACE_SECONDS = 5.0  # at a stop signal, how much longer a body still arriving may take


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
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "-"
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
