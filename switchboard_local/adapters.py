"""The adapter registry: configured producers and their health.

Webhook sources (family ``webhook``) and Redis adapters (family ``queue``)
are rows of one table; an event's ``source`` is an adapter's name. Secrets are
kept as references (an environment variable, a file) or, when the user gives
a value, in this owner-only database; they are never shown back.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .clock import rfc3339
from .errors import Conflict, InvalidArgument, NotFound
from .queries import Q
from .store import Store, Transaction

FAMILIES = ("webhook", "queue")
MAX_ACTIVE_SECRETS = 2
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class Adapter:
    name: str
    family: str
    kind: str
    trust_mode: str
    enabled: bool
    config: dict[str, Any]
    secrets: list[dict[str, str]]
    created_at: int
    updated_at: int
    last_poll_at: int | None
    last_error: str | None
    consecutive_failures: int
    messages_stored: int

    @classmethod
    def from_row(cls, row: Any) -> Adapter:
        return cls(
            name=row["name"],
            family=row["family"],
            kind=row["kind"],
            trust_mode=row["trust_mode"],
            enabled=bool(row["enabled"]),
            config=json.loads(row["config"]),
            secrets=json.loads(row["secrets"]),
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            last_poll_at=row["last_poll_at"],
            last_error=row["last_error"],
            consecutive_failures=row["consecutive_failures"],
            messages_stored=row["messages_stored"],
        )

    def to_dict(self) -> dict[str, Any]:
        """What may be shown: secrets as masked references, never values."""
        return {
            "name": self.name,
            "family": self.family,
            "kind": self.kind,
            "trust_mode": self.trust_mode,
            "enabled": self.enabled,
            "config": {k: masked_url(v) if isinstance(v, str) else v for k, v in self.config.items()},
            "secrets": [mask_secret(ref) for ref in self.secrets],
            "created_at": rfc3339(self.created_at),
            "updated_at": rfc3339(self.updated_at),
            "last_poll_at": rfc3339(self.last_poll_at),
            "last_error": self.last_error,
            "consecutive_failures": self.consecutive_failures,
            "messages_stored": self.messages_stored,
        }


def secret_ref(*, env: str | None = None, file: str | None = None, value: str | None = None) -> dict[str, str]:
    """Exactly one of an environment variable name, a file path, or a value."""
    given = {k: v for k, v in {"env": env, "file": file, "value": value}.items() if v is not None}
    if len(given) != 1:
        raise InvalidArgument("give exactly one secret: an environment variable, a file, or a value")
    ((kind, v),) = given.items()
    if not v:
        raise InvalidArgument(f"the secret {kind} must not be empty")
    return {kind: v}


def masked_url(text: str) -> str:
    """A URL with its password replaced (anything else unchanged): safe to show and log."""
    parts = urlsplit(text)
    if not parts.scheme or parts.password is None:
        return text
    netloc = f"{parts.username or ''}:****@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def mask_secret(ref: dict[str, str]) -> str:
    if "env" in ref:
        return f"env:{ref['env']}"
    if "file" in ref:
        return f"file:{ref['file']}"
    return "value:********"


def _require_name(name: str) -> None:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise InvalidArgument(
            f"adapter name {name!r} must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )


async def add(
    store: Store,
    name: str,
    *,
    family: str,
    kind: str,
    trust_mode: str,
    config: dict[str, Any],
    secrets: list[dict[str, str]] = (),  # type: ignore[assignment]
) -> Adapter:
    _require_name(name)
    if family not in FAMILIES:
        raise InvalidArgument(f"family must be one of {', '.join(FAMILIES)}")
    params = {
        "name": name,
        "family": family,
        "kind": kind,
        "trust_mode": trust_mode,
        "config": json.dumps(config),
        "secrets": json.dumps(list(secrets)),
    }

    def body(tx: Transaction) -> Adapter:
        row = tx.one(Q.insert_adapter, {**params, "now": store.clock.now_ms()})
        if row is None:
            raise Conflict(f"an adapter named {name!r} exists already")
        return Adapter.from_row(row)

    return await store.write(body)


def _found(row: Any, name: str, family: str | None) -> Adapter:
    """The row as an adapter of that family; anything else is not found."""
    if row is None or (family is not None and row["family"] != family):
        noun = {"webhook": "webhook source", "queue": "adapter"}.get(family or "", "adapter")
        raise NotFound(f"no {noun} named {name!r}")
    return Adapter.from_row(row)


async def get(store: Store, name: str, *, family: str | None = None) -> Adapter:
    """One adapter by name: a point read, on the loop's own connection (every webhook request asks)."""
    row = await store.peek(lambda tx: tx.one(Q.get_adapter, {"name": name}))
    return _found(row, name, family)


async def list_adapters(store: Store, *, family: str | None = None) -> list[Adapter]:
    rows = await store.read(lambda tx: tx.all(Q.list_adapters, {"family": family}))
    return [Adapter.from_row(r) for r in rows]


async def remove(store: Store, name: str, *, family: str | None = None) -> None:
    """Remove an adapter and its rules (its stored events stay)."""

    def body(tx: Transaction) -> None:
        _found(tx.one(Q.get_adapter, {"name": name}), name, family)
        tx.run(Q.delete_adapter, {"name": name})
        tx.run(Q.delete_rules_of_source, {"name": name})

    await store.write(body)


async def set_enabled(store: Store, name: str, enabled: bool, *, family: str | None = None) -> Adapter:
    def body(tx: Transaction) -> Adapter:
        _found(tx.one(Q.get_adapter, {"name": name}), name, family)
        row = tx.one(Q.set_adapter_enabled, {"name": name, "enabled": int(enabled), "now": store.clock.now_ms()})
        return Adapter.from_row(row)

    return await store.write(body)


async def rotate_secret(store: Store, name: str, ref: dict[str, str]) -> Adapter:
    """Add a second active secret; both verify until the older one is retired."""

    def change(secrets: list[dict[str, str]]) -> list[dict[str, str]]:
        if len(secrets) >= MAX_ACTIVE_SECRETS:
            raise Conflict(f"{name!r} has {len(secrets)} active secrets already; retire the older one first")
        return [*secrets, ref]

    return await _change_secrets(store, name, change)


async def retire_secret(store: Store, name: str) -> Adapter:
    """Drop the oldest active secret (the one a rotation replaced)."""

    def change(secrets: list[dict[str, str]]) -> list[dict[str, str]]:
        if len(secrets) < 2:
            raise Conflict(f"{name!r} has {len(secrets)} active secret(s); there is no older one to retire")
        return secrets[1:]

    return await _change_secrets(store, name, change)


async def _change_secrets(store: Store, name: str, change: Any) -> Adapter:
    def body(tx: Transaction) -> Adapter:
        row = tx.one(Q.get_adapter, {"name": name})
        if row is None:
            raise NotFound(f"no adapter named {name!r}")
        if row["family"] != "webhook":
            raise Conflict(f"{name!r} is a {row['family']} adapter; only webhook sources have secrets")
        secrets = change(json.loads(row["secrets"]))
        updated = tx.one(Q.set_adapter_secrets, {"name": name, "secrets": json.dumps(secrets), "now": store.clock.now_ms()})
        return Adapter.from_row(updated)

    return await store.write(body)


async def record_health(store: Store, name: str, *, error: str | None = None, stored: int = 0) -> None:
    """A running adapter's poll result (for `adapter status` and the dashboard)."""
    await store.write(
        lambda tx: tx.run(Q.record_adapter_health, {"name": name, "error": error, "stored": stored, "now": store.clock.now_ms()})
    )
