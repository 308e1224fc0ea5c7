"""Who holds an SQLite database's write lock, when it is held by a process that does not let go.

SQLite's lock belongs to a process, not to the database: a process stopped
(SIGSTOP, Ctrl-Z, a debugger) inside a write transaction keeps it, and no
other process can write, nor a standby take the lead from it, until it
continues or ends. Nothing another process does can free it; what can be
done is to say who it is (`status`, `doctor`), and answer webhooks 503 soon
(http/app.py's STORE_WAIT_SECONDS) rather than after the busy timeout.

Linux tells who holds it: /proc/locks lists the POSIX lock on the -shm
file's WAL write byte with its pid, and /proc/PID/stat the process's state.
Elsewhere the ingest leader and its standbys (their rows) are the
candidates, and `ps` tells a stopped one. A PostgreSQL database has no such
lock (its server ends a stopped client's transaction at its own timeouts).
"""

from __future__ import annotations

import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import StoreFault
from .store.interface import Store
from .store.opener import POSTGRESQL, backend
from .store.queries import Q

PROC_LOCKS = Path("/proc/locks")
WAL_WRITE_BYTE = 120  # the -shm byte SQLite locks for a write transaction (WALINDEX_LOCK_OFFSET + WAL_WRITE_LOCK)
STATES = {"R": "running", "S": "sleeping", "D": "waiting on the disk", "T": "stopped", "t": "stopped",
          "Z": "a zombie", "X": "gone", "I": "idle"}  # fmt: skip


@dataclass(frozen=True)
class Holder:
    """A process that keeps the write lock: stopped, or holding it past the wait asked for."""

    pid: int
    state: str  # STATES' words, "gone" or "unknown"
    kind: str | None  # serve or mcp when it is one of this database's ingest processes; None: another program

    @property
    def stopped(self) -> bool:
        return self.state == "stopped"

    def name(self) -> str:
        return f"{self.kind or 'a process'} pid {self.pid}"

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "kind": self.kind, "state": self.state}


def lock_holders(path: Path) -> list[int] | None:
    """The pids holding the WAL write lock of the SQLite file at ``path`` (none: it is free, or
    there is no -shm); None when the system cannot tell (no /proc/locks)."""
    try:
        shm = path.with_name(path.name + "-shm").stat()
    except OSError:
        return []
    try:
        lines = PROC_LOCKS.read_text().splitlines()
    except OSError:
        return None
    where = f"{os.major(shm.st_dev):02x}:{os.minor(shm.st_dev):02x}:{shm.st_ino}"
    found = []
    for line in lines:
        fields = line.split()
        # "1: POSIX  ADVISORY  WRITE 4242 fe:00:2146353 120 120"; a "->" line waits for a lock, holds none
        if len(fields) < 8 or fields[1] == "->" or fields[1] != "POSIX" or fields[3] != "WRITE":
            continue
        start, end = int(fields[6]), fields[7]
        if fields[5] == where and start <= WAL_WRITE_BYTE and (end == "EOF" or int(end) >= WAL_WRITE_BYTE):
            found.append(int(fields[4]))
    return found


def process_state(pid: int) -> str:
    """The state of process ``pid`` on this host, in words: STATES', "gone" or "unknown"."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return STATES.get(stat.rpartition(")")[2].split()[0], "unknown")
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return "gone"
    except (OSError, IndexError):
        return "unknown"
    try:  # no /proc (macOS): ps says it
        shown = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    letter = shown.stdout.strip()[:1]
    return STATES.get(letter, "unknown") if letter else "gone"


async def holders(store: Store, wait: float = 1.0) -> list[Holder]:
    """The processes keeping ``store``'s write lock: one that is stopped, or one that has not let
    go within ``wait`` seconds; [] while writes can go on (and for a PostgreSQL database)."""
    if backend(store.where) == POSTGRESQL:
        return []
    pids = lock_holders(store.path)
    if pids == []:
        return []
    here = socket.gethostname()
    kinds = {row["pid"]: row["kind"] for row in await _ingest_rows(store) if row["host"] == here}
    if pids is None:  # the system cannot say who holds it: the ingest processes stopped are the suspects
        return [h for h in (Holder(pid, process_state(pid), kind) for pid, kind in kinds.items()) if h.stopped]
    found = [Holder(pid, process_state(pid), kinds.get(pid)) for pid in pids if pid != os.getpid()]
    if any(h.stopped for h in found):
        return [h for h in found if h.stopped]
    if not found:
        return []
    try:
        await store.probe_writable(wait)
    except StoreFault:  # still held (or taken again) after the wait: name whoever holds it now
        now = lock_holders(store.path) or []
        return [Holder(pid, process_state(pid), kinds.get(pid)) for pid in now if pid != os.getpid()]
    return []


async def _ingest_rows(store: Store) -> list[Any]:
    """The leader's row, lapsed or not (a stopped leader's lapses), and every member's."""
    leader = await store.read_one(Q.get_leader)
    return [*([leader] if leader is not None else []), *await store.read_all(Q.members, {"since": 0})]
