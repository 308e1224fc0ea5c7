"""Settings every process on the file shares, kept in the database.

`switchboard-local config set NAME VALUE` writes one; a missing row means the
default. Verbs read a setting inside their own transactions, at most once
every CACHE_SECONDS per process (a statement saved on every delivery), so a
change applies within a second to every running process (serve, agents' MCP
servers) without a restart, and at once to the process that made it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from . import audit
from .errors import InvalidArgument
from .store.interface import Store, Transaction
from .store.queries import Q
from .text import digits

CACHE_SECONDS = 1.0

_SIZE = re.compile(r"^\s*([0-9]+)\s*(B|KiB|MiB|GiB|K|M|G)?\s*$", re.IGNORECASE)
_UNITS = {None: 1, "b": 1, "k": 1024, "kib": 1024, "m": 1024**2, "mib": 1024**2, "g": 1024**3, "gib": 1024**3}


def parse_size(text: str) -> int:
    """Bytes from ``1048576``, ``512KiB``, ``1MiB`` or ``1M`` (binary units)."""
    match = _SIZE.match(text)
    if match is None:
        raise InvalidArgument(f"{text!r} is not a size (bytes, or a number with KiB, MiB or GiB)")
    number, unit = match.groups()
    return int(number) * _UNITS[unit.lower() if unit else None]


def format_size(size: int) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} bytes"


@dataclass(frozen=True)
class Setting:
    """A size in bytes, between ``low`` and ``high``."""

    name: str
    default: int
    low: int
    high: int
    help: str

    def parse(self, text: str) -> int:
        value = parse_size(text)
        if not self.low <= value <= self.high:
            raise InvalidArgument(
                f"{self.name} must be between {format_size(self.low)} and {format_size(self.high)}, got {text!r}"
            )
        return value

    def show(self, value: int) -> str:
        return format_size(value)


@dataclass(frozen=True)
class AddressSetting:
    """A listen address, ``HOST:PORT`` (``[::1]:PORT`` for IPv6); none by default."""

    name: str
    help: str
    default: None = None

    def parse(self, text: str) -> str:
        host, sep, port = text.strip().rpartition(":")
        bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        number = digits(port)
        if not sep or not bare or number is None or not 0 < number < 65536 or any(c.isspace() for c in bare):
            raise InvalidArgument(f"{self.name} must be HOST:PORT (e.g. 127.0.0.1:8787), got {text!r}")
        return f"{host}:{number}"

    def show(self, value: str | None) -> str:
        return "not set" if value is None else value


def split_address(address: str) -> tuple[str, int]:
    """(host, port) of an AddressSetting's value; an IPv6 host without its brackets."""
    host, _, port = address.rpartition(":")
    return (host[1:-1] if host.startswith("[") else host), int(port)


MAX_PAYLOAD = Setting(
    "limits.max_payload",
    default=1024 * 1024,
    low=1024,
    high=4 * 1024 * 1024,  # an MCP line (16 MiB at most) carries it whole, escaped
    help="largest payload, result or error text a todo may hold (its JSON, in bytes)",
)

HTTP_LISTEN = AddressSetting(
    "http.listen",
    help="where an `mcp` process that leads ingest runs the webhook receiver (HOST:PORT); unset: it runs none",
)

SETTINGS: dict[str, Setting | AddressSetting] = {s.name: s for s in (MAX_PAYLOAD, HTTP_LISTEN)}

# Settings of one install, not of the data: where this machine's process
# listens. `db copy` leaves them behind (the new database's hosts set their own).
PER_INSTALL = frozenset({HTTP_LISTEN.name})


def _known(name: str) -> Setting | AddressSetting:
    try:
        return SETTINGS[name]
    except KeyError:
        raise InvalidArgument(f"there is no setting named {name!r}; the settings are {', '.join(SETTINGS)}") from None


def value_in(tx: Transaction, setting: Setting) -> int:
    """The setting, as read in this transaction or (per process) less than CACHE_SECONDS ago."""
    key = ("setting", setting.name)
    cached = tx.cache.get(key)
    if cached is not None and time.monotonic() - cached[1] < CACHE_SECONDS:
        return cached[0]  # type: ignore[no-any-return]
    row = tx.one(Q.get_setting, {"name": setting.name})
    value = setting.default if row is None else setting.parse(row["value"])
    tx.cache[key] = (value, time.monotonic())
    return value


@dataclass(frozen=True)
class Value:
    setting: Setting | AddressSetting
    value: Any
    is_default: bool

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.setting.name,
            "value": self.value,
            "default": self.setting.default,
            "is_default": self.is_default,
            "help": self.setting.help,
        }


async def get_all(store: Store) -> list[Value]:
    stored = {r["name"]: r["value"] for r in await store.read_all(Q.list_settings)}
    return [
        Value(s, s.default, True) if s.name not in stored else Value(s, s.parse(stored[s.name]), False)
        for s in SETTINGS.values()
    ]


async def get(store: Store, name: str) -> Value:
    setting = _known(name)
    return next(v for v in await get_all(store) if v.setting is setting)


async def set_value(store: Store, name: str, text: str, *, by: str | None = None) -> Value:
    setting = _known(name)
    value = setting.parse(text)

    def body(tx: Transaction) -> None:
        tx.run(Q.set_setting, {"name": name, "value": str(value)})
        if by is not None:
            audit.record(tx, store.clock.now_ms(), by=by, action="setting.set", subject=name, value=str(value))

    await store.write(body)
    store.cache.pop(("setting", name), None)  # this process sees its own change at once
    return Value(setting, value, False)


async def unset(store: Store, name: str, *, by: str | None = None) -> Value:
    setting = _known(name)

    def body(tx: Transaction) -> None:
        tx.run(Q.delete_setting, {"name": name})
        if by is not None:
            audit.record(tx, store.clock.now_ms(), by=by, action="setting.unset", subject=name)

    await store.write(body)
    store.cache.pop(("setting", name), None)
    return Value(setting, setting.default, True)


def require_size(tx: Transaction, what: str, text: str | None) -> None:
    """Refuse a payload, result or error text over limits.max_payload."""
    if text is None:
        return
    cap = value_in(tx, MAX_PAYLOAD)
    size = len(text) if len(text) * 4 <= cap else len(text.encode("utf-8"))
    if size > cap:
        raise InvalidArgument(
            f"{what} is {size} bytes, over the cap of {format_size(cap)} (setting {MAX_PAYLOAD.name})"
        )
