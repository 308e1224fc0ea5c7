"""psycopg's errors as the core's (core/errors.py): Busy, Unavailable, StoreUnusable,
Conflict, InvalidArgument (a value PostgreSQL cannot hold); a bug (bad SQL, a misused
API) as it is. Never with a secret in the message."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import psycopg
import psycopg.errors as pgerrors

from ...errors import Busy, Conflict, InvalidArgument, StoreUnusable, SwitchboardError, Unavailable

RETRY = (pgerrors.SerializationFailure, pgerrors.DeadlockDetected)
_BUSY = (pgerrors.LockNotAvailable, pgerrors.QueryCanceled)  # lock_timeout, statement_timeout
_UNUSABLE = (pgerrors.DataCorrupted, pgerrors.IndexCorrupted)


def translate(exc: BaseException, where: str, hidden: Sequence[str] = ()) -> SwitchboardError | None:
    """The core's error for a driver error, or None for a bug (bad SQL, a misused API).

    libpq is handed a URL's keywords (store/url.py), never the URL, so it has no URL
    to quote; still, none of ``hidden`` (the password, the query's values) is shown
    should the driver's text hold it."""
    if not isinstance(exc, psycopg.Error):
        return None
    message = _scrubbed(_first_line(exc), hidden)
    if isinstance(exc, psycopg.IntegrityError):
        return Conflict(f"the database refused the change: {message}")
    if isinstance(exc, _BUSY) or isinstance(exc, RETRY):
        return Busy(f"{where}: {message}; try again later")
    if isinstance(exc, _UNUSABLE):
        return StoreUnusable(f"{where} cannot be used: {message}")
    if isinstance(exc, psycopg.DataError):  # a value PostgreSQL cannot hold (SQLite can): NUL in text, \u0000 in JSON
        detail = getattr(getattr(exc, "diag", None), "message_detail", None)
        return InvalidArgument(f"PostgreSQL cannot store a value given: {message}{f' ({detail})' if detail else ''}")
    sqlstate = exc.sqlstate or ""
    if isinstance(exc, psycopg.OperationalError) or sqlstate[:2] in ("08", "28", "3D", "53", "57", "58", "XX"):
        return Unavailable(f"{where}: {message}")
    if sqlstate in ("25006", "42501"):  # a read-only transaction or server; no privilege
        return Unavailable(f"{where}: {message}")
    if isinstance(exc, psycopg.InterfaceError):  # a closed connection
        return Unavailable(f"{where}: {message}")
    return None


def _scrubbed(text: str, hidden: Sequence[str]) -> str:
    """``text`` without any of ``hidden``: a long one wherever it is, a short one where it is quoted."""
    for value in sorted(hidden, key=len, reverse=True):
        if len(value) >= 4:
            text = text.replace(value, "***")
        else:
            text = text.replace(f'"{value}"', '"***"').replace(f"'{value}'", "'***'")
    return text


@contextlib.contextmanager
def driver_errors(where: str, hidden: Sequence[str] = ()) -> Iterator[None]:
    """Driver errors leave the store as the core's errors, never as psycopg's (nor with ``hidden``: secrets)."""
    try:
        yield
    except psycopg.Error as exc:
        translated = translate(exc, where, hidden)
        if translated is None:
            raise
        raise translated from exc


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
