"""What the store's parts share, defined once: the schema version, where a database is
(a file's path or a PostgreSQL URL), how it is named in messages, the busy timeout.

The interface, the opener and both backends import these; nothing here
imports a backend or a database driver.
"""

from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path

from ..errors import InvalidArgument, Unavailable
from ..text import decimal
from .url import SCHEMES, parse, redacted

# The schema version this code writes, the same number on both backends. A new
# version appends one migration to each backend's (sqlite/migrations.py,
# postgres/migrations.py) and updates schema.sql and schema.postgres.sql.
SCHEMA_VERSION = 14

APP_NAME = "switchboard-local"
DB_ENV = "SWITCHBOARD_DB"
BUSY_TIMEOUT_ENV = "SWITCHBOARD_BUSY_TIMEOUT"  # seconds a write waits for another writer's lock
BUSY_TIMEOUT_MS = 30_000  # the default

# The repository (this file is switchboard_local/core/store/shared.py): where the schemas are kept.
ROOT = Path(__file__).resolve().parents[3]

Location = Path | str
"""Where a database is: a file's path, or (a str) a PostgreSQL URL."""


def is_url(location: object) -> bool:
    """Whether ``location`` (a --db value, $SWITCHBOARD_DB) names a PostgreSQL database by URL."""
    return isinstance(location, str) and location[:13].lower().startswith(SCHEMES)


def location(value: str | os.PathLike[str]) -> Location:
    """A --db value or $SWITCHBOARD_DB as the store takes it: a URL as it is, else an expanded path."""
    return value if is_url(value) else expanded(value)


def describe(where: str | os.PathLike[str]) -> str:
    """A database's name for messages: a path, or a URL with its password hidden."""
    if is_url(where):
        assert isinstance(where, str)
        return redacted(where)
    return str(where)


def local_path(where: Location) -> Path:
    """The name beside which the files that go with a database (the dashboard token) are kept:
    an SQLite database's own file; for a PostgreSQL URL, a name in the user data dir made of
    the user, host, port and database (never the password)."""
    if not is_url(where):
        return Path(where)
    import platformdirs

    parse(str(where))  # refused, naming what is wrong, unless it reads cleanly
    params = parse(str(where).partition("?")[0])  # named by its user, host, port and path alone
    user = params.get("user", "")
    host = params.get("host", "local").lower()
    port = str(int(params["port"])) if params.get("port", "").isdigit() else "5432"
    database = params.get("dbname") or user or "postgres"
    name = re.sub(r"[^A-Za-z0-9._@-]+", "_", f"{user}@{host}_{port}_{database}".lstrip("@"))
    return platformdirs.user_data_path(APP_NAME) / "postgresql" / f"{name}.db"


def default_path() -> Location:
    """The database: $SWITCHBOARD_DB (a path or a PostgreSQL URL), else the platform's user data dir."""
    from_env = os.environ.get(DB_ENV)
    if from_env:
        return location(from_env)
    import platformdirs

    return platformdirs.user_data_path(APP_NAME) / "switchboard.db"


def busy_timeout_ms() -> int:
    """How long a write waits for another writer's lock before it is refused as busy
    ($SWITCHBOARD_BUSY_TIMEOUT seconds; both backends)."""
    raw = os.environ.get(BUSY_TIMEOUT_ENV)
    if not raw:
        return BUSY_TIMEOUT_MS
    seconds = decimal(raw.strip())
    if seconds is None or not 0 <= seconds <= 3600:
        raise InvalidArgument(f"${BUSY_TIMEOUT_ENV} must be a number of seconds from 0 to 3600, got {raw!r}")
    return round(seconds * 1000)


def expanded(path: str | os.PathLike[str]) -> Path:
    try:
        return Path(path).expanduser()
    except RuntimeError:  # ~user of a user that does not exist
        raise Unavailable(f"{path}: no home folder for {Path(path).parts[0]}") from None


def schema_text(package: str, name: str) -> str:
    """A schema (``schema.sql``, ``schema.postgres.sql``): the copy packaged beside the
    backend's modules in a wheel or the binary, else the repository root's."""
    packaged = resources.files(package).joinpath(name)
    if packaged.is_file():
        return packaged.read_text("utf-8")
    return (ROOT / name).read_text("utf-8")
