"""The PostgreSQL store's connections, kept for reuse: a small pool that fails fast.

Why not psycopg_pool: it makes connections in background workers and a
caller waits for one for its whole timeout, even while every attempt is
refused at once (a server that is down); its attempts then back off, so a
server back up was used again only tens of seconds later. During an outage
every call (a webhook's commit, a dashboard's read) took the full wait and
the receiver's senders gave up before its 503. Here a connection is made on
demand, in the caller's own thread: a server that cannot be reached is an
``Unavailable`` at once, and the first call after it is back connects. A
caller waits only while every connection is in use by another call.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from psycopg import pq

from ...errors import Busy, Unavailable

MAX_AGE_SECONDS = 3600.0  # a connection older than this is closed when it comes back (as psycopg_pool's max_lifetime)


class Pool:
    """Up to ``size`` connections made by ``connect`` (which raises only the core's errors)."""

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], size: int, *, wait: float, where: str) -> None:
        self._connect = connect
        self._size = size
        self._wait = wait
        self._where = where
        self._idle: list[tuple[psycopg.Connection[Any], float]] = []  # (connection, when it was made)
        self._open = 0  # made and not closed: idle or in use
        self._changed = threading.Condition()
        self._closed = False

    @contextlib.contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection[Any]]:
        """A connection for the block (``timeout``: how long to wait while all are in use)."""
        conn, made = self._take(self._wait if timeout is None else timeout)
        try:
            yield conn
        finally:
            self._give_back(conn, made)

    def _take(self, timeout: float) -> tuple[psycopg.Connection[Any], float]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                if self._closed:
                    raise Unavailable(f"{self._where}: the store is closing")
                if self._idle:
                    return self._idle.pop()  # the one used last: the likeliest to be alive
                if self._open < self._size:
                    self._open += 1
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Busy(f"{self._where}: all {self._size} connections stayed in use for {timeout:g} s; "
                               "try again later")  # fmt: skip
                self._changed.wait(left)
        try:
            return self._connect(), time.monotonic()
        except BaseException:
            self._forget(1)
            raise

    def _give_back(self, conn: psycopg.Connection[Any], made: float) -> None:
        if not conn.closed and not conn.broken and conn.info.transaction_status != pq.TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                conn.rollback()  # left in a transaction by an error: the next caller starts clean
        usable = not conn.closed and not conn.broken and conn.info.transaction_status == pq.TransactionStatus.IDLE
        with self._changed:
            if usable and not self._closed and time.monotonic() - made < MAX_AGE_SECONDS:
                self._idle.append((conn, made))
                self._changed.notify()
                return
            stale: list[tuple[psycopg.Connection[Any], float]] = []
            if not usable:
                # Broken: the server went away (a restart, an outage), and the idle ones, made
                # before, are as dead: dropped now, rather than each failing a call of its own.
                stale, self._idle = self._idle, []
        for old, _ in stale:
            old.close()
        conn.close()
        self._forget(1 + len(stale))

    def _forget(self, count: int) -> None:
        with self._changed:
            self._open -= count
            self._changed.notify(count)

    def close(self) -> None:
        """Close the idle connections; those in use are closed as they come back."""
        with self._changed:
            self._closed = True
            idle, self._idle = self._idle, []
            self._open -= len(idle)
            self._changed.notify_all()
        for conn, _ in idle:
            conn.close()
