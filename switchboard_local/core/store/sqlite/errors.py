"""sqlite3's errors as the core's (core/errors.py), by SQLite's result code: Busy,
Unavailable, StoreUnusable, Conflict; a bug (a misused API, bad SQL) as it is."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from ...errors import Busy, Conflict, StoreUnusable, SwitchboardError, Unavailable
from .group_commit import is_busy

# SQLite's primary result codes, as the driver names them, by what they mean here.
_BUSY = {"SQLITE_BUSY", "SQLITE_LOCKED"}
UNUSABLE = {"SQLITE_CORRUPT", "SQLITE_NOTADB"}
_UNAVAILABLE = {"SQLITE_FULL", "SQLITE_IOERR", "SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_NOLFS",
                "SQLITE_PROTOCOL"}  # fmt: skip


def translate(exc: sqlite3.Error, path: Path) -> SwitchboardError | None:
    """The core's error for a driver error, or None for a bug (misused API, bad SQL)."""
    name = (getattr(exc, "sqlite_errorname", None) or "").split("_")
    primary = "_".join(name[:2])  # SQLITE_IOERR_WRITE -> SQLITE_IOERR
    if primary in _BUSY or (not primary and is_busy(exc)):
        return Busy(f"{path} is locked by another process for longer than the busy timeout; try again later")
    if primary in UNUSABLE:
        return StoreUnusable(f"{path} cannot be used: {exc}")
    if primary in _UNAVAILABLE:
        if _disk_full(path):  # SQLite often says only "disk I/O error"
            return Unavailable(f"the disk holding {path} is full ({exc})")
        return Unavailable(f"{path}: {exc}")
    if primary == "SQLITE_CONSTRAINT":
        return Conflict(f"the database refused the change: {exc}")
    return None


def _disk_full(path: Path) -> bool:
    try:
        disk = os.statvfs(path.parent)
    except OSError:
        return False
    return disk.f_bavail * disk.f_frsize < 64 * 1024


@contextlib.contextmanager
def driver_errors(path: Path) -> Iterator[None]:
    """Driver errors leave the store as the core's errors, never as sqlite3's."""
    try:
        yield
    except sqlite3.Error as exc:
        translated = translate(exc, path)
        if translated is None:
            raise
        raise translated from exc
    except OSError as exc:  # creating the folder or the file, statvfs
        where = exc.filename or path
        raise Unavailable(f"{where}: {exc.strerror or exc}") from exc


def primary(exc: sqlite3.Error) -> str:
    """SQLite's primary result code of a driver error: SQLITE_IOERR_WRITE -> SQLITE_IOERR."""
    return "_".join((getattr(exc, "sqlite_errorname", None) or "").split("_")[:2])
