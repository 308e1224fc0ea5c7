"""Checkpoints off the commit path: the writing process folds the WAL into the
file from a thread and a connection of its own.

SQLite's automatic checkpoint runs inside the COMMIT that crosses
``wal_autocheckpoint`` pages: that commit also copies the log into the file
and syncs it, which was the long tail of commit latency. Here the write
connection's threshold is raised (WAL_AUTOCHECKPOINT, a safety net should this
thread fall behind) and a ``Checkpointer`` does the work beside the commits:

- every INTERVAL_SECONDS (0.1 s, as watch.py polls), when something
  committed (from any process: the connection's ``data_version``), a
  PASSIVE checkpoint: it copies what no reader still needs and never waits
  for a lock, so commits go on meanwhile.
  When it copied everything (no reader holds an older snapshot), a RESTART
  one at once, during which this process's writes wait (``writer_turn``):
  it copies the few pages committed since, and the next write starts the
  log over from its first page. So the -wal file stops growing after about
  one interval's worth of pages, and a commit rewrites pages of it rather
  than appending: a file that grows makes each commit's fdatasync write the
  file's size too, which cost about as much again as the data (0.2 ms a
  commit on the development VM);
- when the log still holds more than RESTART_PAGES pages the PASSIVE one could
  not copy (a reader in the way), a RESTART one, waiting at most
  RESTART_WAIT_MS for the lock and the readers, at most every
  RESTART_EVERY_SECONDS;
- when nothing has committed for IDLE_SECONDS, and at close, a TRUNCATE one:
  the -wal file goes back to zero bytes.

A checkpoint only copies committed pages from the log to the file; a crash
at any point leaves every commit in one or the other (synchronous=FULL syncs
the log at each commit). A checkpoint that finds the file busy is simply
tried again at the next look.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from pathlib import Path

WAL_AUTOCHECKPOINT = 10_000  # pages: the write connection checkpoints inline only past this
INTERVAL_SECONDS = 0.1
REWIND_WAIT_MS = 5  # the most the RESTART that starts the log over waits (this process's writes wait with it)
RESTART_PAGES = 4096
RESTART_WAIT_MS = 100
RESTART_EVERY_SECONDS = 0.125  # the most often that one is tried (this process's writes may wait for it)
IDLE_SECONDS = 1.0


class Checkpointer:
    """A thread that checkpoints the file's WAL; ``close`` stops it after a last TRUNCATE."""

    def __init__(
        self,
        path: Path,
        *,
        interval: float = INTERVAL_SECONDS,
        restart_pages: int = RESTART_PAGES,
        idle: float = IDLE_SECONDS,
    ) -> None:
        self._interval = interval
        self._restart_pages = restart_pages
        self._idle = idle
        self._stop = threading.Event()
        # The write connection's lock (group_commit.GroupCommit.turn), set by the
        # store: held for the RESTART that starts the log over, so that this
        # process's next write waits a moment for it rather than racing it.
        self.writer_turn: threading.Lock | None = None
        # Its own connection: a checkpoint never holds the write connection, and
        # never waits for a lock unless it asks to (busy_timeout 0 otherwise).
        self._conn = sqlite3.connect(str(path.absolute()), isolation_level=None, timeout=0, check_same_thread=False)
        self._conn.execute("PRAGMA busy_timeout = 0")
        self.checkpoints = 0  # checkpoints run (tests and the bench read it)
        self.truncations = 0
        self.rewinds = 0  # RESTARTs after which the next write starts the log over
        self._busy = False  # the last checkpoint found the file busy
        self._thread = threading.Thread(target=self._run, name="switchboard-checkpoints", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop, with a last TRUNCATE if anything committed since the last one."""
        self._stop.set()
        self._thread.join()
        self._conn.close()

    def _run(self) -> None:
        seen = self._version()
        changed_at = time.monotonic()
        dirty = False  # something committed since the last TRUNCATE
        restarted_at = float("-inf")
        while not self._stop.wait(self._interval):
            version = self._version()
            now = time.monotonic()
            if version != seen:
                seen, changed_at, dirty = version, now, True
                log, copied = self._checkpoint("PASSIVE")
                if 0 < log == copied:
                    self._rewind()
                elif log - copied > self._restart_pages and now - restarted_at >= RESTART_EVERY_SECONDS:
                    restarted_at = now
                    self._checkpoint("RESTART", wait_ms=RESTART_WAIT_MS)
            elif dirty and now - changed_at >= self._idle:
                dirty = not self._truncate()
        if dirty or self._version() != seen:
            self._truncate()

    def _rewind(self) -> None:
        """Everything in the log was copied: a RESTART, holding this process's
        writes back meanwhile, so that the next write starts the log over."""
        turn = self.writer_turn
        if turn is not None and not turn.acquire(timeout=REWIND_WAIT_MS / 1000):
            return  # the writer is busy for a while: the next look tries again
        try:
            self._checkpoint("RESTART", wait_ms=REWIND_WAIT_MS)
        finally:
            if turn is not None:
                turn.release()
        self.rewinds += not self._busy

    def _version(self) -> int:
        with contextlib.suppress(sqlite3.Error):
            return int(self._conn.execute("PRAGMA data_version").fetchone()[0])
        return -1

    def _truncate(self) -> bool:
        """A TRUNCATE checkpoint; whether it emptied the log."""
        log, copied = self._checkpoint("TRUNCATE")
        if log == 0:
            self.truncations += 1
            return True
        return False

    def _checkpoint(self, mode: str, wait_ms: int = 0) -> tuple[int, int]:
        """(pages in the log, pages copied); a busy or failed checkpoint counts as nothing copied."""
        try:
            if wait_ms:
                self._conn.execute(f"PRAGMA busy_timeout = {wait_ms}")
            try:
                busy, log, copied = self._conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
            finally:
                if wait_ms:
                    self._conn.execute("PRAGMA busy_timeout = 0")
        except sqlite3.Error:  # busy, or the file went away: the next look tries again
            self._busy = True
            return -1, 0
        self.checkpoints += 1
        self._busy = bool(busy)
        if busy and mode == "TRUNCATE":
            return max(log, 1), copied
        return log, copied
