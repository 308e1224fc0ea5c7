"""The per-install access token: what the dashboard asks of every request, reads included.

One random token per database, in an owner-only file beside it
(``switchboard.db.dashboard-token``), created the first time a process
serving the dashboard starts (or `switchboard-local dashboard` asks for it).
It is never logged and never stored in the database: whoever can read the
file can act, exactly as whoever can write the database can.
"""

from __future__ import annotations

import errno
import hmac
import os
import re
import secrets
import stat
import tempfile
from pathlib import Path

from .errors import Unavailable
from .store.shared import Location, local_path

SUFFIX = ".dashboard-token"
_TOKEN = re.compile(r"[A-Za-z0-9_-]{32,128}")


def token_path(db: Location) -> Path:
    """Beside the database's file; for a PostgreSQL URL, beside its local name (store.local_path)."""
    beside = local_path(db)
    return beside.with_name(beside.name + SUFFIX)


def read_or_create(db: Location) -> str:
    """The token of the database ``db`` (a file's path, a URL, or a store's ``path``): read, or made now (mode 0600).

    Processes starting at once agree, and none reads a half-written file: the
    token is written whole to a temporary owner-only file, then hard-linked
    into place, which fails if a token is there already (never replaced);
    the loser reads the winner's. A file with a group or other bit set is made
    owner-only again; one that holds no token is refused (``Unavailable``),
    not silently replaced.
    """
    path = token_path(db)
    try:
        # A PostgreSQL store's path is a local name in the user data dir (store/shared.py's local_path),
        # whose folder may not exist yet; an SQLite file's folder does.
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if path.exists():
            return _read(path)
        token = secrets.token_urlsafe(32)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")  # mode 0600
        try:
            with os.fdopen(fd, "w", encoding="ascii") as f:
                f.write(token + "\n")
            _link(temporary, path)
        finally:
            os.unlink(temporary)
    except FileExistsError:
        return _read(path)
    except OSError as exc:
        raise Unavailable(f"cannot create the dashboard token file {path}: {exc.strerror or exc}") from None
    return token


# What os.link raises where the file system has no hard links (FAT, some network mounts).
_NO_LINKS = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK)


def _link(temporary: str, path: Path) -> None:
    """``temporary`` at ``path`` too, unless something is there already (FileExistsError)."""
    try:
        os.link(temporary, path, follow_symlinks=False)
        return
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise
    # Created exclusively, then written: a process starting at that very moment may find it still empty.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(Path(temporary).read_text("ascii"))


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
