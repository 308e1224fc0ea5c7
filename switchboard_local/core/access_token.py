"""The per-install access token: what the dashboard asks of a browser before an action.

One random token per database, in an owner-only file beside it
(``switchboard.db.dashboard-token``), created the first time a process
serving the dashboard starts (or `switchboard-local dashboard` asks for it).
It is never logged and never stored in the database: whoever can read the
file can act, exactly as whoever can write the database can.
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
import stat
from pathlib import Path

from .errors import Unavailable
from .store import Location, local_path

SUFFIX = ".dashboard-token"
_TOKEN = re.compile(r"[A-Za-z0-9_-]{32,128}")


def token_path(db: Location) -> Path:
    """Beside the database's file; for a PostgreSQL URL, beside its local name (store.local_path)."""
    beside = local_path(db)
    return beside.with_name(beside.name + SUFFIX)


def read_or_create(db: Location) -> str:
    """The token of the database ``db`` (a file's path, a URL, or a store's ``path``): read, or made now (mode 0600).

    Two processes starting at once agree: the file is created exclusively, and
    the loser reads the winner's. A file with a group or other bit set is made
    owner-only again; one that holds no token is refused (``Unavailable``),
    not silently replaced.
    """
    path = token_path(db)
    try:
        # A PostgreSQL store's path is a local name in the user data dir (core/postgres.py),
        # whose folder may not exist yet; an SQLite file's folder does.
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        return _read(path)
    except OSError as exc:
        raise Unavailable(f"cannot create the dashboard token file {path}: {exc.strerror or exc}") from None
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(token + "\n")
    return token


def _read(path: Path) -> str:
    try:
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode):
            raise Unavailable(f"the dashboard token file {path} is not a regular file")
        if info.st_mode & 0o077:
            os.chmod(path, 0o600)  # owner-only, as the database is
        text = path.read_text("ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise Unavailable(f"cannot read the dashboard token file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not _TOKEN.fullmatch(text):
        raise Unavailable(f"the dashboard token file {path} holds no token; delete it and a new one is made")
    return text


def matches(expected: str, given: str | None) -> bool:
    """Constant-time: does ``given`` equal the token?"""
    return given is not None and hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogateescape"))


def derived(token: str, purpose: str) -> str:
    """A value bound to the token for one ``purpose`` (the CSRF token): learns nothing of the token."""
    return hmac.new(token.encode(), purpose.encode(), "sha256").hexdigest()
