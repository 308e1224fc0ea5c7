"""What `service install` checks of the service's surroundings, and says: the variables the
service will not have, and the folders others could write to.

A service manager starts `serve` with none of this shell's environment: what a
source reads from it (--secret-env, an adapter's --url-env and its broker's own
variables), serve's own settings and
libpq's PG* variables must be in the environment file the systemd unit reads,
or the service runs without them. Install and its dry run both name them (names
only, never a value). A folder holding the unit or that file, writable by
another account, lets that account choose what the service runs: said, with the
chmod that mends it, and left as it is.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import process
from ..core import adapters, sources
from ..core.store.opener import open_store
from ..core.store.shared import BUSY_TIMEOUT_ENV, Location, is_url
from . import service_units as units
from .common import warn
from .service_managers import Launchd, Systemd, config_home


@dataclass(frozen=True)
class Unset:
    """A variable that serve, a source or libpq reads, which the service's environment will not hold."""

    name: str
    reader: str  # a source's name, serve or libpq
    here: bool  # this shell has it

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "read_by": self.reader, "set_in_this_shell": self.here}


def unset(found: list[sources.Source], database: Location, given: set[str]) -> list[Unset]:
    """What the service will miss: the variables read from its environment that ``given`` (the
    names the environment file assigns) leaves out. Names only: no value is ever shown."""
    wanted: list[tuple[str, str]] = []
    brokers = process.brokers()
    for source in found:
        if source.enabled:
            wanted += [(ref["env"], source.name) for ref in source.secrets if isinstance(ref.get("env"), str)]
            if source.family == "queue":
                wanted += [(name, source.name) for name in adapters.env_of(source, brokers)]
    # Set in this shell and read by serve itself, or by libpq for a PostgreSQL database (PGPASSWORD, …).
    wanted += [(name, "serve") for name in (process.LOG_LEVEL_ENV, BUSY_TIMEOUT_ENV) if name in os.environ]
    if is_url(database):
        wanted += [(name, "libpq") for name in sorted(os.environ) if name.startswith("PG")]
    missing = [Unset(name, reader, bool(os.environ.get(name))) for name, reader in wanted if name not in given]
    return list(dict.fromkeys(missing))  # each once, in order


def unset_note(missing: list[Unset], chosen: Systemd | Launchd) -> str | None:
    """The one line that names them, and where they go."""
    if not missing:
        return None
    named = ", ".join(f"{u.reader} reads ${u.name} ({'set in this shell' if u.here else 'not set in this shell either'})"
                      for u in missing)  # fmt: skip
    if isinstance(chosen, Systemd):
        file = config_home() / units.ENV_FILE
        return (f"note: the service gets none of this shell's environment, and {file} sets none of these: {named}; "
                "put NAME=value lines there (chmod 600), which the unit reads")  # fmt: skip
    return (f"note: the service gets none of this shell's environment (launchd passes an agent none): {named}; "
            "give those sources a --secret-file or a stored secret")  # fmt: skip


def given(chosen: Systemd | Launchd, env_text: str | None) -> set[str]:
    """The names the service's environment file assigns: ``env_text`` as install leaves it, else as it is
    (launchd has no such file)."""
    if not isinstance(chosen, Systemd):
        return set()
    if env_text is not None:
        return units.assigned_names(env_text)
    try:
        return units.assigned_names(chosen.environment_file().read_text("utf-8", errors="replace"))
    except OSError:  # none, or unreadable: the service reads nothing from it either
        return set()


def sources_as_they_are(database: Location) -> list[sources.Source]:
    """The sources, read without creating, migrating or changing anything (a dry run's)."""
    if not is_url(database) and not Path(database).exists():
        return []  # nothing stored yet

    async def go() -> list[sources.Source]:
        async with await open_store(database, read_only=True) as store:
            return await sources.list_sources(store)

    return asyncio.run(go())


def open_folders(chosen: Systemd | Launchd) -> list[str]:
    """Warn (and say so in the answer) of each folder holding what the service runs or reads that others may write.

    Another account that can write there can put its own unit or environment
    file in place of ours: the service would run its command, as you.
    """
    if isinstance(chosen, Systemd):
        base, leaves = config_home(), [chosen.path().parent, chosen.environment_file().parent]
    else:
        base, leaves = Path.home() / "Library", [chosen.path().parent, chosen.log_file.parent]
    folders: dict[Path, None] = {}
    for leaf in leaves:
        for folder in (leaf, *leaf.parents):
            folders[folder] = None
            if folder == base or folder == folder.parent:
                break
    said = []
    for folder in folders:
        try:
            mode = stat.S_IMODE(os.stat(folder).st_mode)
        except OSError:  # not there yet: install makes it owner-only
            continue
        if mode & 0o022:
            who = "its group and others" if mode & 0o022 == 0o022 else "its group" if mode & 0o020 else "others"
            said.append(f"{folder} is writable by {who} (mode {mode:04o}): another account could put its own "
                        f"unit or environment file there for the service; fix: chmod go-w {shlex.quote(str(folder))}")  # fmt: skip
    for message in said:
        warn(message)
    return said
